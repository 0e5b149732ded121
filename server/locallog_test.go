package server_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distash/distash"
	"github.com/distash/distash/config"
	"github.com/distash/distash/distashtest"
	"github.com/distash/distash/internal/clustertest"
	"github.com/distash/distash/internal/fsys/faultfs"
	"github.com/distash/distash/internal/testutil/wait"
	"github.com/distash/distash/server"
)

// localLogTOML is a cluster of one DRAM cache pool with one replica per
// shard, so a cache stash's contents after a restart are its own: what
// it reloaded, or nothing. A 1 s MVCC window makes the stash flush (and
// log) what it applied within a second.
const localLogTOML = `
[cluster]
mvcc_window = "1s"
failure_wait = %q

[log]
replicas = 1

[[pool]]
name = "cache"
prefix = "c/"
medium = "dram"
mode = "ephemeral"
engine = "memory"
stashes = 2
replication = 1
capacity = "64MiB"
local_log = %v
`

// newLocalLogCluster lays out a transaction node and two stash nodes of
// the cache pool, each stash node on a fault FS over the real disk (so a
// kill -9 can be emulated).
func newLocalLogCluster(t *testing.T, failureWait string, localLog bool) *clustertest.Sim {
	c := clustertest.NewSim(t, fmt.Sprintf(localLogTOML, failureWait, localLog),
		clustertest.Specs("tx1 transaction", "cache1 stash cache", "cache2 stash cache")...)
	for _, n := range c.Nodes[1:] {
		n.FS = faultfs.New(nil)
	}
	return c
}

// cacheHistory checks that no read of a cached key returns a value older
// than one already read, or acknowledged as written, before the read
// began. One writer per key writes increasing numbers, each after the
// last was acknowledged; a read may miss (an ephemeral pool may lose any
// key), never go back in time.
type cacheHistory struct {
	keys  int
	acked []atomic.Int64 // per key: newest number acknowledged
	mu    sync.Mutex
	seen  []int64 // per key: newest number a finished read returned
	// violations found, and reads: ok (present or absent), hits (present).
	violations []string
}

// readStats counts reads in a time window.
type readStats struct{ ok, hits atomic.Int64 }

func (s *readStats) rate() float64 {
	if s.ok.Load() == 0 {
		return 0
	}
	return float64(s.hits.Load()) / float64(s.ok.Load())
}

func cacheKey(i int) []byte { return []byte(fmt.Sprintf("c/k%04d", i)) }

// write runs one writer goroutine per key group until ctx ends.
func (h *cacheHistory) write(ctx context.Context, db *distash.DB, writers int, wg *sync.WaitGroup) {
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			next := make(map[int]int64)
			for ctx.Err() == nil {
				// A quarter of the keys are written: the others keep the
				// values they had before a kill, so a stash that lost
				// them misses until they are filled again.
				k := w + writers*rng.IntN(h.keys/4/writers)
				n := next[k] + 1
				// Retried with the same number until acknowledged: a
				// commit of unknown outcome applies the same value.
				for ctx.Err() == nil {
					wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
					err := db.Transact(wctx, func(tr *distash.Tx) error {
						tr.Set(cacheKey(k), []byte(strconv.FormatInt(n, 10)))
						return nil
					})
					cancel()
					if err == nil {
						next[k] = n
						h.acked[k].Store(n)
						break
					}
				}
				time.Sleep(time.Millisecond)
			}
		}()
	}
}

// read runs readers until ctx ends, counting each successful read in
// the stats stats() returns at the time.
func (h *cacheHistory) read(ctx context.Context, db *distash.DB, readers int, stats func() *readStats, wg *sync.WaitGroup) {
	for r := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(r), 11))
			for ctx.Err() == nil {
				k := rng.IntN(h.keys)
				floor := h.acked[k].Load()
				h.mu.Lock()
				floor = max(floor, h.seen[k])
				h.mu.Unlock()
				var v []byte
				rctx, cancel := context.WithTimeout(ctx, time.Second)
				err := db.ReadTransact(rctx, func(tr *distash.Tx) error {
					var err error
					v, err = tr.Get(cacheKey(k))
					return err
				})
				cancel()
				if err != nil {
					continue
				}
				st := stats()
				st.ok.Add(1)
				if v == nil {
					continue
				}
				st.hits.Add(1)
				got, perr := strconv.ParseInt(string(v), 10, 64)
				h.mu.Lock()
				switch {
				case perr != nil:
					h.violations = append(h.violations, fmt.Sprintf("key %d: value %q", k, v))
				case got < floor:
					h.violations = append(h.violations, fmt.Sprintf("key %d: read %d after %d was acknowledged or read", k, got, floor))
				}
				if perr == nil && got > h.seen[k] {
					h.seen[k] = got
				}
				h.mu.Unlock()
			}
		}()
	}
}

// holder returns the cache node whose stash holds the keys, and its stash.
func holder(c *clustertest.Sim) (*clustertest.SimNode, server.StashStats) {
	c.T.Helper()
	for _, n := range c.Nodes[1:] {
		srv := n.Server()
		if srv == nil {
			continue
		}
		for _, st := range srv.Stashes() {
			if st.Keys > 0 {
				return n, st
			}
		}
	}
	c.T.Fatal("no cache stash holds keys")
	return nil, server.StashStats{}
}

