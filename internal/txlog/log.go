package txlog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distash/distash/internal/kv"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// TaggedMutation is a mutation with the tags of every stash that must apply
// it.
type TaggedMutation struct {
	kv.Mutation
	Tags []kv.Tag
}

// Entry is one commit batch: all mutations committed at Version. PrevVersion
// is the Version of the previous entry (0 for the first entry of a log).
type Entry struct {
	Version, PrevVersion kv.Version
	Mutations            []TaggedMutation
}

// Message is the part of one Entry for one tag.
type Message struct {
	Version   kv.Version
	Mutations []kv.Mutation
}

// Options configure Open. Zero values mean the defaults.
type Options struct {
	Dir      string   // replicas live in Dir/replica-<i>
	Replicas int      // 1 (default) .. 7, all in this process over raft.NewInmemTransport
	Tags     []kv.Tag // every tag that must pop before an entry can be dropped; nil on reopen keeps the recovered set
	Logger   *slog.Logger

	// SnapshotThreshold is how many raft log records since the last snapshot
	// trigger a new one (default 4096); TrailingLogs how many records are
	// kept behind a snapshot (default 1024); SnapshotInterval how often raft
	// checks the threshold (default 5s, jittered up to 2x).
	SnapshotThreshold uint64
	TrailingLogs      uint64
	SnapshotInterval  time.Duration
	// PopInterval is how often changed pops are replicated (default 200ms).
	PopInterval time.Duration
	// LeaderTimeout bounds how long Open, Append and pop flushes wait for a
	// raft leader (default 10s).
	LeaderTimeout time.Duration
	// RaftCacheBytes bounds the data of the recent raft log records each
	// replica keeps in memory in front of its store (default 32 MiB, and
	// at most 1024 records).
	RaftCacheBytes int64
	// MemoryBytes is the budget of the entries each replica holds in memory
	// until every tag popped them (Stats.Memory; default 256 MiB). Past it,
	// OverMemoryBudget reports true and stashes flush what they applied
	// without waiting for their MVCC window to pass, so that they pop it.
	MemoryBytes int64
}

const maxReplicas = 7

// DefaultMemoryBytes is the default of Options.MemoryBytes.
const DefaultMemoryBytes = 256 << 20

var (
	// ErrClosed is returned by operations on a closed Log.
	ErrClosed = errors.New("txlog: closed")
	// ErrOutOfOrder is returned (through the Future) by Append for an entry
	// whose Version is not above the last appended one or whose PrevVersion
	// is not the last appended Version: a programming error of the caller.
	ErrOutOfOrder = errors.New("txlog: entry out of order")
	// ErrPrevVersion is returned (through the Future) when the replicated log
	// rejected an entry because its PrevVersion is not the version of the
	// last committed entry: an earlier append was lost (e.g. across a leader
	// change). The entry is definitely not in the log; call Resync.
	ErrPrevVersion = errors.New("txlog: prev version does not match the log")
	// ErrCommitUnknown wraps raft errors of an append (leadership lost,
	// shutdown): the entry may or may not be committed. Call Resync to learn
	// the log's last version.
	ErrCommitUnknown = errors.New("txlog: commit result unknown")
	// ErrNoLeader is returned when no raft leader appeared within
	// Options.LeaderTimeout; the entry was not submitted (definitely not
	// committed), nor will later appends be until Resync.
	ErrNoLeader = errors.New("txlog: no raft leader")
	// ErrTrimmed is returned by Peek for a version below what the log has
	// already dropped.
	ErrTrimmed = errors.New("txlog: version already popped")
)

// Future is the result of an Append.
type Future struct {
	version kv.Version
	af      raft.ApplyFuture
	stopped <-chan struct{} // closed once the replica af was submitted to is stopped
	done    chan struct{}
	err     error
}

func newFuture(v kv.Version) *Future { return &Future{version: v, done: make(chan struct{})} }

