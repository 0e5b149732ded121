package flash

import (
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"sync/atomic"
	"syscall"

	"github.com/bits-and-blooms/bloom/v3"

	"github.com/distash/distash/internal/fsys"
)

// segment is one log file. Its bytes below size are immutable once
// written; the write buffer keeps recent chunks of them in memory.
type segment struct {
	id   uint32
	path string
	wf   fsys.File // read-write handle through the engine's FS: appends, recovery and cleaning reads
	// rf is the point-read fast path, on the operating system's files only
	// (nil when the engine's FS is another, e.g. a fault-injecting one):
	// an *os.File that a user-level thread reads through io_uring, opened
	// O_DIRECT when rfDirect.
	rf       *os.File
	rfDirect bool

	// Protected by Engine.mu.
	size  int64    // bytes written (header included)
	sum   uint32   // CRC-32C of bytes [0, size): a sealed segment's checksum in the manifest
	live  int64    // padded bytes of entries the index points at
	tomb  int64    // padded bytes of tombstones the cleaner kept here
	wb    []*chunk // write buffer: chunk i holds bytes [i*chunkSize, (i+1)*chunkSize), nil if not held
	keys  *bloom.BloomFilter
	gone  bool // removed from the engine (cleaned); the file goes when unpinned
	clean bool // being cleaned

	refs atomic.Int32 // the engine's reference plus readers' pins
}

const chunkSize = 64 << 10

type chunk [chunkSize]byte

func segName(id uint32) string { return fmt.Sprintf("%010d.seg", id) }

// pin takes a reference; the caller holds Engine.mu (read or write) and
// the segment is in the engine's map, so refs is positive.
func (s *segment) pin() { s.refs.Add(1) }

// unpin drops a reference; the last one leaves the file for the reaper.
func (s *segment) unpin() { s.refs.Add(-1) }

// readBuffered copies [off, off+n) from the write buffer if it holds all
// of it. The caller holds Engine.mu.
func (s *segment) readBuffered(off int64, n int) ([]byte, bool) {
	first, last := off/chunkSize, (off+int64(n)-1)/chunkSize
	if n == 0 || last >= int64(len(s.wb)) {
		return nil, false
	}
	for c := first; c <= last; c++ {
		if s.wb[c] == nil {
			return nil, false
		}
	}
	out := make([]byte, n)
	for c, done := first, 0; c <= last; c++ {
		lo := int64(0)
		if c == first {
			lo = off - c*chunkSize
		}
		done += copy(out[done:], s.wb[c][lo:])
	}
	return out, true
}

func (s *segment) closeFiles() {
	if s.rf != nil {
		s.rf.Close()
	}
	if s.wf != nil {
		s.wf.Close()
	}
	s.rf, s.wf = nil, nil
}

// openFast opens the point-read fast path of s when the engine's files are
// the operating system's; without it reads go through s.wf.
func (e *Engine) openFast(s *segment) {
	if !e.osFS {
		return
	}
	if e.cfg.DirectIO {
		if rf, err := openRead(s.path, true); err == nil {
			s.rf, s.rfDirect = rf, true
			return
		}
	}
	if rf, err := openRead(s.path, false); err == nil {
		s.rf = rf
	}
}

// extend accounts bytes appended to s in its running checksum.
func (s *segment) extend(b []byte) { s.sum = crc32.Update(s.sum, castagnoli, b) }

// datasync makes f's written data durable. A failed sync is returned,
// never retried: the kernel may have dropped the dirty pages it could not
// write, so a later sync that succeeds proves nothing. Only EINTR, a sync
// that did not run, is tried again.
func datasync(f fsys.File) error {
	for {
		err := f.SyncData()
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

// createSegment writes a new segment with its header (through a temporary
// file renamed into place, so a segment file always has a whole header).
func (e *Engine) createSegment(id uint32) (*segment, error) {
	dir, durable := e.dir, e.durable
	path := e.fs.PathJoin(dir, segName(id))
	tmp := path + ".tmp"
	f, err := e.fs.Create(tmp)
	if err != nil {
		return nil, fmt.Errorf("flash: create segment: %w", err)
	}
	hdr := encodeSegHeader(id)
	if _, err := f.WriteAt(hdr, 0); err != nil {
		f.Close()
		return nil, fmt.Errorf("flash: write segment header %s: %w", tmp, err)
	}
	if durable {
		if err := f.Sync(); err != nil {
			f.Close()
			return nil, fmt.Errorf("flash: sync %s: %w", tmp, err)
		}
	}
	if err := e.fs.Rename(tmp, path); err != nil {
		f.Close()
		return nil, fmt.Errorf("flash: rename %s: %w", tmp, err)
	}
	if durable {
		if err := fsys.SyncDir(e.fs, dir); err != nil {
			f.Close()
			return nil, fmt.Errorf("flash: %w", err)
		}
	}
	s := &segment{id: id, path: path, wf: f, size: segHeaderSize}
	s.extend(hdr)
	e.openFast(s)
	s.refs.Store(1)
	return s, nil
}
