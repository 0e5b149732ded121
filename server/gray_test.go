package server_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/distash/distash"
	"github.com/distash/distash/internal/coordrpc"
)

// TestSilentLeaderNodeIsLeft black-holes every link of the node holding
// the stateless roles and the log's leader (simnet Drop: its connections
// stay open and swallow everything, as a paused process's would). The
// log's raft elects another leader, whose node claims a new generation;
// the client must leave the silent node (its requests there get no answer
// and no error), and the stashes must move their pulls to the new leader,
// or reads of the new generation's commits wait forever (future_version).
// Commits, and reads of them in a new transaction, resume within
// silentBound of the drop. Then each data stash node falls silent in turn:
// no read waits on it longer than readBound.
func TestSilentLeaderNodeIsLeft(t *testing.T) {
	if testing.Short() {
		t.Skip("runs an 8-node cluster")
	}
	const silentBound = 8 * time.Second
	c := newSimCluster(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sctx, scancel := context.WithTimeout(ctx, 60*time.Second)
	c.StartAll(sctx)
	scancel()
	db := c.Open(ctx)
	// Writes, then reads of them, one after the other, each attempt with a
	// deadline far beyond the bound: only the cluster's recovery ends a
	// stall.
	writeRead := func(k string) error {
		tctx, tcancel := context.WithTimeout(ctx, 30*time.Second)
		defer tcancel()
		if err := db.Transact(tctx, func(tr *distash.Tx) error { tr.Set([]byte(k), []byte(k)); return nil }); err != nil {
			return fmt.Errorf("write %s: %w", k, err)
		}
		return db.ReadTransact(tctx, func(tr *distash.Tx) error {
			v, err := tr.Get([]byte(k))
			if err == nil && string(v) != k {
				err = fmt.Errorf("read %s back as %q", k, v)
			}
			return err
		})
	}
	for i := range 20 {
		if err := writeRead(fmt.Sprintf("d/before:%02d", i)); err != nil {
			t.Fatal(err)
		}
	}
	cc, err := coordrpc.NewClient(c.ClusterString(), coordrpc.ClientOptions{Dialer: c.Net.Dialer("probe")})
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	vctx, vcancel := context.WithTimeout(ctx, 10*time.Second)
	v, err := cc.View(vctx)
	vcancel()
	if err != nil || v.StatelessAddress == "" {
		t.Fatalf("no stateless node in the view: %v %v", v, err)
	}
	silent := v.StatelessAddress
	c.Net.Drop([]string{silent}, c.Others(silent))
	dropped := time.Now()
	t.Logf("every link of %s (generation %d) black-holed", silent, v.Generation)
	defer c.Net.Heal()
	var first time.Duration
	for i := 0; ; i++ {
		err := writeRead(fmt.Sprintf("d/after:%03d", i))
		if err == nil {
			if first == 0 {
				first = time.Since(dropped)
				t.Logf("first write read back %v after the drop", first.Round(time.Millisecond))
			}
			if time.Since(dropped) > first+2*time.Second {
				break
			}
			continue
		}
		t.Logf("%v after the drop: %v", time.Since(dropped).Round(time.Millisecond), err)
		if time.Since(dropped) > 40*time.Second {
			t.Fatalf("no write read back within 40 s of silencing %s", silent)
		}
	}
	if first > silentBound {
		t.Errorf("writes and reads of them resumed %v after %s fell silent: want < %v", first.Round(time.Millisecond), silent, silentBound)
	}
	vctx, vcancel = context.WithTimeout(ctx, 10*time.Second)
	v2, err := cc.View(vctx)
	vcancel()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the roles are on %s now, generation %d", v2.StatelessAddress, v2.Generation)
	c.Net.Heal()

	// A silent stash node: reads go to the other replicas of its shards
	// once a read there times out (the client's read deadline), and do
	// not wait for the transaction's deadline. Every data stash in turn,
	// so that one of them holds the keys read.
	read := func() (time.Duration, error) {
		began := time.Now()
		tctx, tcancel := context.WithTimeout(ctx, 30*time.Second)
		defer tcancel()
		err := db.ReadTransact(tctx, func(tr *distash.Tx) error {
			keys := make([][]byte, 20)
			for i := range keys {
				keys[i] = fmt.Appendf(nil, "d/before:%02d", i)
			}
			vals, err := tr.GetMulti(keys)
			for i, v := range vals {
				if err == nil && string(v) != string(keys[i]) {
					err = fmt.Errorf("read %s as %q", keys[i], v)
				}
			}
			return err
		})
		return time.Since(began), err
	}
	const readBound = 3 * time.Second
	for _, s := range v2.Stashes {
		if s.Pool != "data" || s.Address == "" {
			continue
		}
		c.Net.Drop([]string{s.Address}, c.Others(s.Address))
		var longest time.Duration
		for end := time.Now().Add(3 * time.Second); time.Now().Before(end); {
			took, err := read()
			if err != nil {
				t.Fatalf("with %s silent: %v", s.Address, err)
			}
			longest = max(longest, took)
		}
		c.Net.Heal()
		t.Logf("stash %d on %s silent: longest read %v", s.Tag, s.Address, longest.Round(time.Millisecond))
		if longest > readBound {
			t.Errorf("a read took %v while stash node %s was silent: want < %v", longest.Round(time.Millisecond), s.Address, readBound)
		}
	}
}