func (f *Future) finish(err error) {
	f.err = err
	close(f.done)
}

// Version is the appended entry's version.
func (f *Future) Version() kv.Version { return f.version }

// Done is closed once the result is known.
func (f *Future) Done() <-chan struct{} { return f.done }

// Err is the result once Done is closed: nil when the entry is committed by
// a raft quorum (fsynced) and applied.
func (f *Future) Err() error {
	select {
	case <-f.done:
		return f.err
	default:
		return nil
	}
}

// Wait waits for the result. A ctx error says nothing about the entry.
func (f *Future) Wait(ctx context.Context) error {
	select {
	case <-f.done:
		return f.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Stats describe the log.
type Stats struct {
	Entries        int                   // unpopped entries held in memory (per replica)
	Bytes          int64                 // their encoded size
	Memory         int64                 // their memory: Bytes plus the per-tag index
	Popped         map[kv.Tag]kv.Version // replicated popped version per tag of the set
	MinPopped      kv.Version            // minimum over Popped
	Trimmed        kv.Version            // entries <= Trimmed are dropped
	LastVersion    kv.Version
	Leader         int // replica index of the raft leader, -1 if none
	Running        int // running replicas
	RaftLastIndex  uint64
	RaftFirstIndex uint64 // first raft log record still on the leader's disk
}

// Log is the replicated log. See the package documentation.
type Log struct {
	opts   Options
	logger *slog.Logger
	hlog   hclog.Logger

	mu         sync.RWMutex // guards reps[i] start/stop
	reps       []*replica
	leaderHint atomic.Int32

	appendMu     sync.Mutex
	lastAppended kv.Version
	unsubmitted  bool // an append found no leader: fail the next ones until Resync
	closing      bool
	pending      chan *Future
	complDone    chan struct{}

	popMu      sync.Mutex
	tags       []kv.Tag
	popPending map[kv.Tag]kv.Version
	popDirty   bool
	flushMu    sync.Mutex

	notifyMu sync.Mutex
	notifyCh chan struct{}

	closeOnce sync.Once
	closed    chan struct{}
	stopPops  chan struct{}
	popsDone  chan struct{}
	closeErr  error
}

// Open opens (or creates) the log in opts.Dir, recovering every replica from
// its snapshot and raft log, bootstrapping a new raft cluster if the
// directory is empty, and waits until a leader has applied everything
// committed so far (LastVersion is then the recovered log's end).
func Open(opts Options) (*Log, error) {
	if opts.Dir == "" {
		return nil, errors.New("txlog: Options.Dir is required")
	}
	if opts.Replicas == 0 {
		opts.Replicas = 1
	}
	if opts.Replicas < 1 || opts.Replicas > maxReplicas {
		return nil, fmt.Errorf("txlog: Options.Replicas = %d, want 1..%d", opts.Replicas, maxReplicas)
	}
	if opts.SnapshotThreshold == 0 {
		opts.SnapshotThreshold = 4096
	}
	if opts.TrailingLogs == 0 {
		opts.TrailingLogs = 1024
	}
	if opts.SnapshotInterval == 0 {
		opts.SnapshotInterval = 5 * time.Second
	}
	if opts.PopInterval == 0 {
		opts.PopInterval = 200 * time.Millisecond
	}
	if opts.LeaderTimeout == 0 {
		opts.LeaderTimeout = 10 * time.Second
	}
	if opts.RaftCacheBytes <= 0 {
		opts.RaftCacheBytes = DefaultRaftCacheBytes
	}
	if opts.MemoryBytes <= 0 {
		opts.MemoryBytes = DefaultMemoryBytes
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	logger = logger.With("component", "txlog")
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, err
	}
	if err := checkMeta(opts.Dir, opts.Replicas); err != nil {
		return nil, err
	}
	l := &Log{
		opts:   opts,
		logger: logger,
		hlog: hclog.FromStandardLogger(slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
			&hclog.LoggerOptions{Name: "raft", Level: hclog.Error}), // elections are routine on one machine
		pending:    make(chan *Future, 8192),
		complDone:  make(chan struct{}),
		popPending: make(map[kv.Tag]kv.Version),
		notifyCh:   make(chan struct{}),
		closed:     make(chan struct{}),
		stopPops:   make(chan struct{}),
		popsDone:   make(chan struct{}),
	}
	l.leaderHint.Store(-1)
	for i := 0; i < opts.Replicas; i++ {
		id := fmt.Sprintf("replica-%d", i)
		l.reps = append(l.reps, &replica{
			index: i,
			id:    raft.ServerID(id),
			addr:  raft.ServerAddress(id),
			dir:   filepath.Join(opts.Dir, id),
		})
	}
	go l.complete()
	fail := func(err error) (*Log, error) {
		l.shutdown()
		return nil, err
	}
	l.mu.Lock()
	for i := range l.reps {
		if err := l.startReplicaLocked(i, true); err != nil {
			l.mu.Unlock()
			return fail(err)
		}
	}
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), opts.LeaderTimeout)
	defer cancel()
	if _, err := l.Resync(ctx); err != nil {
		return fail(err)
	}
	st := l.bestFSM().state()
	l.popMu.Lock()
	for t, v := range st.Popped {
		l.popPending[t] = v
	}
	if opts.Tags != nil {
		l.tags = normTags(opts.Tags)
	} else {
		for t := range st.Popped {
			l.tags = append(l.tags, t)
		}
		l.tags = normTags(l.tags)
	}
	l.popDirty = len(l.tags) != len(st.Popped)
	for _, t := range l.tags {
		if _, ok := st.Popped[t]; !ok {
			l.popDirty = true
		}
	}
	l.popMu.Unlock()
	if err := l.flushPops(opts.LeaderTimeout); err != nil {
		return fail(err)
	}
	go l.popLoop()
	logger.Info("txlog open", "dir", opts.Dir, "replicas", opts.Replicas, "last_version", st.Last,
		"entries", st.Entries, "tags", len(l.tags))
	return l, nil
}

