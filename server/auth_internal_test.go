package server

import (
	"testing"

	"github.com/distash/distash/internal/authz"
)

// TestNodeOnlyMethodsAreNodeRules: with [auth], nodeOnly leaves node-only
// calls to authz, so every one of them must be a node-only rule there.
func TestNodeOnlyMethodsAreNodeRules(t *testing.T) {
	ps := authz.NewPools(nil)
	for m := range nodeOnlyMethods {
		if err := authz.Check(authz.NewPolicy([]authz.Role{{Name: "all", Members: []string{"x"}, Status: true, Admin: true}}),
			ps, authz.Identity{Name: "x", Source: "certificate"}, m, nil); err == nil {
			t.Errorf("%s is node-only in the gateway, but authz lets a client with every permission call it", m)
		}
	}
}
