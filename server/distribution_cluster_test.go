package server_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distash/distash"
	"github.com/distash/distash/internal/clustertest"
	"github.com/distash/distash/internal/coordrpc"
	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/testutil/bank"
	"github.com/distash/distash/internal/txlog"
	"github.com/distash/distash/internal/wire"
	"github.com/distash/distash/server"
)

// newLayoutCluster is an in-process cluster of the given nodes ("name
// class pool") running toml; the transaction nodes are the coordinators.
func newLayoutCluster(t *testing.T, toml string, nodes ...string) *clustertest.Sim {
	return clustertest.NewSim(t, toml, clustertest.Specs(nodes...)...)
}

// newTunedCluster is newLayoutCluster with the nodes' test settings.
func newTunedCluster(t *testing.T, tuning server.Tuning, toml string, nodes ...string) *clustertest.Sim {
	c := newLayoutCluster(t, toml, nodes...)
	c.Tuning = tuning
	return c
}

// withinShare reports whether every stash holds within frac of the mean.
func withinShare(bytes map[string]int64, frac float64) (bool, string) {
	var total int64
	for _, b := range bytes {
		total += b
	}
	if len(bytes) == 0 || total == 0 {
		return false, "no bytes"
	}
	mean := float64(total) / float64(len(bytes))
	ok := true
	for _, b := range bytes {
		if float64(b) < mean*(1-frac) || float64(b) > mean*(1+frac) {
			ok = false
		}
	}
	return ok, fmt.Sprintf("bytes %v, mean %.0f", bytes, mean)
}

var growTOML = clustertest.DurablePool(4, 1, `mvcc_window = "2s"`, `shard_bytes = "4KiB"`, `failure_wait = "2s"`)

