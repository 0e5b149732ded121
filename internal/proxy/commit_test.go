package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distash/distash/internal/clock"
	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/logentry"
	"github.com/distash/distash/internal/resolver"
	"github.com/distash/distash/internal/sequencer"
	"github.com/distash/distash/internal/shardmap"
	"github.com/distash/distash/internal/testutil/wait"
)

// testPools: an ephemeral pool and a durable one whose stashes hold at
// most 1 KiB each.
var testPools = []Pool{{Name: "cache", Prefix: "c/"}, {Name: "data", Prefix: "d/", Capacity: 1024}}

type fixedUsage map[kv.Tag]int64

func (u fixedUsage) Usage(tag kv.Tag) (int64, kv.Version) { return u[tag], 0 }

func newProxy(t *testing.T, usage StashUsage) (*CommitProxy, *fakeLog, *sequencer.Sequencer) {
	t.Helper()
	p, log, seq := newStoppedProxy(t, usage, nil)
	run(t, p)
	return p, log, seq
}

// run runs p until the test ends.
func run(t *testing.T, p *CommitProxy) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// newStoppedProxy returns a proxy that is not running yet, with the
// options tune changes (if not nil).
func newStoppedProxy(t *testing.T, usage StashUsage, tune func(*CommitOptions)) (*CommitProxy, *fakeLog, *sequencer.Sequencer) {
	t.Helper()
	log := newFakeLog()
	seq := sequencer.New(clock.Real{}, 0)
	shards := shardmap.Initial([]shardmap.PoolSpec{
		{Name: "cache", Prefix: []byte("c/"), Tags: []kv.Tag{1, 2}, Replication: 2},
		{Name: "data", Prefix: []byte("d/"), Tags: []kv.Tag{3, 4}, Replication: 1},
	})
	opts := CommitOptions{Pools: testPools, Sequencer: seq, Resolver: resolver.New(5_000_000), Log: log, Shards: shards, Usage: usage,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if tune != nil {
		tune(&opts)
	}
	t.Cleanup(func() {
		log.mu.Lock()
		defer log.mu.Unlock()
		if log.outOfOrder != 0 {
			t.Errorf("the proxy appended %d entries out of order", log.outOfOrder)
		}
	})
	return NewCommitProxy(opts), log, seq
}

func set(k, v string) kv.Mutation {
	return kv.Mutation{Type: kv.MutSet, Key: []byte(k), Param: []byte(v)}
}

func TestValidateRejectsBadTransactions(t *testing.T) {
	cases := []struct {
		m    kv.Mutation
		code kv.Code
	}{
		{set("x/1", "v"), kv.CodeKeyOutsidePools},
		{set("\xff/keyServers/", "v"), kv.CodeKeyOutsidePools},
		{kv.Mutation{Type: kv.MutSet, Key: make([]byte, kv.MaxKeyBytes+1)}, kv.CodeKeyTooLarge},
		{kv.Mutation{Type: kv.MutSet, Key: []byte("d/k"), Param: make([]byte, kv.MaxValueBytes+1)}, kv.CodeValueTooLarge},
		{kv.Mutation{Type: kv.MutClearRange, Key: []byte("d/b"), Param: []byte("d/a")}, kv.CodeInvalidMutation},
		{kv.Mutation{Type: kv.MutClearRange, Key: []byte("d/a"), Param: []byte("e/")}, kv.CodeKeyOutsidePools},
		{kv.Mutation{Type: kv.MutAdd, Key: []byte("d/a"), Param: make([]byte, 9)}, kv.CodeInvalidMutation},
		{kv.Mutation{Type: 99, Key: []byte("d/a")}, kv.CodeInvalidMutation},
	}
	for _, c := range cases {
		err := Validate(testPools, Txn{Mutations: []kv.Mutation{c.m}})
		if kv.CodeOf(err) != c.code {
			t.Errorf("%s %.20q: %v, want %s", c.m.Type, c.m.Key, err, c.code.Name())
		}
	}
	big := Txn{}
	for i := 0; i < 101; i++ {
		big.Mutations = append(big.Mutations, kv.Mutation{Type: kv.MutSet, Key: []byte(fmt.Sprintf("d/%d", i)), Param: make([]byte, 100_000)})
	}
	if kv.CodeOf(Validate(testPools, big)) != kv.CodeTransactionTooLarge {
		t.Error("10 MB transaction accepted")
	}
}

// TestConcurrentCommitsBatchAndTag: many concurrent commits get distinct or
// shared (batched) versions in order, and each mutation is logged with the
// tags of its shard's team.
func TestConcurrentCommitsBatchAndTag(t *testing.T) {
	p, log, seq := newProxy(t, fixedUsage{})
	ctx := context.Background()
	var wg sync.WaitGroup
	versions := make([]kv.Version, 64)
	for i := range versions {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			v, err := p.Commit(ctx, Txn{ReadVersion: seq.CommittedVersion(), Mutations: []kv.Mutation{set(fmt.Sprintf("c/%02d", i), "x")},
				WriteConflicts: []kv.KeyRange{kv.PointRange([]byte(fmt.Sprintf("c/%02d", i)))}})
			if err != nil {
				t.Error(err)
			}
			versions[i] = v
		}(i)
	}
	wg.Wait()
	for _, v := range versions {
		if v > seq.CommittedVersion() {
			t.Fatalf("reply at %d before committed version %d", v, seq.CommittedVersion())
		}
	}
	// Both cache stashes (replication 2) got all 64 sets.
	for _, tag := range []kv.Tag{1, 2} {
		n := 0
		for _, m := range log.messages(tag) {
			n += len(m.Mutations)
		}
		if n != 64 {
			t.Fatalf("tag %d got %d mutations, want 64", tag, n)
		}
	}
	if c := p.Counters(); c.Commits != 64 || c.Batches > 64 {
		t.Fatalf("counters %+v", c)
	}
}

