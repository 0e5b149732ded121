package distash_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/distash/distash"
	"github.com/distash/distash/internal/testutil/silent"
	"github.com/distash/distash/internal/testutil/wait"
)

// TestClusterLeavesSilentNodes: nodes that stop answering with their
// connections open (paused) are left, not waited on until the caller's
// deadline. The stateless node falls silent, and so does the coordinator
// that answered last, while the view moves the roles to another node: a
// read-modify-write transaction (a read version, a read, a commit)
// completes there within stallAfter plus a few view refreshes. Then a
// stash falls silent: each read is served by its other replica after the
// read deadline at most.
func TestClusterLeavesSilentNodes(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	fc := newFakeCluster(t, replicatedShards)
	k1, k2 := fc.node("k1", true), fc.node("k2", true)
	s1, s2 := fc.node("s1", false), fc.node("s2", false)
	a, b := fc.node("a", false), fc.node("b", false)
	fc.setView(1, "s1", map[uint32]string{1: "a", 2: "b"})
	db := openFake(t, ctx, k1.addr+","+k2.addr)
	rmw := func(tr *distash.Tx) error {
		if _, err := tr.Get([]byte("d/pear")); err != nil {
			return err
		}
		tr.Set([]byte("d/pear"), []byte("x"))
		return nil
	}
	if err := db.Transact(ctx, rmw); err != nil {
		t.Fatal(err)
	}

	s1.silent.Store(true)
	k1.silent.Store(true)
	asked := k2.views.Load()
	go func() {
		// The new node claims the roles once the client looks for them
		// (it asked the live coordinator for the view).
		wait.Until(5*time.Second, func() bool { return k2.views.Load() > asked })
		fc.setView(2, "s2", map[uint32]string{1: "a", 2: "b"})
	}()
	start := time.Now()
	if err := db.Transact(ctx, rmw); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	t.Logf("a transaction begun on the silent stateless node committed on the new one after %v", took.Round(time.Millisecond))
	if took > 3*time.Second {
		t.Errorf("the transaction took %v to leave the silent stateless node: want < 3 s", took.Round(time.Millisecond))
	}
	if s2.commits.Load() != 1 || k2.views.Load() == 0 {
		t.Fatalf("the new stateless node got %d commits, the live coordinator %d view requests", s2.commits.Load(), k2.views.Load())
	}

	// A new client, which knows no replica's latency yet, and readers in
	// parallel: some reads go to a (the least expected wait).
	db = openFake(t, ctx, k2.addr)
	a.silent.Store(true)
	aReads := a.reads.Load()
	longest := readsAvoid(t, db, func() bool { return a.reads.Load() != aReads })
	t.Logf("with a silent stash replica, the longest read took %v", longest.Round(time.Millisecond))
	if longest > 2500*time.Millisecond {
		t.Errorf("a read took %v with a silent replica: want < 2.5 s", longest.Round(time.Millisecond))
	}
	if b.reads.Load() == 0 {
		t.Fatal("b served no read")
	}

	// A stash node that accepts connections and never speaks (a paused
	// process: its kernel still accepts), which a new client has no
	// connection to yet: opening the read stream must not wait for
	// gRPC's connect timeout.
	silentAddr, accepted := silent.Listen(t)
	fc.nodes["z"] = &fakeNode{fc: fc, name: "z", addr: silentAddr}
	fc.setView(3, "s2", map[uint32]string{1: "z", 2: "b"})
	db = openFake(t, ctx, k2.addr)
	longest = readsAvoid(t, db, func() bool { return accepted.Load() > 0 })
	t.Logf("with a replica on a node that never speaks, the longest read took %v", longest.Round(time.Millisecond))
	if longest > 2500*time.Millisecond {
		t.Errorf("a read took %v with a replica on a node that never speaks: want < 2.5 s", longest.Round(time.Millisecond))
	}
}

// readsAvoid reads on 4 goroutines, each at least 10 times and until
// tried says the silent replica was asked, and returns the longest read.
// Every read must be served by b.
func readsAvoid(t *testing.T, db *distash.DB, tried func() bool) time.Duration {
	t.Helper()
	ctx := ctxT(t, 30*time.Second)
	var mu sync.Mutex
	var longest time.Duration
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := 0; i < 10 || !tried(); i++ {
				if i == 200 || ctx.Err() != nil {
					t.Error("200 reads, none sent to the silent replica")
					return
				}
				began := time.Now()
				var got string
				err := db.ReadTransact(ctx, func(tr *distash.Tx) error {
					var err error
					got, err = getString(tr, fmt.Sprintf("d/k%d-%d", w, i))
					return err
				})
				if err != nil || got != "b" {
					t.Errorf("read served by %q (%v), want b", got, err)
					return
				}
				mu.Lock()
				longest = max(longest, time.Since(began))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return longest
}
