package txlog

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/distash/distash/internal/decode"
	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/logentry"
	"github.com/hashicorp/raft"
)

// msgOverhead is the per-mutation size counted against Peek's maxBytes on
// top of key and param bytes.
const msgOverhead = 16

// fsmEntry is one committed, not yet trimmed entry: its raft command (kept
// verbatim, for snapshots) and how much of the index refers to it.
type fsmEntry struct {
	version kv.Version
	raw     []byte
	mem     int64 // memory the entry holds: raw and its part of the index
}

// Sizes of what the per-tag index holds for an entry: a tagMsg per tag and
// a kv.Mutation per mutation and tag (shared by the tags that get every
// mutation of the entry).
var (
	tagMsgBytes   = int64(unsafe.Sizeof(tagMsg{}))
	mutationBytes = int64(unsafe.Sizeof(kv.Mutation{}))
)

// tagMsg is one Message of a tag's queue, with its size for maxBytes.
type tagMsg struct {
	msg  logentry.Message
	size int
}

// fsm is the raft state machine of one replica: the committed entries not yet
// popped by every tag, indexed per tag, plus the replicated popped versions.
// Apply is deterministic, so every replica (and every restart) trims the same
// way and agrees on snapshots.
type fsm struct {
	replica int
	logger  *slog.Logger
	notify  func()

	mu      sync.RWMutex
	entries []fsmEntry            // increasing versions, all > trimmed
	index   map[kv.Tag][]tagMsg   // per tag: its messages, increasing versions
	popped  map[kv.Tag]kv.Version // replicated popped version of every tag of the set
	trimmed kv.Version            // every entry <= trimmed has been dropped
	// gone is, per tag, the version of its newest message dropped by a
	// trim: a stash of the tag at version >= gone[tag] has seen every
	// message the log dropped for it and can still catch up (a stash that
	// was down while the log trimmed only other tags' entries, such as a
	// transaction node's system stash: system writes are rare). goneFloor
	// stands for what an older snapshot did not record: every tag may have
	// lost messages up to it.
	gone      map[kv.Tag]kv.Version
	goneFloor kv.Version
	epoch     uint64       // generation: entries of a lower Epoch are rejected
	bytes     int64        // sum of len(raw) over entries and spilled
	mem       int64        // sum of mem over entries and spilled
	last      atomic.Int64 // version of the last applied entry (written under mu)

	// Raft records applied, and their bytes, since the last snapshot or
	// restore (snapshotDue).
	sinceSnapRecords, sinceSnapBytes atomic.Int64

	// scratch for grouping an entry's mutations by tag (apply goroutine only)
	groups []tagGroup

	// Spilled entries (spill.go): the oldest unpopped ones, moved out of
	// memory, all older than entries. spillCfg nil: nothing spills.
	spillCfg     *spillConfig
	spill        *spillStore
	spilled      []spillRef
	spilledBytes int64 // sum of n over spilled
	spillFailed  bool  // the last spill write failed (logged when it starts failing)
	// a spilled entry failed to read back: logged, and onSpillDamage
	// called, once until the state is rebuilt
	spillReadFailed atomic.Bool
	// onSpillDamage starts rebuilding the state (rebuild) from raft's
	// snapshot and log; nil: nothing does.
	onSpillDamage func()
	// appliedIndex is the raft index of the last record applied, 0 since
	// a Restore (whose snapshot's index raft does not tell the FSM).
	appliedIndex uint64
	// rebuildMu orders Restore and rebuild, which both replace the state.
	rebuildMu sync.Mutex
}

type tagGroup struct {
	tag  kv.Tag
	n    int
	size int
	muts []kv.Mutation
}

func newFSM(replica int, logger *slog.Logger, notify func()) *fsm {
	return &fsm{
		replica: replica,
		logger:  logger,
		notify:  notify,
		index:   make(map[kv.Tag][]tagMsg),
		popped:  make(map[kv.Tag]kv.Version),
		gone:    make(map[kv.Tag]kv.Version),
	}
}

func (f *fsm) lastVersion() kv.Version { return kv.Version(f.last.Load()) }

// snapshotAppendFactor: a snapshot waits for snapshotAppendFactor times its
// size in records appended since the last one.
const snapshotAppendFactor = 2

// snapshotDue reports whether a snapshot is worth taking: at least
// minRecords raft records applied since the last one, and at least
// snapshotAppendFactor times as many bytes of them as the snapshot would
// write (the unpopped entries). A snapshot writes every entry some tag has
// not popped, up to HoldBytes (and more for a tag the log may not drop):
// taken every few thousand records, as raft does on its own, a log holding
// a gigabyte for a stash that is down would write that gigabyte every few
// seconds, and one holding an MVCC window's worth rewrote it every check
// (5–9% of a transaction node's CPU at 10,000 commits/s). This way the
// snapshots write at most half what the log appends, and the raft log on
// disk holds about twice the unpopped entries' size past the last one.
func (f *fsm) snapshotDue(minRecords int64) bool {
	f.mu.RLock()
	held := f.bytes
	f.mu.RUnlock()
	return f.sinceSnapRecords.Load() >= minRecords && f.sinceSnapBytes.Load() >= snapshotAppendFactor*held
}

