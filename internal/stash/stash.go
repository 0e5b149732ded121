// Package stash is the storage server of one stash instance.
//
// A stash pulls the mutations of its own tag from the log, applies them in
// version order to an in-memory MVCC window, and serves reads at any version
// inside that window. Versions that fall out of the window (older than the
// newest by the MVCC window, or earlier when the window outgrows its memory
// budget) are flushed to the stash's storage engine, and the log is told it
// may drop them (pop).
//
// Invariants:
//  1. The engine holds the state as of durable; the window holds every
//     mutation with version in (durable, applied].
//  2. A read at version v is served only if minReadable <= v <= applied; the
//     answer is the newest window entry at or below v, else the engine's
//     value. minReadable is raised before a flush touches the engine, and a
//     reader pins it for the length of its read, so the engine never shows
//     a reader a version newer than it asked for.
//  3. Atomic operations are resolved at apply time, against the latest value.
//  4. A volatile (dram) stash restarts empty at the log's end; a durable one,
//     or a dram one with a local log, restarts at its engine's version and
//     catches up from the log.
package stash

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distash/distash/internal/clock"
	"github.com/distash/distash/internal/engine"
	"github.com/distash/distash/internal/fsys"
	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/loadsample"
	"github.com/distash/distash/internal/logentry"
	"github.com/distash/distash/internal/shardmap"
)

// Log is the part of the transaction log a stash uses.
type Log interface {
	Peek(ctx context.Context, tag kv.Tag, after kv.Version, maxBytes int) ([]logentry.Message, kv.Version, error)
	Pop(tag kv.Tag, upTo kv.Version)
}

// memoryBudgeted is implemented by a log that bounds the memory of the
// entries it holds until every tag popped them (txlog.Log). While it is over
// its budget, a durable stash flushes everything it applied, ignoring its
// MVCC window, so that it can pop it; a volatile one pops what it applied
// anyway.
type memoryBudgeted interface {
	OverMemoryBudget() bool
}

// Options configure a stash.
type Options struct {
	Tag    kv.Tag
	Pool   string
	Index  int // index of the stash within its pool
	Engine engine.Engine
	Log    Log
	// Volatile stashes lose their data on restart: they start at StartVersion
	// with an empty engine and pop as they apply.
	Volatile     bool
	StartVersion kv.Version
	// LocalLog: the engine keeps what it applied across a restart (a dram
	// stash with a local log, package engine/locallog). The stash then
	// pops its tag only up to its engine's version and keeps its
	// ownership in Dir, as a durable stash does, so that a restart
	// reloads the engine and catches up from the log; with Volatile it
	// still starts at StartVersion when its engine is behind it (a local
	// log that was empty or could not be used).
	LocalLog bool
	// Ephemeral pools count hits and misses.
	Ephemeral bool
	// TrackBytes keeps an exact count of live key+value bytes (durable pools:
	// the commit proxy checks capacity against it).
	TrackBytes    bool
	CapacityBytes int64
	// TrackRecency keeps the stash's keys in access order for Coldest, when
	// its engine keeps none (durable pools with recency = true).
	TrackRecency bool
	// WindowVersions is the MVCC window (5 s = 5e6 versions).
	WindowVersions kv.Version
	// WindowBytes bounds the window's memory (its structures included, see
	// window.bytes); older versions are flushed early once the window
	// holds half of it (reads of them then get transaction_too_old), and
	// past all of it the stash applies nothing more until they are.
	// Default DefaultWindowBytes.
	WindowBytes int64
	// FlushInterval is how often versions leaving the window are flushed.
	FlushInterval time.Duration
	// ReportUsage, if set, receives the stash's live bytes (TrackBytes) and
	// applied version when it starts and after each batch it applies: the
	// commit proxy checks durable pools' capacity against these reports.
	ReportUsage func(tag kv.Tag, usedBytes int64, applied kv.Version)
	// FutureWait is how long a read at a version the stash has not reached waits.
	FutureWait time.Duration
	Logger     *slog.Logger
	// Dir is where a durable stash keeps its ownership across restarts
	// (see ownership.go); "" keeps it in memory only.
	Dir string
	// FS is the file system of Dir (nil: the operating system's).
	FS fsys.FS
	// AdoptOwnership lets a durable stash whose engine holds data open
	// without an ownership file, writing one: Dir was written by a
	// version that kept the file only once a stash had moved a shard.
	// Otherwise a missing file there is damage (the stash cannot tell
	// what it owns).
	AdoptOwnership bool
	// OnDiskFull, if set, is called once each time the stash finds its
	// disk full (see faults.go).
	OnDiskFull func(err error)
	// Fetcher copies the ranges this stash becomes a destination of from
	// their source replicas (data distribution); nil: it cannot fetch.
	Fetcher Fetcher
	// SampleUnit is the byte sample's unit (loadsample.ByteSample); 0: default.
	SampleUnit int64
	// Clock times the stash's loops, retries and read waits (nil: the
	// real clock).
	Clock clock.Clock
}

// DefaultWindowBytes is the default of Options.WindowBytes.
const DefaultWindowBytes = 64 << 20

