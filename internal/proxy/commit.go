// Package proxy holds the GRV proxy and the commit proxy of the transaction
// pipeline.
//
// The commit proxy takes whole transactions (read version, read and write
// conflict ranges, mutations), batches them, and for each batch: gets a
// commit version from the sequencer, refuses transactions that would push a
// durable pool past its capacity (pool_full), asks the resolver which of the
// rest conflict, tags each mutation of the committed ones with the stashes
// that own its shard, appends the batch to the log and replies once the log
// has made it durable. Batches are pipelined: the next batch is resolved
// while earlier ones wait for the log, and replies go out in version order.
package proxy

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distash/distash/internal/backup/blog"
	"github.com/distash/distash/internal/budget"
	"github.com/distash/distash/internal/clock"
	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/logentry"
	"github.com/distash/distash/internal/resolver"
	"github.com/distash/distash/internal/sequencer"
	"github.com/distash/distash/internal/shardmap"
)

// Txn is a transaction to commit.
type Txn struct {
	ReadVersion    kv.Version
	ReadConflicts  []kv.KeyRange
	WriteConflicts []kv.KeyRange
	Mutations      []kv.Mutation
	// Unthrottled: the read version did not come through a GRV proxy, so
	// the transaction has not waited on the throttle yet.
	Unthrottled bool
}

// Appender is the part of the log the commit proxy writes to.
type Appender interface {
	Append(e *logentry.Entry) *logentry.Future
	// Resync returns the log's last committed version once no append is in
	// flight, after an append failed.
	Resync(ctx context.Context) (kv.Version, error)
}

// Sequencer is the part of the sequencer the commit proxy uses (a
// *sequencer.Sequencer in process; a remote one behind the same methods).
type Sequencer interface {
	// NextCommitVersion returns the previous commit version and a new,
	// larger one.
	NextCommitVersion() (prev, v kv.Version)
	// ReportCommitted records that v is durable in the log.
	ReportCommitted(v kv.Version)
	// Resync chains the next version to the log's last one after an
	// append of unknown outcome.
	Resync(logLast kv.Version)
}

// Resolver decides which transactions of a batch conflict (a
// *resolver.Resolver in process).
type Resolver interface {
	Resolve(version kv.Version, txns []resolver.Txn) []resolver.Outcome
}

var (
	_ Sequencer = (*sequencer.Sequencer)(nil)
	_ Resolver  = (*resolver.Resolver)(nil)
)

// StashUsage tells the proxy how full a stash is.
type StashUsage interface {
	// Usage returns the stash's live bytes and the version they include.
	Usage(tag kv.Tag) (usedBytes int64, applied kv.Version)
}

// UsageBoard is a StashUsage fed by the stashes: each reports its live
// bytes and applied version as they change, and the commit proxy reads the
// last report instead of calling the stash on its commit path (the stash
// may be in another process). A report lags the stash; the proxy counts
// every byte it committed above the reported version as pending, so a late
// report only makes the capacity check more cautious.
type UsageBoard struct {
	mu      sync.Mutex
	reports map[kv.Tag]usageReport // Protected by mu.
}

type usageReport struct {
	used    int64
	applied kv.Version
}

// NewUsageBoard returns an empty board: a stash that has not reported
// counts as empty.
func NewUsageBoard() *UsageBoard { return &UsageBoard{reports: map[kv.Tag]usageReport{}} }

// Report records a stash's live bytes as of version applied.
func (b *UsageBoard) Report(tag kv.Tag, used int64, applied kv.Version) {
	b.mu.Lock()
	b.reports[tag] = usageReport{used: used, applied: applied}
	b.mu.Unlock()
}

// Usage implements StashUsage with the last report.
func (b *UsageBoard) Usage(tag kv.Tag) (int64, kv.Version) {
	b.mu.Lock()
	defer b.mu.Unlock()
	r := b.reports[tag]
	return r.used, r.applied
}