// Apply implements raft.FSM.
func (f *fsm) Apply(l *raft.Log) any {
	return f.ApplyBatch([]*raft.Log{l})[0]
}

// ApplyBatch implements raft.BatchingFSM: one lock and one wake-up of
// waiting peeks per batch.
func (f *fsm) ApplyBatch(logs []*raft.Log) []any {
	resps := make([]any, len(logs))
	changed := false
	f.mu.Lock()
	for i, l := range logs {
		f.sinceSnapRecords.Add(1)
		f.sinceSnapBytes.Add(int64(len(l.Data)))
		if l.Type != raft.LogCommand {
			continue
		}
		resp, err := f.applyRecordLocked(l.Data)
		if err != nil {
			resps[i] = err
			if !errors.Is(err, ErrPrevVersion) && !errors.Is(err, logentry.ErrStaleEpoch) {
				f.logger.Error("txlog: cannot apply raft log", "replica", f.replica, "index", l.Index, "err", err)
			}
			continue
		}
		resps[i] = resp
		changed = true
	}
	if len(logs) > 0 {
		f.appliedIndex = logs[len(logs)-1].Index
	}
	f.mu.Unlock()
	if changed {
		f.notify()
	}
	return resps
}

func (f *fsm) applyLocked(data []byte) error {
	_, err := f.applyRecordLocked(data)
	return err
}

// applyRecordLocked applies one raft command. Its response is nil, except
// for a generation: the last version when the generation began.
func (f *fsm) applyRecordLocked(data []byte) (any, error) {
	rec, err := decodeRecord(data)
	if err != nil {
		return nil, err
	}
	switch rec.kind {
	case recEntry:
		e := &rec.entry
		// Checked first: a deposed proxy's entry usually does not chain
		// either, and ErrStaleEpoch tells it why.
		if e.Epoch < f.epoch {
			return nil, fmt.Errorf("%w: entry %d of epoch %d, the log is at epoch %d", logentry.ErrStaleEpoch, e.Version, e.Epoch, f.epoch)
		}
		last := f.lastVersion()
		if e.Version <= last || e.PrevVersion != last {
			return nil, fmt.Errorf("%w: entry %d has prev %d, log ends at %d", ErrPrevVersion, e.Version, e.PrevVersion, last)
		}
		f.addLocked(e, data)
	case recPop:
		f.popLocked(rec.pops)
	case recGeneration:
		if rec.epoch <= f.epoch {
			return nil, fmt.Errorf("%w: generation %d, the log is at epoch %d", logentry.ErrStaleEpoch, rec.epoch, f.epoch)
		}
		f.epoch = rec.epoch
		return f.lastVersion(), nil
	}
	return nil, nil
}

func (f *fsm) currentEpoch() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.epoch
}

// holdTrimPoint returns, when the unpopped entries hold more than hold
// bytes (their memory, and the size of those spilled), the lowest version
// whose trimming brings them to at most target bytes.
func (f *fsm) holdTrimPoint(hold, target int64) (kv.Version, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	mem := f.mem + f.spilledBytes
	if mem <= hold {
		return 0, false
	}
	for i := range f.spilled {
		r := &f.spilled[i]
		mem -= r.mem() + int64(r.n)
		if mem <= target {
			return r.version, true
		}
	}
	for _, e := range f.entries {
		mem -= e.mem
		if mem <= target {
			return e.version, true
		}
	}
	return f.lastVersion(), true // not reached: mem ends at 0
}

// addLocked appends a decoded entry whose raft command is raw and indexes
// its mutations per tag (a mutation listed twice for one tag counts once).
func (f *fsm) addLocked(e *logentry.Entry, raw []byte) {
	groups := f.groups[:0]
	find := func(t kv.Tag) *tagGroup {
		for i := range groups {
			if groups[i].tag == t {
				return &groups[i]
			}
		}
		groups = append(groups, tagGroup{tag: t})
		return &groups[len(groups)-1]
	}
	total := 0
	for i := range e.Mutations {
		m := &e.Mutations[i]
		for j, t := range m.Tags {
			if slices.Contains(m.Tags[:j], t) {
				continue
			}
			g := find(t)
			g.n++
			g.size += m.Bytes() + msgOverhead
			total++
		}
	}
	mem := int64(len(raw))
	if total > 0 {
		// The tags that get every mutation of the entry (the team of a
		// single shard, the common case) share one slice of them all; the
		// others get theirs from one backing array. A copy per tag made the
		// index of a replicated entry several times the entry's size.
		n := len(e.Mutations)
		var every []kv.Mutation
		rest := 0
		for i := range groups {
			if groups[i].n < n {
				rest += groups[i].n
			} else if every == nil {
				every = make([]kv.Mutation, n)
				for j := range e.Mutations {
					every[j] = e.Mutations[j].Mutation
				}
			}
		}
		backing := make([]kv.Mutation, rest)
		off := 0
		for i := range groups {
			g := &groups[i]
			if g.n == n {
				g.muts = every
				continue
			}
			g.muts = backing[off : off : off+g.n]
			off += g.n
		}
		for i := range e.Mutations {
			m := &e.Mutations[i]
			for j, t := range m.Tags {
				if slices.Contains(m.Tags[:j], t) {
					continue
				}
				if g := find(t); g.n < n {
					g.muts = append(g.muts, m.Mutation)
				}
			}
		}
		for i := range groups {
			g := &groups[i]
			f.index[g.tag] = append(f.index[g.tag], tagMsg{msg: logentry.Message{Version: e.Version, Mutations: g.muts}, size: g.size})
			g.muts = nil
		}
		mem += int64(len(groups))*tagMsgBytes + int64(len(every)+rest)*mutationBytes
	}
	f.groups = groups[:0]
	f.entries = append(f.entries, fsmEntry{version: e.Version, raw: raw, mem: mem})
	f.bytes += int64(len(raw))
	f.mem += mem
	f.last.Store(int64(e.Version))
	if f.spill != nil && f.mem > f.spillCfg.at {
		f.spillLocked()
	}
}