// Stash is one storage server. Create it with New, then Run it.
type Stash struct {
	opts  Options
	eng   engine.Engine
	clock clock.Clock

	// pin is held shared by every read for its whole duration and exclusively
	// by a flush while it raises minReadable (invariant 2).
	pin sync.RWMutex
	mu  sync.RWMutex
	win *window // Protected by mu.
	// applied is the newest version applied to the window. Protected by mu.
	applied kv.Version
	// minReadable is the oldest version reads may ask for. Protected by mu.
	minReadable kv.Version
	// durable is the engine's version. Protected by mu.
	durable kv.Version
	// liveBytes and liveKeys count live pairs when TrackBytes. Protected by mu.
	liveBytes, liveKeys int64
	// appliedCh is closed and replaced whenever applied advances. Protected by mu.
	appliedCh chan struct{}

	hits, misses, reads atomic.Int64
	// flushMu serializes flushes: the flush loop's, by age, and the pull
	// loop's, when the window is over its budget.
	flushMu sync.Mutex

	// failure is set, once, when Run stops on an error: from then on reads
	// fail fast with stash_unavailable, so clients use another replica
	// instead of waiting for versions this stash will never apply.
	failure    atomic.Pointer[error]
	failedC    chan struct{} // closed when failure is set
	failedOnce sync.Once

	closeOnce sync.Once
	closeErr  error
	closed    atomic.Bool // set under pin held exclusively

	// rec is the access order of keys when TrackRecency (nil otherwise).
	rec *recency

	// own is what the stash serves and fetches; snaps its persisted
	// snapshots; jobs the fetches in progress by range id; cleanups the
	// ranges of aborted fetches to clear. Protected by mu.
	own      ownership
	snaps    []ownSnapshot
	jobs     map[uint64]*fetchJob
	cleanups []kv.KeyRange
	// undurable are ranges a fetch finished at a version the engine has
	// not made durable yet: a restart before it would copy them again, so
	// the data distributor hears "copied" until then, not "serving" (and
	// keeps the sources, which the copy may need). Durable stashes only.
	undurable []finishedFetch
	// sample estimates the bytes of key ranges (shard sizes, split keys).
	// Protected by mu.
	sample *loadsample.ByteSample
	// writes estimates recent write rates (shards written fast split);
	// applyNow is the time of the batch being applied, one clock read per
	// batch rather than per mutation. Protected by mu.
	writes    *loadsample.WriteRate
	applyNow  time.Time
	fetchWake chan struct{}
	// dropped counts mutations for keys the stash does not hold (should
	// stay 0); movedIn counts ranges fetched.
	dropped, movedIn atomic.Int64

	// disk is the disk-full state (faults.go).
	disk diskState
	// ownUnsaved: snaps changed but could not be written (a full disk);
	// the next flush writes them before it makes any version durable.
	// Protected by mu.
	ownUnsaved bool
	// filesChecked is when checkFiles last ran (flush loop only).
	filesChecked time.Time

	// engEpoch counts engine writes other than flushes (twice each: odd
	// while one runs); pre are the old values apply prefetched, set while
	// it holds mu (prefetch.go). pre is protected by mu.
	engEpoch atomic.Uint64
	pre      *prefetched
}

// New returns a stash over an opened engine.
func New(opts Options) *Stash {
	if opts.WindowVersions <= 0 {
		opts.WindowVersions = 5 * kv.VersionsPerSecond
	}
	if opts.WindowBytes <= 0 {
		opts.WindowBytes = DefaultWindowBytes
	}
	if opts.FlushInterval <= 0 {
		opts.FlushInterval = 100 * time.Millisecond
	}
	if opts.FutureWait <= 0 {
		opts.FutureWait = time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &Stash{opts: opts, eng: opts.Engine, clock: clock.Or(opts.Clock), win: newWindow(), appliedCh: make(chan struct{}), failedC: make(chan struct{}),
		jobs: map[uint64]*fetchJob{}, sample: loadsample.NewByteSample(opts.SampleUnit),
		writes: loadsample.NewWriteRate(opts.SampleUnit, 0), fetchWake: make(chan struct{}, 1)}
	v := opts.Engine.Version()
	if opts.Volatile && opts.StartVersion > v {
		v = opts.StartVersion
	}
	s.applied, s.durable, s.minReadable = v, v, v
	st := opts.Engine.Stats()
	s.liveBytes, s.liveKeys = st.Bytes, st.Keys
	_, ordered := opts.Engine.(engine.RecencyOrdered)
	if opts.TrackRecency && !ordered {
		s.rec = newRecency()
	}
	// Every key the engine holds starts cold, in key order, and in the
	// byte sample.
	opts.Engine.Scan(nil, nil, false, func(k, val []byte) bool {
		if s.rec != nil {
			s.rec.addCold(k)
		}
		s.sample.Set(k, int64(len(k)+len(val)))
		return true
	})
	if opts.Dir != "" && s.keepsData() {
		s.openOwnership(st.Keys)
	}
	return s
}

// keepsData reports whether the engine's version is a state the stash
// restarts from (a durable stash, or a dram one with a local log): it pops
// only what its engine holds and keeps its ownership in Dir. Otherwise it
// pops what it applied.
func (s *Stash) keepsData() bool { return !s.opts.Volatile || s.opts.LocalLog }

// openOwnership loads the ownership of a durable stash from its
// directory. A stash that cannot tell what it owns must not serve: a
// damaged file, or none while the engine holds data (unless
// AdoptOwnership), fails it. A new stash writes an empty file at once, so
// that from then on a missing file means damage.
func (s *Stash) openOwnership(engineKeys int64) {
	snaps, at, exists, found, err := loadOwnership(s.fs(), s.opts.Dir, s.durable)
	if err != nil {
		s.fail(err)
		return
	}
	if !exists {
		// The engine's own version: a dram stash with a local log that
		// starts empty starts above it (at StartVersion) with nothing.
		if (s.eng.Version() > 0 || engineKeys > 0) && !s.opts.AdoptOwnership {
			s.fail(fsys.Damaged(filepath.Join(s.opts.Dir, ownershipFile),
				"missing, but the stash's engine holds data (version %d, %d keys): the stash cannot tell what it owns", s.durable, engineKeys))
			return
		}
		if err := writeOwnership(s.fs(), s.opts.Dir, nil); err != nil {
			s.fail(err)
			return
		}
	}
	if !found {
		return
	}
	s.snaps = snaps
	s.own.set = true
	for _, r := range at.Ranges {
		if r.State == fetching {
			r.id = s.own.newID()
			s.jobs[r.id] = &fetchJob{id: r.id}
		}
		s.own.cur = append(s.own.cur, r)
	}
}

// Tag is the stash's tag.
func (s *Stash) Tag() kv.Tag { return s.opts.Tag }

// Dir is the stash's directory (Options.Dir; "" for none).
func (s *Stash) Dir() string { return s.opts.Dir }

// SetOwned sets the key ranges a stash serves from its first version when
// it has no ownership of its own yet: a new stash of the cluster's first
// shard map, or a stash made before ownership was kept. Once the stash
// has ownership (loaded, set, or changed by an assignment) it is ignored:
// the log's assignments change it from then on.
func (s *Stash) SetOwned(ranges []kv.KeyRange) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.own.set {
		return
	}
	s.own.set = true
	s.own.cur = nil
	for _, r := range ranges {
		s.own.cur = append(s.own.cur, ownRange{Begin: r.Begin, End: r.End, State: serving})
	}
	sort.Slice(s.own.cur, func(i, j int) bool { return bytes.Compare(s.own.cur[i].Begin, s.own.cur[j].Begin) < 0 })
	s.own.cur = coalesce(s.own.cur)
	// A durable stash keeps them: a restart then finds what it owned at
	// its engine's version in its file, like any other ownership.
	if s.Failed() == nil {
		if err := s.saveOwnership(s.durable); err != nil {
			s.opts.Logger.Error("stash: save ownership", "tag", s.opts.Tag, "err", err)
			s.fail(err)
		}
	}
}

