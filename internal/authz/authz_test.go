package authz

import (
	"errors"
	"strings"
	"testing"

	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/wire"
)

// TestEveryMethodHasARule enumerates every method of every service in the
// wire protocol's descriptor: a new RPC without a rule fails here (and the
// server would refuse it to everyone but nodes).
func TestEveryMethodHasARule(t *testing.T) {
	services := wire.File_distash_proto.Services()
	if services.Len() < 5 {
		t.Fatalf("%d services in the descriptor, want DiStash, Log, Coordinator, Admin, Backup", services.Len())
	}
	n := 0
	for i := 0; i < services.Len(); i++ {
		sd := services.Get(i)
		for j := 0; j < sd.Methods().Len(); j++ {
			m := sd.Methods().Get(j)
			full := "/" + string(sd.FullName()) + "/" + string(m.Name())
			n++
			r, ok := RuleOf(full)
			if !ok {
				t.Errorf("%s has no authorization rule (internal/authz/rules.go)", full)
				continue
			}
			streaming := m.IsStreamingClient() || m.IsStreamingServer()
			switch {
			case r.PerMessage && !streaming:
				t.Errorf("%s: unary but PerMessage", full)
			case streaming && !r.PerMessage:
				// Checked once, when it opens, with no request: only a
				// node's stream (the log's PeekStream) may be, whose
				// caller may read every tag anyway.
				if needs := r.Needs(testPools, nil); len(needs) != 1 || needs[0].Perm != PermNode {
					t.Errorf("%s: a stream checked only when it opens needs %v, want a node's certificate alone", full, needs)
				}
			}
		}
	}
	if n != len(rules) {
		t.Errorf("%d methods in the descriptor, %d rules: a rule names a method that does not exist", n, len(rules))
	}
}

var testPools = NewPools(map[string]string{"cache": "c/", "data": "d/", "logs": "l/"})

func shop() *Policy {
	return NewPolicy([]Role{
		{Name: "shop", Members: []string{"app1"}, Read: []string{"cache", "data"}, Write: []string{"cache"}},
		{Name: "ops", Members: []string{"alice"}, Admin: true},
		{Name: "monitor", Members: []string{"prom"}, Status: true},
	})
}

func denied(t *testing.T, err error, want ...string) {
	t.Helper()
	if !errors.Is(err, &kv.Error{Code: kv.CodePermissionDenied}) {
		t.Fatalf("got %v, want permission_denied", err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%q does not name %q", err, w)
		}
	}
}

func TestCommitNeedsEveryPool(t *testing.T) {
	p, app := shop(), Identity{Name: "app1", Source: "certificate"}
	set := func(k string) *wire.Mutation {
		return &wire.Mutation{Type: uint32(kv.MutSet), Key: []byte(k), Param: []byte("v")}
	}
	rng := func(b, e string) *wire.KeyRange { return &wire.KeyRange{Begin: []byte(b), End: []byte(e)} }
	method := wire.DiStash_Commit_FullMethodName
	ok := &wire.CommitRequest{Mutations: []*wire.Mutation{set("c/1")}, WriteConflicts: []*wire.KeyRange{rng("c/1", "c/1\x00")}, ReadConflicts: []*wire.KeyRange{rng("d/a", "d/z")}}
	if err := Check(p, testPools, app, method, ok); err != nil {
		t.Fatalf("write cache, read data: %v", err)
	}
	// A write of data besides the cache's: the whole request is refused.
	both := &wire.CommitRequest{Mutations: []*wire.Mutation{set("c/1"), set("d/1")}}
	denied(t, Check(p, testPools, app, method, both), `"app1"`, "write", `pool "data"`)
	// A write conflict range alone, and a clear range reaching into data.
	denied(t, Check(p, testPools, app, method, &wire.CommitRequest{WriteConflicts: []*wire.KeyRange{rng("c/", "d/0")}}), `pool "data"`)
	clr := &wire.Mutation{Type: uint32(kv.MutClearRange), Key: []byte("c/"), Param: []byte("e")}
	denied(t, Check(p, testPools, app, method, &wire.CommitRequest{Mutations: []*wire.Mutation{clr}}), `write on pool "data"`)
	// A read conflict on a pool without read.
	denied(t, Check(p, testPools, app, method, &wire.CommitRequest{ReadConflicts: []*wire.KeyRange{rng("l/", "l0")}}), `read on pool "logs"`)
	// The stream's messages get the same rule.
	denied(t, Check(p, testPools, app, wire.DiStash_CommitStream_FullMethodName, &wire.CommitStreamRequest{Request: both}), `pool "data"`)
	if err := Check(p, testPools, app, wire.DiStash_CommitStream_FullMethodName, &wire.CommitStreamRequest{Request: ok}); err != nil {
		t.Fatal(err)
	}
}