// Pool is what the commit proxy knows of a pool: the keys it owns, and
// the capacity its stashes must stay within.
type Pool struct {
	Name   string
	Prefix string // the pool's keys start with it; "" owns no key
	// Capacity bounds the live bytes of each stash of a durable pool
	// (pool_full past it); 0 for an ephemeral pool or one without a bound.
	Capacity int64
}

// poolForKey returns the first of pools whose prefix key has.
func poolForKey(pools []Pool, key []byte) (*Pool, bool) {
	for i := range pools {
		if p := pools[i].Prefix; p != "" && len(key) >= len(p) && string(key[:len(p)]) == p {
			return &pools[i], true
		}
	}
	return nil, false
}

// CommitOptions configure a commit proxy.
type CommitOptions struct {
	// Pools are the cluster's pools: a user transaction may write only
	// inside them.
	Pools     []Pool
	Sequencer Sequencer
	Resolver  Resolver
	Log       Appender
	Shards    *shardmap.Map
	// ShardsAt is the version Shards was read at (the recovery's end): the
	// version of the map's last change until the proxy commits one.
	ShardsAt kv.Version
	Usage    StashUsage
	// Epoch is the generation this proxy belongs to, carried by every log
	// entry it appends: the log refuses entries of an epoch older than the
	// newest generation it began (logentry.ErrStaleEpoch), so a proxy of a
	// deposed generation cannot commit. 0 in an embedded cluster.
	Epoch uint64
	// Throttle, if set, is waited on by transactions without a read
	// version (blind writes skip the GRV proxy, where throttling happens)
	// and by those whose read version did not come from it (Unthrottled).
	Throttle Throttle
	// MaxBatch bounds the transactions of one batch.
	MaxBatch int
	// MaxBatchBytes bounds the memory of one batch's transactions (see
	// TxnMemory), which the batch's log entry, its resolver call and its
	// tagged mutations grow with; a transaction larger than that forms a
	// batch alone. Default DefaultMaxBatchBytes.
	MaxBatchBytes int64
	// MaxQueuedBytes bounds the memory (see TxnMemory) of the transactions
	// the proxy holds, from Commit to the reply: waiting for a batch, being
	// resolved and waiting for the log. Commit waits, or fails with its
	// ctx's error, while it is spent, so many large transactions cannot pile
	// up. Default DefaultMaxQueuedBytes.
	MaxQueuedBytes int64
	// MaxInflightBatches bounds the batches waiting for the log at once.
	// While the log is busy, new transactions queue and form the next,
	// larger batch: batching adapts to the log's speed, as FoundationDB's
	// commit proxies do.
	MaxInflightBatches int
	// IdleCommitInterval is how long the proxy waits without transactions
	// before it commits an empty batch to advance versions (default 250ms).
	IdleCommitInterval time.Duration
	Logger             *slog.Logger
	// ObserveBatch, if set, is told the number of transactions of every
	// batch that carries any (metrics: the commit batch size histogram).
	ObserveBatch func(txns int)
	// Backup is the backup running when the proxy starts (read from the
	// system stash at recovery; nil: none). Backup hook (issue 23).
	Backup *blog.Config
	// Clock times the idle commits (nil: the real clock).
	Clock clock.Clock
	// Retired reports whether a stash's tag was retired (its stash was
	// replaced, or gone with its files). A write to a shard whose every
	// team member is retired would be acknowledged and applied by no
	// stash, so it is refused (stash_unavailable) until the shard has a
	// team again. Nil: no tag is.
	Retired func(kv.Tag) bool
}

type commitReq struct {
	txn    Txn
	system bool
	mem    int64 // TxnMemory(txn), taken from the proxy's budget until the reply
	reply  chan commitResult
}

// Defaults of CommitOptions.MaxBatchBytes and MaxQueuedBytes.
const (
	DefaultMaxBatchBytes  = 64 << 20
	DefaultMaxQueuedBytes = 256 << 20
)