// spillLocked moves the oldest entries in memory to the spill store until
// the memory they hold is back to the lower bound. An entry whose write
// fails stays in memory, and so does every later one: the hold bound then
// acts on memory alone.
func (f *fsm) spillLocked() {
	mem, k := f.mem, 0
	for k < len(f.entries) && mem > f.spillCfg.to {
		mem -= f.entries[k].mem
		k++
	}
	if k == 0 {
		return
	}
	// The tags of each entry to spill are the fronts of the index queues.
	upTo := f.entries[k-1].version
	tagsOf := make(map[kv.Version][]kv.Tag, k)
	for t, q := range f.index {
		for i := 0; i < len(q) && q[i].msg.Version <= upTo; i++ {
			tagsOf[q[i].msg.Version] = append(tagsOf[q[i].msg.Version], t)
		}
	}
	done := 0
	for ; done < k; done++ {
		e := &f.entries[done]
		seg, off, err := f.spill.write(e.version, e.raw, f.bytes)
		if err != nil {
			if !f.spillFailed {
				f.spillFailed = true
				f.logger.Error("txlog: cannot spill entries to disk: they stay in memory, and the hold bound is the memory one", "replica", f.replica, "err", err)
			}
			break
		}
		if f.spillFailed {
			f.spillFailed = false
			f.logger.Info("txlog: spilling entries to disk again", "replica", f.replica)
		}
		tags := tagsOf[e.version]
		slices.Sort(tags)
		r := spillRef{version: e.version, seg: seg, off: off, n: int32(len(e.raw)), tags: tags}
		f.spilled = append(f.spilled, r)
		f.mem += r.mem() - e.mem
		f.spilledBytes += int64(r.n)
	}
	if done == 0 {
		return
	}
	upTo = f.entries[done-1].version
	clear(f.entries[:done])
	f.entries = f.entries[done:]
	for t, q := range f.index {
		i := sort.Search(len(q), func(i int) bool { return q[i].msg.Version > upTo })
		switch {
		case i == len(q):
			delete(f.index, t)
		case i > 0:
			clear(q[:i])
			f.index[t] = q[i:]
		}
	}
}

// popLocked raises the popped versions of the tags in pops (popped versions
// never go down), makes pops' tags the tag set, and drops every entry at or
// below the minimum popped version. An empty tag set trims nothing.
func (f *fsm) popLocked(pops []TagVersion) {
	next := make(map[kv.Tag]kv.Version, len(pops))
	for _, p := range pops {
		v := max(p.Version, f.popped[p.Tag], next[p.Tag])
		next[p.Tag] = v
	}
	f.popped = next
	if len(next) == 0 {
		return
	}
	minPopped := kv.Version(0)
	first := true
	for _, v := range next {
		if first || v < minPopped {
			minPopped, first = v, false
		}
	}
	f.trimLocked(minPopped)
}

func (f *fsm) trimLocked(upTo kv.Version) {
	if upTo <= f.trimmed {
		return
	}
	f.trimmed = upTo
	if n := len(f.spilled); n > 0 {
		k := sort.Search(n, func(i int) bool { return f.spilled[i].version > upTo })
		for i := 0; i < k; i++ {
			r := &f.spilled[i]
			f.bytes -= int64(r.n)
			f.spilledBytes -= int64(r.n)
			f.mem -= r.mem()
			for _, t := range r.tags {
				if r.version > f.goneFloor && r.version > f.gone[t] {
					f.gone[t] = r.version
				}
			}
		}
		clear(f.spilled[:k])
		f.spilled = f.spilled[k:]
		if len(f.spilled) == 0 {
			f.spilled = nil
		}
		f.spill.trim(upTo)
	}
	k := sort.Search(len(f.entries), func(i int) bool { return f.entries[i].version > upTo })
	for i := 0; i < k; i++ {
		f.bytes -= int64(len(f.entries[i].raw))
		f.mem -= f.entries[i].mem
	}
	clear(f.entries[:k]) // let the trimmed commands be collected
	f.entries = f.entries[k:]
	if len(f.entries) == 0 {
		f.entries = nil
	}
	for t, q := range f.index {
		k := sort.Search(len(q), func(i int) bool { return q[i].msg.Version > upTo })
		if k == 0 {
			continue
		}
		if v := q[k-1].msg.Version; v > f.goneFloor && v > f.gone[t] {
			f.gone[t] = v
		}
		if k == len(q) {
			delete(f.index, t)
			continue
		}
		clear(q[:k])
		f.index[t] = q[k:]
	}
}

