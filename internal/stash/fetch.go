package stash

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"github.com/distash/distash/internal/engine"
	"github.com/distash/distash/internal/fsys"
	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/shardmap"
)

// Fetcher reads a range of a move's source: the live replicas of the
// shard's team (the stash tries them in turn). The stash asks for about
// byteLimit bytes at a time, at a version it has applied, so memory stays
// bounded whatever the shard's size.
type Fetcher interface {
	FetchRange(ctx context.Context, from []kv.Tag, begin, end []byte, v kv.Version, byteLimit int64) (kvs []kv.KeyValue, more bool, err error)
}

// fetchChunkBytes is how much one fetch request asks for.
var fetchChunkBytes int64 = 1 << 20

// bufferedMutation is a write to a range being fetched, held until the
// copy is done.
type bufferedMutation struct {
	version kv.Version
	m       kv.Mutation
}

// fetchedChunk records that the engine holds [previous end, end) of a
// fetching range as of version at.
type fetchedChunk struct {
	end []byte
	at  kv.Version
}

// fetchJob is the progress of the fetch of one range. Protected by mu.
type fetchJob struct {
	id      uint64
	buffer  []bufferedMutation
	chunks  []fetchedChunk
	fetched int64 // bytes copied so far
	keys    int64
}

// applyAssign applies a private assignment mutation at version v.
// Called with mu held.
func (s *Stash) applyAssign(v kv.Version, m kv.Mutation) error {
	sh, err := shardmap.DecodeAssign(m)
	if err != nil {
		return err
	}
	rl := roleNone
	switch {
	case slices.Contains(sh.Team, s.opts.Tag):
		rl = roleServe
	case slices.Contains(sh.Dest, s.opts.Tag):
		rl = roleFetch
	}
	for _, c := range s.own.assign(sh.Begin, sh.End, rl, sh.Team, v) {
		switch {
		case c.dropped:
			// Reads below v still see the range (past ranges); the
			// clear reaches the engine when v is flushed.
			if err := s.applyMutation(v, kv.Mutation{Type: kv.MutClearRange, Key: c.r.Begin, Param: c.r.End}); err != nil {
				return err
			}
		case c.aborted:
			s.abortFetch(c.r)
		case c.started:
			s.jobs[c.r.id] = &fetchJob{id: c.r.id}
		}
	}
	// Pieces of a cut fetching range got new ids: their jobs restart.
	for id, j := range s.jobs {
		if _, ok := s.own.fetchingByID(id); !ok {
			s.abortFetchJob(j)
		}
	}
	for _, r := range s.own.cur {
		if r.State == fetching && s.jobs[r.id] == nil {
			s.jobs[r.id] = &fetchJob{id: r.id}
		}
	}
	s.wakeFetcher()
	return s.saveOwnership(v)
}

// abortFetch forgets the job of a fetching range that left the stash and
// has the fetcher clear what it copied. Called with mu held.
func (s *Stash) abortFetch(r ownRange) {
	if j := s.jobs[r.id]; j != nil {
		s.abortFetchJob(j)
	}
	s.cleanups = append(s.cleanups, kv.KeyRange{Begin: r.Begin, End: r.End})
}

func (s *Stash) abortFetchJob(j *fetchJob) {
	delete(s.jobs, j.id)
	if s.opts.TrackBytes {
		s.liveBytes -= j.fetched
		s.liveKeys -= j.keys
	}
}

// saveOwnership persists the ownership of a durable stash as of v.
// Called with mu held.
func (s *Stash) saveOwnership(v kv.Version) error {
	if s.opts.Dir == "" || !s.keepsData() {
		return nil
	}
	err := s.own.save(s.fs(), s.opts.Dir, v, s.durable, &s.snaps)
	if errors.Is(err, fs.ErrNotExist) {
		// The directory went away while the stash ran: what it holds
		// can no longer be vouched for. Failing plainly would have its
		// supervisor reopen it empty and replay its tag from the log,
		// which knows nothing of the ranges it fetched from other
		// replicas; damage has it rebuilt from those replicas instead.
		if ok, xerr := fsys.Exists(s.fs(), s.opts.Dir); xerr == nil && !ok {
			return fsys.Damaged(filepath.Join(s.opts.Dir, ownershipFile), "missing while the stash runs (its directory %s was removed): %v", s.opts.Dir, err)
		}
	}
	if err != nil && fsys.IsNoSpace(err) {
		// The snapshots are kept in memory: the next flush writes them
		// before it makes v or later durable, and waits while it cannot.
		s.ownUnsaved = true
		s.noteDiskFull(err)
		return nil
	}
	return err
}

// writeUnsavedOwnership writes the ownership snapshots a full disk kept
// from being written. Called with flushMu held.
func (s *Stash) writeUnsavedOwnership() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ownUnsaved {
		return nil
	}
	if err := writeOwnership(s.fs(), s.opts.Dir, s.snaps); err != nil {
		return s.writeFailed(err)
	}
	s.ownUnsaved = false
	return nil
}