func stashOf(n *clustertest.SimNode) server.StashStats {
	for _, st := range n.Server().Stashes() {
		return st
	}
	return server.StashStats{}
}

// runLocalLogKill loads the cache, runs a writer and readers, kills -9 the
// stash node holding the keys, restarts it once down returns, and returns
// the hit rates of the preReads reads before the kill and of the window
// reads after the restart, the stash before the kill and after the
// restart.
func runLocalLogKill(t *testing.T, failureWait string, localLog bool, down func(c *clustertest.Sim, old server.StashStats), window int64) (before, after float64, old, restarted server.StashStats, h *cacheHistory) {
	c := newLocalLogCluster(t, failureWait, localLog)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c.StartAll(ctx)
	db := c.Open(ctx)
	const keys = 400
	h = &cacheHistory{keys: keys, acked: make([]atomic.Int64, keys), seen: make([]int64, keys)}
	for i := range keys {
		if err := db.Transact(ctx, func(tr *distash.Tx) error {
			tr.Set(cacheKey(i), []byte("0"))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	var cur atomic.Pointer[readStats]
	cur.Store(&readStats{})
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	h.write(wctx, db, 4, &wg)
	h.read(wctx, db, 4, func() *readStats { return cur.Load() }, &wg)
	defer func() {
		stop()
		wg.Wait()
	}()
	// The writes of the load so far leave the 1 s window: logged.
	var srvs []*server.Server
	for _, n := range c.Nodes {
		if srv := n.Server(); srv != nil {
			srvs = append(srvs, srv)
		}
	}
	distashtest.WaitFlushed(t, srvs...)
	// The windows are counts of reads (the readers make about 150 a
	// second), not fixed times.
	const preReads = 150
	pre := &readStats{}
	cur.Store(pre)
	wait.Within(t, time.Minute, fmt.Sprintf("%d reads before the kill", preReads), func() bool { return pre.ok.Load() >= preReads })
	n, old := holder(c)
	cur.Store(&readStats{}) // reads while it is down are not counted
	c.Kill9(n)
	killed := time.Now()
	down(c, old)
	downFor := time.Since(killed)
	if err := c.Start(ctx, n); err != nil {
		t.Fatal(err)
	}
	post := &readStats{}
	cur.Store(post)
	wait.Within(t, time.Minute, fmt.Sprintf("%d reads after the restart", window), func() bool { return post.ok.Load() >= window })
	cur.Store(&readStats{})
	stop()
	wg.Wait()
	t.Logf("local_log=%v, down %v: hit rate %.3f before (%d reads), %.3f after the restart (%d reads)",
		localLog, downFor.Round(time.Millisecond), pre.rate(), pre.ok.Load(), post.rate(), post.ok.Load())
	if pre.ok.Load() == 0 || post.ok.Load() == 0 {
		t.Fatalf("reads before %d, after %d: want some in both", pre.ok.Load(), post.ok.Load())
	}
	return pre.rate(), post.rate(), old, stashOf(n), h
}

// downFor keeps a killed stash node down for d (within failure_wait).
func downFor(d time.Duration) func(*clustertest.Sim, server.StashStats) {
	return func(*clustertest.Sim, server.StashStats) { time.Sleep(d) }
}

// untilTagLosesItsShards keeps a killed stash node down until its tag,
// past failure_wait, holds no shard of the shard map: the data
// distributor moved them to the pool's other stash.
func untilTagLosesItsShards(c *clustertest.Sim, old server.StashStats) {
	c.T.Helper()
	wait.Within(c.T, time.Minute, fmt.Sprintf("stash %d's shards moved off it", old.Tag), func() bool {
		st, err := c.Status(context.Background())
		if err != nil || len(st.StashShares) == 0 {
			return false
		}
		for _, sh := range st.StashShares {
			if sh.Id == old.Tag && sh.Shards > 0 {
				return false
			}
		}
		return true
	})
}

// TestDRAMStashLocalLogSurvivesKill9 kills -9 (in process: its disk keeps
// what it wrote, nothing more reaches it) the stash node of a DRAM pool
// with local_log that holds the cached keys, under a writer to those
// keys, and restarts it within failure_wait: it keeps its tag, reloads
// its local log, catches up, and its hit rate right after the restart is
// at least 90% of before; no read ever returns a value older than one
// already read or acknowledged before it began. Without local_log the
// same run fails: the stash comes back empty (hit rate near 0).
func TestDRAMStashLocalLogSurvivesKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a 3-node cluster for about 8 s")
	}
	t.Parallel() // waits on the cluster's timers most of the time: overlaps another such test
	before, after, old, st, h := runLocalLogKill(t, "60s", true, downFor(500*time.Millisecond), 300)
	if len(h.violations) > 0 {
		t.Fatalf("%d stale reads, first: %s", len(h.violations), h.violations[0])
	}
	if st.Tag != old.Tag {
		t.Fatalf("the restarted stash has tag %d, it had %d: it should keep it within failure_wait", st.Tag, old.Tag)
	}
	if st.LocalLog == nil || st.LocalLog.RecoveredVersion == 0 || st.LocalLog.RecoveredKeys == 0 || st.LocalLog.StartedEmpty != "" {
		t.Fatalf("local log status %+v: want a version and keys reloaded", st.LocalLog)
	}
	t.Logf("reloaded version %d, %d keys in %d ms (%d bytes read)", st.LocalLog.RecoveredVersion, st.LocalLog.RecoveredKeys, st.LocalLog.RecoveryMs, st.LocalLog.RecoveredReadBytes)
	if after < 0.9*before {
		t.Fatalf("hit rate %.3f after the restart, %.3f before: want at least 90%% of it", after, before)
	}
}

// TestDRAMStashLocalLogAfterFailureWait: a stash node with local_log that
// returns after failure_wait finds its tag replaced (its shards moved to
// the pool's other stash): it rejoins as a new, empty stash, and no read
// returns a stale value.
func TestDRAMStashLocalLogAfterFailureWait(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a 3-node cluster for about 10 s")
	}
	t.Parallel() // waits on the cluster's timers most of the time: overlaps another such test
	before, after, old, st, h := runLocalLogKill(t, "1s", true, untilTagLosesItsShards, 300)
	if len(h.violations) > 0 {
		t.Fatalf("%d stale reads, first: %s", len(h.violations), h.violations[0])
	}
	if st.Tag == old.Tag {
		t.Fatalf("the stash kept tag %d after failure_wait: want a new one", st.Tag)
	}
	if st.LocalLog == nil || st.LocalLog.RecoveredVersion != 0 || st.LocalLog.RecoveredKeys != 0 {
		t.Fatalf("local log status %+v: want an empty start", st.LocalLog)
	}
	// Only the keys written since (a quarter) are there to hit.
	if after > 0.6*before {
		t.Fatalf("hit rate %.3f after the restart, %.3f before: an empty stash should miss the keys not written since", after, before)
	}
}

