package flash

import (
	"errors"
	"fmt"
	"io"
	"math"
	"unsafe"

	"github.com/distash/distash/internal/fsys"
)

func uintptrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(&b[0])) }

// recoverSegment replays segment id into the index. Damage is a
// *CorruptionError (or, against the manifest's record want of a sealed
// segment, a *fsys.DamageError), except a torn tail of the last segment:
// its last frame incomplete or failing its checksum with no valid frame
// after it. That frame was never acknowledged (a group commit returns only
// after its frame is synced, and the next frame is written only after
// that), so it is dropped and the file truncated before it.
func (e *Engine) recoverSegment(id uint32, last bool, want *sealedSeg) error {
	path := e.fs.PathJoin(e.dir, segName(id))
	f, err := e.fs.OpenReadWrite(path)
	if err != nil {
		return fmt.Errorf("flash: open segment: %w", err)
	}
	data, err := readFile(f)
	if err != nil {
		f.Close()
		return fmt.Errorf("flash: read segment %s: %w", path, err)
	}
	if want != nil {
		switch {
		case int64(len(data)) != want.size:
			f.Close()
			return fsys.Damaged(path, "%d bytes where the manifest recorded %d (truncated or extended)", len(data), want.size)
		case crc(data) != want.sum:
			f.Close()
			return fsys.Damaged(path, "checksum mismatch: crc32c %08x, the manifest recorded %08x", crc(data), want.sum)
		}
	}
	// Registered before decoding: setLocked accounts live bytes to the
	// segment, and Open closes the files of every registered segment if
	// recovery fails.
	s := &segment{id: id, path: path, wf: f, size: int64(len(data))}
	s.keys = newBloom(max(e.cfg.SegmentBytes, int64(len(data))))
	s.refs.Store(1)
	e.mu.Lock()
	defer e.mu.Unlock()
	e.segs[id] = s

	valid, err := decodeSegment(path, id, data, last, e.nextLSN, func(_ int, h frameHeader, ents []decodedEntry) {
		for _, d := range ents {
			key := append([]byte(nil), d.key...)
			if d.kind == kindSet {
				l := loc{seg: id, off: uint32(d.off), n: uint32(d.size)}
				e.setLocked(key, e.hash(key), l, uint32(len(d.value)), d.cost, false)
				s.keys.Add(key)
			} else {
				e.deleteLocked(key)
			}
		}
		e.nextLSN = h.lsn + 1
		e.version.Store(h.version)
	})
	if err != nil {
		return err
	}
	if valid < len(data) {
		if err := e.dropTail(s, data[:valid]); err != nil {
			return fmt.Errorf("flash: drop torn tail of %s at %d: %w", path, valid, err)
		}
		e.m.torn.Add(int64(len(data) - valid))
		s.size = int64(valid)
	}
	s.extend(data[:valid])
	e.openFast(s)
	e.deadKick = 0
	return nil
}

// readFile reads a whole file through its handle.
func readFile(f fsys.File) ([]byte, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	data := make([]byte, fi.Size())
	if _, err := io.ReadFull(io.NewSectionReader(f, 0, fi.Size()), data); err != nil {
		return nil, err
	}
	return data, nil
}