// TestStashJoinsThenIsExcludedAndIncluded runs a four-stash pool in
// process over the fault transport: 2,000 skewed keys spread to within
// 35% per stash; a fifth stash process joins and gets its share (±20% of
// the mean); `exclude` drains it completely and `include` gives it shards
// back; `configure pool=data replication=2` doubles every shard's
// replicas; a writer and readers run throughout, and every acknowledged
// write reads back at the end.
func TestStashJoinsThenIsExcludedAndIncluded(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an in-process cluster")
	}
	t.Parallel() // waits on the cluster's timers most of the time: overlaps another such test
	c := newTunedCluster(t, server.Tuning{DistributionInterval: 50 * time.Millisecond}, growTOML, "tx1 transaction", "data1 stash data", "data2 stash data", "data3 stash data", "data4 stash data")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c.StartAll(ctx)
	db := c.Open(ctx)

	value := func(i int) string { return fmt.Sprintf("value-%06d-%080d", i, i) }
	for i := 0; i < 2000; i += 50 {
		err := db.Transact(ctx, func(tr *distash.Tx) error {
			for j := i; j < i+50; j++ {
				tr.Set([]byte(fmt.Sprintf("d/user:%d", j)), []byte(value(j)))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// Two minutes: on a loaded machine (the suite runs the process tests
	// beside it) the splits and moves took over one (a run at 17:50 UTC,
	// 2026-12-02, with one stash still at twice the others' bytes).
	took := clustertest.WaitUntil(t, 2*time.Minute, "2,000 skewed keys spread over four stashes", func() (bool, string) {
		b := c.PoolBytes("data")
		var total, most int64
		for _, n := range b {
			total += n
			most = max(most, n)
		}
		return total > 0 && float64(most) <= 0.35*float64(total), fmt.Sprint(b)
	})
	t.Logf("spread: %v after %v", c.PoolBytes("data"), took.Round(time.Millisecond))

	// A workload for the rest of the test.
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	// About 100 new keys a second: the moves keep up with it.
	w := &bank.Writer{DB: db, Prefix: "d/", Pause: 20 * time.Millisecond}
	waitWriter := w.Run(wctx, 2)
	var readErr atomic.Pointer[error]
	var readers sync.WaitGroup
	for r := 0; r < 2; r++ {
		readers.Add(1)
		go func(seed uint64) {
			defer readers.Done()
			rng := rand.New(rand.NewPCG(seed, 1))
			for wctx.Err() == nil {
				k := rng.IntN(2000)
				err := db.ReadTransact(wctx, func(tr *distash.Tx) error {
					v, err := tr.Get([]byte(fmt.Sprintf("d/user:%d", k)))
					if err != nil {
						return err
					}
					if string(v) != value(k) {
						return fmt.Errorf("d/user:%d = %.20q, want %.20q", k, v, value(k))
					}
					return nil
				})
				if err != nil && wctx.Err() == nil {
					readErr.Store(&err)
					return
				}
			}
		}(uint64(r))
	}

	// A fifth stash joins.
	n5 := c.Add(clustertest.Specs("data5 stash data")[0])
	if err := c.Start(ctx, n5); err != nil {
		t.Fatal(err)
	}
	took = clustertest.WaitUntil(t, 2*time.Minute, "the fifth stash holds its share", func() (bool, string) {
		return withinShare(c.PoolBytes("data"), 0.2)
	})
	t.Logf("fifth stash joined: %v after %v", c.PoolBytes("data"), took.Round(time.Millisecond))

	// Exclude drains it; include undoes it.
	cc, err := coordrpc.NewClient(c.ClusterString(), coordrpc.ClientOptions{Dialer: c.Net.Dialer(clientNode)})
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if _, err := cc.Exclude(ctx, []string{n5.Addr}); err != nil {
		t.Fatal(err)
	}
	took = clustertest.WaitUntil(t, 2*time.Minute, "the excluded stash is drained", func() (bool, string) {
		b := c.PoolBytes("data")
		d := c.Distribution()["data"]
		return b["data5"] == 0 && d.Moving == 0, fmt.Sprintf("%v, moving %d", b, d.Moving)
	})
	t.Logf("excluded stash drained after %v: %v", took.Round(time.Millisecond), c.PoolBytes("data"))
	if _, err := cc.Include(ctx, []string{n5.Addr}); err != nil {
		t.Fatal(err)
	}
	took = clustertest.WaitUntil(t, 2*time.Minute, "the included stash gets its share back", func() (bool, string) {
		return withinShare(c.PoolBytes("data"), 0.2)
	})
	t.Logf("included again: %v after %v", c.PoolBytes("data"), took.Round(time.Millisecond))

	// Replication changes online: 1 -> 2 doubles the pool's bytes.
	before := int64(0)
	for _, b := range c.PoolBytes("data") {
		before += b
	}
	if err := cc.Configure(ctx, "data", "replication", "2"); err != nil {
		t.Fatal(err)
	}
	took = clustertest.WaitUntil(t, 2*time.Minute, "every shard has two replicas", func() (bool, string) {
		d := c.Distribution()["data"]
		var after int64
		for _, b := range c.PoolBytes("data") {
			after += b
		}
		return d.Replication == 2 && d.UnderReplicated == 0 && d.Moving == 0 && d.Queued == 0 && after >= 2*before,
			fmt.Sprintf("%+v; bytes %d, before %d", d, after, before)
	})
	t.Logf("replication 2 after %v: %v", took.Round(time.Millisecond), c.PoolBytes("data"))

	wcancel()
	waitWriter()
	readers.Wait()
	if p := readErr.Load(); p != nil {
		t.Fatalf("a reader: %v", *p)
	}
	missing, err := w.Check(ctx, db)
	if err != nil || missing != 0 {
		t.Fatalf("%d of %d acknowledged writes missing (%v)", missing, w.Count(), err)
	}
	t.Logf("%d acknowledged writes all read back; %d moves done", w.Count(), c.Distribution()["data"].MovesDone)
}

const dramTOML = `
[cluster]
mvcc_window = "2s"
shard_bytes = "4KiB"

[[pool]]
name = "cache"
prefix = "c/"
medium = "dram"
mode = "ephemeral"
engine = "memory"
stashes = 3
replication = 2
capacity = "64MiB"
`

// TestDramStashRestartRejoinsEmpty restarts a dram stash of an R=2 pool:
// it comes back empty as a new stash (a new tag; the old one is retired
// at once, without the failure wait), every shard gets back to two live
// replicas, and no read ever returns an older value of a key than one
// already read.
func TestDramStashRestartRejoinsEmpty(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an in-process cluster")
	}
	t.Parallel() // waits on the cluster's timers most of the time: overlaps another such test
	c := newTunedCluster(t, server.Tuning{DistributionInterval: 50 * time.Millisecond}, dramTOML, "tx1 transaction", "cache1 stash cache", "cache2 stash cache", "cache3 stash cache")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c.StartAll(ctx)
	db := c.Open(ctx)

	const keys = 300
	var counter atomic.Int64
	enc := func(n int64) []byte { return []byte(fmt.Sprintf("%012d-%050d", n, n)) }
	for i := 0; i < keys; i += 50 {
		err := db.Transact(ctx, func(tr *distash.Tx) error {
			for j := i; j < i+50; j++ {
				tr.Set([]byte(fmt.Sprintf("c/k:%03d", j)), enc(counter.Add(1)))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	var wg sync.WaitGroup
	var fail atomic.Pointer[string]
	// Writers raise values; readers remember the highest value seen per
	// key and must never see a lower one (or none).
	for g := 0; g < 2; g++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, 2))
			for wctx.Err() == nil {
				k := fmt.Sprintf("c/k:%03d", rng.IntN(keys))
				db.Transact(wctx, func(tr *distash.Tx) error {
					tr.Set([]byte(k), enc(counter.Add(1)))
					return nil
				})
			}
		}(uint64(g))
	}
	var seenMu sync.Mutex
	seen := map[string]string{}
	for g := 0; g < 3; g++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, 3))
			for wctx.Err() == nil {
				k := fmt.Sprintf("c/k:%03d", rng.IntN(keys))
				var got []byte
				err := db.ReadTransact(wctx, func(tr *distash.Tx) error {
					v, err := tr.Get([]byte(k))
					got = v
					return err
				})
				if err != nil {
					continue
				}
				seenMu.Lock()
				if prev := seen[k]; string(got) < prev {
					msg := fmt.Sprintf("%s read %.12q after %.12q", k, got, prev)
					fail.Store(&msg)
				} else {
					seen[k] = string(got)
				}
				seenMu.Unlock()
			}
		}(uint64(10 + g))
	}
	twoReplicas := func() (bool, string) {
		d, ok := c.Distribution()["cache"]
		return ok && d.UnderReplicated == 0 && d.Moving == 0 && d.Queued == 0,
			fmt.Sprintf("%+v", d)
	}
	clustertest.WaitUntil(t, time.Minute, "the pool settles", twoReplicas)

	n := c.Node("cache1")
	c.Crash(n)
	if err := c.Start(ctx, n); err != nil {
		t.Fatal(err)
	}
	took := clustertest.WaitUntil(t, time.Minute, "the restarted stash holds data again and every shard has two live replicas", func() (bool, string) {
		b := c.PoolBytes("cache")
		ok, state := twoReplicas()
		return ok && b["cache1"] > 0, fmt.Sprintf("%v %s", b, state)
	})
	t.Logf("restarted dram stash: two replicas per shard again %v after the restart", took.Round(time.Millisecond))
	// The log keeps entries for the new tag and no longer for the
	// replaced one: it trims up to within a few seconds of its end.
	tx := c.Node("tx1")
	clustertest.WaitUntil(t, 30*time.Second, "the log trims past the replaced stash's tag", func() (bool, string) {
		ls := tx.Server().LogStats()
		behind := float64(ls.LastVersion-ls.Trimmed) / 1e6
		return behind < 5 && len(ls.Popped) == 4, fmt.Sprintf("trimmed %.1f s behind the end; popped %v", behind, ls.Popped)
	})
	time.Sleep(500 * time.Millisecond)
	wcancel()
	wg.Wait()
	if p := fail.Load(); p != nil {
		t.Fatalf("an older value after a newer one: %s", *p)
	}
	// Every key still has a value: one replica always had it.
	err := db.ReadTransact(ctx, func(tr *distash.Tx) error {
		for i := 0; i < keys; i++ {
			v, err := tr.Get([]byte(fmt.Sprintf("c/k:%03d", i)))
			if err != nil {
				return err
			}
			if v == nil {
				return fmt.Errorf("c/k:%03d is gone", i)
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	t.Logf("pool bytes after: %v", c.PoolBytes("cache"))
}

var durableTOML = clustertest.DurablePool(3, 2, `mvcc_window = "2s"`, `shard_bytes = "4KiB"`)

// TestEmptyDurableStashOfTrimmedTagJoinsAsNew starts a durable R=2 pool
// with one of its three stash nodes missing and writes until the log
// (made small) force-popped the missing stash's tag, which the first
// shard map gave shards, and dropped its entries. The stash node then
// starts for the first time: it cannot catch up from the log, but it
// holds nothing, so it retires its tag and joins as a new stash. Every
// shard gets back to two live replicas, the new stash gets data, and
// every key reads back its last value.
func TestEmptyDurableStashOfTrimmedTagJoinsAsNew(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an in-process cluster")
	}
	t.Parallel() // waits on the cluster's timers most of the time: overlaps another such test
	// HoldBytes is 512 KiB. A durable stash pops what
	// leaves its MVCC window (2 s): the writes below hold about half of it
	// for the live stashes, so only the missing one is force-popped.
	c := newTunedCluster(t, server.Tuning{DistributionInterval: 50 * time.Millisecond, LogMemoryBytes: 128 << 10, LogHoldBytes: 512 << 10}, durableTOML, "tx1 transaction", "data1 stash data", "data2 stash data", "data3 stash data")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	errs := make(chan error, 3)
	for _, name := range []string{"tx1", "data1", "data2"} {
		go func() { errs <- c.Start(ctx, c.Node(name)) }()
	}
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	db := c.Open(ctx)

	// Keys spread over the first map's three shards ("d/" + one byte
	// splits them), so every stash has writes.
	const keys = 200
	key := func(k int) string { return fmt.Sprintf("d/%c-k:%03d", byte(k*256/keys), k) }
	value := func(k, round int) string { return fmt.Sprintf("%03d-%02d-%0900d", k, round, round) }
	last := map[string]string{}
	tx := c.Node("tx1")
	// missing returns the tags the log force-popped that no running
	// stash has, and the log's stats.
	missing := func() (map[kv.Tag]kv.Version, txlog.Stats) {
		ls := tx.Server().LogStats()
		out := maps.Clone(ls.Dropped)
		for _, name := range []string{"data1", "data2"} {
			for _, st := range c.Node(name).Server().Stashes() {
				delete(out, kv.Tag(st.Tag))
			}
		}
		return out, ls
	}
	// Rewrite the keys, about 120 KiB a second, until the log dropped
	// entries of the missing stash's tag.
	trimmed := func() bool {
		m, ls := missing()
		for _, v := range m {
			if ls.Trimmed >= v {
				return true
			}
		}
		return false
	}
	for round := 0; !trimmed(); round++ {
		if round == 20 {
			m, ls := missing()
			t.Fatalf("the log did not drop the missing stash's entries after %d rounds of writes: %v, %+v", round, m, ls)
		}
		for i := 0; i < keys; i += 20 {
			err := db.Transact(ctx, func(tr *distash.Tx) error {
				for j := i; j < i+20; j++ {
					tr.Set([]byte(key(j)), []byte(value(j, round)))
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			for j := i; j < i+20; j++ {
				last[key(j)] = value(j, round)
			}
			time.Sleep(150 * time.Millisecond)
		}
	}
	m, ls := missing()
	if len(m) != 1 || len(ls.Dropped) != 1 {
		t.Fatalf("the log force-popped %v, want only the missing stash's tag", ls.Dropped)
	}
	t.Logf("the log force-popped the missing stash's tag: %v, trimmed up to %d", m, ls.Trimmed)

	began := time.Now()
	if err := c.Start(ctx, c.Node("data3")); err != nil {
		t.Fatal(err)
	}
	started := time.Since(began)
	took := clustertest.WaitUntil(t, time.Minute, "the new stash holds data and every shard has two live replicas", func() (bool, string) {
		b := c.PoolBytes("data")
		d, ok := c.Distribution()["data"]
		return ok && d.UnderReplicated == 0 && d.Moving == 0 && d.Queued == 0 && b["data3"] > 0,
			fmt.Sprintf("%v %+v", b, d)
	})
	t.Logf("data3 started in %v; two live replicas per shard %v after: %v",
		started.Round(time.Millisecond), took.Round(time.Millisecond), c.PoolBytes("data"))
	for _, n := range []string{"data1", "data2", "data3"} {
		for _, st := range c.Node(n).Server().Stashes() {
			if st.Health != server.HealthHealthy || st.Restarts != 0 {
				t.Errorf("%s's stash %d: %s after %d restarts (%s)", n, st.Tag, st.Health, st.Restarts, st.LastError)
			}
		}
	}
	readsBackLast(t, ctx, db, last)
}

// readsBackLast checks, in one read transaction, that every key of last
// reads back its value there.
func readsBackLast(t *testing.T, ctx context.Context, db *distash.DB, last map[string]string) {
	t.Helper()
	err := db.ReadTransact(ctx, func(tr *distash.Tx) error {
		for k, want := range last {
			v, err := tr.Get([]byte(k))
			if err != nil {
				return err
			}
			if string(v) != want {
				return fmt.Errorf("%q = %.10q, want %.10q", k, v, want)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestRemoteDurableStashesFlushWhenTheLogIsOverBudget: with a long MVCC
// window, durable stashes in their own processes pop only what leaves it,
// so a burst of writes fills the log. The log tells them, in its Peek and
// Report answers, when it is over its memory budget; they then flush and
// pop everything they applied, and the log never reaches the bound where
// it force-pops a live stash's tag (which fails that stash for good).
func TestRemoteDurableStashesFlushWhenTheLogIsOverBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an in-process cluster")
	}
	t.Parallel() // waits on the cluster's timers most of the time: overlaps another such test
	// HoldBytes is 512 KiB; the test writes about 2 MiB
	// within the window.
	toml := strings.Replace(durableTOML, `mvcc_window = "2s"`, `mvcc_window = "60s"`, 1)
	c := newTunedCluster(t, server.Tuning{LogMemoryBytes: 128 << 10, LogHoldBytes: 512 << 10}, toml, "tx1 transaction", "data1 stash data", "data2 stash data", "data3 stash data")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c.StartAll(ctx)
	db := c.Open(ctx)
	const keys = 200
	key := func(k int) string { return fmt.Sprintf("d/%c-k:%03d", byte(k*256/keys), k) }
	last := map[string]string{}
	for round := 0; round < 12; round++ {
		for i := 0; i < keys; i += 20 {
			err := db.Transact(ctx, func(tr *distash.Tx) error {
				for j := i; j < i+20; j++ {
					tr.Set([]byte(key(j)), []byte(fmt.Sprintf("%03d-%02d-%0900d", j, round, round)))
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			for j := i; j < i+20; j++ {
				last[key(j)] = fmt.Sprintf("%03d-%02d-%0900d", j, round, round)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	ls := c.Node("tx1").Server().LogStats()
	for _, n := range []string{"data1", "data2", "data3"} {
		for _, st := range c.Node(n).Server().Stashes() {
			if st.Health != server.HealthHealthy || st.Restarts != 0 {
				t.Errorf("%s's stash %d: %s after %d restarts (%s)", n, st.Tag, st.Health, st.Restarts, st.LastError)
			}
		}
	}
	if len(ls.Dropped) != 0 {
		t.Errorf("the log force-popped live stashes' tags: %v", ls.Dropped)
	}
	t.Logf("log after the burst: %d entries, %d bytes in memory", ls.Entries, ls.Memory)
	err := db.ReadTransact(ctx, func(tr *distash.Tx) error {
		for k, want := range last {
			v, err := tr.Get([]byte(k))
			if err != nil {
				return err
			}
			if string(v) != want {
				return fmt.Errorf("%q = %.10q, want %.10q", k, v, want)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// heldLog is the cluster of the tests of a durable stash that holds the
// only copy of its shards (replication 1, two stash nodes) and goes away
// while writes continue: the log may not drop its entries.
type heldLog struct {
	t    *testing.T
	ctx  context.Context
	c    *clustertest.Sim
	db   *distash.DB
	last map[string]string // every key's last acknowledged value
}

// heldLogKeys are the keys written, over both stashes' shards (the first
// map splits "d/" by its first byte).
const heldLogKeys = 100

func heldLogKey(k int) string { return fmt.Sprintf("d/%c-k:%03d", byte(k*256/heldLogKeys), k) }

// newHeldLog starts the cluster (in parallel with other such tests, 3
// minutes at most), with a log whose hold bound is 512 KiB, and writes
// every key once.
func newHeldLog(t *testing.T) *heldLog {
	if testing.Short() {
		t.Skip("starts an in-process cluster")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	toml := clustertest.DurablePool(2, 1, `mvcc_window = "1s"`)
	c := newTunedCluster(t, server.Tuning{LogMemoryBytes: 128 << 10, LogHoldBytes: 512 << 10}, toml, "tx1 transaction", "data1 stash data", "data2 stash data")
	c.StartAll(ctx)
	h := &heldLog{t: t, ctx: ctx, c: c, db: c.Open(ctx), last: map[string]string{}}
	h.writeAll(0)
	return h
}

// writeAll writes every key, 10 to a transaction (about 100 KiB).
func (h *heldLog) writeAll(round int) {
	h.t.Helper()
	for from := 0; from < heldLogKeys; from += 10 {
		vals := map[string]string{}
		err := h.db.Transact(h.ctx, func(tr *distash.Tx) error {
			for k := from; k < from+10; k++ {
				vals[heldLogKey(k)] = fmt.Sprintf("%03d-%03d-%0900d", k, round, round)
				tr.Set([]byte(heldLogKey(k)), []byte(vals[heldLogKey(k)]))
			}
			return nil
		})
		if err != nil {
			h.t.Fatal(err)
		}
		maps.Copy(h.last, vals)
	}
}

// reason is the ratekeeper's reason for its limit, as status shows it.
func (h *heldLog) reason() string {
	st, err := h.c.Status(h.ctx)
	if err != nil {
		return err.Error()
	}
	return st.RateLimitReason
}

// crashUntilHeld crashes node name and writes until the log keeps its
// stash's entries past the hold bound and the ratekeeper says so. The log
// must never force-pop it.
func (h *heldLog) crashUntilHeld(name string) {
	h.t.Helper()
	h.c.Crash(h.c.Node(name))
	tx := h.c.Node("tx1").Server()
	round := 1
	clustertest.WaitUntil(h.t, time.Minute, "the log keeps the down stash's writes and throttles", func() (bool, string) {
		h.writeAll(round)
		round++
		ls := tx.LogStats()
		if len(ls.Dropped) != 0 {
			h.t.Fatalf("the log force-popped %v: the down stash's acknowledged writes are gone", ls.Dropped)
		}
		r := h.reason()
		return strings.Contains(r, "the log holds"), fmt.Sprintf("log memory %d, rate limit reason %q", ls.Memory, r)
	})
	h.t.Logf("throttled after %d rounds: %s", round, h.reason())
}

// waitUnthrottled waits until the ratekeeper no longer holds writes for
// the log.
func (h *heldLog) waitUnthrottled(why string) {
	h.t.Helper()
	clustertest.WaitUntil(h.t, time.Minute, why, func() (bool, string) {
		r := h.reason()
		return !strings.Contains(r, "the log holds"), r
	})
}

// TestLogKeepsTheWritesOfADownDurableStashWithNoOtherReplica: a durable
// pool of replication 1 whose one stash node is down while writes go on.
// Once the log holds more than its hold bound (512 KiB here), it must not
// force-pop that stash's tag — its entries are the only copy of
// acknowledged writes — so it keeps them, most spilled to disk, and the
// ratekeeper throttles writes, saying why. The stash node comes back,
// catches up from the log (reading the spilled entries back),
// and every acknowledged write reads back; the throttle lifts.
func TestLogKeepsTheWritesOfADownDurableStashWithNoOtherReplica(t *testing.T) {
	h := newHeldLog(t)
	ctx := h.ctx
	h.crashUntilHeld("data2")
	// Past twice its memory budget (256 KiB) the log spilled the oldest
	// entries: the stash catches up reading them back from disk.
	if ls := h.c.Node("tx1").Server().LogStats(); ls.Spilled == 0 || ls.SpilledEntries == 0 {
		t.Fatalf("the log holds %d bytes for a down stash and spilled none: %+v", ls.Bytes, ls)
	}
	if err := h.c.Start(ctx, h.c.Node("data2")); err != nil {
		t.Fatal(err)
	}
	h.waitUnthrottled("the throttle lifts once the stash caught up")
	if ls := h.c.Node("tx1").Server().LogStats(); len(ls.Dropped) != 0 {
		t.Fatalf("the log force-popped %v", ls.Dropped)
	}
	readsBackLast(t, ctx, h.db, h.last)
}

// TestLostOnlyCopyIsGivenUpByAnEmptyStash: the way out when a durable
// stash that held the only copy of its writes is gone for good. Its node
// returns with an empty stash directory (a replaced disk): the stash
// cannot catch up from the log (entries before the ones the log kept for
// it are long gone), so it retires its tag and joins as a new stash; the
// log stops keeping the old tag's entries and the throttle lifts. What
// only that stash held is lost, as it must be: the pool's status says so,
// and writes to the lost shard are refused (before, they were
// acknowledged, and no stash applied them); the other shard takes writes.
// Until the operator gives the lost shard up (exclude --failed of the
// address): it then starts empty and takes writes again.
func TestLostOnlyCopyIsGivenUpByAnEmptyStash(t *testing.T) {
	h := newHeldLog(t)
	ctx := h.ctx
	// The log must have trimmed the first rounds' entries (every stash
	// popped them), or an empty stash would catch up from the log and lose
	// nothing. Trims follow the stashes' pops, which a loaded machine
	// delays: wait for them rather than count rounds.
	tx := h.c.Node("tx1").Server()
	h.writeAll(1)
	early := tx.LogStats().LastVersion
	for round := 2; round < 5; round++ {
		h.writeAll(round)
	}
	clustertest.WaitUntil(t, time.Minute, "the log trims the first rounds' entries", func() (bool, string) {
		ls := tx.LogStats()
		return ls.Trimmed >= early, fmt.Sprintf("trimmed up to %d, want %d", ls.Trimmed, early)
	})
	h.crashUntilHeld("data2")
	// The disk is replaced: the node keeps its identity, its stash's
	// files are gone.
	data2 := h.c.Node("data2")
	if err := os.RemoveAll(filepath.Join(data2.Dir, "stash")); err != nil {
		t.Fatal(err)
	}
	if err := h.c.Start(ctx, data2); err != nil {
		t.Fatal(err)
	}
	h.waitUnthrottled("the throttle lifts once the empty stash retired the old tag")
	// The lost shard is named in the pool's status; a write to it is
	// refused, not acknowledged into a shard no stash serves; the other
	// shard takes writes.
	if d := h.c.Distribution()["data"]; !strings.Contains(d.Warning, "no replica left") || !strings.Contains(d.Warning, "exclude --failed "+data2.Addr) {
		t.Errorf("the pool's status does not name the lost shard, and how to give it up (exclude --failed %s): %+v", data2.Addr, d)
	}
	refused, ok := 0, 0
	for _, k := range []int{0, heldLogKeys - 1} { // one key in each half of "d/"
		// One commit at a time (Transact would retry the refusal, which
		// is retryable: the shard may get a team again), until one
		// commits or is refused for the lost shard.
		_, err := clustertest.Until(ctx, 30*time.Second, 50*time.Millisecond, "a write of "+heldLogKey(k)+" commits or is refused", func() (bool, string) {
			tr, err := h.db.CreateTransaction(ctx)
			if err != nil {
				return false, err.Error()
			}
			tr.Set([]byte(heldLogKey(k)), []byte("after"))
			switch err := tr.Commit(); {
			case err == nil:
				ok++
				return true, ""
			case errors.Is(err, distash.ErrStashUnavailable) && strings.Contains(err.Error(), "has no replica left"):
				refused++
				t.Logf("write to the lost shard refused: %v", err)
				return true, ""
			default:
				return false, err.Error()
			}
		})
		if err != nil {
			t.Error(err)
		}
	}
	if refused != 1 || ok != 1 {
		t.Errorf("%d writes refused and %d committed, want one each (one key per shard)", refused, ok)
	}

	// The operator gives the lost shard up (exclude --failed of the
	// address its stash was at). The node there is alive and keeps its new
	// stash; the retired tag's shard starts empty and takes writes again.
	h.excludeFailed(data2.Addr, true)
	clustertest.WaitUntil(t, time.Minute, "the pool no longer holds a shard with no replica", func() (bool, string) {
		d := h.c.Distribution()["data"]
		return !strings.Contains(d.Warning, "no replica left"), d.Warning
	})
	if _, err := h.c.Coordinators().Include(ctx, []string{data2.Addr}); err != nil {
		t.Fatal(err)
	}
	h.writeAll(1000)
	readsBackLast(t, ctx, h.db, h.last)
}

// shardTeams returns the shard map as the roles' node serves it
// (Locations): each shard's first key and team.
func (h *heldLog) shardTeams() []*wire.Shard {
	h.t.Helper()
	v := h.c.View(h.ctx)
	conn := h.c.Dial(clustertest.ProbeNode, v.StatelessAddress)
	resp, err := wire.NewDiStashClient(conn).Locations(h.ctx, &wire.LocationsRequest{Begin: []byte{}, End: []byte{0xff, 0xff}})
	if err == nil {
		err = resp.Error.Err()
	}
	if err != nil {
		h.t.Fatal(err)
	}
	return resp.Shards
}

// excludeFailed declares the stash at addr failed (exclude --failed),
// retrying while the controller has just taken over; alive says whether
// its node should be found alive (and keep its stash).
func (h *heldLog) excludeFailed(addr string, alive bool) {
	h.t.Helper()
	var live []string
	_, err := clustertest.Until(h.ctx, 30*time.Second, 100*time.Millisecond, "exclude --failed "+addr, func() (bool, string) {
		var err error
		live, err = h.c.Coordinators().ExcludeFailed(h.ctx, []string{addr})
		return err == nil, fmt.Sprint(err)
	})
	if err != nil {
		h.t.Fatal(err)
	}
	if got := slices.Contains(live, addr); got != alive {
		h.t.Fatalf("exclude --failed %s: its node alive %v, want %v", addr, got, alive)
	}
}

// TestFailedStashIsGivenUpOnTheOperatorsWord: the way out when a durable
// stash holding the only copy of its shards is gone for good and never
// comes back. While it is down the log keeps its writes and, past its
// hold bound, throttles every write (TestLogKeepsTheWritesOfADownDurable…).
// The operator declares it failed (exclude --failed): its tag is retired,
// the log stops keeping its writes and the throttle lifts; the shard it
// alone held starts empty on the live stash, so its keys read as absent
// (their data is lost, on the operator's word) and take writes again; the
// other shard keeps every acknowledged write. The node then returns with
// its old files: it joins as a new stash, and nothing it held comes back.
func TestFailedStashIsGivenUpOnTheOperatorsWord(t *testing.T) {
	h := newHeldLog(t)
	ctx := h.ctx
	data2 := h.c.Node("data2")
	var tag uint32
	for _, l := range h.c.View(ctx).Stashes {
		if l.Address == data2.Addr {
			tag = l.Tag
		}
	}
	lost := map[string]bool{}
	for _, sh := range h.shardTeams() {
		if slices.Equal(sh.Stashes, []uint32{tag}) {
			for k := range heldLogKeys {
				if key := heldLogKey(k); key >= string(sh.Begin) && key < string(sh.End) {
					lost[key] = true
				}
			}
		}
	}
	if len(lost) == 0 || len(lost) == heldLogKeys {
		t.Fatalf("%d of %d keys are on data2's stash (tag %d) alone, want some but not all", len(lost), heldLogKeys, tag)
	}
	h.crashUntilHeld("data2")

	h.excludeFailed(data2.Addr, false)
	st, err := h.c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	shown := false
	for _, s := range st.Stashes {
		shown = shown || s.Id == tag && s.GivenUp && s.Excluded
	}
	if !shown {
		t.Errorf("status does not show stash %d as excluded and given up: %v", tag, st.Stashes)
	}
	h.waitUnthrottled("the throttle lifts once the failed stash's tag is retired")
	clustertest.WaitUntil(t, time.Minute, "no shard names the failed stash", func() (bool, string) {
		for _, sh := range h.shardTeams() {
			if slices.Contains(sh.Stashes, tag) {
				return false, fmt.Sprintf("[%q, %q) on %v", sh.Begin, sh.End, sh.Stashes)
			}
		}
		return true, ""
	})
	if d := h.c.Distribution()["data"]; strings.Contains(d.Warning, "no replica left") {
		t.Errorf("the pool still warns of a shard with no replica: %s", d.Warning)
	}
	// The lost shard's keys read as absent; the others as last written.
	err = h.db.ReadTransact(ctx, func(tr *distash.Tx) error {
		for k, want := range h.last {
			v, err := tr.Get([]byte(k))
			if err != nil {
				return err
			}
			if lost[k] {
				want = ""
			}
			if string(v) != want {
				return fmt.Errorf("%q = %.10q, want %.10q (on the given-up stash: %v)", k, v, want, lost[k])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Every key takes writes again.
	h.writeAll(1000)
	readsBackLast(t, ctx, h.db, h.last)

	// The failed node returns with the files it had: it joins as a new
	// stash (its tag is retired) and brings back none of its old data.
	if err := h.c.Start(ctx, data2); err != nil {
		t.Fatal(err)
	}
	clustertest.WaitUntil(t, time.Minute, "the returning node joins with a fresh tag", func() (bool, string) {
		for _, l := range h.c.View(ctx).Stashes {
			if l.Address == data2.Addr && l.Node != "" {
				return l.Tag != tag && !l.Retired && l.Alive, fmt.Sprintf("tag %d retired %v alive %v", l.Tag, l.Retired, l.Alive)
			}
		}
		return false, "no slot names it"
	})
	if _, err := h.c.Coordinators().Include(ctx, []string{data2.Addr}); err != nil {
		t.Fatal(err)
	}
	h.writeAll(1001)
	readsBackLast(t, ctx, h.db, h.last)
}
