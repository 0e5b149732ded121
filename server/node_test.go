package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/distash/distash/config"
	"github.com/distash/distash/internal/testutil/bank"
	"github.com/distash/distash/server"
)

// TestNodeRefusals: a node whose configuration differs from the cluster's
// is refused with the first differing field; a stash node of no such pool
// is refused with the reason; one more stash node than a pool's stashes
// joins it.
func TestNodeRefusals(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an in-process cluster")
	}
	t.Parallel() // waits on the cluster's timers most of the time: overlaps another such test
	c := newSimCluster(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c.StartAll(ctx)

	start := func(name, toml, class, pool string) error {
		cfg, err := config.Parse([]byte(toml))
		if err != nil {
			t.Fatal(err)
		}
		ln, err := c.Net.Listen(name + ":4500")
		if err != nil {
			t.Fatal(err)
		}
		sctx, scancel := context.WithTimeout(ctx, 20*time.Second)
		defer scancel()
		srv, err := server.StartNode(sctx, server.NodeOptions{
			Dir: t.TempDir(), Config: cfg, Listen: name + ":4500", Listener: ln, Dialer: c.Net.Dialer(name + ":4500"),
			Coordinators: c.Coords, Class: class, Pool: pool, Logger: c.Logger,
		})
		if err == nil {
			srv.Stop()
		}
		return err
	}
	other := strings.Replace(bank.ClusterTOML, `prefix = "d/"`, `prefix = "e/"`, 1)
	err := start("stranger", other, server.ClassStash, "data")
	if err == nil || !strings.Contains(err.Error(), "prefix") || !strings.Contains(err.Error(), "e/") {
		t.Errorf("a node with another data prefix: %v; want a refusal naming the prefix", err)
	}
	// A fourth stash node of a 3-stash pool is not refused: the pool
	// grows by a stash (the data distributor moves shards to it).
	if err := start("extra", bank.ClusterTOML, server.ClassStash, "data"); err != nil {
		t.Errorf("a fourth stash node of a 3-stash pool: %v; want it to join", err)
	}
	err = start("lost", bank.ClusterTOML, server.ClassStash, "nosuch")
	if err == nil || !strings.Contains(err.Error(), "nosuch") {
		t.Errorf("a stash node of no such pool: %v", err)
	}
	t.Logf("refusals work; e.g. %v", start("stranger2", other, server.ClassTransaction, ""))
}
