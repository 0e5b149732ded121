package txlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/distash/distash/internal/fsys"
	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/logentry"
)

// Spilling: a tag that stops popping (a stash that is down) makes the log
// hold every entry it has not popped. Past the memory budget the state
// machine moves its oldest entries to segment files (a spill store) and
// keeps, per spilled entry, only where it is and which tags it has
// messages for; a peek below the spilled version reads them back. The
// files are scratch: raft's log and snapshots hold every entry durably,
// so a replica that restarts clears them and spills again while it
// restores its snapshot. A snapshot reads the spilled entries back
// (streaming from the files) to write them, as it writes those in memory.

// spillSegmentBytes is the size past which the spill store starts a new
// segment file: trims delete whole segments.
const spillSegmentBytes = 64 << 20

// errSpillClosed is what reads of a closed spill store return: the
// replica stopped.
var errSpillClosed = errors.New("txlog: spill store closed")

// errSpillDiskLow: the disk has too little free space to spill (see
// spillConfig.minFree). Not sticky: a later write tries again.
var errSpillDiskLow = errors.New("txlog: too little free disk space to spill")

// spillMinFree is the free disk space a new spill segment must leave,
// besides twice what the log holds: raft's log and snapshots need room
// too, and a log replica whose raft store fills its disk fails for good,
// which stops every commit. Better to keep entries in memory and let the
// hold bound act.
const spillMinFree = 1 << 30

// spillConfig is how a replica's state machines spill: the directory the
// stores of its successive state machines (one per Restore) live under,
// and the memory bounds.
type spillConfig struct {
	fs   fsys.FS
	base string
	// at and to: when the entries in memory pass at bytes, the oldest
	// are spilled until at most to bytes stay.
	at, to int64
	// minFree: a new segment is started only while the disk has more than
	// minFree bytes free plus twice what the log holds.
	minFree int64
	gen     atomic.Int64
}

// SpillFactor: entries spill once their memory passes SpillFactor times
// Options.MemoryBytes, the most a replica holds in memory. Below, the log
// is over its budget only while stashes flush and pop (OverMemoryBudget),
// and nothing is written to disk twice. Each time, the oldest entries are
// written until the memory is back under the bound by spillChunkBytes (or
// a quarter of the bound): the apply that spills holds the state
// machine's lock, and commits wait on applies (8 MiB is a few
// milliseconds of writing).
const SpillFactor = 2

const spillChunkBytes = 8 << 20

// newSpillConfig clears base (what an earlier run spilled is scratch) and
// returns the config of the stores under it.
func newSpillConfig(fs fsys.FS, base string, memoryBytes int64) (*spillConfig, error) {
	if err := fs.RemoveAll(base); err != nil {
		return nil, fmt.Errorf("txlog: clearing spill directory: %w", err)
	}
	at := SpillFactor * memoryBytes
	return &spillConfig{fs: fs, base: base, at: at, to: at - min(at/4, spillChunkBytes), minFree: spillMinFree}, nil
}

// open returns a new, empty store in a directory of its own.
func (c *spillConfig) open() *spillStore {
	return &spillStore{fs: c.fs, dir: filepath.Join(c.base, strconv.FormatInt(c.gen.Add(1), 10)), minFree: c.minFree, usageDir: filepath.Dir(c.base)}
}

// spillStore holds one state machine's spilled entries in segment files.
// Writes and trims run under the state machine's write lock; reads under
// its read lock, or (snapshots) on segments they pinned.
type spillStore struct {
	fs       fsys.FS
	dir      string
	minFree  int64
	usageDir string // an existing directory on the same disk (GetDiskUsage)

	mu     sync.Mutex
	segs   []*spillSeg // live segments, oldest first; the last takes writes
	next   int
	failed error // the first write error: nothing more is spilled
	closed bool
	buf    []byte // a record being written
}

// spillBufKeep bounds the record buffer a store keeps between writes.
const spillBufKeep = 1 << 20

// spillSeg is one segment file.
type spillSeg struct {
	path    string
	f       fsys.File
	size    int64
	last    kv.Version // newest entry written to it
	pins    int        // snapshots still reading it
	dropped bool       // trimmed or closed: removed once unpinned
}

// spillRef is a spilled entry: where its raft command is, and the tags it
// has messages for (what a peek of another tag skips without reading).
type spillRef struct {
	version kv.Version
	seg     *spillSeg
	off     int64
	n       int32 // len(raw)
	tags    []kv.Tag
}

// spillRefBytes is the memory a spilled entry keeps, besides its tags.
var spillRefBytes = int64(unsafe.Sizeof(spillRef{}))

func (r *spillRef) mem() int64 { return spillRefBytes + int64(len(r.tags))*4 }