// What a transaction holds in the proxy besides its key and value bytes:
// per mutation, its kv.Mutation (56 bytes) and its tagged copy in the log
// entry (logentry.TaggedMutation, 80); per conflict range, its kv.KeyRange
// (48). For small keys and values these are most of the memory (a 500,000
// mutation transaction of 19 bytes a mutation, conflict ranges included,
// holds about 100 MB).
const (
	mutationMemory = 136
	rangeMemory    = 48
)

// TxnMemory estimates the memory txn holds in the commit proxy: its key,
// value and range bytes plus the structures above. MaxBatchBytes and
// MaxQueuedBytes are counted in it.
func TxnMemory(txn Txn) int64 {
	n := int64(len(txn.Mutations)*mutationMemory + (len(txn.ReadConflicts)+len(txn.WriteConflicts))*rangeMemory)
	for _, m := range txn.Mutations {
		n += int64(m.Bytes())
	}
	for _, rs := range [][]kv.KeyRange{txn.ReadConflicts, txn.WriteConflicts} {
		for _, r := range rs {
			n += int64(len(r.Begin) + len(r.End))
		}
	}
	return n
}

type commitResult struct {
	version kv.Version
	err     error
}

type inflight struct {
	version kv.Version
	future  *logentry.Future
	reqs    []*commitReq
	results []commitResult
	pending map[kv.Tag]int64 // bytes this batch adds per stash
}

// Counters are the commit proxy's running totals.
type Counters struct {
	Commits, Conflicts, TooOld, PoolFull, Batches int64
}

// CommitProxy batches and commits transactions. Start it with Run.
type CommitProxy struct {
	opts   CommitOptions
	reqs   chan *commitReq
	waits  chan *inflight
	slots  chan struct{}  // one token per batch waiting for the log
	queued *budget.Budget // memory of the transactions between Commit and reply
	// stopped is closed when Run has returned, after it answered every
	// request it took: a request still queued then never committed.
	stopped chan struct{}

	mu       sync.Mutex
	shards   *shardmap.Map // Protected by mu.
	shardsAt kv.Version    // the version of shards' last change. Protected by mu.
	backup   *blog.Capture // the running backup's capture, nil if none. Protected by mu.
	// pending holds bytes committed to each durable stash that the stash
	// has not applied yet, oldest first. Only the batching loop touches it.
	pending map[kv.Tag][]pendingBytes

	commits, conflicts, tooOld, poolFull, batches atomic.Int64
	// needResync is set when an append failed: the next batch must chain
	// from the log's actual last version.
	needResync atomic.Bool
}

type pendingBytes struct {
	version kv.Version
	bytes   int64
}

// NewCommitProxy returns a commit proxy.
func NewCommitProxy(opts CommitOptions) *CommitProxy {
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = 512
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.IdleCommitInterval <= 0 {
		opts.IdleCommitInterval = 250 * time.Millisecond
	}
	opts.Clock = clock.Or(opts.Clock)
	if opts.MaxInflightBatches <= 0 {
		opts.MaxInflightBatches = 1
	}
	if opts.MaxBatchBytes <= 0 {
		opts.MaxBatchBytes = DefaultMaxBatchBytes
	}
	if opts.MaxQueuedBytes <= 0 {
		opts.MaxQueuedBytes = DefaultMaxQueuedBytes
	}
	return &CommitProxy{
		slots:    make(chan struct{}, opts.MaxInflightBatches),
		queued:   budget.New(opts.MaxQueuedBytes),
		opts:     opts,
		reqs:     make(chan *commitReq, 4096),
		waits:    make(chan *inflight, 256),
		stopped:  make(chan struct{}),
		shards:   opts.Shards,
		shardsAt: opts.ShardsAt,
		backup:   blog.NewCapture(opts.Backup),
		pending:  make(map[kv.Tag][]pendingBytes),
	}
}

// Shards returns a copy of the current shard map.
func (p *CommitProxy) Shards() *shardmap.Map {
	m, _ := p.ShardsAt()
	return m
}