func normTags(tags []kv.Tag) []kv.Tag {
	out := slices.Clone(tags)
	slices.Sort(out)
	return slices.Compact(out)
}

// checkMeta records the replica count of a new log and rejects reopening it
// with another count.
func checkMeta(dir string, replicas int) error {
	path := filepath.Join(dir, "txlog.meta")
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte("replicas="+strconv.Itoa(replicas)+"\n"), 0o644); err != nil {
			return err
		}
		return os.Rename(tmp, path)
	}
	if err != nil {
		return err
	}
	s, ok := strings.CutPrefix(strings.TrimSpace(string(b)), "replicas=")
	n, err := strconv.Atoi(s)
	if !ok || err != nil {
		return fmt.Errorf("txlog: bad %s: %q", path, b)
	}
	if n != replicas {
		return fmt.Errorf("txlog: %s holds a log of %d replicas, opened with %d", dir, n, replicas)
	}
	return nil
}

// complete resolves futures in append order.
func (l *Log) complete() {
	defer close(l.complDone)
	for f := range l.pending {
		err := awaitFuture(f.af, f.stopped)
		if err != nil {
			err = fmt.Errorf("%w: %w", ErrCommitUnknown, err)
		} else if re, ok := f.af.Response().(error); ok && re != nil {
			err = re
		}
		f.finish(err)
	}
}

// awaitFuture waits for a raft future of a replica. Raft never answers
// futures still queued when it shuts down, so once the replica is stopped
// it gives up with raft.ErrRaftShutdown (the waiting goroutine is then
// leaked: at most the few futures that were queued).
func awaitFuture(rf raft.Future, stopped <-chan struct{}) error {
	errc := make(chan error, 1)
	go func() { errc <- rf.Error() }()
	select {
	case err := <-errc:
		return err
	case <-stopped:
		select {
		case err := <-errc:
			return err
		default:
			return raft.ErrRaftShutdown
		}
	}
}