// peek returns tag's messages with versions in (after, end], stopping after
// about maxBytes (then end is the last message's version).
func (f *fsm) peek(tag kv.Tag, after kv.Version, maxBytes int) ([]logentry.Message, kv.Version, error) {
	f.mu.RLock()
	if gone := max(f.goneFloor, f.gone[tag]); after < gone {
		trimmed := f.trimmed
		f.mu.RUnlock()
		return nil, 0, fmt.Errorf("%w: tag %d peeks after %d but the log dropped its messages up to %d (trimmed up to %d)", logentry.ErrTrimmed, tag, after, gone, trimmed)
	}
	if n := len(f.spilled); n > 0 && after < f.spilled[n-1].version {
		return f.peekSpilledRUnlock(tag, after, maxBytes)
	}
	defer f.mu.RUnlock()
	msgs, end := f.peekMemoryLocked(tag, after, maxBytes, 0)
	return msgs, end, nil
}

// peekMemoryLocked returns tag's messages in memory after after, up to
// about maxBytes counting from size (what the caller already has), and
// where they end. f.mu must be held.
func (f *fsm) peekMemoryLocked(tag kv.Tag, after kv.Version, maxBytes, size int) ([]logentry.Message, kv.Version) {
	var msgs []logentry.Message
	end := f.lastVersion()
	q := f.index[tag]
	i := sort.Search(len(q), func(i int) bool { return q[i].msg.Version > after })
	for ; i < len(q); i++ {
		msgs = append(msgs, q[i].msg)
		size += q[i].size
		if maxBytes > 0 && size >= maxBytes && i+1 < len(q) {
			end = q[i].msg.Version
			break
		}
	}
	return msgs, end
}

// peekSpilledRUnlock is peek from a version below the last spilled one.
// Under f.mu (read-locked by the caller) it picks the spilled entries with
// messages for tag, up to about maxBytes of their size, and pins their
// segments; it reads them after unlocking, so that applies do not wait on
// the disk. If they all fit, the messages in memory follow.
func (f *fsm) peekSpilledRUnlock(tag kv.Tag, after kv.Version, maxBytes int) ([]logentry.Message, kv.Version, error) {
	var refs []spillRef
	budget, n := 0, len(f.spilled)
	i := sort.Search(n, func(i int) bool { return f.spilled[i].version > after })
	for ; i < n && (maxBytes <= 0 || budget < maxBytes); i++ {
		r := &f.spilled[i]
		if _, ok := slices.BinarySearch(r.tags, tag); ok {
			refs = append(refs, *r)
			budget += int(r.n)
		}
	}
	var (
		mem []logentry.Message
		end = f.lastVersion()
	)
	switch {
	case i < n || !(maxBytes <= 0 || budget < maxBytes):
		// Cut at the last entry picked, unless tag has nothing after it.
		if len(refs) > 0 && f.hasMessageAfter(tag, refs[len(refs)-1].version, i) {
			end = refs[len(refs)-1].version
		}
	default:
		mem, end = f.peekMemoryLocked(tag, after, maxBytes, budget)
	}
	store := f.spill
	pinned := store.pin(refs)
	f.mu.RUnlock()
	defer store.unpin(pinned)
	if len(refs) == 0 {
		return mem, end, nil
	}
	msgs := make([]logentry.Message, 0, len(refs)+len(mem))
	for k := range refs {
		raw, err := store.read(&refs[k])
		var rec record
		if err == nil {
			if rec, err = decodeRecord(raw); err != nil {
				err = fmt.Errorf("txlog: spilled entry %d: %w", refs[k].version, err)
			}
		}
		if err != nil {
			if !errors.Is(err, errSpillClosed) && f.spillReadFailed.CompareAndSwap(false, true) {
				f.logger.Error("txlog: a spilled entry does not read back: rebuilding the replica's state from its raft snapshot and log; until then the stashes that need it cannot catch up from it", "replica", f.replica, "err", err)
				if f.onSpillDamage != nil {
					f.onSpillDamage()
				}
			}
			return nil, 0, err
		}
		msg, _ := tagMessage(&rec.entry, tag)
		msgs = append(msgs, msg)
	}
	return append(msgs, mem...), end, nil
}

// hasMessageAfter reports whether tag has a message above version v, in
// f.spilled[from:] or in memory. f.mu must be held.
func (f *fsm) hasMessageAfter(tag kv.Tag, v kv.Version, from int) bool {
	for i := from; i < len(f.spilled); i++ {
		if _, ok := slices.BinarySearch(f.spilled[i].tags, tag); ok {
			return true
		}
	}
	q := f.index[tag]
	return len(q) > 0 && q[len(q)-1].msg.Version > v
}

type fsmState struct {
	Entries int
	Bytes   int64
	Memory  int64
	Spilled int64 // bytes of the entries spilled, of Bytes
	// entries spilled, of Entries
	SpilledEntries int
	Popped         map[kv.Tag]kv.Version
	MinPopped      kv.Version
	Trimmed        kv.Version
	Last           kv.Version
	Epoch          uint64
	Gone           map[kv.Tag]kv.Version
	GoneFloor      kv.Version
}