// readable reports whether [begin, end) may be read at v. Called with pin held.
func (s *Stash) readable(begin, end []byte, v kv.Version) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.own.readable(begin, end, v)
}

// Run pulls from the log and flushes until ctx is done or one of them
// fails. It returns only once both have stopped, so the engine may be
// closed after it. After an error the stash is failed (Failed reports it)
// and its reads fail fast.
func (s *Stash) Run(ctx context.Context) error {
	if err := s.Failed(); err != nil {
		return err // failed as it opened (NewFailed, or its ownership)
	}
	if !s.keepsData() {
		s.opts.Log.Pop(s.opts.Tag, s.AppliedVersion())
	}
	s.reportUsage()
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	errc := make(chan error, 3)
	go func() { errc <- s.pullLoop(runCtx) }()
	go func() { errc <- s.flushLoop(runCtx) }()
	go func() { errc <- s.fetchLoop(runCtx) }()
	var err error
	select {
	case err = <-errc:
		stop()
		for range 2 {
			if err2 := <-errc; err == nil {
				err = err2
			}
		}
	case <-s.failedC: // a read found the engine broken
		stop()
		for range 3 {
			<-errc
		}
	}
	if err != nil {
		s.fail(err)
	}
	return s.Failed()
}

// fail marks the stash failed with err, once.
func (s *Stash) fail(err error) {
	s.failedOnce.Do(func() {
		s.failure.Store(&err)
		close(s.failedC)
	})
}

// reportUsage pushes the live bytes and applied version to
// Options.ReportUsage.
func (s *Stash) reportUsage() {
	if s.opts.ReportUsage == nil {
		return
	}
	s.mu.RLock()
	used, applied := s.liveBytes, s.applied
	s.mu.RUnlock()
	s.opts.ReportUsage(s.opts.Tag, used, applied)
}

// Failed returns the error that stopped the stash, nil while it runs.
func (s *Stash) Failed() error {
	if p := s.failure.Load(); p != nil {
		return *p
	}
	return nil
}

// failedCh is closed when the stash fails.
func (s *Stash) failedCh() <-chan struct{} { return s.failedC }

// engineReadFailed fails the stash after its engine failed a read: an
// engine that cannot read what it acknowledged is broken, and the stash
// is restarted or replaced rather than serving errors or wrong data.
func (s *Stash) engineReadFailed(err error) error {
	s.opts.Logger.Error("stash engine read failed", "tag", s.opts.Tag, "pool", s.opts.Pool, "err", err)
	s.fail(err)
	return s.unavailable()
}

// unavailable is the error reads of a failed stash get.
func (s *Stash) unavailable() error {
	if err := s.Failed(); err != nil {
		return kv.Errorf(kv.CodeStashUnavailable, "stash %d (pool %q, #%d) has failed: %v", s.opts.Tag, s.opts.Pool, s.opts.Index, err)
	}
	return nil
}