// Append submits e to the raft leader and returns at once (it blocks only
// while no leader is known, or when raft's apply queue is full). It must be
// called by one goroutine, in increasing Version order, with e.PrevVersion
// the previous entry's Version (LastVersion after Open or Resync). e is
// encoded before Append returns and may be reused.
func (l *Log) Append(e *Entry) *Future {
	f := newFuture(e.Version)
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	if l.closing {
		f.finish(ErrClosed)
		return f
	}
	if e.Version <= l.lastAppended || e.PrevVersion != l.lastAppended {
		f.finish(fmt.Errorf("%w: entry %d with prev %d after %d", ErrOutOfOrder, e.Version, e.PrevVersion, l.lastAppended))
		return f
	}
	l.lastAppended = e.Version
	if l.unsubmitted {
		// It would chain onto an entry that is not in the log.
		f.finish(fmt.Errorf("%w: an earlier append was not submitted, Resync first", ErrNoLeader))
		return f
	}
	buf := encodeEntry(e)
	r := l.waitLeader(l.opts.LeaderTimeout)
	if r == nil {
		l.unsubmitted = true
		f.finish(ErrNoLeader)
		return f
	}
	f.af, f.stopped = r.raft.Apply(buf, 0), r.stopped
	l.pending <- f
	return f
}

// Resync waits for a leader to apply every committed entry and makes its
// last version the one the next Append must chain from (PrevVersion). Call
// it from the appending goroutine after an append failed, once no append is
// in flight.
func (l *Log) Resync(ctx context.Context) (kv.Version, error) {
	for {
		r := l.waitLeaderCtx(ctx)
		if r == nil {
			if err := ctx.Err(); err != nil {
				return 0, fmt.Errorf("%w: %w", ErrNoLeader, err)
			}
			return 0, ErrClosed
		}
		timeout := l.opts.LeaderTimeout
		if dl, ok := ctx.Deadline(); ok {
			timeout = time.Until(dl)
		}
		if err := awaitFuture(r.raft.Barrier(timeout), r.stopped); err != nil {
			if ctx.Err() != nil {
				return 0, fmt.Errorf("txlog: resync: %w", err)
			}
			continue // leadership moved: retry
		}
		v := r.fsm.lastVersion()
		l.appendMu.Lock()
		l.lastAppended, l.unsubmitted = v, false
		l.appendMu.Unlock()
		return v, nil
	}
}

// leader returns a running replica that believes it leads, or nil.
func (l *Log) leader() *replicaRef {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if h := l.leaderHint.Load(); h >= 0 {
		if r := l.reps[h]; r.running && r.raft.State() == raft.Leader {
			return r.ref()
		}
	}
	for _, r := range l.reps {
		if r.running && r.raft.State() == raft.Leader {
			l.leaderHint.Store(int32(r.index))
			return r.ref()
		}
	}
	return nil
}

func (l *Log) waitLeader(timeout time.Duration) *replicaRef {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return l.waitLeaderCtx(ctx)
}

func (l *Log) waitLeaderCtx(ctx context.Context) *replicaRef {
	if r := l.leader(); r != nil {
		return r
	}
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-l.closed:
			return nil
		case <-t.C:
		}
		if r := l.leader(); r != nil {
			return r
		}
	}
}

// bestFSM returns the state machine of the running replica that has applied
// the most (the leader on ties), or nil.
func (l *Log) bestFSM() *fsm {
	l.mu.RLock()
	defer l.mu.RUnlock()
	var best *fsm
	for _, r := range l.reps {
		if !r.running {
			continue
		}
		if best == nil || r.fsm.lastVersion() > best.lastVersion() ||
			(r.fsm.lastVersion() == best.lastVersion() && r.raft.State() == raft.Leader) {
			best = r.fsm
		}
	}
	return best
}