func (f *fsm) state() fsmState {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.stateLocked()
}

// stateLocked is state with f.mu held.
func (f *fsm) stateLocked() fsmState {
	s := fsmState{
		Entries:        len(f.spilled) + len(f.entries),
		Bytes:          f.bytes,
		Memory:         f.mem,
		Spilled:        f.spilledBytes,
		SpilledEntries: len(f.spilled),
		Popped:         make(map[kv.Tag]kv.Version, len(f.popped)),
		Trimmed:        f.trimmed,
		Last:           f.lastVersion(),
		Epoch:          f.epoch,
		Gone:           maps.Clone(f.gone),
		GoneFloor:      f.goneFloor,
	}
	first := true
	for t, v := range f.popped {
		s.Popped[t] = v
		if first || v < s.MinPopped {
			s.MinPopped, first = v, false
		}
	}
	return s
}

// Held is what the log holds for one tag: the entries after the tag's
// popped version, which the log cannot drop until the tag pops them.
type Held struct {
	Entries int
	Bytes   int64 // their encoded size
}

// held returns, for every tag of the set, the entries it has not popped.
func (f *fsm) held() map[kv.Tag]Held {
	f.mu.RLock()
	defer f.mu.RUnlock()
	// The spilled entries, then those in memory: suffix[i] is the encoded
	// size of the i-th and every later one.
	ns, n := len(f.spilled), len(f.spilled)+len(f.entries)
	version := func(i int) kv.Version {
		if i < ns {
			return f.spilled[i].version
		}
		return f.entries[i-ns].version
	}
	suffix := make([]int64, n+1)
	for i := n - 1; i >= 0; i-- {
		if i < ns {
			suffix[i] = suffix[i+1] + int64(f.spilled[i].n)
		} else {
			suffix[i] = suffix[i+1] + int64(len(f.entries[i-ns].raw))
		}
	}
	out := make(map[kv.Tag]Held, len(f.popped))
	for t, v := range f.popped {
		i := sort.Search(n, func(i int) bool { return version(i) > v })
		out[t] = Held{Entries: n - i, Bytes: suffix[i]}
	}
	return out
}

// Snapshot format (all integers varint/uvarint unless noted):
//
//	magic "TXLS" snapVersion:byte last trimmed [epoch:uvarint] nPopped (tag popped)* nEntries (len raw)* crc32c:4 bytes big-endian
//	version 3: magic 3 last trimmed epoch:uvarint goneFloor nPopped (tag popped)* nGone (tag gone)* nEntries (len raw)* crc
//
// Version 1 has no epoch (0); version 2 has one. Neither records what each
// tag lost to trims: decoding them sets goneFloor to trimmed, as if every
// tag had lost messages up to there. Version 3 records it. A state is
// written in the oldest version that holds it (version 1 at epoch 0 with
// nothing gone beyond the floor), so each state has one encoding.
var snapMagic = [4]byte{'T', 'X', 'L', 'S'}

const (
	snapVersion      byte = 1
	snapVersionEpoch byte = 2
	snapVersionGone  byte = 3
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

type fsmSnapshot struct {
	last, trimmed kv.Version
	epoch         uint64
	goneFloor     kv.Version
	popped        []TagVersion
	gone          []TagVersion
	// spilled are written first, read back from store (pinned until
	// Release), then entries.
	spilled []spillRef
	store   *spillStore
	pinned  []*spillSeg
	entries []fsmEntry
}

// Snapshot implements raft.FSM. It copies only slice headers: entries are
// immutable once applied, so Persist can run concurrently with Apply. The
// segments of the spilled entries stay until Release.
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	// Raft calls Snapshot and Restore between applies: nothing is applied
	// while the counters start again.
	f.sinceSnapRecords.Store(0)
	f.sinceSnapBytes.Store(0)
	s := &fsmSnapshot{
		last:      f.lastVersion(),
		trimmed:   f.trimmed,
		epoch:     f.epoch,
		goneFloor: f.goneFloor,
		entries:   slices.Clone(f.entries),
	}
	if len(f.spilled) > 0 {
		s.spilled, s.store = slices.Clone(f.spilled), f.spill
		s.pinned = f.spill.pin(s.spilled)
	}
	byTag := func(a, b TagVersion) int { return cmp.Compare(a.Tag, b.Tag) }
	for t, v := range f.popped {
		s.popped = append(s.popped, TagVersion{Tag: t, Version: v})
	}
	slices.SortFunc(s.popped, byTag)
	for t, v := range f.gone {
		s.gone = append(s.gone, TagVersion{Tag: t, Version: v})
	}
	slices.SortFunc(s.gone, byTag)
	return s, nil
}

func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if err := s.write(sink); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

