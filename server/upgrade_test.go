package server_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/distash/distash"
	"github.com/distash/distash/internal/clustertest"
	"github.com/distash/distash/internal/protover"
	"github.com/distash/distash/server"
)

// upgradeTOML: three transaction nodes (the coordinators and the log's
// replicas) and a durable pool replicated on two stash nodes.
const upgradeTOML = `
[log]
replicas = 3

[[pool]]
name = "data"
prefix = "d/"
medium = "ssd"
mode = "durable"
engine = "pebble"
stashes = 2
replication = 2
`

// TestRollingUpgrade runs a mixed cluster, some nodes acting as the
// previous release (protocol 1 only, through NodeOptions.Protocol), through
// the rolling restart of docs/operations.md: each node in turn, the
// transaction nodes first and then the stash nodes, stopped and started
// again as this release, under a writer; every acknowledged write is read
// back at the end.
func TestRollingUpgrade(t *testing.T) {
	t.Parallel() // waits on the cluster's timers most of the time: overlaps another such test
	previous := protover.Speaker{Min: 1, Max: 1}
	c := clustertest.NewSim(t, upgradeTOML, clustertest.Specs(
		"tx1 transaction", "tx2 transaction", "tx3 transaction", "data1 stash data", "data2 stash data")...)
	for _, n := range c.Nodes {
		if n.Name != "tx3" && n.Name != "data2" {
			n.Protocol = previous
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c.StartAll(ctx)
	db := c.Open(ctx)

	// The writer: each key written once; acked holds those acknowledged.
	var mu sync.Mutex
	var acked []string
	wctx, stopWriter := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; wctx.Err() == nil; i++ {
			k := fmt.Sprintf("d/w-%06d", i)
			octx, cancel := context.WithTimeout(wctx, 3*time.Second)
			err := db.Transact(octx, func(tr *distash.Tx) error { tr.Set([]byte(k), []byte(k)); return nil })
			cancel()
			if err == nil {
				mu.Lock()
				acked = append(acked, k)
				mu.Unlock()
			}
		}
	}()
	ackedCount := func() int { mu.Lock(); defer mu.Unlock(); return len(acked) }
	progress := func(what string) {
		t.Helper()
		from := ackedCount()
		clustertest.WaitUntil(t, 30*time.Second, what, func() (bool, string) {
			n := ackedCount()
			return n >= from+20, fmt.Sprintf("%d writes acknowledged since", n-from)
		})
	}
	progress("writes in the mixed cluster")
	// Status shows each node's range, and the cluster's: what they all speak.
	checkProtocols := func(when string, want map[string]string, cluster string) {
		t.Helper()
		clustertest.WaitUntil(t, 30*time.Second, "status "+when, func() (bool, string) {
			st, err := c.Status(ctx)
			if err != nil {
				return false, err.Error()
			}
			names := map[string]string{}
			for _, n := range c.Nodes {
				names[n.Addr] = n.Name
			}
			got := map[string]string{}
			for _, n := range st.Nodes {
				got[names[n.Address]] = fmt.Sprintf("%d-%d", n.ProtocolMin, n.ProtocolMax)
			}
			have := fmt.Sprintf("%v cluster %d-%d", got, st.ProtocolMin, st.ProtocolMax)
			return have == fmt.Sprintf("%v cluster %s", want, cluster), have
		})
	}
	checkProtocols("of the mixed cluster", map[string]string{"tx1": "1-1", "tx2": "1-1", "tx3": "1-2", "data1": "1-1", "data2": "1-2"}, "1-1")

	for _, name := range []string{"tx1", "tx2", "tx3", "data1", "data2"} {
		n := c.Node(name)
		c.Stop(n)
		n.Protocol = protover.Speaker{} // this release
		if err := c.Start(ctx, n); err != nil {
			t.Fatal(err)
		}
		if n.Class == clustertest.Stash {
			// The next stash node stops only once this one serves again:
			// the pool keeps a replica of every shard.
			clustertest.WaitUntil(t, 30*time.Second, name+"'s stashes healthy", func() (bool, string) {
				srv := n.Server()
				sts := srv.Stashes()
				for _, st := range sts {
					if st.Health != server.HealthHealthy {
						return false, fmt.Sprintf("%+v", st)
					}
				}
				return len(sts) > 0, "no stash yet"
			})
		}
		progress("writes after " + name + " restarted as this release")
	}
	checkProtocols("after the upgrade", map[string]string{"tx1": "1-2", "tx2": "1-2", "tx3": "1-2", "data1": "1-2", "data2": "1-2"}, "1-2")
	stopWriter()
	wg.Wait()

	mu.Lock()
	keys := append([]string(nil), acked...)
	mu.Unlock()
	err := db.ReadTransact(ctx, func(tr *distash.Tx) error {
		for _, k := range keys {
			v, err := tr.Get([]byte(k))
			if err != nil {
				return err
			}
			if string(v) != k {
				return fmt.Errorf("acknowledged write %s lost (read %q)", k, v)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d acknowledged writes, all read back after the rolling upgrade", len(keys))
}