func (s *Stash) pullLoop(ctx context.Context) error {
	for {
		after := s.AppliedVersion()
		msgs, end, err := s.opts.Log.Peek(ctx, s.opts.Tag, after, 4<<20)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, logentry.ErrTrimmed) {
				// The log no longer holds versions this stash has not
				// applied: it cannot catch up. A dram stash restarts empty
				// at the log's end; a durable one has lost writes.
				return fmt.Errorf("stash %d (pool %q) is at version %d but the log dropped the versions after it (the stash was away longer than the log holds a tag's entries): %w",
					s.opts.Tag, s.opts.Pool, after, err)
			}
			s.opts.Logger.Warn("stash peek failed", "tag", s.opts.Tag, "err", err)
			select {
			case <-ctx.Done():
				return nil
			case <-s.clock.After(50 * time.Millisecond):
			}
			continue
		}
		over, err := s.apply(msgs, end)
		if err != nil {
			s.opts.Logger.Error("stash apply failed", "tag", s.opts.Tag, "pool", s.opts.Pool, "err", err)
			return err
		}
		s.reportUsage()
		if over {
			// Apply no faster than the engine absorbs: flush before pulling
			// more, so the window stays within its budget plus one Peek
			// (or one version, which cannot be split) when the log outruns
			// the engine, instead of growing until the process runs out of
			// memory.
			if err := s.flushOrWait(ctx); err != nil {
				s.opts.Logger.Error("stash flush failed", "tag", s.opts.Tag, "pool", s.opts.Pool, "err", err)
				return err
			}
		}
	}
}

// flushOrWait flushes; while the disk is full it waits for room (reads
// of what the stash applied are still served), until ctx ends.
func (s *Stash) flushOrWait(ctx context.Context) error {
	for {
		err := s.flush()
		if !isDiskFull(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-s.clock.After(s.opts.FlushInterval):
		}
	}
}

// apply adds messages to the window and advances applied to end. over
// reports that the window is past its budget.
func (s *Stash) apply(msgs []logentry.Message, end kv.Version) (over bool, err error) {
	pre := s.prefetchOld(msgs)
	s.mu.Lock()
	s.pre = pre
	s.applyNow = s.clock.Now()
	for _, m := range msgs {
		if m.Version <= s.applied {
			continue // already durable in the engine (restart) or applied
		}
		for _, mut := range m.Mutations {
			if err := s.route(m.Version, mut); err != nil {
				s.pre = nil
				s.mu.Unlock()
				return false, err
			}
		}
	}
	if end > s.applied {
		s.applied = end
		close(s.appliedCh)
		s.appliedCh = make(chan struct{})
	}
	over = s.win.bytes > s.opts.WindowBytes
	s.pre = nil
	s.mu.Unlock()
	return over, nil
}

// maxVersion is above every version: reads at it see the newest state,
// including mutations of the batch being applied.
const maxVersion = kv.Version(1<<63 - 1)

// current returns the newest value of key: window first, then engine.
// Called with mu held.
func (s *Stash) current(key []byte) ([]byte, bool, error) {
	if v, present, found := s.win.at(key, maxVersion); found {
		return v, present, nil
	}
	if o, ok := s.prefetchedOld(key); ok {
		return o.value, o.present, nil
	}
	// Accounting and atomic operations read the old value: not a client's
	// reference, so no side effects in the engine.
	return engine.Peek(s.eng, key)
}

// route applies mutation m of version v as the stash's ownership says:
// assignments change the ownership, writes of served ranges go to the
// window, writes of ranges being fetched to the fetch's buffer, others
// are dropped. Called with mu held.
func (s *Stash) route(v kv.Version, m kv.Mutation) error {
	if shardmap.IsAssign(m.Key) {
		return s.applyAssign(v, m)
	}
	if !s.own.set {
		return s.applyMutation(v, m)
	}
	if m.Type == kv.MutClearRange {
		for _, r := range s.own.cur {
			if bytes.Compare(r.End, m.Key) <= 0 || bytes.Compare(r.Begin, m.Param) >= 0 {
				continue
			}
			piece := m
			if bytes.Compare(piece.Key, r.Begin) < 0 {
				piece.Key = r.Begin
			}
			if bytes.Compare(piece.Param, r.End) > 0 {
				piece.Param = r.End
			}
			if err := s.routeTo(r, v, piece); err != nil {
				return err
			}
		}
		return nil
	}
	i := s.own.lookup(m.Key)
	if i < 0 {
		// The commit proxy tags a key to the stashes that hold it at
		// that version, so this should not happen: say so once.
		if s.dropped.Add(1) == 1 {
			s.opts.Logger.Warn("stash got a write for a key it does not hold; dropped", "tag", s.opts.Tag, "key", m.Key, "version", v)
		}
		return nil
	}
	return s.routeTo(s.own.cur[i], v, m)
}

func (s *Stash) routeTo(r ownRange, v kv.Version, m kv.Mutation) error {
	if r.State == serving {
		return s.applyMutation(v, m)
	}
	if j := s.jobs[r.id]; j != nil {
		m.Key, m.Param = slices.Clone(m.Key), slices.Clone(m.Param)
		j.buffer = append(j.buffer, bufferedMutation{version: v, m: m})
	}
	return nil
}