func (s *fsmSnapshot) write(w io.Writer) error {
	crc := crc32.New(crcTable)
	// The buffer batches the small writes below; a snapshot smaller than
	// its 1 MiB (an empty or nearly empty log, as in tests and fuzzing)
	// gets a buffer of its own size instead.
	size := 64 + (len(s.popped)+len(s.gone))*(binary.MaxVarintLen32+binary.MaxVarintLen64)
	for i := range s.spilled {
		size += binary.MaxVarintLen64 + int(s.spilled[i].n)
	}
	for _, e := range s.entries {
		size += binary.MaxVarintLen64 + len(e.raw)
	}
	bw := bufio.NewWriterSize(io.MultiWriter(w, crc), min(size, 1<<20))
	var b []byte
	b = append(b, snapMagic[:]...)
	version := snapVersion
	switch {
	case len(s.gone) > 0 || s.goneFloor != s.trimmed:
		version = snapVersionGone
	case s.epoch != 0:
		version = snapVersionEpoch
	}
	b = append(b, version)
	b = binary.AppendVarint(b, int64(s.last))
	b = binary.AppendVarint(b, int64(s.trimmed))
	switch version {
	case snapVersionEpoch:
		b = binary.AppendUvarint(b, s.epoch)
	case snapVersionGone:
		b = binary.AppendUvarint(b, s.epoch)
		b = binary.AppendVarint(b, int64(s.goneFloor))
	}
	b = binary.AppendUvarint(b, uint64(len(s.popped)))
	for _, p := range s.popped {
		b = binary.AppendUvarint(b, uint64(p.Tag))
		b = binary.AppendVarint(b, int64(p.Version))
	}
	if version == snapVersionGone {
		b = binary.AppendUvarint(b, uint64(len(s.gone)))
		for _, p := range s.gone {
			b = binary.AppendUvarint(b, uint64(p.Tag))
			b = binary.AppendVarint(b, int64(p.Version))
		}
	}
	b = binary.AppendUvarint(b, uint64(len(s.spilled)+len(s.entries)))
	if _, err := bw.Write(b); err != nil {
		return err
	}
	for i := range s.spilled {
		raw, err := s.store.read(&s.spilled[i])
		if err != nil {
			return err
		}
		b = binary.AppendUvarint(b[:0], uint64(len(raw)))
		if _, err := bw.Write(b); err != nil {
			return err
		}
		if _, err := bw.Write(raw); err != nil {
			return err
		}
	}
	for _, e := range s.entries {
		b = binary.AppendUvarint(b[:0], uint64(len(e.raw)))
		if _, err := bw.Write(b); err != nil {
			return err
		}
		if _, err := bw.Write(e.raw); err != nil {
			return err
		}
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	_, err := w.Write(binary.BigEndian.AppendUint32(nil, crc.Sum32()))
	return err
}

func (s *fsmSnapshot) Release() {
	if s.store != nil {
		s.store.unpin(s.pinned)
		s.store, s.pinned = nil, nil
	}
}

// Restore implements raft.FSM: it replaces the whole state with the
// snapshot's.
func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	f.rebuildMu.Lock()
	defer f.rebuildMu.Unlock()
	nf := f.successor()
	if err := decodeSnapshotFrom(nf, rc); err != nil {
		nf.closeSpill()
		return err
	}
	f.mu.Lock()
	f.appliedIndex = 0
	old := f.replaceLocked(nf)
	f.sinceSnapRecords.Store(0)
	f.sinceSnapBytes.Store(0)
	f.mu.Unlock()
	if old != nil {
		old.close()
	}
	f.notify()
	return nil
}

// replaceLocked makes nf's state f's and returns f's old spill store, for
// the caller to close once f.mu is released. f.mu must be held.
func (f *fsm) replaceLocked(nf *fsm) *spillStore {
	f.entries, f.index, f.popped, f.trimmed, f.bytes, f.mem = nf.entries, nf.index, nf.popped, nf.trimmed, nf.bytes, nf.mem
	f.epoch = nf.epoch
	f.gone, f.goneFloor = nf.gone, nf.goneFloor
	old := f.spill
	f.spill, f.spilled, f.spilledBytes, f.spillFailed = nf.spill, nf.spilled, nf.spilledBytes, nf.spillFailed
	f.last.Store(nf.last.Load())
	return old
}

// rebuild replaces f's state, after a spilled entry did not read back,
// with what raft holds durably: the snapshot snap (of raft index
// snapIndex; nil: none, an empty state at index 0) and the raft records
// after it up to the last f applied, read with get. The new state spills
// to a new store as it fills. The records are applied under f's lock, so
// applies wait for them: the log after the last snapshot is at most about
// twice what the log holds (snapshotDue). The new state must reach f's
// last version, trim point and popped versions, or f is kept.
func (f *fsm) rebuild(snap io.Reader, snapIndex uint64, get func(index uint64, l *raft.Log) error) error {
	f.rebuildMu.Lock()
	defer f.rebuildMu.Unlock()
	nf := f.successor()
	if snap != nil {
		if err := decodeSnapshotFrom(nf, snap); err != nil {
			nf.closeSpill()
			return fmt.Errorf("txlog: rebuilding from snapshot %d: %w", snapIndex, err)
		}
	}
	f.mu.Lock()
	applied := max(f.appliedIndex, snapIndex)
	var rec raft.Log
	for i := snapIndex + 1; i <= applied; i++ {
		if err := get(i, &rec); err != nil {
			f.mu.Unlock()
			nf.closeSpill()
			return fmt.Errorf("txlog: rebuilding from raft record %d: %w", i, err)
		}
		if rec.Type == raft.LogCommand {
			_, _ = nf.applyRecordLocked(rec.Data) // refused as when first applied
		}
	}
	if a, b := f.stateLocked(), nf.state(); a.Last != b.Last || a.Trimmed != b.Trimmed || !maps.Equal(a.Popped, b.Popped) || a.Epoch != b.Epoch {
		f.mu.Unlock()
		nf.closeSpill()
		return fmt.Errorf("txlog: the rebuilt state (last %d, trimmed %d, epoch %d) is not the replica's (last %d, trimmed %d, epoch %d)", b.Last, b.Trimmed, b.Epoch, a.Last, a.Trimmed, a.Epoch)
	}
	old := f.replaceLocked(nf)
	f.spillReadFailed.Store(false)
	f.mu.Unlock()
	old.close()
	f.notify()
	return nil
}

