package authz

import (
	"bytes"
	"sort"

	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/wire"
)

// Pools maps keys to the pools whose prefixes hold them.
type Pools struct {
	list []pool // sorted by prefix
}

type pool struct {
	name   string
	prefix []byte
	end    []byte // the first key after every key with prefix
}

// NewPools indexes pools by prefix: name → prefix.
func NewPools(prefixes map[string]string) *Pools {
	ps := &Pools{}
	for name, prefix := range prefixes {
		ps.list = append(ps.list, pool{name: name, prefix: []byte(prefix), end: prefixEnd([]byte(prefix))})
	}
	sort.Slice(ps.list, func(i, j int) bool { return bytes.Compare(ps.list[i].prefix, ps.list[j].prefix) < 0 })
	return ps
}

// prefixEnd is the first key after every key starting with p (nil: none).
func prefixEnd(p []byte) []byte {
	end := bytes.Clone(p)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// systemStart is the first key of the system key space.
var systemStart = []byte{0xff}

// key returns the needs of touching key with perm: perm on its pool;
// PermSystemRead for a read of a system key; nothing for a key outside
// every pool (the server refuses those itself: key_outside_pools).
func (ps *Pools) key(perm Perm, k []byte) []Need {
	if len(k) > 0 && k[0] == 0xff {
		if perm == PermRead {
			return []Need{{Perm: PermSystemRead}}
		}
		return nil
	}
	for _, p := range ps.list {
		if bytes.HasPrefix(k, p.prefix) {
			return []Need{{Perm: perm, Pool: p.name}}
		}
	}
	return nil
}

// span returns the needs of touching [begin, end) with perm: perm on every
// pool it overlaps, and PermSystemRead for a read reaching the system key
// space.
func (ps *Pools) span(perm Perm, begin, end []byte) []Need {
	var out []Need
	for _, p := range ps.list {
		if (p.end == nil || bytes.Compare(begin, p.end) < 0) && bytes.Compare(end, p.prefix) > 0 {
			out = append(out, Need{Perm: perm, Pool: p.name})
		}
	}
	if perm == PermRead && bytes.Compare(end, systemStart) > 0 {
		out = append(out, Need{Perm: PermSystemRead})
	}
	return out
}

// Rule is what one gRPC method needs.
type Rule struct {
	// Needs computes the permissions req (the method's request message)
	// needs. For a stream that is checked per message (PerMessage) it
	// gets each request the stream carries.
	Needs func(ps *Pools, req any) []Need
	// PerMessage: a stream whose every request is checked as it arrives
	// (the handler calls Check); opening it needs nothing.
	PerMessage bool
}

func fixed(n ...Need) Rule { return Rule{Needs: func(*Pools, any) []Need { return n }} }

var (
	anyGrant = fixed(Need{Perm: PermAny})
	status   = fixed(Need{Perm: PermStatus})
	admin    = fixed(Need{Perm: PermAdmin})
	node     = fixed(Need{Perm: PermNode})
)

// commitNeeds: write of every mutation's pool (a clear range: of every
// pool it overlaps) and of every write conflict range's pools, read of
// every read conflict range's pools.
func commitNeeds(ps *Pools, req *wire.CommitRequest) []Need {
	out := []Need{{Perm: PermAny}}
	for _, m := range req.GetMutations() {
		if kv.MutationType(m.GetType()) == kv.MutClearRange {
			out = append(out, ps.span(PermWrite, m.GetKey(), m.GetParam())...)
		} else {
			out = append(out, ps.key(PermWrite, m.GetKey())...)
		}
	}
	for _, r := range req.GetWriteConflicts() {
		out = append(out, ps.span(PermWrite, r.GetBegin(), r.GetEnd())...)
	}
	for _, r := range req.GetReadConflicts() {
		out = append(out, ps.span(PermRead, r.GetBegin(), r.GetEnd())...)
	}
	return out
}

func readNeeds(ps *Pools, req *wire.ReadRequest) []Need {
	out := []Need{{Perm: PermAny}}
	for _, k := range req.GetKeys() {
		out = append(out, ps.key(PermRead, k)...)
	}
	return out
}

func rangeNeeds(ps *Pools, req *wire.ReadRangeRequest) []Need {
	return append([]Need{{Perm: PermAny}}, ps.span(PermRead, req.GetBegin(), req.GetEnd())...)
}

// rules maps every gRPC method of every service in internal/wire to what
// it needs (TestEveryMethodHasARule enumerates the services).
var rules = map[string]Rule{
	// Data: read versions and the layout need any grant; commits and
	// reads their pools' write and read.
	wire.DiStash_GetReadVersion_FullMethodName: anyGrant,
	wire.DiStash_ReadVersionStream_FullMethodName: {PerMessage: true, Needs: func(*Pools, any) []Need {
		return []Need{{Perm: PermAny}}
	}},
	wire.DiStash_Commit_FullMethodName: {Needs: func(ps *Pools, req any) []Need {
		r, _ := req.(*wire.CommitRequest)
		return commitNeeds(ps, r)
	}},
	wire.DiStash_CommitStream_FullMethodName: {PerMessage: true, Needs: func(ps *Pools, req any) []Need {
		r, _ := req.(*wire.CommitStreamRequest)
		return commitNeeds(ps, r.GetRequest())
	}},
	wire.DiStash_ReadStream_FullMethodName: {PerMessage: true, Needs: func(ps *Pools, req any) []Need {
		r, _ := req.(*wire.ReadStreamRequest)
		if rr := r.GetRangeRequest(); rr != nil {
			return rangeNeeds(ps, rr)
		}
		return readNeeds(ps, r.GetRequest())
	}},
	wire.DiStash_Read_FullMethodName: {Needs: func(ps *Pools, req any) []Need {
		r, _ := req.(*wire.ReadRequest)
		return readNeeds(ps, r)
	}},
	wire.DiStash_ReadRange_FullMethodName: {Needs: func(ps *Pools, req any) []Need {
		r, _ := req.(*wire.ReadRangeRequest)
		return rangeNeeds(ps, r)
	}},
	wire.DiStash_Locations_FullMethodName:   anyGrant,
	wire.DiStash_ClusterInfo_FullMethodName: anyGrant,
	wire.DiStash_Status_FullMethodName:      status,
	wire.DiStash_Coldest_FullMethodName: {Needs: func(ps *Pools, req any) []Need {
		r, _ := req.(*wire.ColdestRequest)
		return []Need{{Perm: PermRead, Pool: r.GetPool()}}
	}},
	wire.DiStash_ShardMetrics_FullMethodName: node,

	// The log: nodes only.
	wire.Log_Peek_FullMethodName:       node,
	wire.Log_PeekStream_FullMethodName: node,
	wire.Log_Pop_FullMethodName:        node,
	wire.Log_Report_FullMethodName:     node,

	// The coordinators: clients may ask for the view (where the roles
	// are); operators change the cluster; the rest is node-to-node.
	wire.Coordinator_Register_FullMethodName:         node,
	wire.Coordinator_Heartbeat_FullMethodName:        node,
	wire.Coordinator_View_FullMethodName:             anyGrant,
	wire.Coordinator_Claim_FullMethodName:            node,
	wire.Coordinator_RecoveryDone_FullMethodName:     node,
	wire.Coordinator_Exclude_FullMethodName:          admin,
	wire.Coordinator_Include_FullMethodName:          admin,
	wire.Coordinator_Configure_FullMethodName:        admin,
	wire.Coordinator_Retire_FullMethodName:           node,
	wire.Coordinator_JoinCoordinators_FullMethodName: node,
	wire.Coordinator_SetLogReplicas_FullMethodName:   node,
	wire.Coordinator_Auth_FullMethodName:             admin,

	// Operator calls to one node.
	wire.Admin_Kill_FullMethodName: admin,
	wire.Admin_Auth_FullMethodName: admin,

	// Backup and restore.
	wire.Backup_Start_FullMethodName:  admin,
	wire.Backup_Status_FullMethodName: admin,
	wire.Backup_Stop_FullMethodName:   admin,
}

// RuleOf returns the rule of a gRPC full method name; false for a method
// no rule covers, which the server refuses (a new method must be given a
// rule before anyone may call it).
func RuleOf(method string) (Rule, bool) {
	r, ok := rules[method]
	return r, ok
}

// Check decides whether id may make the call req of method: Decide with
// the method's needs. An unknown method is refused.
func Check(p *Policy, ps *Pools, id Identity, method string, req any) error {
	r, ok := rules[method]
	if !ok {
		if id.Node {
			return nil
		}
		return kv.Errorf(kv.CodePermissionDenied, "identity %s: %s has no authorization rule", id, method)
	}
	return Decide(p, id, method, r.Needs(ps, req))
}
