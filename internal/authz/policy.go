// Package authz decides who may do what on a cluster with [auth]
// (docs/security.md). It is the pure core of authorization: an Identity
// (from a verified client certificate or bearer token), a Policy (roles:
// members, per-pool read and write, status, admin), the Needs of every
// gRPC method (rules.go: what a request asks for, computed from the request
// itself, per pool) and Decide, which allows a request or refuses it with
// permission_denied naming the identity, the permission and the pool. The
// server's interceptors (server/auth.go) feed it; it does no I/O of its own
// except reading token key files (tokens.go).
package authz

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/distash/distash/internal/wire"
)

// Role is a named set of permissions and the identities that hold it.
type Role struct {
	Name    string   `json:"name"`
	Members []string `json:"members,omitempty"` // certificate identities or token subjects
	Read    []string `json:"read,omitempty"`    // pool names
	Write   []string `json:"write,omitempty"`   // pool names
	Status  bool     `json:"status,omitempty"`  // status, status json, /metrics, the console, system key reads
	Admin   bool     `json:"admin,omitempty"`   // operator verbs, auth changes, backup; system key reads
}

// grants are the permissions of one identity: the union of its roles'.
type grants struct {
	read, write   map[string]bool
	status, admin bool
}

// Policy is a set of roles, indexed by member. The zero Policy grants
// nothing. A Policy is immutable once built: a change makes a new one.
type Policy struct {
	roles []Role
	by    map[string]*grants
}

// NewPolicy indexes roles (copied). Roles are kept sorted by name.
func NewPolicy(roles []Role) *Policy {
	p := &Policy{by: map[string]*grants{}}
	for _, r := range roles {
		p.roles = append(p.roles, r.clone())
	}
	sort.Slice(p.roles, func(i, j int) bool { return p.roles[i].Name < p.roles[j].Name })
	for _, r := range p.roles {
		for _, m := range r.Members {
			g := p.by[m]
			if g == nil {
				g = &grants{read: map[string]bool{}, write: map[string]bool{}}
				p.by[m] = g
			}
			for _, pool := range r.Read {
				g.read[pool] = true
			}
			for _, pool := range r.Write {
				g.write[pool] = true
			}
			g.status = g.status || r.Status
			g.admin = g.admin || r.Admin
		}
	}
	return p
}

func (r Role) clone() Role {
	r.Members = slices.Clone(r.Members)
	r.Read = slices.Clone(r.Read)
	r.Write = slices.Clone(r.Write)
	return r
}

// Roles returns a copy of the policy's roles, sorted by name.
func (p *Policy) Roles() []Role {
	if p == nil {
		return nil
	}
	out := make([]Role, len(p.roles))
	for i, r := range p.roles {
		out[i] = r.clone()
	}
	return out
}

// Role returns the role named name.
func (p *Policy) Role(name string) (Role, bool) {
	for _, r := range p.Roles() {
		if r.Name == name {
			return r, true
		}
	}
	return Role{}, false
}

// Grant returns the roles with member added to role name (a new policy),
// or false if there is no such role. Adding a member twice is a no-op.
func Grant(roles []Role, name, member string) ([]Role, bool) {
	for i := range roles {
		if roles[i].Name == name {
			if !slices.Contains(roles[i].Members, member) {
				roles[i].Members = append(slices.Clone(roles[i].Members), member)
				sort.Strings(roles[i].Members)
			}
			return roles, true
		}
	}
	return roles, false
}

// Revoke returns the roles with member removed from role name, or false if
// there is no such role.
func Revoke(roles []Role, name, member string) ([]Role, bool) {
	for i := range roles {
		if roles[i].Name == name {
			roles[i].Members = slices.DeleteFunc(slices.Clone(roles[i].Members), func(m string) bool { return m == member })
			return roles, true
		}
	}
	return roles, false
}

// PutRole returns the roles with r defined (replacing a role of its name;
// its members are kept when r names none).
func PutRole(roles []Role, r Role) []Role {
	for i := range roles {
		if roles[i].Name == r.Name {
			if r.Members == nil {
				r.Members = roles[i].Members
			}
			roles[i] = r.clone()
			return roles
		}
	}
	return append(roles, r.clone())
}