// spillBlocked reports whether f's last spill write failed: what it holds
// past its memory bound stays in memory.
func (f *fsm) spillBlocked() bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.spillFailed
}

// successor returns an empty state machine of f's replica to replace f's
// state (Restore, rebuild): it spills as f does, to a store of its own, as
// it fills.
func (f *fsm) successor() *fsm {
	nf := newFSM(f.replica, f.logger, f.notify)
	if f.spillCfg != nil {
		nf.spillCfg, nf.spill = f.spillCfg, f.spillCfg.open()
	}
	return nf
}

// startSpill makes f spill, with cfg's bounds, from now on.
func (f *fsm) startSpill(cfg *spillConfig) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.spillCfg, f.spill = cfg, cfg.open()
}

// closeSpill drops what f spilled: its replica stopped, or it is not the
// state that was restored. Its spilled entries no longer read.
func (f *fsm) closeSpill() {
	f.mu.RLock()
	s := f.spill
	f.mu.RUnlock()
	if s != nil {
		s.close()
	}
}

// decodeSnapshot rebuilds a state machine from a snapshot, rejecting any
// corruption with an error.
func decodeSnapshot(data []byte, replica int, logger *slog.Logger, notify func()) (*fsm, error) {
	nf := newFSM(replica, logger, notify)
	if err := decodeSnapshotFrom(nf, bytes.NewReader(data)); err != nil {
		return nil, err
	}
	return nf, nil
}

// snapHeader is what a snapshot holds before its entries.
type snapHeader struct {
	version       byte
	last, trimmed kv.Version
	epoch         uint64
	goneFloor     kv.Version
	popped, gone  map[kv.Tag]kv.Version
	entries       uint64 // how many follow
}

// snapHeaderBytes is what decodeSnapshotFrom reads first, and doubles
// while the header does not fit.
const snapHeaderBytes = 64 << 10