func (s *Stash) wakeFetcher() {
	select {
	case s.fetchWake <- struct{}{}:
	default:
	}
}

// fetchLoop runs the fetches of the ranges this stash is a destination
// of, one at a time.
func (s *Stash) fetchLoop(ctx context.Context) error {
	for {
		if err := s.cleanUp(); err != nil {
			return err
		}
		s.mu.RLock()
		r, ok := s.own.nextFetch()
		s.mu.RUnlock()
		if ok && s.opts.Fetcher != nil {
			err := s.runFetch(ctx, r)
			switch {
			case ctx.Err() != nil:
				return nil
			case errors.Is(err, errFetchAborted):
				continue
			case err != nil:
				var kerr *kv.Error
				if !errors.As(err, &kerr) {
					return err // the engine failed
				}
				s.opts.Logger.Warn("stash fetch failed; retrying", "tag", s.opts.Tag, "begin", r.Begin, "end", r.End, "err", err)
				select {
				case <-ctx.Done():
					return nil
				case <-s.clock.After(100 * time.Millisecond):
				}
			}
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-s.fetchWake:
		case <-s.clock.After(time.Second):
		}
	}
}

var errFetchAborted = errors.New("stash: fetch aborted: the range left the stash")

// cleanUp clears from the engine the parts of aborted fetches that no
// current range holds.
func (s *Stash) cleanUp() error {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	s.mu.Lock()
	todo := s.cleanups
	s.cleanups = nil
	var clear []kv.KeyRange
	for _, r := range todo {
		clear = append(clear, s.uncovered(r)...)
	}
	durable := s.durable
	for _, r := range clear {
		s.sample.ClearRange(r.Begin, r.End)
	}
	s.mu.Unlock()
	if len(clear) == 0 {
		return nil
	}
	b := &engine.Batch{Version: durable}
	for _, r := range clear {
		b.Writes = append(b.Writes, engine.Write{Key: r.Begin, End: r.End})
	}
	return s.writeEngine(b)
}

// uncovered returns the parts of r no current range holds. Called with mu held.
func (s *Stash) uncovered(r kv.KeyRange) []kv.KeyRange {
	var out []kv.KeyRange
	at := r.Begin
	for _, c := range s.own.cur {
		if bytes.Compare(c.End, at) <= 0 || bytes.Compare(c.Begin, r.End) >= 0 {
			continue
		}
		if bytes.Compare(c.Begin, at) > 0 {
			out = append(out, kv.KeyRange{Begin: at, End: c.Begin})
		}
		at = c.End
	}
	if bytes.Compare(at, r.End) < 0 {
		out = append(out, kv.KeyRange{Begin: at, End: r.End})
	}
	return out
}

// runFetch copies range r from its sources. The engine's part of r is
// cleared first (a copy interrupted by a crash, or data of an older
// ownership), then chunks are written straight to the engine (r is not
// readable here, and its writes are buffered, not in the window), each at
// the version it was read at; last, the buffered writes newer than each
// chunk's version are applied and r becomes readable.
func (s *Stash) runFetch(ctx context.Context, r ownRange) error {
	// Nothing of r may stay in the window: its older entries (a range
	// dropped before) would reach the engine over the copy.
	if err := s.flushTo(r.From); err != nil {
		return err
	}
	if err := s.clearForFetch(r); err != nil {
		return err
	}
	cursor := r.Begin
	for bytes.Compare(cursor, r.End) < 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		v := s.AppliedVersion()
		kvs, more, err := s.opts.Fetcher.FetchRange(ctx, r.Sources, cursor, r.End, v, fetchChunkBytes)
		if err != nil {
			return err
		}
		next := r.End
		if more && len(kvs) > 0 {
			next = kv.KeyAfter(kvs[len(kvs)-1].Key)
		} else if more {
			continue
		}
		if err := s.writeChunk(r, kvs, next, v); err != nil {
			return err
		}
		cursor = next
	}
	return s.finishFetch(r)
}

// clearForFetch clears r in the engine before a copy.
func (s *Stash) clearForFetch(r ownRange) error {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	s.mu.Lock()
	j := s.jobs[r.id]
	if j == nil {
		s.mu.Unlock()
		return errFetchAborted
	}
	j.chunks, j.fetched, j.keys = nil, 0, 0
	durable := s.durable
	s.mu.Unlock()
	// Bytes already in the engine for r (a copy cut short by a crash) are
	// counted in the stash's totals: take them out.
	var bytesIn, keysIn int64
	if s.opts.TrackBytes {
		if err := s.eng.Scan(r.Begin, r.End, false, func(k, v []byte) bool {
			bytesIn += int64(len(k) + len(v))
			keysIn++
			return true
		}); err != nil {
			return err
		}
	}
	if err := s.writeEngine(&engine.Batch{Version: durable, Writes: []engine.Write{{Key: r.Begin, End: r.End}}}); err != nil {
		return err
	}
	s.mu.Lock()
	s.liveBytes -= bytesIn
	s.liveKeys -= keysIn
	s.sample.ClearRange(r.Begin, r.End)
	if s.rec != nil {
		s.rec.removeRange(r.Begin, r.End)
	}
	s.mu.Unlock()
	return nil
}

