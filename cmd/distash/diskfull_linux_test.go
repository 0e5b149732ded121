package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/distash/distash"
	"github.com/distash/distash/internal/clusterstatus"
	"github.com/distash/distash/internal/clustertest"
	"github.com/distash/distash/internal/testutil/wait"
	"github.com/distash/distash/internal/wire"
)

// diskFullTOML: a durable pool with three replicas of every shard, one
// stash node each. Flash segments of 1 MiB make the engine write new files
// as it goes, so a small file system fills.
const diskFullTOML = `
[cluster]
mvcc_window = "2s"

[[pool]]
name = "data"
prefix = "d/"
medium = "ssd"
mode = "durable"
engine = "flash"
stashes = 3
replication = 3

[pool.flash]
segment = "1MiB"
`

// TestProcessStashDiskFills runs real server processes: one transaction
// node and three stash nodes of a durable pool with replication 3, the
// first stash node's --dir on a 32 MiB tmpfs that the test mounts (as
// root; skipped when it cannot). While writers commit, the test fills the
// tmpfs: the stash reports disk_full in the cluster's status (before, it
// stayed healthy, silent, while it fell behind and the ratekeeper held
// the whole cluster to ~50 transactions/s), the cluster keeps committing,
// and once the test frees the space the stash is healthy again and every
// acknowledged write reads back.
func TestProcessStashDiskFills(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 4 real server processes")
	}
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs needs root")
	}
	nodes := clustertest.Specs("tx1 transaction", "data1 stash data", "data2 stash data", "data3 stash data")
	for i := range nodes {
		nodes[i].Zone = "z" + nodes[i].Name
	}
	c := newProcs(t, clustertest.ProcsOptions{TOML: diskFullTOML, Nodes: nodes, Verbose: true})
	small := c.node("data1").Dir
	if err := os.MkdirAll(small, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", small).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs (%v: %s): this test needs a small file system to fill", err, strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", small).CombinedOutput(); err != nil {
			t.Logf("umount %s: %v: %s", small, err, out)
		}
	})
	defer c.stopAll() // before the umount
	c.start()
	coordinators := c.Coordinators
	var addrs []string
	for _, n := range c.Nodes {
		addrs = append(addrs, n.Addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	db, err := distash.Open(ctx, coordinators)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	data1 := func() *wire.StashStatus {
		sctx, scancel := context.WithTimeout(ctx, 5*time.Second)
		defer scancel()
		st, err := clusterstatus.Gather(sctx, coordinators, nil)
		if err != nil {
			return &wire.StashStatus{Health: err.Error()}
		}
		for _, s := range st.Stashes {
			if s.Address == addrs[1] {
				return s
			}
		}
		return &wire.StashStatus{Health: "not in status"}
	}
	waitData1 := func(what string, timeout time.Duration, cond func(*wire.StashStatus) bool) *wire.StashStatus {
		t.Helper()
		var s *wire.StashStatus
		if _, err := clustertest.Until(ctx, timeout, 200*time.Millisecond, what, func() (bool, string) {
			s = data1()
			return cond(s), fmt.Sprintf("data1's stash: %s, %s", s.Health, s.LastError)
		}); err != nil {
			t.Fatal(err)
		}
		return s
	}
	waitData1("the cluster serves", time.Minute, func(s *wire.StashStatus) bool { return s.Health == "healthy" })

	// Writers: one key per transaction, every acknowledged one kept.
	var n atomic.Int64
	var mu sync.Mutex
	acked := map[string]string{}
	wctx, wcancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for g := 0; g < 6; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; wctx.Err() == nil; i++ {
				k := fmt.Sprintf("d/%c/w%d-%06d", 'a'+byte(i%26), g, i)
				v := fmt.Sprintf("%s=%0800d", k, i)
				if db.Transact(wctx, func(tr *distash.Tx) error { tr.Set([]byte(k), []byte(v)); return nil }) == nil {
					n.Add(1)
					mu.Lock()
					acked[k] = v
					mu.Unlock()
				}
			}
		}()
	}
	// Rates over the time a number of commits take (or a longest window,
	// if they take longer: a throttled cluster).
	base := wait.Rate(n.Load, 500, 2*time.Second)

	// Fill the file system.
	filler := filepath.Join(small, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 1<<20)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	f.Close()
	s := waitData1("data1's stash reports disk_full", 30*time.Second, func(s *wire.StashStatus) bool { return s.Health == "disk_full" })
	t.Logf("data1's stash: %s: %s", s.Health, s.LastError)
	fullRate := wait.Rate(n.Load, max(int64(base), 1), 3*time.Second) // a second's worth at the rate before
	t.Logf("commits/s: %.0f before, %.0f while data1's disk is full", base, fullRate)
	if fullRate < base/3 {
		t.Errorf("one full replica of three throttled the cluster: %.0f commits/s, %.0f before", fullRate, base)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	wcancel()
	wg.Wait()
	tr, err := db.CreateTransaction(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rv, err := tr.ReadVersion()
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	s = waitData1("data1's stash is healthy and caught up", 60*time.Second, func(s *wire.StashStatus) bool {
		return s.Health == "healthy" && s.Version >= rv
	})
	t.Logf("healthy and caught up %v after the space was freed (%d restarts); %d writes acknowledged", time.Since(began).Round(time.Millisecond), s.Restarts, len(acked))
	// Every acknowledged write, read from data1's stash itself.
	conn, err := c.Conn(addrs[1])
	if err != nil {
		t.Fatal(err)
	}
	if err := clustertest.CheckStash(ctx, conn, db, s.Id, acked); err != nil {
		t.Fatalf("read from data1's stash: %v", err)
	}
}