// decodeSnapshotFrom decodes the snapshot rd reads into nf, a new state
// machine, one entry at a time: nf spills as it fills (if it spills), so
// restoring a log that holds gigabytes for a stash that is down does not
// need them in memory. The checksum is checked at the end: on any error
// the caller drops nf.
func decodeSnapshotFrom(nf *fsm, rd io.Reader) error {
	buf := make([]byte, 0, snapHeaderBytes)
	var (
		h   snapHeader
		off int
		eof bool
	)
	for {
		n, err := io.ReadFull(rd, buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		switch {
		case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
			eof = true
		case err != nil:
			return fmt.Errorf("txlog: reading snapshot: %w", err)
		}
		h, off, err = decodeSnapHeader(buf)
		if err == nil {
			break
		}
		if eof {
			return err
		}
		buf = slices.Grow(buf, cap(buf)) // a header past what was read: read more
	}
	nf.epoch, nf.goneFloor, nf.popped, nf.gone = h.epoch, h.goneFloor, h.popped, h.gone
	crc := crc32.New(crcTable)
	crc.Write(buf[:off])
	var rest io.Reader = bytes.NewReader(buf[off:])
	if !eof {
		rest = io.MultiReader(rest, rd)
	}
	r := &snapStream{br: bufio.NewReaderSize(rest, 64<<10), crc: crc}
	for i := uint64(0); i < h.entries; i++ {
		raw, err := r.entry()
		if err != nil {
			return fmt.Errorf("snapshot entry %d: %w", i, err)
		}
		rec, err := decodeRecord(raw)
		if err != nil {
			return fmt.Errorf("snapshot entry %d: %w", i, err)
		}
		if rec.kind != recEntry {
			return fmt.Errorf("%w: snapshot entry %d is not an entry", ErrCorrupt, i)
		}
		if rec.entry.Version <= nf.lastVersion() || rec.entry.Version <= h.trimmed {
			return fmt.Errorf("%w: snapshot entry %d has version %d out of order", ErrCorrupt, i, rec.entry.Version)
		}
		nf.addLocked(&rec.entry, raw)
	}
	var sum [4]byte
	if _, err := io.ReadFull(r.br, sum[:]); err != nil {
		return r.fail("snapshot checksum", err)
	}
	if binary.BigEndian.Uint32(sum[:]) != crc.Sum32() {
		return fmt.Errorf("%w: snapshot checksum mismatch", ErrCorrupt)
	}
	if n, _ := io.Copy(io.Discard, r.br); n != 0 {
		return fmt.Errorf("%w: snapshot: %d trailing bytes", ErrCorrupt, n)
	}
	if nf.lastVersion() > h.last {
		return fmt.Errorf("%w: snapshot entries go past its last version", ErrCorrupt)
	}
	nf.last.Store(int64(h.last))
	nf.trimmed = h.trimmed
	return nil
}

// decodeSnapHeader decodes the header at the start of b and returns it
// with its length. A b that holds only part of it fails like a damaged
// one: the caller reads more, if there is more, and tries again.
func decodeSnapHeader(b []byte) (h snapHeader, off int, err error) {
	if len(b) < len(snapMagic)+1 {
		return h, 0, fmt.Errorf("%w: snapshot too short (%d bytes)", ErrCorrupt, len(b))
	}
	if [4]byte(b[:4]) != snapMagic || b[4] < snapVersion || b[4] > snapVersionGone {
		return h, 0, fmt.Errorf("%w: bad snapshot header", ErrCorrupt)
	}
	h.version = b[4]
	h.popped, h.gone = make(map[kv.Tag]kv.Version), make(map[kv.Tag]kv.Version)
	r := &decode.Reader{B: b, Off: 5, Corrupt: ErrCorrupt, What: "snapshot last version"}
	h.last = kv.Version(r.Varint())
	r.What = "snapshot trimmed version"
	h.trimmed = kv.Version(r.Varint())
	h.goneFloor = h.trimmed
	switch h.version {
	case snapVersionEpoch:
		r.What = "snapshot epoch"
		h.epoch = r.Uvarint()
		if r.Err() == nil && h.epoch == 0 {
			r.Fail("epoch 0 in a version %d snapshot", snapVersionEpoch)
		}
	case snapVersionGone:
		r.What = "snapshot epoch"
		h.epoch = r.Uvarint()
		r.What = "snapshot gone floor"
		h.goneFloor = kv.Version(r.Varint())
		if r.Err() == nil && (h.goneFloor < 0 || h.goneFloor > h.trimmed) {
			r.Fail("gone floor %d outside [0, trimmed %d]", h.goneFloor, h.trimmed)
		}
	}
	r.What = "snapshot popped count"
	np := r.Count(2)
	for i := 0; i < np && r.Err() == nil; i++ {
		r.What = "snapshot popped tag"
		t := kv.Tag(r.Uint32())
		r.What = "snapshot popped version"
		h.popped[t] = kv.Version(r.Varint())
	}
	if h.version == snapVersionGone {
		r.What = "snapshot gone count"
		ng := r.Count(2)
		for i := 0; i < ng && r.Err() == nil; i++ {
			r.What = "snapshot gone tag"
			t := kv.Tag(r.Uint32())
			r.What = "snapshot gone version"
			v := kv.Version(r.Varint())
			if r.Err() != nil {
				break
			}
			if _, dup := h.gone[t]; dup || v <= h.goneFloor || v > h.trimmed {
				r.Fail("tag %d gone up to %d: a duplicate, or outside (gone floor %d, trimmed %d]", t, v, h.goneFloor, h.trimmed)
				break
			}
			h.gone[t] = v
		}
	}
	r.What = "snapshot entry count"
	h.entries = r.Uvarint()
	if r.Err() != nil {
		return h, 0, r.Err()
	}
	return h, r.Off, nil
}

// snapStream reads a snapshot's entries, adding what it reads to crc.
type snapStream struct {
	br  *bufio.Reader
	crc hash.Hash32
	off int64 // bytes read, for errors
}

// maxSnapEntryBytes bounds an entry's length: a larger one is damage.
const maxSnapEntryBytes = 1 << 30

// entry reads one entry: its length, then its raft command.
func (r *snapStream) entry() ([]byte, error) {
	n, err := binary.ReadUvarint(r)
	if err != nil {
		return nil, r.fail("length", err)
	}
	if n > maxSnapEntryBytes {
		return nil, fmt.Errorf("%w: length %d at offset %d", ErrCorrupt, n, r.off)
	}
	// Read in pieces: a damaged length does not allocate more than the
	// bytes that are there.
	raw := make([]byte, 0, min(n, 1<<20))
	for uint64(len(raw)) < n {
		k := min(n-uint64(len(raw)), 1<<20)
		raw = slices.Grow(raw, int(k))
		got, err := io.ReadFull(r.br, raw[len(raw):len(raw)+int(k)])
		raw = raw[:len(raw)+got]
		if err != nil {
			return nil, r.fail("command", err)
		}
	}
	r.crc.Write(raw)
	r.off += int64(len(raw))
	return raw, nil
}

// ReadByte reads one byte of a varint, adding it to crc.
func (r *snapStream) ReadByte() (byte, error) {
	c, err := r.br.ReadByte()
	if err == nil {
		r.crc.Write([]byte{c})
		r.off++
	}
	return c, err
}

// fail maps a read error: the end of the bytes, or a varint past 64 bits,
// is damage (ErrCorrupt); other errors are the reader's.
func (r *snapStream) fail(what string, err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: %s truncated at offset %d", ErrCorrupt, what, r.off)
	}
	if err.Error() == "binary: varint overflows a 64-bit integer" {
		return fmt.Errorf("%w: %s: varint overflows 64 bits at offset %d", ErrCorrupt, what, r.off)
	}
	return fmt.Errorf("txlog: reading snapshot: %w", err)
}