func TestConflictsAndTooOld(t *testing.T) {
	p, _, seq := newProxy(t, fixedUsage{})
	ctx := context.Background()
	k := []byte("d/k")
	if _, err := p.Commit(ctx, Txn{Mutations: []kv.Mutation{set("d/first", "0")}}); err != nil {
		t.Fatal(err)
	}
	rv := seq.CommittedVersion()
	if _, err := p.Commit(ctx, Txn{ReadVersion: rv, Mutations: []kv.Mutation{set("d/k", "1")}, WriteConflicts: []kv.KeyRange{kv.PointRange(k)}}); err != nil {
		t.Fatal(err)
	}
	_, err := p.Commit(ctx, Txn{ReadVersion: rv, ReadConflicts: []kv.KeyRange{kv.PointRange(k)}, Mutations: []kv.Mutation{set("d/j", "2")}})
	if kv.CodeOf(err) != kv.CodeNotCommitted {
		t.Fatalf("stale read committed: %v", err)
	}
	_, err = p.Commit(ctx, Txn{ReadVersion: seq.CommittedVersion() - 6_000_000, ReadConflicts: []kv.KeyRange{kv.PointRange(k)}, Mutations: []kv.Mutation{set("d/j", "2")}})
	if kv.CodeOf(err) != kv.CodeTransactionTooOld {
		t.Fatalf("read version older than the window: %v", err)
	}
}