// ShardsAt returns a copy of the shard map and the version of its last
// change (the version the proxy started from if it made none): every
// assignment the map holds was committed at or before it.
func (p *CommitProxy) ShardsAt() (*shardmap.Map, kv.Version) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return shardmap.New(p.shards.Shards()), p.shardsAt
}

// QueuedBytes returns the memory (see TxnMemory) of the transactions the
// proxy holds now.
func (p *CommitProxy) QueuedBytes() int64 { return p.queued.Used() }

// Counters returns the running totals.
func (p *CommitProxy) Counters() Counters {
	return Counters{Commits: p.commits.Load(), Conflicts: p.conflicts.Load(), TooOld: p.tooOld.Load(), PoolFull: p.poolFull.Load(), Batches: p.batches.Load()}
}

// Commit validates txn, commits it and returns its commit version.
func (p *CommitProxy) Commit(ctx context.Context, txn Txn) (kv.Version, error) {
	if err := Validate(p.opts.Pools, txn); err != nil {
		return 0, err
	}
	if (txn.ReadVersion == 0 || txn.Unthrottled) && p.opts.Throttle != nil {
		if err := p.opts.Throttle.Wait(ctx); err != nil {
			return 0, err
		}
	}
	return p.submit(ctx, &commitReq{txn: txn})
}

// CommitSystem commits a transaction of system keys (\xff), which user
// transactions may not write.
func (p *CommitProxy) CommitSystem(ctx context.Context, txn Txn) (kv.Version, error) {
	return p.submit(ctx, &commitReq{txn: txn, system: true})
}

func (p *CommitProxy) submit(ctx context.Context, r *commitReq) (kv.Version, error) {
	r.reply = make(chan commitResult, 1)
	r.mem = TxnMemory(r.txn)
	if err := p.queued.Acquire(ctx, r.mem); err != nil {
		return 0, err // not submitted: it did not commit
	}
	select {
	case p.reqs <- r:
	case <-p.stopped:
		p.queued.Release(r.mem)
		return 0, errProxyStopped
	case <-ctx.Done():
		p.queued.Release(r.mem)
		return 0, ctx.Err()
	}
	select {
	case res := <-r.reply:
		return res.version, res.err
	case <-p.stopped:
		// Run answered every request it took before it returned: one
		// with no answer was never taken, so it did not commit.
		select {
		case res := <-r.reply:
			return res.version, res.err
		default:
			p.queued.Release(r.mem)
			return 0, errProxyStopped
		}
	case <-ctx.Done():
		// The transaction may still commit.
		return 0, kv.Errorf(kv.CodeCommitUnknownResult, "%v while waiting for the commit", ctx.Err())
	}
}

// errProxyStopped answers a commit that a stopped proxy (its generation
// ended) never took: it did not commit, and the client asks the
// coordinators where the roles are now. Before, such a commit waited for
// the client's request timeout (10 s).
var errProxyStopped = kv.Errorf(kv.CodeWrongNode, "the commit proxy stopped (its generation ended) before it took the transaction: it did not commit")

// Validate checks a user transaction's sizes and that every key it writes
// lies in one of pools.
func Validate(pools []Pool, txn Txn) error {
	size := 0
	for _, m := range txn.Mutations {
		if len(m.Key) > kv.MaxKeyBytes {
			return kv.Errorf(kv.CodeKeyTooLarge, "key of %d bytes (limit %d)", len(m.Key), kv.MaxKeyBytes)
		}
		switch m.Type {
		case kv.MutSet:
			if len(m.Param) > kv.MaxValueBytes {
				return kv.Errorf(kv.CodeValueTooLarge, "value of %d bytes for key %.40q (limit %d)", len(m.Param), m.Key, kv.MaxValueBytes)
			}
		case kv.MutClearRange:
			if len(m.Param) > kv.MaxKeyBytes {
				return kv.Errorf(kv.CodeKeyTooLarge, "end key of %d bytes (limit %d)", len(m.Param), kv.MaxKeyBytes)
			}
		case kv.MutAdd, kv.MutMax, kv.MutMin:
			if len(m.Param) > 8 {
				return kv.Errorf(kv.CodeInvalidMutation, "%s operand of %d bytes (at most 8)", m.Type, len(m.Param))
			}
		case kv.MutClear:
		default:
			return kv.Errorf(kv.CodeInvalidMutation, "unknown mutation type %d", m.Type)
		}
		if err := checkInPool(pools, m); err != nil {
			return err
		}
		size += m.Bytes()
	}
	for _, r := range txn.ReadConflicts {
		size += len(r.Begin) + len(r.End)
	}
	for _, r := range txn.WriteConflicts {
		size += len(r.Begin) + len(r.End)
	}
	if size > kv.MaxTransactionBytes {
		return kv.Errorf(kv.CodeTransactionTooLarge, "transaction of %d bytes (limit %d)", size, kv.MaxTransactionBytes)
	}
	return nil
}

