package flash

import (
	"fmt"
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
	sid, err := checkSegHeader(path, data)
	if err != nil {
		f.Close()
		return err
	}
	if sid != id {
		f.Close()
		return &CorruptionError{File: path, Offset: 16, Reason: fmt.Sprintf("header names segment %d", sid)}
	}
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

	off := segHeaderSize
	for off < len(data) {
		h, reason := checkFrame(data, off, e.nextLSN)
		if reason != "" {
			if last && !validFrameAfter(data, off+8) {
				if err := f.Truncate(int64(off)); err != nil {
					return fmt.Errorf("flash: drop torn tail of %s at %d: %w", path, off, err)
				}
				if err := datasync(f); err != nil {
					return fmt.Errorf("flash: sync %s: %w", path, err)
				}
				e.m.torn.Add(int64(len(data) - off))
				s.size = int64(off)
				break
			}
			return &CorruptionError{File: path, Offset: int64(off), Reason: reason}
		}
		payload := data[off+frameHeaderSize : off+frameHeaderSize+int(h.plen)]
		p := 0
		for i := uint32(0); i < h.count; i++ {
			ent, bad := parseEntry(payload[p:], true)
			if bad != "" {
				return &CorruptionError{File: path, Offset: int64(off + frameHeaderSize + p), Reason: bad}
			}
			key := append([]byte(nil), ent.key...)
			if ent.kind == kindSet {
				l := loc{seg: id, off: uint32(off + frameHeaderSize + p), n: uint32(ent.size)}
				e.setLocked(key, e.hash(key), l, uint32(len(ent.value)), ent.cost, false)
				s.keys.Add(key)
			} else {
				e.deleteLocked(key)
			}
			p += pad8(ent.size)
		}
		if p != len(payload) {
			return &CorruptionError{File: path, Offset: int64(off + frameHeaderSize + p), Reason: "bytes after the frame's last entry"}
		}
		e.nextLSN = h.lsn + 1
		e.version.Store(h.version)
		off += frameHeaderSize + int(h.plen)
	}
	e.deadKick = 0
	return nil
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
	case h.lsn < minLSN:
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
