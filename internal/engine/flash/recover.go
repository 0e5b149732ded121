package flash

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"unsafe"
)

func uintptrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(&b[0])) }

// recoverSegment replays segment id into the index. Damage is a
// *CorruptionError, except a torn tail of the last segment: its last frame
// incomplete or failing its checksum with no valid frame after it. That
// frame was never acknowledged (a group commit returns only after its
// frame is synced, and the next frame is written only after that), so it
// is dropped and the file truncated before it.
func (e *Engine) recoverSegment(id uint32, last bool) error {
	path := filepath.Join(e.dir, segName(id))
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("flash: open segment: %w", err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		f.Close()
		return fmt.Errorf("flash: read segment: %w", err)
	}
	// Registered before decoding: setLocked accounts live bytes to the
	// segment, and Open closes the files of every registered segment if
	// recovery fails.
	s := &segment{id: id, path: path, wf: f, rf: f, size: int64(len(data))}
	if e.cfg.DirectIO {
		if rf, err := openDirect(path); err == nil {
			s.rf = rf
		}
	}
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
		if err := f.Truncate(int64(valid)); err != nil {
			return fmt.Errorf("flash: drop torn tail of %s at %d: %w", path, valid, err)
		}
		if err := datasync(f); err != nil {
			return fmt.Errorf("flash: sync %s: %w", path, err)
		}
		e.m.torn.Add(int64(len(data) - valid))
		s.size = int64(valid)
	}
	e.deadKick = 0
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