func checkInPool(pools []Pool, m kv.Mutation) error {
	pool, ok := poolForKey(pools, m.Key)
	if !ok {
		return kv.Errorf(kv.CodeKeyOutsidePools, "key %.60q is in no pool", m.Key)
	}
	if m.Type == kv.MutClearRange {
		end := kv.PrefixEnd([]byte(pool.Prefix))
		if bytes.Compare(m.Param, m.Key) < 0 {
			return kv.Errorf(kv.CodeInvalidMutation, "clear range end %.60q before begin %.60q", m.Param, m.Key)
		}
		if end != nil && bytes.Compare(m.Param, end) > 0 {
			return kv.Errorf(kv.CodeKeyOutsidePools, "clear range [%.60q, %.60q) leaves pool %q", m.Key, m.Param, pool.Name)
		}
	}
	return nil
}

// finish answers r and gives its memory back to the budget.
func (p *CommitProxy) finish(r *commitReq, res commitResult) {
	p.queued.Release(r.mem)
	r.reply <- res
}

// Run batches and commits until ctx is done.
func (p *CommitProxy) Run(ctx context.Context) error {
	defer close(p.stopped)
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.replyLoop()
	}()
	defer func() {
		close(p.waits)
		<-done
	}()
	// next is a request taken from the queue that did not fit the batch
	// being formed: it starts the next one.
	var next *commitReq
	stopping := func(batch []*commitReq) {
		if next != nil {
			batch = append(batch, next)
		}
		for _, r := range batch {
			p.finish(r, commitResult{err: kv.Errorf(kv.CodeCommitUnknownResult, "cluster stopping")})
		}
	}
	for {
		var batch []*commitReq
		var batchBytes int64
		if next != nil {
			batch, batchBytes, next = append(batch, next), next.mem, nil
		} else {
			idle := p.opts.Clock.NewTimer(p.opts.IdleCommitInterval)
			select {
			case <-ctx.Done():
				idle.Stop()
				return nil
			case r := <-p.reqs:
				batch, batchBytes = append(batch, r), r.mem
			case <-idle.C():
				// Nothing to commit: commit an empty batch so versions keep
				// advancing at the stashes and they can flush and pop the log.
			}
			idle.Stop()
		}
		// Wait for a free slot; requests arriving meanwhile join this batch.
		select {
		case p.slots <- struct{}{}:
		case <-ctx.Done():
			stopping(batch)
			return nil
		}
	drain:
		for len(batch) < p.opts.MaxBatch && batchBytes < p.opts.MaxBatchBytes {
			select {
			case r := <-p.reqs:
				if len(batch) > 0 && batchBytes+r.mem > p.opts.MaxBatchBytes {
					next = r
					break drain
				}
				batch, batchBytes = append(batch, r), batchBytes+r.mem
			default:
				break drain
			}
		}
		if p.needResync.Load() {
			if err := p.resync(ctx); err != nil {
				p.opts.Logger.Error("log resync failed", "err", err)
				for _, r := range batch {
					p.finish(r, commitResult{err: kv.Errorf(kv.CodeCommitUnknownResult, "log unavailable: %v", err)})
				}
				<-p.slots
				continue
			}
		}
		inf := p.commitBatch(batch)
		select {
		case p.waits <- inf:
		case <-ctx.Done():
			stopping(batch)
			return nil
		}
	}
}

