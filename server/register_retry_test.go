package server_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/distash/distash/internal/clustertest"
	"github.com/distash/distash/internal/wire"
)

// TestRetriedRegistrationKeepsTheFirstMapsTag starts a durable R=2 pool
// whose controller applies data2's first registration but never answers
// it, as a loaded controller that commits it after the node's attempt
// timed out. data2 asks again (its client's next attempt): the same run of
// the node, so its slot keeps the tag the cluster's first shard map gives
// shards to. A retry that took it for a restart with an empty stash
// retired that tag at the cluster's start, and a shard whose other
// replica's stash had not started yet then had no replica at all (CI's
// TestEmptyDurableStashOfTrimmedTagJoinsAsNew: a key range on no stash).
func TestRetriedRegistrationKeepsTheFirstMapsTag(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an in-process cluster")
	}
	c := newLayoutCluster(t, clustertest.DurablePool(3, 2), "tx1 transaction", "data1 stash data", "data2 stash data", "data3 stash data")
	var lost atomic.Bool
	c.Node("tx1").Interceptor = func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		r, ok := req.(*wire.RegisterRequest)
		if info.FullMethod != wire.Coordinator_Register_FullMethodName || !ok || r.Address != c.Node("data2").Addr || lost.Load() {
			return handler(ctx, req)
		}
		resp, err := handler(ctx, req)
		if rr, ok := resp.(*wire.RegisterResponse); err != nil || !ok || rr.Error != nil || !lost.CompareAndSwap(false, true) {
			return resp, err // not applied: answered as it is
		}
		<-ctx.Done() // applied; the answer is lost
		return nil, ctx.Err()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c.StartAll(ctx)
	if !lost.Load() {
		t.Fatal("data2's registration was never applied and left unanswered")
	}
	clustertest.WaitUntil(t, 30*time.Second, "every shard has two live replicas", func() (bool, string) {
		d, ok := c.Distribution()["data"]
		return ok && d.UnderReplicated == 0 && d.Shards > 0, fmt.Sprintf("%+v", d)
	})
	v := c.View(ctx)
	for _, l := range v.Stashes {
		if l.Retired {
			t.Errorf("tag %d (slot %d of %q) was retired at the cluster's start", l.Tag, l.Slot, l.Pool)
		}
	}
	for _, name := range []string{"data1", "data2", "data3"} {
		for _, st := range c.Node(name).Server().Stashes() {
			if st.Tag > 3 {
				t.Errorf("%s serves tag %d, not one of the first shard map's (1 to 3)", name, st.Tag)
			}
		}
	}
	if d := c.Distribution()["data"]; d.MovesDone != 0 {
		t.Errorf("%d moves repaired shards at the cluster's start, want none: %+v", d.MovesDone, d)
	}
}
