package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distash/distash/config"
	"github.com/distash/distash/internal/clock"
	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/resolver"
	"github.com/distash/distash/internal/sequencer"
	"github.com/distash/distash/internal/shardmap"
	"github.com/distash/distash/internal/testutil/wait"
	"github.com/distash/distash/internal/txlog"
)

const testConfig = `
[[pool]]
name = "cache"
prefix = "c/"
medium = "dram"
mode = "ephemeral"
engine = "memory"
stashes = 2
replication = 2

[[pool]]
name = "data"
prefix = "d/"
medium = "ssd"
mode = "durable"
engine = "pebble"
stashes = 2
replication = 1
capacity = "1KiB"
`

type fixedUsage map[kv.Tag]int64

func (u fixedUsage) Usage(tag kv.Tag) (int64, kv.Version) { return u[tag], 0 }

func newProxy(t *testing.T, usage StashUsage) (*CommitProxy, *txlog.Log, *sequencer.Sequencer) {
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
func newStoppedProxy(t *testing.T, usage StashUsage, tune func(*CommitOptions)) (*CommitProxy, *txlog.Log, *sequencer.Sequencer) {
	t.Helper()
	cfg, err := config.Parse([]byte(testConfig))
	if err != nil {
		t.Fatal(err)
	}
	tags := []kv.Tag{0, 1, 2, 3, 4}
	log, err := txlog.Open(txlog.Options{Dir: t.TempDir(), Tags: tags, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { log.Close() })
	seq := sequencer.New(clock.Real{}, log.LastVersion())
	shards := shardmap.Initial([]shardmap.PoolSpec{
		{Name: "cache", Prefix: []byte("c/"), Tags: []kv.Tag{1, 2}, Replication: 2},
		{Name: "data", Prefix: []byte("d/"), Tags: []kv.Tag{3, 4}, Replication: 1},
	})
	opts := CommitOptions{Config: cfg, Sequencer: seq, Resolver: resolver.New(5_000_000), Log: log, Shards: shards, Usage: usage,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if tune != nil {
		tune(&opts)
	}
	return NewCommitProxy(opts), log, seq
}

func set(k, v string) kv.Mutation {
	return kv.Mutation{Type: kv.MutSet, Key: []byte(k), Param: []byte(v)}
}

func TestValidateRejectsBadTransactions(t *testing.T) {
	cfg, _ := config.Parse([]byte(testConfig))
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
		err := Validate(cfg, Txn{Mutations: []kv.Mutation{c.m}})
		if kv.CodeOf(err) != c.code {
			t.Errorf("%s %.20q: %v, want %s", c.m.Type, c.m.Key, err, c.code.Name())
		}
	}
	big := Txn{}
	for i := 0; i < 101; i++ {
		big.Mutations = append(big.Mutations, kv.Mutation{Type: kv.MutSet, Key: []byte(fmt.Sprintf("d/%d", i)), Param: make([]byte, 100_000)})
	}
	if kv.CodeOf(Validate(cfg, big)) != kv.CodeTransactionTooLarge {
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
		msgs, _, err := log.Peek(ctx, tag, 0, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, m := range msgs {
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

// TestLeaderLossResyncs: with a 3-replica log, the raft leader stops while
// transactions commit. Commits in flight may end with commit_unknown_result;
// the proxy resyncs with the log and later commits succeed, and every
// acknowledged commit is in the log.
func TestLeaderLossResyncs(t *testing.T) {
	cfg, _ := config.Parse([]byte(testConfig))
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	log, err := txlog.Open(txlog.Options{Dir: t.TempDir(), Replicas: 3, Tags: []kv.Tag{0, 1, 2, 3, 4}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	seq := sequencer.New(clock.Real{}, log.LastVersion())
	shards := shardmap.Initial([]shardmap.PoolSpec{
		{Name: "cache", Prefix: []byte("c/"), Tags: []kv.Tag{1, 2}, Replication: 2},
		{Name: "data", Prefix: []byte("d/"), Tags: []kv.Tag{3, 4}, Replication: 1},
	})
	p := NewCommitProxy(CommitOptions{Config: cfg, Sequencer: seq, Resolver: resolver.New(5_000_000), Log: log, Shards: shards, Usage: fixedUsage{}, Logger: quiet})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	var mu sync.Mutex
	acked := map[string]bool{}
	commit := func(key string) error {
		_, err := p.Commit(ctx, Txn{Mutations: []kv.Mutation{set(key, "v")}})
		if err == nil {
			mu.Lock()
			acked[key] = true
			mu.Unlock()
		}
		return err
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				commit(fmt.Sprintf("c/%d/%d", w, i))
			}
		}(w)
	}
	ackedCount := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(acked)
	}
	wait.For(t, "20 commits before the leader stops", func() bool { return ackedCount() >= 20 })
	leader := log.Stats().Leader
	if err := log.StopReplica(leader); err != nil {
		t.Fatal(err)
	}
	// The load goes on until a new leader took over and acknowledges
	// commits (more than the ones that may have been in flight).
	before := ackedCount()
	wait.Within(t, 15*time.Second, "commits under a new leader", func() bool {
		return log.Stats().Leader != leader && ackedCount() >= before+20
	})
	close(stop)
	wg.Wait()
	// After the new leader took over, commits succeed again.
	wait.Every(t, 50*time.Millisecond, 15*time.Second, "a commit after leader loss", func() bool { return commit("c/after") == nil })
	msgs, _, err := log.Peek(ctx, 1, 0, 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	inLog := map[string]bool{}
	for _, m := range msgs {
		for _, mut := range m.Mutations {
			inLog[string(mut.Key)] = true
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for k := range acked {
		if !inLog[k] {
			t.Fatalf("acknowledged commit %s is not in the log", k)
		}
	}
	t.Logf("%d commits acknowledged across a leader change (leader was replica %d, now %d)", len(acked), leader, log.Stats().Leader)
}

// TestNeverAcknowledgesAnUntaggedMutation: when the configuration names a
// pool the shard map does not cover (its prefix changed after the map was
// recorded), a transaction writing there is refused whole, nothing of it
// reaches the log, and other transactions commit.
func TestNeverAcknowledgesAnUntaggedMutation(t *testing.T) {
	cfg, _ := config.Parse([]byte(testConfig))
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	log, err := txlog.Open(txlog.Options{Dir: t.TempDir(), Tags: []kv.Tag{0, 1, 2}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	seq := sequencer.New(clock.Real{}, log.LastVersion())
	// Only the cache pool is in the shard map: d/ keys have no shard.
	shards := shardmap.Initial([]shardmap.PoolSpec{{Name: "cache", Prefix: []byte("c/"), Tags: []kv.Tag{1, 2}, Replication: 2}})
	p := NewCommitProxy(CommitOptions{Config: cfg, Sequencer: seq, Resolver: resolver.New(5_000_000), Log: log, Shards: shards, Usage: fixedUsage{}, Logger: quiet})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

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
	msgs, _, err := log.Peek(ctx, 1, 0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, m := range msgs {
		for _, mut := range m.Mutations {
			keys = append(keys, string(mut.Key))
		}
	}
	if len(keys) != 1 || keys[0] != "c/k3" {
		t.Fatalf("log holds %q, want only c/k3", keys)
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
	msgs, _, err := log.Peek(context.Background(), 1, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
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