// writeChunk writes the pairs of [previous end, next) read at version at.
func (s *Stash) writeChunk(r ownRange, kvs []kv.KeyValue, next []byte, at kv.Version) error {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	s.mu.RLock()
	_, current := s.jobs[r.id]
	durable := s.durable
	s.mu.RUnlock()
	if !current {
		return errFetchAborted
	}
	if len(kvs) > 0 {
		b := &engine.Batch{Version: durable}
		for _, p := range kvs {
			b.Writes = append(b.Writes, engine.Write{Key: p.Key, Value: p.Value})
		}
		if err := s.writeEngine(b); err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.jobs[r.id]
	if j == nil {
		// Aborted while writing: the cleanup clears what was written.
		return errFetchAborted
	}
	for _, p := range kvs {
		n := int64(len(p.Key) + len(p.Value))
		j.fetched += n
		j.keys++
		if s.opts.TrackBytes {
			s.liveBytes += n
			s.liveKeys++
		}
		s.sample.Set(p.Key, n)
		if s.rec != nil {
			s.rec.touch(p.Key)
		}
	}
	j.chunks = append(j.chunks, fetchedChunk{end: slices.Clone(next), at: at})
	return nil
}

// finishFetch applies the buffered writes newer than their chunk's copy
// and makes r readable from the stash's applied version. It holds mu while
// it does: the buffer holds only the writes made during the copy.
func (s *Stash) finishFetch(r ownRange) error {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.jobs[r.id]
	if j == nil {
		return errFetchAborted
	}
	rp := &replay{s: s, overlay: map[string][]byte{}}
	chunkAt := func(key []byte) int {
		return sort.Search(len(j.chunks), func(i int) bool { return bytes.Compare(j.chunks[i].end, key) > 0 })
	}
	for _, bm := range j.buffer {
		m := bm.m
		if m.Type == kv.MutClearRange {
			begin := m.Key
			for i := chunkAt(begin); i < len(j.chunks) && bytes.Compare(begin, m.Param) < 0; i++ {
				end := j.chunks[i].end
				if bytes.Compare(end, m.Param) > 0 {
					end = m.Param
				}
				if bm.version > j.chunks[i].at {
					if err := rp.clearRange(begin, end); err != nil {
						return err
					}
				}
				begin = end
			}
			continue
		}
		i := chunkAt(m.Key)
		if i >= len(j.chunks) || bm.version <= j.chunks[i].at {
			continue // the copy has it
		}
		if err := rp.apply(m); err != nil {
			return err
		}
	}
	if len(rp.writes) > 0 {
		if err := s.writeEngine(&engine.Batch{Version: s.durable, Writes: rp.writes}); err != nil {
			return err
		}
	}
	delete(s.jobs, j.id)
	s.own.finish(j.id, s.applied)
	if s.opts.Dir != "" && s.keepsData() && s.applied > s.durable {
		s.undurable = append(s.undurable, finishedFetch{begin: r.Begin, end: r.End, at: s.applied})
	}
	s.movedIn.Add(1)
	return s.saveOwnership(s.applied)
}

// finishedFetch is a range whose fetch finished at version at.
type finishedFetch struct {
	begin, end []byte
	at         kv.Version
}

// replay applies buffered writes to the engine's state of a fetched range,
// reading through the writes it has not applied yet. Called with mu held.
type replay struct {
	s       *Stash
	overlay map[string][]byte // nil: cleared
	clears  []kv.KeyRange
	writes  []engine.Write
}

func (rp *replay) get(key []byte) ([]byte, bool, error) {
	if v, ok := rp.overlay[string(key)]; ok {
		return v, v != nil, nil
	}
	for _, c := range rp.clears {
		if bytes.Compare(key, c.Begin) >= 0 && bytes.Compare(key, c.End) < 0 {
			return nil, false, nil
		}
	}
	return engine.Peek(rp.s.eng, key)
}

func (rp *replay) set(key, value []byte, present bool) error {
	old, was, err := rp.get(key)
	if err != nil {
		return err
	}
	s := rp.s
	if was {
		if s.opts.TrackBytes {
			s.liveBytes -= int64(len(key) + len(old))
			s.liveKeys--
		}
	}
	if present {
		if value == nil {
			value = []byte{}
		}
		if s.opts.TrackBytes {
			s.liveBytes += int64(len(key) + len(value))
			s.liveKeys++
		}
		s.sample.Set(key, int64(len(key)+len(value)))
		rp.overlay[string(key)] = value
		rp.writes = append(rp.writes, engine.Write{Key: key, Value: value})
		if s.rec != nil {
			s.rec.touch(key)
		}
		return nil
	}
	s.sample.Clear(key)
	rp.overlay[string(key)] = nil
	rp.writes = append(rp.writes, engine.Write{Key: key})
	if s.rec != nil {
		s.rec.remove(key)
	}
	return nil
}

func (rp *replay) apply(m kv.Mutation) error {
	switch m.Type {
	case kv.MutSet:
		return rp.set(m.Key, m.Param, true)
	case kv.MutClear:
		return rp.set(m.Key, nil, false)
	case kv.MutAdd, kv.MutMax, kv.MutMin:
		old, present, err := rp.get(m.Key)
		if err != nil {
			return err
		}
		return rp.set(m.Key, kv.ApplyAtomic(m.Type, old, present, m.Param), true)
	}
	return nil
}

func (rp *replay) clearRange(begin, end []byte) error {
	s := rp.s
	if s.opts.TrackBytes {
		// Every live key of the range goes: the engine's not overlaid, and
		// the overlay's present ones.
		err := s.eng.Scan(begin, end, false, func(k, v []byte) bool {
			if _, ok := rp.overlay[string(k)]; ok {
				return true
			}
			for _, c := range rp.clears {
				if bytes.Compare(k, c.Begin) >= 0 && bytes.Compare(k, c.End) < 0 {
					return true
				}
			}
			s.liveBytes -= int64(len(k) + len(v))
			s.liveKeys--
			return true
		})
		if err != nil {
			return err
		}
		for k, v := range rp.overlay {
			if v != nil && k >= string(begin) && k < string(end) {
				s.liveBytes -= int64(len(k) + len(v))
				s.liveKeys--
			}
		}
	}
	for k := range rp.overlay {
		if k >= string(begin) && k < string(end) {
			delete(rp.overlay, k)
		}
	}
	rp.clears = append(rp.clears, kv.KeyRange{Begin: slices.Clone(begin), End: slices.Clone(end)})
	rp.writes = append(rp.writes, engine.Write{Key: begin, End: end})
	s.sample.ClearRange(begin, end)
	if s.rec != nil {
		s.rec.removeRange(begin, end)
	}
	return nil
}

// RangeMetrics describes a range of a stash for the data distributor.
type RangeMetrics struct {
	Bytes    int64  // estimated live bytes (the stash's byte sample)
	SplitKey []byte // a key halving Bytes; nil if the sample cannot split it
	// State is the stash's part in the range: serving; fetching (copying
	// it); copied (a durable stash that copied it, until its engine made
	// the copy durable: a restart before would copy it again); partial
	// (serving part of it); none.
	State string
	// FetchedBytes is what a fetching range copied so far.
	FetchedBytes int64
	// WriteRate is the bytes written per second lately; WriteSplitKey a
	// key halving it (nil if the sample cannot split the range).
	WriteRate     float64
	WriteSplitKey []byte
}

// Metrics returns the metrics of ranges.
func (s *Stash) Metrics(ranges []kv.KeyRange, splitKeys bool) []RangeMetrics {
	// The write rate's decay changes it: the write lock.
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	out := make([]RangeMetrics, len(ranges))
	for i, r := range ranges {
		m := &out[i]
		m.Bytes = s.sample.Estimate(r.Begin, r.End)
		m.WriteRate = s.writes.Rate(now, r.Begin, r.End)
		if splitKeys {
			m.SplitKey = s.sample.SplitKey(r.Begin, r.End)
			m.WriteSplitKey = s.writes.SplitKey(now, r.Begin, r.End)
		}
		m.State = "none"
		for _, c := range s.own.cur {
			if bytes.Compare(c.End, r.Begin) <= 0 || bytes.Compare(c.Begin, r.End) >= 0 {
				continue
			}
			if c.State == fetching {
				m.State = "fetching"
				if j := s.jobs[c.id]; j != nil {
					m.FetchedBytes += j.fetched
				}
			} else if m.State != "fetching" {
				m.State = "serving"
			}
		}
		if m.State == "serving" && !s.own.readable(r.Begin, r.End, s.applied) {
			m.State = "partial"
		}
		for _, f := range s.undurable {
			if m.State == "serving" && bytes.Compare(f.end, r.Begin) > 0 && bytes.Compare(f.begin, r.End) < 0 {
				m.State = "copied" // not yet durable
			}
		}
	}
	return out
}

// Owned returns the ranges the stash serves now.
func (s *Stash) Owned() []kv.KeyRange {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.own.servingRanges()
}
