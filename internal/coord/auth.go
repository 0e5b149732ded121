package coord

// The cluster's roles ([auth], docs/security.md): created from the
// configuration, then changed live by OpAuth commands (distash cli auth),
// so every coordinator holds them and every node reads them from there.

import (
	"errors"
	"fmt"
	"slices"

	"github.com/distash/distash/internal/authz"
)

// OpAuth changes the cluster's roles (AuthChange).
const OpAuth = "auth"

// AuthChange is an OpAuth: Op "grant" or "revoke" (Identity to or from
// Role), "role" (define or replace Define; its members are kept when it
// names none) or "delete-role" (Role).
type AuthChange struct {
	Op       string      `json:"op"`
	Role     string      `json:"role,omitempty"`
	Identity string      `json:"identity,omitempty"`
	Define   *authz.Role `json:"define,omitempty"`
}

// Auth is the command applying ch.
func Auth(ch AuthChange) Command { return Command{Op: OpAuth, Auth: &ch} }

// ErrNoAuth refuses a change of roles on a cluster without [auth].
var ErrNoAuth = errors.New("coord: the cluster has no [auth] section (trusted-network mode): there are no roles to change")

// AuthRoles returns the cluster's roles (the configuration's until the
// first change) and whether the cluster has [auth] at all.
func (s *State) AuthRoles() ([]authz.Role, bool) {
	cfg, err := s.ParsedConfig()
	if err != nil || cfg == nil || cfg.Auth == nil {
		return nil, false
	}
	if s.AuthSet {
		return cloneRoles(s.Grants), true
	}
	out := make([]authz.Role, len(cfg.Auth.Roles))
	for i, r := range cfg.Auth.Roles {
		out[i] = authz.Role(r)
		out[i].Members = slices.Clone(r.Members)
		out[i].Read, out[i].Write = slices.Clone(r.Read), slices.Clone(r.Write)
	}
	return out, true
}

func cloneRoles(rs []authz.Role) []authz.Role {
	return authz.NewPolicy(rs).Roles()
}

// applyAuth applies an OpAuth; on error nothing changes.
func (s *State) applyAuth(ch *AuthChange) error {
	if ch == nil {
		return errors.New("coord: auth without a change")
	}
	roles, ok := s.AuthRoles()
	if !ok {
		return ErrNoAuth
	}
	cfg, err := s.ParsedConfig()
	if err != nil {
		return err
	}
	roles, err = authz.Change(roles, ch.Op, ch.Role, ch.Identity, ch.Define, func(pool string) bool {
		_, ok := cfg.PoolByName(pool)
		return ok
	})
	if err != nil {
		return fmt.Errorf("coord: %w", err)
	}
	s.Grants, s.AuthSet = roles, true
	return nil
}
