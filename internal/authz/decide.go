package authz

import (
	"fmt"

	"github.com/distash/distash/internal/kv"
)

// Identity is who a request comes from.
type Identity struct {
	// Name names the client: its certificate's configured field, or its
	// token's subject. Empty: the connection presented neither.
	Name string
	// Source is how Name was learnt: "certificate" or "token".
	Source string
	// Node: the peer holds a cluster node's certificate (serverAuth). A
	// node is a member of the cluster: it may make every call, the
	// node-to-node ones included, as before authorization existed.
	Node bool
}

func (id Identity) String() string {
	switch {
	case id.Node:
		return fmt.Sprintf("node %q", id.Name)
	case id.Name == "":
		return "anonymous (no client certificate, no bearer token)"
	}
	return fmt.Sprintf("%q (%s)", id.Name, id.Source)
}

// Perm is a permission a request needs.
type Perm uint8

const (
	// PermAny: any grant at all (read versions, the pools' layout, the
	// coordinators' view: what every client needs to run transactions).
	PermAny Perm = iota
	// PermRead of Need.Pool.
	PermRead
	// PermWrite of Need.Pool.
	PermWrite
	// PermStatus: the cluster's status, metrics and console.
	PermStatus
	// PermAdmin: operator verbs, grant changes, backup and restore.
	PermAdmin
	// PermSystemRead: reads of the system key space (\xff), which admin or
	// status grants.
	PermSystemRead
	// PermNode: node-to-node calls, for node certificates only.
	PermNode
)

func (p Perm) String() string {
	switch p {
	case PermAny:
		return "any grant"
	case PermRead:
		return "read"
	case PermWrite:
		return "write"
	case PermStatus:
		return "status"
	case PermAdmin:
		return "admin"
	case PermSystemRead:
		return "status or admin (to read the system key space)"
	case PermNode:
		return "a node certificate"
	}
	return fmt.Sprintf("perm(%d)", uint8(p))
}

// Need is one permission a request needs; Pool for PermRead and PermWrite.
type Need struct {
	Perm Perm
	Pool string
}

// Decide allows the request (nil) or refuses it with a *kv.Error of code
// permission_denied naming the identity, the first permission it lacks and
// its pool, and the method. Every request needs at least PermAny: an
// identity no role names is refused everything.
func Decide(p *Policy, id Identity, method string, needs []Need) error {
	if id.Node {
		return nil
	}
	deny := func(n Need) error {
		what := n.Perm.String()
		if n.Perm == PermRead || n.Perm == PermWrite {
			what = fmt.Sprintf("%s on pool %q", what, n.Pool)
		}
		return kv.Errorf(kv.CodePermissionDenied, "identity %s lacks %s (%s)", id, what, method)
	}
	var g *grants
	if p != nil && id.Name != "" {
		g = p.by[id.Name]
	}
	if g == nil {
		if len(needs) > 0 && needs[0].Perm == PermNode {
			return deny(needs[0])
		}
		return kv.Errorf(kv.CodePermissionDenied, "identity %s has no grant (%s)", id, method)
	}
	for _, n := range needs {
		ok := false
		switch n.Perm {
		case PermAny:
			ok = true
		case PermRead:
			ok = g.read[n.Pool]
		case PermWrite:
			ok = g.write[n.Pool]
		case PermStatus:
			ok = g.status
		case PermAdmin:
			ok = g.admin
		case PermSystemRead:
			ok = g.status || g.admin
		case PermNode:
			ok = false
		}
		if !ok {
			return deny(n)
		}
	}
	return nil
}
