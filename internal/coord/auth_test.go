package coord

import (
	"errors"
	"testing"

	"github.com/distash/distash/internal/authz"
)

const authCfg = `
[[pool]]
name = "cache"
prefix = "c/"
medium = "dram"
mode = "ephemeral"
engine = "memory"

[auth]
[[auth.role]]
name = "shop"
members = ["app1"]
read = ["cache"]
`

// TestAuthCommands: the roles start as the configuration's; grant,
// revoke, role and delete-role change them in the replicated state (and
// survive its encoding); a bad change leaves them as they were; a cluster
// without [auth] refuses changes.
func TestAuthCommands(t *testing.T) {
	s := &State{}
	if _, err := s.Apply(SetConfig(authCfg)); err != nil {
		t.Fatal(err)
	}
	roles, ok := s.AuthRoles()
	if !ok || len(roles) != 1 || roles[0].Members[0] != "app1" {
		t.Fatalf("initial roles %v, %v", roles, ok)
	}
	for _, ch := range []AuthChange{
		{Op: "grant", Role: "shop", Identity: "app2"},
		{Op: "role", Define: &authz.Role{Name: "ops", Admin: true}},
		{Op: "grant", Role: "ops", Identity: "alice"},
		{Op: "revoke", Role: "shop", Identity: "app1"},
	} {
		if _, err := s.Apply(Auth(ch)); err != nil {
			t.Fatalf("%+v: %v", ch, err)
		}
	}
	for _, bad := range []AuthChange{
		{Op: "grant", Role: "nope", Identity: "x"},
		{Op: "role", Define: &authz.Role{Name: "r", Read: []string{"nopool"}}},
		{Op: "frob"},
	} {
		if _, err := s.Apply(Auth(bad)); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	b, err := encodeCommand(Auth(AuthChange{Op: "delete-role", Role: "ops"}))
	if err != nil {
		t.Fatal(err)
	}
	c, err := decodeCommand(b)
	if err != nil {
		t.Fatal(err)
	}
	clone := s.Clone()
	if _, err := clone.Apply(c); err != nil {
		t.Fatal(err)
	}
	p := authz.NewPolicy(s.Grants)
	if _, ok := p.Role("ops"); !ok {
		t.Error("applying to the clone changed the original")
	}
	want := "shop: members=[app2] read=[cache] write=[]"
	if got, _ := clone.AuthRoles(); len(got) != 1 || got[0].String() != want {
		t.Errorf("roles after the changes: %v, want %s", got, want)
	}

	plain := &State{}
	plain.Apply(SetConfig("[[pool]]\nname = \"c\"\nprefix = \"c/\"\nmedium = \"dram\"\nmode = \"ephemeral\"\nengine = \"memory\"\n"))
	if _, err := plain.Apply(Auth(AuthChange{Op: "grant", Role: "shop", Identity: "x"})); !errors.Is(err, ErrNoAuth) {
		t.Errorf("a change without [auth]: %v", err)
	}
}