// write appends raw (the raft command of entry version) with its
// checksum; held is what the log holds, for the free space a new segment
// must leave (errSpillDiskLow). After a failed write the store takes no
// more (failed).
func (s *spillStore) write(version kv.Version, raw []byte, held int64) (*spillSeg, int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failed != nil {
		return nil, 0, s.failed
	}
	if s.closed {
		return nil, 0, errSpillClosed
	}
	seg, err := s.segment(held)
	if errors.Is(err, errSpillDiskLow) {
		return nil, 0, err
	}
	if err == nil {
		s.buf = binary.BigEndian.AppendUint32(append(s.buf[:0], raw...), crc32.Checksum(raw, crcTable))
		rec := s.buf
		if cap(s.buf) > spillBufKeep {
			s.buf = nil // an outsized entry: do not keep its buffer
		}
		if _, err = seg.f.Write(rec); err == nil {
			off := seg.size
			seg.size += int64(len(rec))
			seg.last = version
			return seg, off, nil
		}
	}
	s.failed = fmt.Errorf("txlog: spilling to %s: %w", s.dir, err)
	return nil, 0, s.failed
}

// segment returns the segment that takes the next write.
func (s *spillStore) segment(held int64) (*spillSeg, error) {
	if n := len(s.segs); n > 0 && s.segs[n-1].size < spillSegmentBytes {
		return s.segs[n-1], nil
	}
	// A file system that cannot tell is taken to have room.
	if du, err := s.fs.GetDiskUsage(s.usageDir); err == nil {
		if need := s.minFree + spillSegmentBytes + 2*held; du.AvailBytes < uint64(need) {
			return nil, fmt.Errorf("%w: %d bytes free in %s, a new segment needs %d", errSpillDiskLow, du.AvailBytes, s.usageDir, need)
		}
	}
	if s.next == 0 {
		if err := s.fs.MkdirAll(s.dir, 0o755); err != nil {
			return nil, err
		}
	}
	path := filepath.Join(s.dir, fmt.Sprintf("%06d.spill", s.next))
	f, err := s.fs.Create(path)
	if err != nil {
		return nil, err
	}
	s.next++
	seg := &spillSeg{path: path, f: f}
	s.segs = append(s.segs, seg)
	return seg, nil
}

// read returns ref's raft command, checking it against its checksum: a
// spilled entry that does not read back as written is ErrCorrupt.
func (s *spillStore) read(ref *spillRef) ([]byte, error) {
	buf := make([]byte, int(ref.n)+4)
	if _, err := ref.seg.f.ReadAt(buf, ref.off); err != nil {
		s.mu.Lock()
		closed := s.closed
		s.mu.Unlock()
		if closed {
			return nil, errSpillClosed
		}
		return nil, fmt.Errorf("txlog: reading spilled entry %d from %s: %w", ref.version, ref.seg.path, err)
	}
	raw := buf[:ref.n]
	if crc32.Checksum(raw, crcTable) != binary.BigEndian.Uint32(buf[ref.n:]) {
		return nil, fmt.Errorf("%w: spilled entry %d in %s fails its checksum", ErrCorrupt, ref.version, ref.seg.path)
	}
	return raw, nil
}

// trim drops the segments whose entries are all at or below upTo.
func (s *spillStore) trim(upTo kv.Version) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	k := 0
	for k < len(s.segs) && s.segs[k].last <= upTo {
		s.drop(s.segs[k])
		k++
	}
	s.segs = slices.Delete(s.segs, 0, k)
}

// drop removes seg's file, or leaves that to the last unpin. s.mu must be
// held.
func (s *spillStore) drop(seg *spillSeg) {
	seg.dropped = true
	if seg.pins > 0 {
		return
	}
	seg.f.Close()
	_ = s.fs.Remove(seg.path)
}

// pin keeps the segments of refs until unpin: a snapshot reads them
// outside the state machine's lock.
func (s *spillStore) pin(refs []spillRef) []*spillSeg {
	s.mu.Lock()
	defer s.mu.Unlock()
	var segs []*spillSeg
	for i := range refs {
		if seg := refs[i].seg; len(segs) == 0 || segs[len(segs)-1] != seg {
			seg.pins++
			segs = append(segs, seg)
		}
	}
	return segs
}

func (s *spillStore) unpin(segs []*spillSeg) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, seg := range segs {
		seg.pins--
		if seg.pins == 0 && seg.dropped {
			s.drop(seg)
		}
	}
	s.removeIfDone()
}

// close drops every segment: the state machine is replaced (Restore) or
// its replica stopped. Pinned segments go with their last unpin, and the
// directory with the last of them.
func (s *spillStore) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	for _, seg := range s.segs {
		s.drop(seg)
	}
	s.removeIfDone()
}

// removeIfDone removes a closed store's directory once no snapshot reads
// it. s.mu must be held.
func (s *spillStore) removeIfDone() {
	if !s.closed {
		return
	}
	s.segs = slices.DeleteFunc(s.segs, func(seg *spillSeg) bool { return seg.pins == 0 })
	if len(s.segs) == 0 {
		_ = s.fs.RemoveAll(s.dir)
	}
}

// tagMessage returns tag's message of entry e (its mutations for tag,
// each once) and its size for maxBytes, as addLocked indexes it.
func tagMessage(e *logentry.Entry, tag kv.Tag) (logentry.Message, int) {
	msg := logentry.Message{Version: e.Version}
	size := 0
	for i := range e.Mutations {
		m := &e.Mutations[i]
		if slices.Contains(m.Tags, tag) {
			msg.Mutations = append(msg.Mutations, m.Mutation)
			size += m.Bytes() + msgOverhead
		}
	}
	return msg, size
}