// dropTail cuts s's file to keep, durably: a truncation where the file
// can be truncated (the OS's files), else a rewrite of keep through a
// temporary file renamed over it (file systems without truncation, such as
// the in-memory one of tests).
func (e *Engine) dropTail(s *segment, keep []byte) error {
	if t, ok := s.wf.(interface{ Truncate(int64) error }); ok {
		err := t.Truncate(int64(len(keep)))
		if err == nil {
			return datasync(s.wf)
		}
		if !errors.Is(err, errors.ErrUnsupported) {
			return err
		}
	}
	tmp := s.path + ".tmp"
	f, err := e.fs.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := f.WriteAt(keep, 0); err != nil {
		f.Close()
		return err
	}
	if err := datasync(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := e.fs.Rename(tmp, s.path); err != nil {
		return err
	}
	if err := fsys.SyncDir(e.fs, e.dir); err != nil {
		return err
	}
	nf, err := e.fs.OpenReadWrite(s.path)
	if err != nil {
		return err
	}
	s.wf.Close()
	s.wf = nf
	return nil
}

// decodedEntry is an entry of a valid frame and its offset in the file.
type decodedEntry struct {
	entry
	off int
}

// decodeSegment decodes data, the content of the file path of segment id,
// as recovery reads it: the header, then the frames in order, each with a
// sequence number at least minLSN and above the one before, calling fn
// with each valid frame's offset, header and entries (which alias data and
// ents' backing array is reused: fn must copy what it keeps). It returns
// the length of the valid content: len(data), or, if the last segment ends
// in a torn tail (its last frame incomplete or failing its checksum, with
// no valid frame after it), that frame's offset. Any other damage is a
// *CorruptionError naming path and the offset. It is the one decoder of
// segment files (recovery, cleaning) and is fuzzed (FuzzDecodeSegment).
func decodeSegment(path string, id uint32, data []byte, last bool, minLSN uint64, fn func(off int, h frameHeader, ents []decodedEntry)) (int, error) {
	sid, err := checkSegHeader(path, data)
	if err != nil {
		return 0, err
	}
	if sid != id {
		return 0, &CorruptionError{File: path, Offset: 16, Reason: fmt.Sprintf("header names segment %d", sid)}
	}
	if int64(len(data)) > math.MaxUint32 {
		// Locations hold 32-bit offsets; the writer rotates long before.
		return 0, &CorruptionError{File: path, Offset: math.MaxUint32, Reason: fmt.Sprintf("segment of %d bytes, past the format's 4 GiB", len(data))}
	}
	var ents []decodedEntry
	for off := segHeaderSize; off < len(data); {
		h, reason := checkFrame(data, off, minLSN)
		if reason != "" {
			if last && !validFrameAfter(data, off+8) {
				return off, nil
			}
			return 0, &CorruptionError{File: path, Offset: int64(off), Reason: reason}
		}
		// The frame's checksum holds, so damage inside it cannot be a torn
		// write: a malformed entry is corruption wherever the frame is.
		p, end := off+frameHeaderSize, off+frameHeaderSize+int(h.plen)
		ents = ents[:0]
		for i := uint32(0); i < h.count; i++ {
			ent, bad := parseEntry(data[p:end], true)
			if bad != "" {
				return 0, &CorruptionError{File: path, Offset: int64(p), Reason: bad}
			}
			ents = append(ents, decodedEntry{ent, p})
			p += pad8(ent.size) // stays within end: p, end and frames are 8-aligned
		}
		if p != end {
			return 0, &CorruptionError{File: path, Offset: int64(p), Reason: "bytes after the frame's last entry"}
		}
		fn(off, h, ents)
		minLSN = h.lsn + 1
		off = end
	}
	return len(data), nil
}

// checkFrame validates the frame at off and returns its header, or the
// reason it is not a valid frame.
func checkFrame(data []byte, off int, minLSN uint64) (frameHeader, string) {
	if len(data)-off < frameHeaderSize {
		return frameHeader{}, fmt.Sprintf("truncated frame header (%d of %d bytes)", len(data)-off, frameHeaderSize)
	}
	h, ok := parseFrameHeader(data[off:])
	switch {
	case !ok:
		return h, "bad frame header (magic or checksum)"
	case h.plen%8 != 0:
		return h, fmt.Sprintf("frame payload length %d is not a multiple of 8", h.plen)
	case int64(off)+frameHeaderSize+int64(h.plen) > int64(len(data)):
		return h, fmt.Sprintf("truncated frame (%d payload bytes, %d in the file)", h.plen, len(data)-off-frameHeaderSize)
	case crc(data[off+frameHeaderSize:off+frameHeaderSize+int(h.plen)]) != h.pcrc:
		return h, "frame checksum mismatch"
	case h.lsn < minLSN || h.lsn == math.MaxUint64: // the last would wrap the next minimum to 0
		return h, fmt.Sprintf("frame sequence number %d out of order (expected at least %d)", h.lsn, minLSN)
	}
	return h, ""
}

// validFrameAfter reports whether a valid frame starts anywhere at or
// after from (8-byte aligned): if so, damage before it is not a torn tail.
func validFrameAfter(data []byte, from int) bool {
	for p := (from + 7) &^ 7; p+frameHeaderSize <= len(data); p += 8 {
		if _, reason := checkFrame(data, p, 0); reason == "" {
			return true
		}
	}
	return false
}