func (s *Stash) applyMutation(v kv.Version, m kv.Mutation) error {
	switch m.Type {
	case kv.MutSet:
		if err := s.account(m.Key, int64(len(m.Param)), true); err != nil {
			return err
		}
		s.win.put(v, m.Key, m.Param, true, m.Cost)
		s.sample.Set(m.Key, int64(len(m.Key)+len(m.Param)))
		s.writes.Add(s.applyNow, m.Key, int64(len(m.Key)+len(m.Param)))
		if s.rec != nil {
			s.rec.touch(m.Key)
		}
	case kv.MutClear:
		if err := s.account(m.Key, 0, false); err != nil {
			return err
		}
		s.win.put(v, m.Key, nil, false, 0)
		s.sample.Clear(m.Key)
		if s.rec != nil {
			s.rec.remove(m.Key)
		}
	case kv.MutClearRange:
		if s.opts.TrackBytes {
			if err := s.accountRange(m.Key, m.Param); err != nil {
				return err
			}
		}
		s.win.clearRange(v, m.Key, m.Param)
		s.sample.ClearRange(m.Key, m.Param)
		if s.rec != nil {
			s.rec.removeRange(m.Key, m.Param)
		}
	case kv.MutAdd, kv.MutMax, kv.MutMin:
		old, present, err := s.current(m.Key)
		if err != nil {
			return err
		}
		nv := kv.ApplyAtomic(m.Type, old, present, m.Param)
		if err := s.account(m.Key, int64(len(nv)), true); err != nil {
			return err
		}
		s.win.put(v, m.Key, nv, true, m.Cost)
		s.sample.Set(m.Key, int64(len(m.Key)+len(nv)))
		s.writes.Add(s.applyNow, m.Key, int64(len(m.Key)+len(nv)))
		if s.rec != nil {
			s.rec.touch(m.Key)
		}
	}
	return nil
}

// account updates the live byte count for a write of key. Called with mu held.
func (s *Stash) account(key []byte, newValueLen int64, present bool) error {
	if !s.opts.TrackBytes {
		return nil
	}
	old, wasPresent, err := s.current(key)
	if err != nil {
		return err
	}
	if wasPresent {
		s.liveBytes -= int64(len(key) + len(old))
		s.liveKeys--
	}
	if present {
		s.liveBytes += int64(len(key)) + newValueLen
		s.liveKeys++
	}
	return nil
}

func (s *Stash) accountRange(begin, end []byte) error {
	// Every live key in the range at the latest version goes away.
	kvs, _, err := s.scanLocked(begin, end, maxVersion, 0, 0, false)
	if err != nil {
		return err
	}
	for _, p := range kvs {
		s.liveBytes -= int64(len(p.Key) + len(p.Value))
		s.liveKeys--
	}
	return nil
}

func (s *Stash) flushLoop(ctx context.Context) error {
	t := s.clock.NewTicker(s.opts.FlushInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		}
		err := s.flush()
		if err == nil && s.clock.Since(s.filesChecked) >= time.Second {
			// Noticed even while nothing is written.
			s.filesChecked = s.clock.Now()
			err = s.checkFiles()
		}
		if isDiskFull(err) {
			continue // retried on a later tick (flushTo paces it)
		}
		if err != nil {
			s.opts.Logger.Error("stash flush failed", "tag", s.opts.Tag, "pool", s.opts.Pool, "err", err)
			return err
		}
	}
}

// flush moves versions that left the window (by age or by memory, its own
// or the log's) into the engine.
func (s *Stash) flush() error { return s.flushTo(0) }

// flushTo is flush that also moves every version up to min (capped at the
// applied version) into the engine.
func (s *Stash) flushTo(min kv.Version) error {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	if err := s.diskFullWait(); err != nil {
		return err // the disk is full: retried every diskFullRetry
	}
	if err := s.writeUnsavedOwnership(); err != nil {
		return err
	}
	logOver := false
	if b, ok := s.opts.Log.(memoryBudgeted); ok && s.keepsData() {
		logOver = b.OverMemoryBudget()
	}
	s.mu.RLock()
	target := s.applied - s.opts.WindowVersions
	if logOver {
		target = s.applied
	}
	if s.win.bytes > s.opts.WindowBytes/2 {
		// Past half its budget the window flushes its oldest versions
		// early, keeping fewer seconds of versions while writes are fast
		// (reads older than that get transaction_too_old), and stays clear
		// of the ratekeeper's pressure point (3/4 of the budget). That
		// point then means what it says, that the engine does not keep
		// up: a window full only because writes are fast throttled every
		// transaction (a DRAM pool's YCSB workload A stalled for seconds
		// at about 5,500 record updates/s).
		if t := s.win.targetForBytes(s.opts.WindowBytes * 2 / 5); t > target {
			target = t
		}
	}
	if min > target {
		target = min
	}
	if target > s.applied {
		target = s.applied
	}
	durable := s.durable
	applied := s.applied
	s.mu.RUnlock()
	if target <= durable {
		if !s.keepsData() {
			s.opts.Log.Pop(s.opts.Tag, applied)
		}
		if _, cause, full := s.DiskFull(); full {
			// Nothing to write to tell whether there is room again.
			if s.probeRoom() {
				s.diskRoomAgain()
			} else {
				return s.noteDiskFull(cause)
			}
		}
		return nil
	}
	if err := s.checkFiles(); err != nil {
		return err
	}
	// Raise minReadable first, waiting out readers of older versions.
	s.pin.Lock()
	s.mu.Lock()
	s.minReadable = target
	s.own.forget(target)
	p := s.win.plan(target)
	s.mu.Unlock()
	s.pin.Unlock()

	b := &engine.Batch{Version: target}
	for _, rc := range p.rangeClears {
		b.Writes = append(b.Writes, engine.Write{Key: rc.begin, End: rc.end})
	}
	for i, wk := range p.keys {
		h := p.latest[i]
		if h.present {
			b.Writes = append(b.Writes, engine.Write{Key: wk.key, Value: h.value, Cost: h.cost})
		} else {
			b.Writes = append(b.Writes, engine.Write{Key: wk.key})
		}
	}
	if err := s.eng.Apply(b); err != nil {
		return s.writeFailed(err)
	}
	s.diskRoomAgain()
	s.mu.Lock()
	s.durable = target
	s.win.drop(target)
	kept := s.undurable[:0]
	for _, f := range s.undurable {
		if f.at > target {
			kept = append(kept, f)
		}
	}
	s.undurable = kept
	s.mu.Unlock()
	if !s.keepsData() {
		s.opts.Log.Pop(s.opts.Tag, applied)
	} else {
		s.opts.Log.Pop(s.opts.Tag, target)
	}
	return nil
}