func TestReadsAndTheSystemKeySpace(t *testing.T) {
	p := shop()
	app, prom, alice := Identity{Name: "app1", Source: "token"}, Identity{Name: "prom", Source: "certificate"}, Identity{Name: "alice", Source: "certificate"}
	read := func(keys ...string) *wire.ReadRequest {
		r := &wire.ReadRequest{}
		for _, k := range keys {
			r.Keys = append(r.Keys, []byte(k))
		}
		return r
	}
	if err := Check(p, testPools, app, wire.DiStash_Read_FullMethodName, read("c/1", "d/2")); err != nil {
		t.Fatal(err)
	}
	denied(t, Check(p, testPools, app, wire.DiStash_Read_FullMethodName, read("l/1")), `read on pool "logs"`, "(token)")
	denied(t, Check(p, testPools, app, wire.DiStash_ReadStream_FullMethodName, &wire.ReadStreamRequest{RangeRequest: &wire.ReadRangeRequest{Begin: []byte("d/"), End: []byte("m")}}), `pool "logs"`)
	sys := read("\xff/shards/x")
	denied(t, Check(p, testPools, app, wire.DiStash_Read_FullMethodName, sys), "system key space")
	for _, id := range []Identity{prom, alice} {
		if err := Check(p, testPools, id, wire.DiStash_Read_FullMethodName, sys); err != nil {
			t.Errorf("%s reading system keys: %v", id, err)
		}
	}
	denied(t, Check(p, testPools, prom, wire.DiStash_ReadRange_FullMethodName, &wire.ReadRangeRequest{Begin: []byte("c/"), End: []byte("\xff\xff")}), `read on pool "cache"`)
}

func TestOperatorAndNodeMethods(t *testing.T) {
	p := shop()
	app, prom, alice := Identity{Name: "app1", Source: "certificate"}, Identity{Name: "prom", Source: "certificate"}, Identity{Name: "alice", Source: "certificate"}
	nodeID := Identity{Name: "distash node1", Source: "certificate", Node: true}
	stranger := Identity{Name: "mallory", Source: "certificate"}
	for _, tc := range []struct {
		method  string
		allowed []Identity
	}{
		{wire.Admin_Kill_FullMethodName, []Identity{alice, nodeID}},
		{wire.Coordinator_Exclude_FullMethodName, []Identity{alice, nodeID}},
		{wire.Admin_Auth_FullMethodName, []Identity{alice, nodeID}},
		{wire.Backup_Start_FullMethodName, []Identity{alice, nodeID}},
		{wire.DiStash_Status_FullMethodName, []Identity{prom, nodeID}},
		{wire.DiStash_GetReadVersion_FullMethodName, []Identity{app, prom, alice, nodeID}},
		{wire.Coordinator_View_FullMethodName, []Identity{app, prom, alice, nodeID}},
		{wire.Coordinator_Register_FullMethodName, []Identity{nodeID}},
		{wire.Log_Pop_FullMethodName, []Identity{nodeID}},
		{wire.DiStash_ShardMetrics_FullMethodName, []Identity{nodeID}},
	} {
		for _, id := range []Identity{app, prom, alice, nodeID, stranger, {}} {
			err := Check(p, testPools, id, tc.method, nil)
			want := false
			for _, a := range tc.allowed {
				want = want || a == id
			}
			if (err == nil) != want {
				t.Errorf("%s by %s: %v, want allowed=%v", tc.method, id, err, want)
			}
		}
	}
	denied(t, Check(p, testPools, stranger, wire.DiStash_GetReadVersion_FullMethodName, nil), `"mallory"`, "no grant")
	denied(t, Check(p, testPools, app, "/distash.v1.DiStash/Frobnicate", nil), "no authorization rule")
}

func TestGrantRevoke(t *testing.T) {
	roles := shop().Roles()
	roles, ok := Grant(roles, "shop", "app2")
	if !ok {
		t.Fatal("no role shop")
	}
	if _, ok := Grant(roles, "nope", "x"); ok {
		t.Fatal("granted a role that does not exist")
	}
	p := NewPolicy(roles)
	app2 := Identity{Name: "app2", Source: "certificate"}
	if err := Check(p, testPools, app2, wire.DiStash_Read_FullMethodName, &wire.ReadRequest{Keys: [][]byte{[]byte("d/1")}}); err != nil {
		t.Fatal(err)
	}
	roles, _ = Revoke(roles, "shop", "app2")
	denied(t, Check(NewPolicy(roles), testPools, app2, wire.DiStash_Read_FullMethodName, &wire.ReadRequest{Keys: [][]byte{[]byte("d/1")}}), "no grant")
	roles = PutRole(roles, Role{Name: "audit", Read: []string{"logs"}})
	roles, _ = Grant(roles, "audit", "app1")
	if err := Check(NewPolicy(roles), testPools, Identity{Name: "app1"}, wire.DiStash_Read_FullMethodName, &wire.ReadRequest{Keys: [][]byte{[]byte("l/1")}}); err != nil {
		t.Fatalf("app1 in audit and shop: %v", err)
	}
}