func (l *Log) waitCh() <-chan struct{} {
	l.notifyMu.Lock()
	defer l.notifyMu.Unlock()
	return l.notifyCh
}

// notify wakes every waiting Peek (called after each applied batch).
func (l *Log) notify() {
	l.notifyMu.Lock()
	close(l.notifyCh)
	l.notifyCh = make(chan struct{})
	l.notifyMu.Unlock()
}

// Peek blocks until the log's committed end version is above after (or ctx
// is done), then returns tag's messages with versions in (after, end] and
// end, the version up to which the caller now has everything of its tag
// (even with no messages). With maxBytes > 0 it stops early after about
// maxBytes (at least one message); end is then the last message's version.
// The returned mutations share memory with the log: do not modify them.
func (l *Log) Peek(ctx context.Context, tag kv.Tag, after kv.Version, maxBytes int) ([]Message, kv.Version, error) {
	for {
		ch := l.waitCh()
		select {
		case <-l.closed:
			return nil, after, ErrClosed
		default:
		}
		if f := l.bestFSM(); f != nil && f.lastVersion() > after {
			return f.peek(tag, after, maxBytes)
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, after, ctx.Err()
		case <-l.closed:
			return nil, after, ErrClosed
		}
	}
}

// Pop records that tag's stash made everything <= upTo durable. Pops are
// batched and replicated every PopInterval; once every tag of the set has
// popped past an entry, every replica drops it.
func (l *Log) Pop(tag kv.Tag, upTo kv.Version) {
	l.popMu.Lock()
	defer l.popMu.Unlock()
	if upTo > l.popPending[tag] {
		l.popPending[tag] = upTo
		l.popDirty = true
	}
}

// Popped returns the highest version popped for tag (replicated or not yet).
func (l *Log) Popped(tag kv.Tag) kv.Version {
	l.popMu.Lock()
	defer l.popMu.Unlock()
	return l.popPending[tag]
}

// SetTags replaces the set of tags that must pop before an entry is dropped
// (replicated with the next pop flush). A new tag starts at its last popped
// version (0 if never popped), holding back trimming until it pops.
func (l *Log) SetTags(tags []kv.Tag) {
	l.popMu.Lock()
	defer l.popMu.Unlock()
	l.tags = normTags(tags)
	l.popDirty = true
}

// Tags returns the current tag set.
func (l *Log) Tags() []kv.Tag {
	l.popMu.Lock()
	defer l.popMu.Unlock()
	return slices.Clone(l.tags)
}