// TestLocalLogHitRateAfterKill9 measures, for the report, the hit rate of
// the 1,500 reads (about 10 s) after a kill -9 and restart of a DRAM stash node, with and
// without local_log. Set DISTASH_LOCALLOG_MEASURE=1 to run it.
func TestLocalLogHitRateAfterKill9(t *testing.T) {
	if os.Getenv("DISTASH_LOCALLOG_MEASURE") == "" {
		t.Skip("a measurement: set DISTASH_LOCALLOG_MEASURE=1")
	}
	for _, ll := range []bool{true, false} {
		t.Run(fmt.Sprintf("local_log=%v", ll), func(t *testing.T) {
			runLocalLogKill(t, "60s", ll, downFor(500*time.Millisecond), 1500)
		})
	}
}

// TestEmbeddedLocalLogStashRestartsWithData: in an embedded cluster, a
// DRAM stash with local_log whose engine fails (a write of its local log
// fails) is restarted by its supervisor from its local log: it keeps
// what it held and catches up with the writes made while it was down.
func TestEmbeddedLocalLogStashRestartsWithData(t *testing.T) {
	cfgText := fmt.Sprintf(localLogTOML, "60s", true)
	cfgText = strings.Replace(cfgText, "stashes = 2", "stashes = 1", 1)
	cfg, err := config.Parse([]byte(cfgText))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fs := faultfs.New(nil)
	srv, err := server.Start(ctx, server.Options{Dir: t.TempDir(), Config: cfg, FS: fs, FlushInterval: 20 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	db, err := distash.Open(ctx, srv.ClusterString())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	set := func(i int, v string) {
		t.Helper()
		if err := db.Transact(ctx, func(tr *distash.Tx) error { tr.Set(cacheKey(i), []byte(v)); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 200 {
		set(i, "a")
	}
	distashtest.WaitFlushed(t, srv) // out of the 1 s window: in the engine, logged
	fs.Fail(faultfs.Rule{Ops: faultfs.OpWrite, Path: "log-*", Times: 1})
	for i := range 50 {
		set(i, "b") // flushed a second later: the local log's write fails
	}
	var st server.StashStats
	wait.Within(t, 20*time.Second, "the stash restarted and healthy", func() bool {
		st = srv.Stashes()[0]
		return st.Restarts > 0 && st.Health == server.HealthHealthy
	})
	if st.LocalLog == nil || st.LocalLog.RecoveredKeys != 200 {
		t.Fatalf("restarted stash's local log %+v: want the 200 keys reloaded", st.LocalLog)
	}
	for i := range 200 {
		want := "a"
		if i < 50 {
			want = "b"
		}
		var v []byte
		if err := db.ReadTransact(ctx, func(tr *distash.Tx) error { v, err = tr.Get(cacheKey(i)); return err }); err != nil {
			t.Fatal(err)
		}
		if string(v) != want {
			t.Fatalf("key %d = %q after the restart, want %q", i, v, want)
		}
	}
}