// waitFor waits until applied >= v, and checks v is still readable. It
// returns with pin held shared; the caller releases it.
func (s *Stash) waitFor(ctx context.Context, v kv.Version) error {
	// The timer is made only once the stash must wait: most reads find
	// their version applied, and a timer per read is a cost of its own.
	var deadline clock.Timer
	defer func() {
		if deadline != nil {
			deadline.Stop()
		}
	}()
	for {
		if err := s.unavailable(); err != nil {
			return err
		}
		s.pin.RLock()
		s.mu.RLock()
		applied, minReadable, ch := s.applied, s.minReadable, s.appliedCh
		s.mu.RUnlock()
		if v < minReadable {
			s.pin.RUnlock()
			return kv.Errorf(kv.CodeTransactionTooOld, "read version %d is older than stash %d keeps (%d)", v, s.opts.Tag, minReadable)
		}
		if v <= applied {
			return nil
		}
		s.pin.RUnlock()
		if _, cause, full := s.DiskFull(); full {
			// It applies nothing more until there is room: another
			// replica serves the read now rather than after FutureWait.
			return kv.Errorf(kv.CodeStashUnavailable, "stash %d's disk is full: it has applied versions up to %d, not %d, and applies no more until there is room (%v)",
				s.opts.Tag, applied, v, cause)
		}
		if deadline == nil {
			deadline = s.clock.NewTimer(s.opts.FutureWait)
		}
		select {
		case <-ch:
		case <-s.failedCh():
		case <-deadline.C():
			return kv.Errorf(kv.CodeFutureVersion, "stash %d has reached version %d, not %d", s.opts.Tag, applied, v)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Get reads keys at version v.
func (s *Stash) Get(ctx context.Context, v kv.Version, keys [][]byte) ([][]byte, []bool, error) {
	if err := s.waitFor(ctx, v); err != nil {
		return nil, nil, err
	}
	defer s.pin.RUnlock()
	// One read lock for the ownership check and the window: every key is
	// checked before any is read.
	s.mu.RLock()
	for _, k := range keys {
		if !s.own.readableKey(k, v) {
			s.mu.RUnlock()
			return nil, nil, kv.Errorf(kv.CodeWrongShardServer, "stash %d does not hold key %q at version %d", s.opts.Tag, k, v)
		}
	}
	values := make([][]byte, len(keys))
	present := make([]bool, len(keys))
	var fromEngine []int // keys the window does not hold at v
	for i, k := range keys {
		val, ok, found := s.win.at(k, v)
		if found {
			values[i], present[i] = val, ok
		} else {
			fromEngine = append(fromEngine, i)
		}
	}
	s.mu.RUnlock()
	if err := s.readEngine(keys, fromEngine, values, present); err != nil {
		return nil, nil, s.engineReadFailed(err)
	}
	for i, k := range keys {
		s.counted(k, present[i])
	}
	s.reads.Add(int64(len(keys)))
	return values, present, nil
}

// counted records a point read of k (present or not).
func (s *Stash) counted(k []byte, ok bool) {
	if ok && s.rec != nil {
		s.rec.touch(k)
	}
	if s.opts.Ephemeral {
		if ok {
			s.hits.Add(1)
		} else {
			s.misses.Add(1)
		}
	}
}

// engineReaders bounds the concurrent engine reads of one Get.
const engineReaders = 8

// readEngine reads keys[i] for every i of idx from the engine into
// values and present. An engine that serves reads on its own schedulers
// (a flash engine with far memory, engine.ReadServer) gets them as one
// GetMany, run as concurrent lookups. Otherwise a durable stash reads
// them several at a time: on a disk each read may wait for the device,
// and one after another a read of a dozen keys took a dozen device
// latencies while it held pin, which also kept the next flush, and every
// read queued behind that flush, waiting. An ephemeral stash (DRAM)
// reads them in turn.
func (s *Stash) readEngine(keys [][]byte, idx []int, values [][]byte, present []bool) error {
	if len(idx) == 0 {
		return nil
	}
	if rs := engine.ServesReads(s.eng); rs != nil {
		ks := make([][]byte, len(idx))
		for j, i := range idx {
			ks[j] = keys[i]
		}
		vals, oks, err := rs.GetMany(ks)
		if err != nil {
			return err
		}
		for j, i := range idx {
			values[i], present[i] = vals[j], oks[j]
		}
		return nil
	}
	if len(idx) < 2 || s.opts.Ephemeral {
		get := s.eng.Get
		if sg, ok := s.eng.(engine.SharedGetter); ok {
			get = sg.GetShared // the values go into the reply unmodified
		}
		for _, i := range idx {
			val, ok, err := get(keys[i])
			if err != nil {
				return err
			}
			values[i], present[i] = val, ok
		}
		return nil
	}
	var (
		wg    sync.WaitGroup
		next  atomic.Int64
		errMu sync.Mutex
		first error
	)
	for range min(engineReaders, len(idx)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				n := int(next.Add(1)) - 1
				if n >= len(idx) {
					return
				}
				i := idx[n]
				val, ok, err := s.eng.Get(keys[i])
				if err != nil {
					errMu.Lock()
					if first == nil {
						first = err
					}
					errMu.Unlock()
					return
				}
				values[i], present[i] = val, ok
			}
		}()
	}
	wg.Wait()
	return first
}

// GetRange reads [begin, end) at version v, at most limit pairs (0: no
// limit) and about byteLimit bytes; more reports that it stopped early.
func (s *Stash) GetRange(ctx context.Context, v kv.Version, begin, end []byte, limit int, byteLimit int64, reverse bool) ([]kv.KeyValue, bool, error) {
	if err := s.waitFor(ctx, v); err != nil {
		return nil, false, err
	}
	defer s.pin.RUnlock()
	if !s.readable(begin, end, v) {
		return nil, false, kv.Errorf(kv.CodeWrongShardServer, "stash %d does not hold range [%q, %q) at version %d", s.opts.Tag, begin, end, v)
	}
	s.reads.Add(1)
	s.mu.RLock()
	o := s.win.overlay(begin, end, v)
	s.mu.RUnlock()
	kvs, more, err := s.merge(o, begin, end, limit, byteLimit, reverse)
	if err != nil {
		return nil, false, s.engineReadFailed(err)
	}
	return kvs, more, nil
}

// scanLocked is GetRange for callers holding mu (byte accounting).
func (s *Stash) scanLocked(begin, end []byte, v kv.Version, limit int, byteLimit int64, reverse bool) ([]kv.KeyValue, bool, error) {
	return s.merge(s.win.overlay(begin, end, v), begin, end, limit, byteLimit, reverse)
}

// merge combines the window overlay with an engine scan of [begin, end).
func (s *Stash) merge(o overlay, begin, end []byte, limit int, byteLimit int64, reverse bool) ([]kv.KeyValue, bool, error) {
	var out []kv.KeyValue
	var size int64
	full := func() bool {
		return (limit > 0 && len(out) >= limit) || (byteLimit > 0 && size >= byteLimit)
	}
	emit := func(k, v []byte) {
		out = append(out, kv.KeyValue{Key: append([]byte(nil), k...), Value: append([]byte(nil), v...)})
		size += int64(len(k) + len(v))
	}
	// Overlay cursor in scan order.
	n := len(o.keys)
	idx := func(i int) int {
		if reverse {
			return n - 1 - i
		}
		return i
	}
	before := func(a, b []byte) bool { // a comes before b in scan order
		if reverse {
			return bytes.Compare(a, b) > 0
		}
		return bytes.Compare(a, b) < 0
	}
	i := 0
	more := false
	scan := s.eng.Scan
	if rs := engine.ServesReads(s.eng); rs != nil {
		scan = rs.ScanServed // the function below does not block
	}
	err := scan(begin, end, reverse, func(k, v []byte) bool {
		for i < n && before(o.keys[idx(i)], k) {
			j := idx(i)
			i++
			if o.present[j] {
				if full() {
					more = true
					return false
				}
				emit(o.keys[j], o.values[j])
			}
		}
		if i < n && bytes.Equal(o.keys[idx(i)], k) {
			j := idx(i)
			i++
			if o.present[j] {
				if full() {
					more = true
					return false
				}
				emit(o.keys[j], o.values[j])
			}
			return true
		}
		if o.cleared(k) {
			return true
		}
		if full() {
			more = true
			return false
		}
		emit(k, v)
		return true
	})
	if err != nil {
		return nil, false, err
	}
	for !more && i < n {
		j := idx(i)
		i++
		if o.present[j] {
			if full() {
				more = true
				break
			}
			emit(o.keys[j], o.values[j])
		}
	}
	return out, more, nil
}

// AppliedVersion is the newest version applied.
func (s *Stash) AppliedVersion() kv.Version {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.applied
}

// Stats describes the stash.
type Stats struct {
	Tag                      kv.Tag
	Pool                     string
	Index                    int
	Keys, Bytes              int64 // live pairs (exact when TrackBytes, else the engine's)
	EngineBytes, WindowBytes int64
	Hits, Misses, Evictions  int64
	FilterNegatives          int64 // absent-key reads answered by a Bloom filter
	Reads                    int64
	Applied, Durable         kv.Version
	WindowLimitBytes         int64
	CapacityBytes            int64
	// Engine holds the engine's own counters, if it reports any
	// (engine.Counted).
	Engine []engine.Counter
}

// Stats returns the stash's sizes and counters.
func (s *Stash) Stats() Stats {
	st, scan := s.statsNow()
	if scan {
		s.addWindowToCounts(&st)
	}
	st.Hits, st.Misses, st.Reads = s.hits.Load(), s.misses.Load(), s.reads.Load()
	return st
}

// statsNow returns the stash's figures but the window's share of Keys and
// Bytes, and whether that share is still to be added (addWindowToCounts).
func (s *Stash) statsNow() (Stats, bool) {
	// Status may ask a failed stash whose engine is closed: hold pin so
	// Close waits, and leave the engine's figures out once it is closed.
	s.pin.RLock()
	defer s.pin.RUnlock()
	if s.closed.Load() {
		s.mu.RLock()
		defer s.mu.RUnlock()
		return Stats{Tag: s.opts.Tag, Pool: s.opts.Pool, Index: s.opts.Index, Applied: s.applied, Durable: s.durable,
			CapacityBytes: s.opts.CapacityBytes, WindowLimitBytes: s.opts.WindowBytes}, false
	}
	es := s.eng.Stats()
	s.mu.RLock()
	defer s.mu.RUnlock()
	st := Stats{
		Tag: s.opts.Tag, Pool: s.opts.Pool, Index: s.opts.Index,
		EngineBytes: es.Bytes, WindowBytes: s.win.bytes, Evictions: es.Evictions, FilterNegatives: es.FilterNegatives,
		Applied: s.applied, Durable: s.durable, CapacityBytes: s.opts.CapacityBytes, WindowLimitBytes: s.opts.WindowBytes,
		Keys: es.Keys, Bytes: es.Bytes,
	}
	if c, ok := s.eng.(engine.Counted); ok {
		st.Engine = c.Counters()
	}
	if s.opts.TrackBytes {
		st.Keys, st.Bytes = s.liveKeys, s.liveBytes
		return st, false
	}
	return st, s.win.keys.Len() > 0
}

// statsScanChunk is how many window keys addWindowToCounts visits under
// one hold of the stash's locks.
const statsScanChunk = 4096

// addWindowToCounts adds the window's newest state to the engine's counts
// in st (a stash without TrackBytes). It visits the window in chunks and
// lets go of the locks between them: a window of a few hundred thousand
// keys took tens of milliseconds to visit, and holding pin that long made
// a flush wait, and every read behind the flush's pending lock, on every
// status or metrics request. Writes applied meanwhile may be counted or
// not, as if the status were a moment earlier or later; a quiet stash
// counts exactly.
func (s *Stash) addWindowToCounts(st *Stats) {
	var from []byte // first key of the next chunk; nil: the start
	for {
		more, next := s.countWindowChunk(st, from)
		if !more {
			return
		}
		from = next
	}
}

// countWindowChunk counts up to statsScanChunk window keys from key from
// on (nil: the start) into st, and returns whether keys remain and the
// first of them.
func (s *Stash) countWindowChunk(st *Stats, from []byte) (more bool, next []byte) {
	s.pin.RLock()
	defer s.pin.RUnlock()
	if s.closed.Load() {
		return false, nil
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	n := 0
	s.win.keys.AscendGreaterOrEqual(&windowKey{key: from}, func(wk *windowKey) bool {
		if n == statsScanChunk {
			more, next = true, wk.key // keys are never changed in place
			return false
		}
		n++
		h := wk.hist[len(wk.hist)-1]
		old, inEngine, _ := engine.Peek(s.eng, wk.key) // status must not reorder eviction or fill caches
		if inEngine {
			st.Keys--
			st.Bytes -= int64(len(wk.key) + len(old))
		}
		if h.present && !s.win.clearedAfter(wk.key, h.version, s.applied) {
			st.Keys++
			st.Bytes += int64(len(wk.key) + len(h.value))
		}
		return true
	})
	return more, next
}

// Close closes the engine once its readers are done; later calls return
// nil. Run must have returned.
func (s *Stash) Close() error {
	s.closeOnce.Do(func() {
		s.pin.Lock() // readers hold pin shared for their whole read
		defer s.pin.Unlock()
		s.closed.Store(true)
		if s.eng != nil {
			s.closeErr = s.eng.Close()
		}
	})
	return s.closeErr
}

// Engine returns the stash's engine, for status displays of its own
// (a local log's); nil for a stash that failed before it opened.
func (s *Stash) Engine() engine.Engine { return s.eng }

// Pool is the name of the stash's pool.
func (s *Stash) Pool() string { return s.opts.Pool }

// Usage returns the live bytes checked against capacity and the version
// they include, read together.
func (s *Stash) Usage() (usedBytes int64, applied kv.Version) {
	if s.opts.TrackBytes {
		s.mu.RLock()
		defer s.mu.RUnlock()
		return s.liveBytes, s.applied
	}
	s.pin.RLock()
	defer s.pin.RUnlock()
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return 0, s.applied
	}
	return s.eng.Stats().Bytes, s.applied
}

// Coldest returns up to n keys of the engine in eviction order, coldest
// first; ok is false when the engine keeps no recency order. Keys written in
// the last MVCC window are not in the engine yet and are never the coldest.
func (s *Stash) Coldest(n int) (keys [][]byte, ok bool) {
	if s.rec != nil {
		return s.rec.coldest(n), true
	}
	s.pin.RLock()
	defer s.pin.RUnlock()
	if s.closed.Load() {
		return nil, true
	}
	r, isOrdered := s.eng.(engine.RecencyOrdered)
	if !isOrdered {
		return nil, false
	}
	keys = r.Coldest(n)
	return keys, keys != nil || s.eng.Stats().Keys == 0
}

// Pressure returns what the ratekeeper watches: the applied version and the
// window's bytes and budget. It is cheaper than Stats.
func (s *Stash) Pressure() (applied kv.Version, windowBytes, windowLimit int64) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.applied, s.win.bytes, s.opts.WindowBytes
}