// SyncPops replicates pending pops and tag changes now.
func (l *Log) SyncPops(ctx context.Context) error {
	select {
	case <-l.closed:
		return ErrClosed
	default:
	}
	done := make(chan error, 1)
	go func() { done <- l.flushPops(l.opts.LeaderTimeout) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l *Log) flushPops(timeout time.Duration) error {
	l.flushMu.Lock()
	defer l.flushMu.Unlock()
	l.popMu.Lock()
	if !l.popDirty {
		l.popMu.Unlock()
		return nil
	}
	pops := make([]TagVersion, 0, len(l.tags))
	for _, t := range l.tags {
		pops = append(pops, TagVersion{Tag: t, Version: l.popPending[t]})
	}
	l.popDirty = false
	l.popMu.Unlock()
	err := func() error {
		r := l.waitLeader(timeout)
		if r == nil {
			return ErrNoLeader
		}
		af := r.raft.Apply(encodePop(pops), timeout)
		if err := awaitFuture(af, r.stopped); err != nil {
			return err
		}
		if re, ok := af.Response().(error); ok && re != nil {
			return re
		}
		return nil
	}()
	if err != nil {
		l.popMu.Lock()
		l.popDirty = true
		l.popMu.Unlock()
		return fmt.Errorf("txlog: replicate pops: %w", err)
	}
	return nil
}

func (l *Log) popLoop() {
	defer close(l.popsDone)
	t := time.NewTicker(l.opts.PopInterval)
	defer t.Stop()
	for {
		select {
		case <-l.stopPops:
			return
		case <-t.C:
			if err := l.flushPops(l.opts.LeaderTimeout); err != nil {
				l.logger.Warn("txlog: pop flush failed", "err", err)
			}
		}
	}
}

// OverMemoryBudget reports whether the most advanced running replica holds
// more than Options.MemoryBytes of entries not popped by every tag. The log
// can only drop what every tag popped, and stashes pop what they flushed,
// so when it is over budget stashes should flush everything they applied.
func (l *Log) OverMemoryBudget() bool {
	f := l.bestFSM()
	if f == nil {
		return false
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.mem > l.opts.MemoryBytes
}

// LastVersion is the version of the last committed entry applied by the
// most advanced running replica.
func (l *Log) LastVersion() kv.Version {
	if f := l.bestFSM(); f != nil {
		return f.lastVersion()
	}
	return 0
}

// Stats describes the most advanced running replica and the leader.
func (l *Log) Stats() Stats {
	s := Stats{Leader: -1}
	if f := l.bestFSM(); f != nil {
		st := f.state()
		s.Entries, s.Bytes, s.Memory, s.Popped, s.MinPopped, s.Trimmed, s.LastVersion = st.Entries, st.Bytes, st.Memory, st.Popped, st.MinPopped, st.Trimmed, st.Last
	}
	l.mu.RLock()
	for _, r := range l.reps {
		if r.running {
			s.Running++
		}
	}
	l.mu.RUnlock()
	if r := l.leader(); r != nil {
		s.Leader = r.index
		s.RaftLastIndex = r.raft.LastIndex()
		s.RaftFirstIndex, _ = r.logs.FirstIndex()
	}
	return s
}

// Snapshot asks every running replica to take a raft snapshot now (and
// compact its raft log down to TrailingLogs records). Meant for tests and
// operators; raft also snapshots on its own.
func (l *Log) Snapshot() error {
	l.mu.RLock()
	defer l.mu.RUnlock()
	var errs []error
	for _, r := range l.reps {
		if !r.running {
			continue
		}
		if err := r.raft.Snapshot().Error(); err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) {
			errs = append(errs, fmt.Errorf("replica %d: %w", r.index, err))
		}
	}
	return errors.Join(errs...)
}

// Close replicates pending pops, waits briefly for in-flight appends, and
// shuts every replica down. Appends and peeks after Close fail with
// ErrClosed.
func (l *Log) Close() error {
	l.closeOnce.Do(func() {
		close(l.stopPops)
		<-l.popsDone
		if err := l.flushPops(min(l.opts.LeaderTimeout, 2*time.Second)); err != nil {
			l.logger.Warn("txlog: final pop flush failed", "err", err)
		}
		l.closeErr = l.shutdown()
	})
	return l.closeErr
}

// shutdown stops appends, peeks and every replica.
func (l *Log) shutdown() error {
	l.appendMu.Lock()
	if !l.closing {
		l.closing = true
		close(l.pending)
	}
	l.appendMu.Unlock()
	select {
	case <-l.complDone:
	case <-time.After(5 * time.Second):
	}
	close(l.closed)
	var errs []error
	l.mu.Lock()
	// Initiate every shutdown first, so no replica spends its last moments
	// trying to reach peers already gone.
	sfs := make([]raft.Future, len(l.reps))
	for _, r := range l.reps {
		if r.running {
			sfs[r.index] = r.raft.Shutdown()
		}
	}
	for _, r := range l.reps {
		if r.running {
			errs = append(errs, l.stopReplicaLocked(r.index, sfs[r.index]))
		}
	}
	l.mu.Unlock()
	<-l.complDone
	return errors.Join(errs...)
}