// DeleteRole returns the roles without role name, or false if there is none.
func DeleteRole(roles []Role, name string) ([]Role, bool) {
	i := slices.IndexFunc(roles, func(r Role) bool { return r.Name == name })
	if i < 0 {
		return roles, false
	}
	return slices.Delete(roles, i, i+1), true
}

// String describes r in one line, as `auth list` prints it.
func (r Role) String() string {
	var b strings.Builder
	b.WriteString(r.Name + ": members=[" + strings.Join(r.Members, ",") + "]")
	b.WriteString(" read=[" + strings.Join(r.Read, ",") + "]")
	b.WriteString(" write=[" + strings.Join(r.Write, ",") + "]")
	if r.Status {
		b.WriteString(" status")
	}
	if r.Admin {
		b.WriteString(" admin")
	}
	return b.String()
}

// Change applies one change of `distash cli auth` to roles (a copy):
// op "grant" or "revoke" (identity to or from role), "role" (define or
// replace define, whose pools must exist: pool tells), "delete-role"
// (role). Its errors say what is wrong; roles are then unchanged.
func Change(roles []Role, op, role, identity string, define *Role, pool func(string) bool) ([]Role, error) {
	roles = NewPolicy(roles).Roles()
	switch op {
	case "grant", "revoke":
		if identity == "" {
			return nil, fmt.Errorf("auth %s: no identity", op)
		}
		var ok bool
		if op == "grant" {
			roles, ok = Grant(roles, role, identity)
		} else {
			roles, ok = Revoke(roles, role, identity)
		}
		if !ok {
			return nil, fmt.Errorf("auth %s: no role named %q (define it with auth role)", op, role)
		}
	case "role":
		if define == nil || !validName(define.Name) {
			return nil, fmt.Errorf("auth role: a role needs a name of a-z, 0-9, _ and -")
		}
		for _, p := range append(slices.Clone(define.Read), define.Write...) {
			if !pool(p) {
				return nil, fmt.Errorf("auth role %s: no pool named %q", define.Name, p)
			}
		}
		for _, m := range define.Members {
			if m == "" {
				return nil, fmt.Errorf("auth role %s: an empty identity", define.Name)
			}
		}
		roles = PutRole(roles, *define)
	case "delete-role":
		var ok bool
		if roles, ok = DeleteRole(roles, role); !ok {
			return nil, fmt.Errorf("auth delete-role: no role named %q", role)
		}
	default:
		return nil, fmt.Errorf("auth: unknown operation %q (grant, revoke, role, delete-role, list)", op)
	}
	return NewPolicy(roles).Roles(), nil // sorted by name
}

// validName: a-z, 0-9, _ and -, as config's names.
func validName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return s != ""
}

// ToWire is roles as AuthResponse carries them.
func ToWire(roles []Role) []*wire.AuthRole {
	out := make([]*wire.AuthRole, len(roles))
	for i, r := range roles {
		out[i] = &wire.AuthRole{Name: r.Name, Members: slices.Clone(r.Members), Read: slices.Clone(r.Read), Write: slices.Clone(r.Write), Status: r.Status, Admin: r.Admin}
	}
	return out
}

// FromWire is a role of the wire; nil for nil.
func FromWire(r *wire.AuthRole) *Role {
	if r == nil {
		return nil
	}
	return &Role{Name: r.Name, Members: slices.Clone(r.Members), Read: slices.Clone(r.Read), Write: slices.Clone(r.Write), Status: r.Status, Admin: r.Admin}
}

// RolesFromWire converts a list of roles of the wire.
func RolesFromWire(rs []*wire.AuthRole) []Role {
	out := make([]Role, 0, len(rs))
	for _, r := range rs {
		out = append(out, *FromWire(r))
	}
	return out
}

// Encode is roles as JSON (an embedded cluster's file of roles).
func Encode(roles []Role) ([]byte, error) { return json.Marshal(struct{ Roles []Role }{roles}) }

// Decode reads what Encode wrote.
func Decode(b []byte) ([]Role, error) {
	var v struct{ Roles []Role }
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, err
	}
	return v.Roles, nil
}
