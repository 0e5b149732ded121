package flash

import (
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/bits-and-blooms/bloom/v3"
)

// segment is one log file. Its bytes below size are immutable once
// written; the write buffer keeps recent chunks of them in memory.
type segment struct {
	id   uint32
	path string
	wf   *os.File // read-write handle: appends, recovery and cleaning reads
	rf   *os.File // point reads (O_DIRECT when configured; else wf)

	// Protected by Engine.mu.
	size  int64    // bytes written (header included)
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
	if s.rf != nil && s.rf != s.wf {
		s.rf.Close()
	}
	if s.wf != nil {
		s.wf.Close()
	}
	s.rf, s.wf = nil, nil
}

// createSegment writes a new segment with its header (through a temporary
// file renamed into place, so a segment file always has a whole header).
func createSegment(dir string, id uint32, durable, direct bool) (*segment, error) {
	path := filepath.Join(dir, segName(id))
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("flash: create segment: %w", err)
	}
	if _, err := f.WriteAt(encodeSegHeader(id), 0); err != nil {
		f.Close()
		return nil, fmt.Errorf("flash: write segment header %s: %w", tmp, err)
	}
	if durable {
		if err := f.Sync(); err != nil {
			f.Close()
			return nil, fmt.Errorf("flash: sync %s: %w", tmp, err)
		}
	}
	if err := os.Rename(tmp, path); err != nil {
		f.Close()
		return nil, fmt.Errorf("flash: rename %s: %w", tmp, err)
	}
	if durable {
		if err := syncDir(dir); err != nil {
			f.Close()
			return nil, err
		}
	}
	s := &segment{id: id, path: path, wf: f, rf: f, size: segHeaderSize}
	if direct {
		if rf, err := openDirect(path); err == nil {
			s.rf = rf
		}
	}
	s.refs.Store(1)
	return s, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("flash: open dir: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("flash: sync dir %s: %w", dir, err)
	}
	return nil
}