// resync waits for every other batch to leave the log, then chains the
// sequencer to the log's last committed version. Called holding one slot.
func (p *CommitProxy) resync(ctx context.Context) error {
	held := 1
	defer func() {
		for ; held > 1; held-- {
			<-p.slots
		}
	}()
	for held < p.opts.MaxInflightBatches {
		select {
		case p.slots <- struct{}{}:
			held++
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	last, err := p.opts.Log.Resync(rctx)
	if err != nil {
		return err
	}
	p.opts.Sequencer.Resync(last)
	p.needResync.Store(false)
	p.opts.Logger.Warn("commit proxy resynced with the log", "version", last)
	return nil
}

// commitBatch resolves, tags and appends one batch; the log's future is
// waited for by replyLoop.
func (p *CommitProxy) commitBatch(batch []*commitReq) *inflight {
	prev, version := p.opts.Sequencer.NextCommitVersion()
	p.batches.Add(1)
	if p.opts.ObserveBatch != nil && len(batch) > 0 {
		p.opts.ObserveBatch(len(batch))
	}
	inf := &inflight{version: version, reqs: batch, results: make([]commitResult, len(batch)), pending: map[kv.Tag]int64{}}

	p.mu.Lock()
	defer p.mu.Unlock()

	// Capacity first: a transaction that would overfill a durable pool is
	// refused before the resolver records its writes.
	var toResolve []resolver.Txn
	var idx []int
	for i, r := range batch {
		// A mutation that no shard owns would reach no stash: refuse the
		// transaction rather than acknowledge a write that is dropped.
		if err := p.checkTaggable(r.txn); err != nil {
			inf.results[i] = commitResult{err: err}
			continue
		}
		if err := p.checkCapacity(r.txn, inf.pending); err != nil {
			inf.results[i] = commitResult{err: err}
			p.poolFull.Add(1)
			continue
		}
		toResolve = append(toResolve, resolver.Txn{ReadVersion: r.txn.ReadVersion, ReadRanges: r.txn.ReadConflicts, WriteRanges: r.txn.WriteConflicts})
		idx = append(idx, i)
	}
	outcomes := p.opts.Resolver.Resolve(version, toResolve)

	entry := &logentry.Entry{Version: version, PrevVersion: prev, Epoch: p.opts.Epoch}
	capture, captured := p.backup, []kv.Mutation(nil) // backup hook (issue 23)
	for j, o := range outcomes {
		i := idx[j]
		switch o {
		case resolver.TooOld:
			inf.results[i] = commitResult{err: kv.Errorf(kv.CodeTransactionTooOld, "read version %d is older than the resolver's window", batch[i].txn.ReadVersion)}
			p.tooOld.Add(1)
			continue
		case resolver.Conflict:
			inf.results[i] = commitResult{err: kv.Errorf(kv.CodeNotCommitted, "a key read at version %d was written by a later commit", batch[i].txn.ReadVersion)}
			p.conflicts.Add(1)
			continue
		}
		tagged, err := p.tagAll(batch[i].txn.Mutations)
		if err != nil {
			// checkTaggable passed, so this is a bug; the transaction
			// fails and nothing of it reaches the log.
			p.opts.Logger.Error("commit proxy: untaggable mutation after the check", "err", err)
			inf.results[i] = commitResult{err: err}
			continue
		}
		inf.results[i] = commitResult{version: version}
		entry.Mutations = append(entry.Mutations, tagged...)
		if batch[i].system {
			assigns, changed := p.applyShardChanges(batch[i].txn.Mutations)
			entry.Mutations = append(entry.Mutations, assigns...)
			if changed {
				p.shardsAt = version
			}
			p.watchBackup(batch[i].txn.Mutations) // backup hook (issue 23)
		} else if capture != nil {
			captured = append(captured, batch[i].txn.Mutations...)
		}
	}
	// Backup hook (issue 23): a copy of the batch's user mutations in the
	// backed-up ranges goes to the system stash in the same log entry.
	if blogMuts := capture.LogMutations(version, captured); blogMuts != nil {
		if tagged, err := p.tagAll(blogMuts); err == nil {
			entry.Mutations = append(entry.Mutations, tagged...)
		} else {
			p.opts.Logger.Error("commit proxy: backup mutation log", "err", err)
		}
	}
	for tag, n := range inf.pending {
		p.pending[tag] = append(p.pending[tag], pendingBytes{version: version, bytes: n})
	}
	inf.future = p.opts.Log.Append(entry)
	return inf
}

// applyShardChanges applies a system transaction's shard map mutations to
// the proxy's map and returns the private assignment mutations that tell
// the stashes concerned: each new shard entry goes to every stash that
// held any part of its range before (they may have to drop it) and to its
// new team and destinations (they may have to fetch it). Mutations later
// in the batch are tagged with the new map; changed reports whether the map
// changed. Called with mu held.
func (p *CommitProxy) applyShardChanges(muts []kv.Mutation) (out []logentry.TaggedMutation, changed bool) {
	for _, m := range muts {
		var announce *shardmap.Shard
		var before []kv.Tag
		if m.Type == kv.MutSet && shardmap.IsShardKey(m.Key) {
			s, err := shardmap.Decode(m.Key, m.Param)
			if err != nil {
				p.opts.Logger.Error("bad shard map mutation", "err", err)
				continue
			}
			if s.Pool != "system" {
				announce = &s
				for _, old := range p.shards.Intersect(s.Begin, s.End) {
					before = append(before, old.Tags()...)
				}
			}
		}
		applied, err := p.shards.Apply(m)
		if err != nil {
			p.opts.Logger.Error("bad shard map mutation", "err", err)
			continue
		}
		changed = changed || applied
		if announce == nil {
			continue
		}
		tags := announce.Tags()
		for _, t := range before {
			if !slices.Contains(tags, t) {
				tags = append(tags, t)
			}
		}
		out = append(out, logentry.TaggedMutation{Mutation: shardmap.AssignMutation(*announce), Tags: tags})
	}
	return out, changed
}

// BackingUp reports whether a backup is configured: the proxy copies the
// backed-up ranges' mutations into the system key space.
func (p *CommitProxy) BackingUp() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.backup != nil
}

// watchBackup starts or stops copying mutations for a backup when a system
// transaction sets or clears its configuration; it takes effect from the
// next batch. Backup hook (issue 23). Called with mu held.
func (p *CommitProxy) watchBackup(muts []kv.Mutation) {
	c, err := blog.WatchConfig(p.backup, muts)
	if err != nil {
		p.opts.Logger.Error("commit proxy: bad backup configuration", "err", err)
	}
	p.backup = c
}

// checkTaggable returns an error naming the first mutation of txn that no
// shard owns, or whose shard's team is all retired (Retired): no stash
// would apply it. Called with mu held.
func (p *CommitProxy) checkTaggable(txn Txn) error {
	for _, m := range txn.Mutations {
		if m.Type == kv.MutClearRange {
			continue // the pieces of a clear range that no shard owns hold no keys
		}
		s, ok := p.shards.Lookup(m.Key)
		var tags []kv.Tag
		if ok {
			tags = s.Tags()
		}
		if len(tags) == 0 {
			return kv.Errorf(kv.CodeKeyOutsidePools, "key %.60q is in no shard of the cluster's shard map", m.Key)
		}
		if r := p.opts.Retired; r != nil && !slices.ContainsFunc(tags, func(t kv.Tag) bool { return !r(t) }) {
			return kv.Errorf(kv.CodeStashUnavailable, "key %.60q is in shard [%q, %q) of pool %q, which has no replica left: every stash that held it (%v) was retired, so no stash would apply the write; its data is lost unless restored from a backup",
				m.Key, s.Begin, s.End, s.Pool, tags)
		}
	}
	return nil
}

// tagAll returns the mutations with the tags of the stashes owning their
// keys; a clear range is split at shard boundaries. It fails if a
// mutation would reach no stash: the commit proxy never acknowledges a
// write that is not in the log under some stash's tag. Called with mu held.
func (p *CommitProxy) tagAll(muts []kv.Mutation) ([]logentry.TaggedMutation, error) {
	out := make([]logentry.TaggedMutation, 0, len(muts))
	for _, m := range muts {
		if m.Type == kv.MutClearRange {
			for _, s := range p.shards.Intersect(m.Key, m.Param) {
				piece := m
				piece.Key, piece.Param = s.Begin, s.End
				out = append(out, logentry.TaggedMutation{Mutation: piece, Tags: s.Tags()})
			}
			continue
		}
		s, ok := p.shards.Lookup(m.Key)
		if !ok || len(s.Tags()) == 0 {
			return nil, kv.Errorf(kv.CodeInternal, "mutation of key %.60q is in no shard", m.Key)
		}
		out = append(out, logentry.TaggedMutation{Mutation: m, Tags: s.Tags()})
	}
	return out, nil
}

// checkCapacity refuses txn if a durable stash it writes would exceed its
// capacity, counting bytes committed but not yet applied. On success the
// transaction's bytes are added to batchPending. Called with mu held.
func (p *CommitProxy) checkCapacity(txn Txn, batchPending map[kv.Tag]int64) error {
	var add map[kv.Tag]int64
	var poolOf map[kv.Tag]*Pool
	for _, m := range txn.Mutations {
		if m.Type == kv.MutClear || m.Type == kv.MutClearRange {
			continue
		}
		pool, ok := poolForKey(p.opts.Pools, m.Key)
		if !ok || pool.Capacity <= 0 {
			continue
		}
		s, ok := p.shards.Lookup(m.Key)
		if !ok {
			continue
		}
		n := int64(len(m.Key) + len(m.Param))
		if m.Type.IsAtomic() {
			n = int64(len(m.Key) + 8)
		}
		if add == nil {
			add, poolOf = map[kv.Tag]int64{}, map[kv.Tag]*Pool{}
		}
		for _, t := range s.Tags() {
			add[t] += n
			poolOf[t] = pool
		}
	}
	for t, n := range add {
		used, applied := p.opts.Usage.Usage(t)
		q := p.pending[t]
		for len(q) > 0 && q[0].version <= applied {
			q = q[1:]
		}
		p.pending[t] = q
		var inflight int64
		for _, pb := range q {
			inflight += pb.bytes
		}
		total := used + inflight + batchPending[t] + n
		if pool := poolOf[t]; total > pool.Capacity {
			return kv.Errorf(kv.CodePoolFull, "pool %q is full: a stash holds %d bytes of its %d, this transaction adds %d", pool.Name, used+inflight+batchPending[t], pool.Capacity, n)
		}
	}
	for t, n := range add {
		batchPending[t] += n
	}
	return nil
}

// replyLoop waits for each batch's log append, in version order, then
// reports the committed version and answers the clients.
func (p *CommitProxy) replyLoop() {
	for inf := range p.waits {
		err := inf.future.Wait(context.Background())
		if err != nil {
			p.opts.Logger.Error("log append failed", "version", inf.version, "err", err)
			p.needResync.Store(true)
		} else {
			p.opts.Sequencer.ReportCommitted(inf.version)
		}
		for i, r := range inf.reqs {
			res := inf.results[i]
			if err != nil && res.err == nil {
				res = commitResult{err: kv.Errorf(kv.CodeCommitUnknownResult, "log append failed: %v", err)}
			}
			if res.err == nil {
				p.commits.Add(1)
			}
			p.finish(r, res)
		}
		<-p.slots
	}
}
