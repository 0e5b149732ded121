package coordrpc

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/distash/distash/config"
	"github.com/distash/distash/internal/coord"
	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/testutil/wait"
	"github.com/distash/distash/internal/wire"
)

func stashLoc(v *wire.ViewResponse, pool string, slot int) *wire.StashLocation {
	for _, l := range v.Stashes {
		if l.Pool == pool && int(l.Slot) == slot {
			return l
		}
	}
	return nil
}

// TestTagsExcludeConfigureRetire: registrations return tags (fresh ones
// for an empty stash whose tag served, a new slot for a stash beyond the
// pool's slots), and Exclude, Include, Configure and Retire, sent through
// a follower, reach the controller and show in View.
func TestTagsExcludeConfigureRetire(t *testing.T) {
	c := newCluster(t, nil)
	ctx := ctxT(t)
	li := c.controller()
	cl := c.client(c.grpc[(li+1)%3])
	cfg := testConfig(t, nil) // cache: tags 1, 2; data: tags 3, 4

	reg := func(id string, empty bool) (int, uint32) {
		t.Helper()
		slot, tag, _, err := cl.Register(ctx, NodeRegistration{ID: id, Addr: "127.0.0.1:" + map[string]string{"a": "7000", "b": "7001", "c": "7002"}[id],
			Class: coord.ClassStash, Pool: "data", DC: "dc1", Zone: "z" + id, Config: cfg, Empty: empty})
		if err != nil {
			t.Fatalf("register %s: %v", id, err)
		}
		return slot, tag
	}
	if slot, tag := reg("a", true); slot != 0 || tag != 3 {
		t.Fatalf("a: slot %d tag %d", slot, tag)
	}
	if slot, tag := reg("b", false); slot != 1 || tag != 4 {
		t.Fatalf("b: slot %d tag %d", slot, tag)
	}
	if slot, tag := reg("a", true); slot != 0 || tag != 5 {
		t.Fatalf("a again, empty: slot %d tag %d, want 0 5", slot, tag)
	}
	if slot, tag := reg("c", false); slot != 2 || tag != 6 {
		t.Fatalf("c: slot %d tag %d, want the new slot 2, tag 6", slot, tag)
	}

	// Admin calls.
	ex, err := cl.Exclude(ctx, []string{"127.0.0.1:7001", "10.0.0.9:4500"})
	if err != nil || !slices.Equal(ex, []string{"10.0.0.9:4500", "127.0.0.1:7001"}) {
		t.Fatalf("exclude: %v %v", ex, err)
	}
	if _, err := cl.Exclude(ctx, []string{"127.0.0.1"}); kv.CodeOf(err) != kv.CodeInvalidMutation || !strings.Contains(err.Error(), `"127.0.0.1"`) {
		t.Fatalf("exclude of a bad address: %v", err)
	}
	if err := cl.Configure(ctx, "", coord.KeyFailureWait, "1m30s"); err != nil {
		t.Fatal(err)
	}
	if err := cl.Configure(ctx, "data", coord.KeyReplication, "3"); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []struct{ pool, key, value, want string }{
		{"", coord.KeyFailureWait, "later", "not a duration"},
		{"", "colour", "red", `unknown key "colour"`},
		{"nope", coord.KeyReplication, "1", "no such pool"},
		{"cache", coord.KeyReplication, "3", "2 stash slots"},
		{"", "", "x", "key missing"},
	} {
		if err := cl.Configure(ctx, bad.pool, bad.key, bad.value); kv.CodeOf(err) != kv.CodeInvalidMutation || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("configure %+v: %v", bad, err)
		}
	}
	if err := cl.Retire(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if err := cl.Retire(ctx, 3); err != nil {
		t.Fatalf("retire again: %v", err)
	}
	if err := cl.Retire(ctx, 99); kv.CodeOf(err) != kv.CodeInvalidMutation || !strings.Contains(err.Error(), "never given") {
		t.Fatalf("retire of an unknown tag: %v", err)
	}

	v, err := cl.View(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v.FailureWaitMs != 90_000 || !v.FailureWaitSet || !slices.Equal(v.Excluded, []string{"10.0.0.9:4500", "127.0.0.1:7001"}) {
		t.Fatalf("view: failure wait %d, excluded %v", v.FailureWaitMs, v.Excluded)
	}
	var reps []string
	for _, r := range v.Replication {
		reps = append(reps, fmt.Sprintf("%s=%d", r.Pool, r.Replication))
	}
	if !slices.Equal(reps, []string{"cache=2", "data=3"}) {
		t.Fatalf("view replication %v", reps)
	}
	if l := stashLoc(v, "data", 1); l == nil || l.Tag != 4 || !l.Excluded || l.Retired || l.Zone != "zb" || l.Dc != "dc1" {
		t.Fatalf("data/1: %v", l)
	}
	if l := stashLoc(v, "data", 2); l == nil || l.Tag != 6 || l.Excluded || l.Node != "c" {
		t.Fatalf("data/2: %v", l)
	}
	if l := stashLoc(v, "data", 0); l == nil || l.Tag != 5 || l.Retired {
		t.Fatalf("data/0: %v", l)
	}
	slots, replaced := 0, 0
	for _, l := range v.Stashes {
		if l.Slot >= 0 {
			slots++
		} else if l.Retired {
			replaced++
		}
	}
	if slots != 5 || replaced != 1 {
		t.Fatalf("%d stash slots and %d replaced tags, want 5 and 1 (%v)", slots, replaced, v.Stashes)
	}
	if err := cl.Retire(ctx, 5); err != nil {
		t.Fatal(err)
	}
	if v, _ = cl.View(ctx); !stashLoc(v, "data", 0).Retired {
		t.Fatal("retired tag 5 not shown retired")
	}
	if slot, tag := reg("a", false); slot != 0 || tag != 7 {
		t.Fatalf("a after its tag was retired: slot %d tag %d, want 0 7", slot, tag)
	}

	left, err := cl.Include(ctx, []string{"127.0.0.1:7001"})
	if err != nil || !slices.Equal(left, []string{"10.0.0.9:4500"}) {
		t.Fatalf("include: %v %v", left, err)
	}
	if left, err = cl.Include(ctx, []string{"all"}); err != nil || len(left) != 0 {
		t.Fatalf("include all: %v %v", left, err)
	}
	if err := cl.Configure(ctx, "", coord.KeyFailureWait, "default"); err != nil {
		t.Fatal(err)
	}
	v, _ = cl.View(ctx)
	if v.FailureWaitMs != config.DefaultFailureWait.Milliseconds() || v.FailureWaitSet || len(v.Excluded) != 0 || stashLoc(v, "data", 1).Excluded {
		t.Fatalf("after include all and default: failure wait %d excluded %v", v.FailureWaitMs, v.Excluded)
	}
	// The state replicated to every coordinator.
	for i, n := range c.nodes {
		wait.For(t, fmt.Sprintf("coordinator %d has the state", i), func() bool {
			st := n.State()
			return st.FailureWaitMs == nil && st.TagRetired(5)
		})
	}
}

func TestAdminRequestsCheckedAtTheBoundary(t *testing.T) {
	s := &Server{}
	bg := context.Background()
	long := strings.Repeat("x", MaxNameBytes+1)
	if r, _ := s.Exclude(bg, nil); r.Error == nil {
		t.Error("nil exclude accepted")
	}
	if r, _ := s.Exclude(bg, &wire.ExcludeRequest{Addresses: []string{long}}); r.Error == nil || !strings.Contains(r.Error.Detail, "address of") {
		t.Errorf("long address: %v", r.Error)
	}
	if r, _ := s.Include(bg, &wire.IncludeRequest{Addresses: make([]string, coord.MaxExcludeAddrs+1)}); r.Error == nil {
		t.Error("too many addresses accepted")
	}
	if r, _ := s.Configure(bg, &wire.ConfigureRequest{Key: coord.KeyFailureWait, Value: long}); r.Error == nil {
		t.Error("long value accepted")
	}
	if r, _ := s.Retire(bg, &wire.RetireRequest{}); r.Error == nil || kv.Code(r.Error.Code) != kv.CodeInvalidMutation {
		t.Errorf("retire of tag 0: %v", r.Error)
	}
	if r, _ := s.Retire(bg, nil); r.Error == nil {
		t.Error("nil retire accepted")
	}
}