// TestCapacityCountsInflightBytes: a durable stash at 900 of 1024 bytes
// takes one 100-byte write, and the next is refused while the first is not
// yet applied.
func TestCapacityCountsInflightBytes(t *testing.T) {
	usage := fixedUsage{3: 900, 4: 900}
	p, _, seq := newProxy(t, usage)
	ctx := context.Background()
	v := string(make([]byte, 90))
	// d/ with first byte < 0x80 after the prefix lives on stash 3.
	if _, err := p.Commit(ctx, Txn{ReadVersion: seq.CommittedVersion(), Mutations: []kv.Mutation{set("d/a", v)}}); err != nil {
		t.Fatal(err)
	}
	_, err := p.Commit(ctx, Txn{ReadVersion: seq.CommittedVersion(), Mutations: []kv.Mutation{set("d/b", v), set("c/b", v)}})
	if !errors.Is(err, kv.Errorf(kv.CodePoolFull, "")) {
		t.Fatalf("second write = %v, want pool_full", err)
	}
	// The ephemeral pool has no such limit; clears are always accepted.
	if _, err := p.Commit(ctx, Txn{ReadVersion: seq.CommittedVersion(), Mutations: []kv.Mutation{set("c/b", v), {Type: kv.MutClear, Key: []byte("d/a")}}}); err != nil {
		t.Fatal(err)
	}
}

// quietProxy is a running proxy on a fake log that never commits empty
// batches on its own (IdleCommitInterval), so every append a test sees is
// one of its transactions.
func quietProxy(t *testing.T, tune func(*CommitOptions)) (*CommitProxy, *fakeLog, *sequencer.Sequencer) {
	p, log, seq := newStoppedProxy(t, fixedUsage{}, func(o *CommitOptions) {
		o.IdleCommitInterval = time.Hour
		if tune != nil {
			tune(o)
		}
	})
	run(t, p)
	return p, log, seq
}

// commitHeld starts committing a transaction writing key and waits until
// its batch is the n-th append the log holds; the result comes on res. A
// success answered before the log committed the entry is an error.
func commitHeld(t *testing.T, p *CommitProxy, log *fakeLog, key string, n int, res chan<- error) {
	t.Helper()
	go func() {
		v, err := p.Commit(context.Background(), Txn{Mutations: []kv.Mutation{set(key, "v")}})
		if err == nil && !log.hasCommitted(v) {
			err = fmt.Errorf("%s answered as committed at %d before the log committed it", key, v)
		}
		res <- err
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := log.waitFor(ctx, func() bool { return len(log.held) >= n }); err != nil {
		t.Fatalf("append of %s not held: %v", key, err)
	}
}

// TestFailedAppendsResync: while four batches wait for the log, appends
// fail with a result the proxy cannot know, as across a raft leader change:
// the first reached the log, the next two did not, and the fourth chained
// on a lost one and is refused. Their transactions end with
// commit_unknown_result; the proxy waits for the batches in flight, resyncs
// with the log, and the transactions queued meanwhile commit. Every
// acknowledged commit is in the log, and the proxy never broke the chain.
func TestFailedAppendsResync(t *testing.T) {
	p, log, seq := quietProxy(t, func(o *CommitOptions) { o.MaxInflightBatches = 4 })
	ctx := context.Background()
	if _, err := p.Commit(ctx, Txn{Mutations: []kv.Mutation{set("c/before", "v")}}); err != nil {
		t.Fatal(err)
	}
	release := log.hold()
	log.failNext(true, false, false)
	failed := make([]chan error, 4)
	for i := range failed {
		failed[i] = make(chan error, 1)
		commitHeld(t, p, log, fmt.Sprintf("c/f%d", i), i+1, failed[i])
	}
	// These wait for a slot, then for the resync.
	queued := make(chan error, 4)
	for i := range 4 {
		go func() {
			_, err := p.Commit(ctx, Txn{Mutations: []kv.Mutation{set(fmt.Sprintf("c/q%d", i), "v")}})
			queued <- err
		}()
	}
	release()
	for i, ch := range failed {
		if err := <-ch; kv.CodeOf(err) != kv.CodeCommitUnknownResult {
			t.Errorf("c/f%d, whose append failed: %v, want commit_unknown_result", i, err)
		}
	}
	for range 4 {
		if err := <-queued; err != nil {
			t.Errorf("a transaction queued behind the failed appends: %v", err)
		}
	}
	if _, err := p.Commit(ctx, Txn{Mutations: []kv.Mutation{set("c/after", "v")}}); err != nil {
		t.Fatalf("commit after the resync: %v", err)
	}
	want := map[string]bool{"c/before": true, "c/f0": true, "c/q0": true, "c/q1": true, "c/q2": true, "c/q3": true, "c/after": true}
	for _, tag := range []kv.Tag{1, 2} {
		if got := log.keys(tag); !maps.Equal(got, want) {
			t.Fatalf("tag %d holds %v; want %v (c/f0 landed although its append failed, c/f1..3 did not)", tag, slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
		}
	}
	if v, last := seq.CommittedVersion(), log.messages(1)[len(log.messages(1))-1].Version; v != last {
		t.Fatalf("sequencer reports %d committed, the log's last entry is %d", v, last)
	}
}

// TestStaleEpochNeverAcknowledged: once a newer generation began at the
// log, the deposed proxy's transactions fail (the log refuses its entries
// with ErrStaleEpoch) and none reaches the log.
func TestStaleEpochNeverAcknowledged(t *testing.T) {
	p, log, _ := quietProxy(t, func(o *CommitOptions) { o.Epoch = 1 })
	ctx := context.Background()
	if _, err := p.Commit(ctx, Txn{Mutations: []kv.Mutation{set("c/ok", "v")}}); err != nil {
		t.Fatal(err)
	}
	log.setEpoch(2)
	for i := range 3 {
		_, err := p.Commit(ctx, Txn{Mutations: []kv.Mutation{set(fmt.Sprintf("c/stale%d", i), "v")}})
		if kv.CodeOf(err) != kv.CodeCommitUnknownResult || !strings.Contains(err.Error(), logentry.ErrStaleEpoch.Error()) {
			t.Fatalf("commit of a deposed proxy: %v, want commit_unknown_result naming the stale epoch", err)
		}
	}
	if got := log.keys(1); len(got) != 1 || !got["c/ok"] {
		t.Fatalf("log holds %v, want only c/ok", got)
	}
}

// TestRepliesWaitForTheLog: while the log holds the appends of two
// pipelined batches, their transactions get no reply and the sequencer
// reports nothing committed; once the log decides, both are answered, with
// versions in order.
func TestRepliesWaitForTheLog(t *testing.T) {
	p, log, seq := quietProxy(t, func(o *CommitOptions) { o.MaxInflightBatches = 2 })
	before := seq.CommittedVersion()
	release := log.hold()
	res := []chan error{make(chan error, 1), make(chan error, 1)}
	commitHeld(t, p, log, "c/a", 1, res[0])
	commitHeld(t, p, log, "c/b", 2, res[1])
	for i, ch := range res {
		select {
		case err := <-ch:
			t.Fatalf("transaction %d answered (%v) before the log decided its append", i, err)
		default:
		}
	}
	if v := seq.CommittedVersion(); v != before {
		t.Fatalf("sequencer reports %d committed while the appends wait; want %d", v, before)
	}
	release()
	for i, ch := range res {
		if err := <-ch; err != nil {
			t.Fatalf("transaction %d: %v", i, err)
		}
	}
	msgs := log.messages(1)
	if len(msgs) != 2 || msgs[0].Version >= msgs[1].Version || seq.CommittedVersion() != msgs[1].Version {
		t.Fatalf("log holds %+v, sequencer at %d; want two entries in version order, the last committed", msgs, seq.CommittedVersion())
	}
}

// TestNeverAcknowledgesAnUntaggedMutation: when the configuration names a
// pool the shard map does not cover (its prefix changed after the map was
// recorded), a transaction writing there is refused whole, nothing of it
// reaches the log, and other transactions commit.
func TestNeverAcknowledgesAnUntaggedMutation(t *testing.T) {
	// Only the cache pool is in the shard map: d/ keys have no shard.
	p, log, _ := newStoppedProxy(t, fixedUsage{}, func(o *CommitOptions) {
		o.Shards = shardmap.Initial([]shardmap.PoolSpec{{Name: "cache", Prefix: []byte("c/"), Tags: []kv.Tag{1, 2}, Replication: 2}})
	})
	run(t, p)
	ctx := context.Background()

	var wg sync.WaitGroup
	errs := make([]error, 3)
	txns := []Txn{
		{Mutations: []kv.Mutation{set("d/k1", "hello")}},
		{Mutations: []kv.Mutation{set("c/k2", "x"), set("d/k2", "y")}},
		{Mutations: []kv.Mutation{set("c/k3", "z")}},
	}
	for i := range txns {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			_, errs[i] = p.Commit(ctx, txns[i])
		}(i)
	}
	wg.Wait()
	for i := 0; i < 2; i++ {
		if kv.CodeOf(errs[i]) != kv.CodeKeyOutsidePools {
			t.Errorf("transaction %d writing a key no shard owns: %v, want key_outside_pools", i, errs[i])
		}
	}
	if errs[2] != nil {
		t.Fatalf("transaction inside the shard map: %v", errs[2])
	}
	var keys []string
	for _, m := range log.messages(1) {
		for _, mut := range m.Mutations {
			keys = append(keys, string(mut.Key))
		}
	}
	if len(keys) != 1 || keys[0] != "c/k3" {
		t.Fatalf("log holds %q, want only c/k3", keys)
	}
}

// TestNeverAcknowledgesAWriteToAShardWithoutLiveTeam: a shard whose every
// team member is retired (its data lost, its stashes replaced) would apply
// no write: a transaction writing there is refused (stash_unavailable,
// naming the shard), and nothing of it reaches the log; writes to other
// shards commit.
func TestNeverAcknowledgesAWriteToAShardWithoutLiveTeam(t *testing.T) {
	p, log, _ := newStoppedProxy(t, fixedUsage{}, func(o *CommitOptions) {
		o.Retired = func(tag kv.Tag) bool { return tag == 3 }
	})
	run(t, p)
	ctx := context.Background()
	// One key in each of the data pool's two shards (tags 3 and 4).
	var lost, kept string
	for _, k := range []string{"d/\x01", "d/\xf0"} {
		s, _ := p.Shards().Lookup([]byte(k))
		if slices.Equal(s.Tags(), []kv.Tag{3}) {
			lost = k
		} else {
			kept = k
		}
	}
	if lost == "" || kept == "" {
		t.Fatalf("test keys not one per shard: lost %q, kept %q", lost, kept)
	}
	_, err := p.Commit(ctx, Txn{Mutations: []kv.Mutation{set("c/a", "x"), set(lost, "y")}})
	if kv.CodeOf(err) != kv.CodeStashUnavailable || !strings.Contains(err.Error(), "no replica left") {
		t.Fatalf("write to a shard whose team is retired: %v, want stash_unavailable naming it", err)
	}
	if _, err := p.Commit(ctx, Txn{Mutations: []kv.Mutation{set(kept, "z")}}); err != nil {
		t.Fatalf("write to a shard with a live team: %v", err)
	}
	for _, tag := range []kv.Tag{1, 2, 3, 4} {
		for _, m := range log.messages(tag) {
			for _, mut := range m.Mutations {
				if string(mut.Key) == lost || string(mut.Key) == "c/a" {
					t.Fatalf("the refused transaction's %q reached the log (tag %d)", mut.Key, tag)
				}
			}
		}
	}
}

// TestBatchBytesBound: 64 concurrent commits through one slot for the log
// would form batches of dozens of transactions; with MaxBatchBytes for
// three, no log entry holds more than three.
func TestBatchBytesBound(t *testing.T) {
	txn := func(i int) Txn {
		return Txn{Mutations: []kv.Mutation{set(fmt.Sprintf("c/%02d", i), string(make([]byte, 1000)))}}
	}
	const perBatch = 3
	p, log, _ := newStoppedProxy(t, fixedUsage{}, func(o *CommitOptions) {
		o.MaxBatchBytes = perBatch * TxnMemory(txn(0))
		o.MaxInflightBatches = 1
	})
	run(t, p)
	var wg sync.WaitGroup
	for i := 0; i < 64; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := p.Commit(context.Background(), txn(i)); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	msgs := log.messages(1)
	total, largest := 0, 0
	for _, m := range msgs {
		total += len(m.Mutations)
		largest = max(largest, len(m.Mutations))
	}
	t.Logf("%d batches, the largest of %d transactions", len(msgs), largest)
	if total != 64 || largest > perBatch {
		t.Fatalf("%d transactions logged, batches of up to %d; want 64 in batches of at most %d", total, largest, perBatch)
	}
}

// TestQueuedBytesBound: while the proxy holds transactions worth its
// MaxQueuedBytes (it is not running, so they wait), the next Commit waits
// and gives up with its ctx without being queued; once the proxy runs, the
// budget frees and commits go through. A transaction larger than the whole
// budget still commits, alone.
func TestQueuedBytesBound(t *testing.T) {
	txn := func(k string, valueBytes int) Txn {
		return Txn{Mutations: []kv.Mutation{set(k, string(make([]byte, valueBytes)))}}
	}
	limit := 2 * TxnMemory(txn("c/a", 1000))
	p, _, _ := newStoppedProxy(t, fixedUsage{}, func(o *CommitOptions) { o.MaxQueuedBytes = limit })
	errs := make(chan error, 2)
	for _, k := range []string{"c/a", "c/b"} {
		go func() {
			_, err := p.Commit(context.Background(), txn(k, 1000))
			errs <- err
		}()
	}
	wait.For(t, "2 commits queued", func() bool { return len(p.reqs) >= 2 })
	if n := p.QueuedBytes(); n != limit {
		t.Fatalf("QueuedBytes = %d; want %d", n, limit)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := p.Commit(ctx, txn("c/c", 10)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Commit past the budget = %v; want it to wait for its deadline", err)
	}
	if n := len(p.reqs); n != 2 {
		t.Fatalf("%d requests queued; want the 2 within the budget", n)
	}
	run(t, p)
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.Commit(context.Background(), txn("c/big", 3000)); err != nil {
		t.Fatalf("a transaction larger than the budget: %v", err)
	}
	if n := p.QueuedBytes(); n != 0 {
		t.Fatalf("%d bytes still counted after every reply", n)
	}
}

// TestCapacityFromPushedUsage: with a UsageBoard the proxy checks capacity
// against what stashes report, counting what it committed above a
// report's version: a lagging report cannot let a pool overfill.
func TestCapacityFromPushedUsage(t *testing.T) {
	board := NewUsageBoard()
	p, _, seq := newProxy(t, board)
	ctx := context.Background()
	v := string(make([]byte, 90))
	board.Report(3, 900, 0) // stash 3 (d/ keys below 0x80) holds 900 of 1024 bytes
	if _, err := p.Commit(ctx, Txn{ReadVersion: seq.CommittedVersion(), Mutations: []kv.Mutation{set("d/a", v)}}); err != nil {
		t.Fatal(err)
	}
	// No new report: the first write still counts, the second is refused.
	if _, err := p.Commit(ctx, Txn{ReadVersion: seq.CommittedVersion(), Mutations: []kv.Mutation{set("d/b", v)}}); kv.CodeOf(err) != kv.CodePoolFull {
		t.Fatalf("second write with a lagging report = %v, want pool_full", err)
	}
	// The stash reports it applied the first write and a clear freed room.
	board.Report(3, 500, seq.CommittedVersion())
	if _, err := p.Commit(ctx, Txn{ReadVersion: seq.CommittedVersion(), Mutations: []kv.Mutation{set("d/b", v)}}); err != nil {
		t.Fatalf("write after a report with room: %v", err)
	}
}

// countingThrottle counts the transactions that waited on it.
type countingThrottle struct{ waits atomic.Int64 }

func (c *countingThrottle) Wait(ctx context.Context) error { c.waits.Add(1); return ctx.Err() }

// TestThrottleWaitedByTransactionsThatSkippedTheGRVProxy: the ratekeeper's
// limit is applied at the GRV proxy, so a commit waits on it only when
// its transaction did not get its read version there: a blind write (no
// read version) or one reading at a client's recent version
// (Unthrottled). One with a GRV proxy's read version does not wait again.
func TestThrottleWaitedByTransactionsThatSkippedTheGRVProxy(t *testing.T) {
	th := &countingThrottle{}
	p, _, seq := newStoppedProxy(t, fixedUsage{}, func(o *CommitOptions) { o.Throttle = th })
	run(t, p)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		txn  func() Txn
		want int64
	}{
		{"blind write", func() Txn { return Txn{Mutations: []kv.Mutation{set("d/a", "1")}} }, 1},
		{"read version from the GRV proxy", func() Txn {
			return Txn{ReadVersion: seq.CommittedVersion(), Mutations: []kv.Mutation{set("d/a", "2")}}
		}, 0},
		{"recent read version", func() Txn {
			return Txn{ReadVersion: seq.CommittedVersion(), Unthrottled: true, Mutations: []kv.Mutation{set("d/a", "3")}}
		}, 1},
	} {
		before := th.waits.Load()
		if _, err := p.Commit(ctx, tc.txn()); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := th.waits.Load() - before; got != tc.want {
			t.Errorf("%s: waited on the throttle %d times, want %d", tc.name, got, tc.want)
		}
	}
}

// TestIdleCommitsAdvanceVersions: a proxy without transactions commits an
// empty batch every IdleCommitInterval of its clock (here a manual one),
// so versions advance at the stashes; and none before.
func TestIdleCommitsAdvanceVersions(t *testing.T) {
	clk := clock.NewManual(time.Unix(0, 0))
	p, _, seq := newStoppedProxy(t, fixedUsage{}, func(o *CommitOptions) { o.Clock = clk })
	run(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const idle = 250 * time.Millisecond // the default
	for i := 0; i < 3; i++ {
		if err := clk.BlockUntil(ctx, 1); err != nil { // the idle timer
			t.Fatal(err)
		}
		v := seq.CommittedVersion()
		clk.Advance(idle - time.Nanosecond)
		if got := seq.CommittedVersion(); got != v {
			t.Fatalf("committed version moved from %d to %d before the idle interval", v, got)
		}
		clk.Advance(time.Nanosecond)
		wait.For(t, "an idle commit", func() bool { return seq.CommittedVersion() > v })
	}
}

// TestStoppedProxyAnswersAtOnce: a commit that reaches a proxy whose Run
// has returned (its generation ended while the request was on its way)
// is answered at once, wrong_node (it did not commit: the client asks the
// coordinators for the new roles), instead of waiting for the caller's
// deadline; a commit it took before it stopped got its answer.
func TestStoppedProxyAnswersAtOnce(t *testing.T) {
	p, _, _ := newStoppedProxy(t, fixedUsage{}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	if _, err := p.Commit(context.Background(), Txn{Mutations: []kv.Mutation{set("c/a", "x")}}); err != nil {
		t.Fatalf("commit while running: %v", err)
	}
	cancel()
	<-done
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	began := time.Now()
	_, err := p.Commit(wctx, Txn{Mutations: []kv.Mutation{set("c/b", "y")}})
	if kv.CodeOf(err) != kv.CodeWrongNode || wctx.Err() != nil {
		t.Fatalf("commit to a stopped proxy: %v after %v, want wrong_node at once", err, time.Since(began))
	}
}
