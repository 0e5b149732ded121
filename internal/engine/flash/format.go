package flash

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"github.com/distash/distash/internal/fsys"
)

// On-disk format. All integers are little endian; everything is 8-byte aligned.
//
// A segment file NNNNNNNNNN.seg starts with a 32-byte header:
//
//	0  magic   [8]byte  "DSFLASH\x00"
//	8  format  uint32   formatVersion
//	12 flags   uint32   segManaged: the segment is listed in the manifest
//	                    (0 in segments written before the manifest existed)
//	16 id      uint64   the segment's id (must match the file name)
//	24 resv    uint32   0
//	28 crc     uint32   CRC32C of bytes [0, 28)
//
// followed by frames. A frame is one group commit (or one garbage
// collection step) and is all-or-nothing on recovery:
//
//	0  magic   uint32   frameMagic
//	4  hcrc    uint32   CRC32C of bytes [8, 40)
//	8  plen    uint32   payload length (a multiple of 8)
//	12 pcrc    uint32   CRC32C of the payload
//	16 lsn     uint64   log sequence number, increasing through the log
//	24 version int64    the engine's version once this frame is applied
//	32 count   uint32   entries in the payload
//	36 flags   uint32   frameGC for a relocation frame
//	40 payload: count entries
//
// An entry is the net effect of the frame on one key (a key appears at most
// once per frame), padded to 8 bytes:
//
//	0  crc     uint32   CRC32C of bytes [4, 16), the key and the value
//	4  kind    uint8    kindSet or kindDelete
//	5  resv    uint8    0
//	6  klen    uint16
//	8  vlen    uint32
//	12 cost    uint32   recomputation cost (camp eviction)
//	16 key, value, zero padding
//
// Each entry has its own checksum so that a point read can verify the one
// entry it fetched; the frame checksum makes a group commit atomic.
const (
	segMagic      = "DSFLASH\x00"
	formatVersion = 1
	segHeaderSize = 32
	segManaged    = 1

	frameMagic      = 0x314d5246 // "FRM1"
	frameHeaderSize = 40
	frameGC         = 1

	entryHeaderSize = 16
	kindSet         = 1
	kindDelete      = 2

	maxKeyLen = 1<<16 - 1
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func crc(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

func pad8(n int) int { return (n + 7) &^ 7 }

// CorruptionError reports damaged or foreign data in a segment file.
type CorruptionError struct {
	File   string
	Offset int64
	Reason string
}

func (e *CorruptionError) Error() string {
	return fmt.Sprintf("flash: corrupt segment %s at offset %d: %s", e.File, e.Offset, e.Reason)
}

// Is makes errors.Is(err, fsys.ErrDamaged) hold for a *CorruptionError.
func (e *CorruptionError) Is(target error) bool { return target == fsys.ErrDamaged }

// As makes errors.As find a *fsys.DamageError in a *CorruptionError: the
// product's one type for a file that cannot be trusted.
func (e *CorruptionError) As(target any) bool {
	if p, ok := target.(**fsys.DamageError); ok {
		*p = &fsys.DamageError{Path: e.File, Reason: fmt.Sprintf("at offset %d: %s", e.Offset, e.Reason)}
		return true
	}
	return false
}

// segIsManaged reports whether a segment header (already checked) says its
// segment is listed in a manifest.
func segIsManaged(b []byte) bool { return binary.LittleEndian.Uint32(b[12:])&segManaged != 0 }

func encodeSegHeader(id uint32) []byte {
	b := make([]byte, segHeaderSize)
	copy(b, segMagic)
	binary.LittleEndian.PutUint32(b[8:], formatVersion)
	binary.LittleEndian.PutUint32(b[12:], segManaged)
	binary.LittleEndian.PutUint64(b[16:], uint64(id))
	binary.LittleEndian.PutUint32(b[28:], crc(b[:28]))
	return b
}

// checkSegHeader validates a segment header and returns its id.
func checkSegHeader(path string, b []byte) (uint32, error) {
	if len(b) < segHeaderSize {
		return 0, &CorruptionError{path, int64(len(b)), fmt.Sprintf("truncated segment header (%d of %d bytes)", len(b), segHeaderSize)}
	}
	if string(b[:8]) != segMagic {
		return 0, &CorruptionError{path, 0, fmt.Sprintf("bad magic %q, not a flash segment", b[:8])}
	}
	if got, want := binary.LittleEndian.Uint32(b[28:]), crc(b[:28]); got != want {
		return 0, &CorruptionError{path, 28, "segment header checksum mismatch"}
	}
	if v := binary.LittleEndian.Uint32(b[8:]); v != formatVersion {
		return 0, &CorruptionError{path, 8, fmt.Sprintf("unsupported format version %d", v)}
	}
	id := binary.LittleEndian.Uint64(b[16:])
	if id == 0 || id > 1<<32-1 {
		return 0, &CorruptionError{path, 16, fmt.Sprintf("bad segment id %d", id)}
	}
	return uint32(id), nil
}

type frameHeader struct {
	plen    uint32
	pcrc    uint32
	lsn     uint64
	version int64
	count   uint32
	flags   uint32
}

func putFrameHeader(b []byte, h frameHeader) {
	binary.LittleEndian.PutUint32(b[0:], frameMagic)
	binary.LittleEndian.PutUint32(b[8:], h.plen)
	binary.LittleEndian.PutUint32(b[12:], h.pcrc)
	binary.LittleEndian.PutUint64(b[16:], h.lsn)
	binary.LittleEndian.PutUint64(b[24:], uint64(h.version))
	binary.LittleEndian.PutUint32(b[32:], h.count)
	binary.LittleEndian.PutUint32(b[36:], h.flags)
	binary.LittleEndian.PutUint32(b[4:], crc(b[8:frameHeaderSize]))
}

// parseFrameHeader decodes a frame header; ok is false if the magic or the
// header checksum is wrong.
func parseFrameHeader(b []byte) (h frameHeader, ok bool) {
	if binary.LittleEndian.Uint32(b[0:]) != frameMagic {
		return h, false
	}
	if binary.LittleEndian.Uint32(b[4:]) != crc(b[8:frameHeaderSize]) {
		return h, false
	}
	h.plen = binary.LittleEndian.Uint32(b[8:])
	h.pcrc = binary.LittleEndian.Uint32(b[12:])
	h.lsn = binary.LittleEndian.Uint64(b[16:])
	h.version = int64(binary.LittleEndian.Uint64(b[24:]))
	h.count = binary.LittleEndian.Uint32(b[32:])
	h.flags = binary.LittleEndian.Uint32(b[36:])
	return h, true
}

// entrySize is the unpadded size of an entry.
func entrySize(klen, vlen int) int { return entryHeaderSize + klen + vlen }

// appendEntry appends an entry to dst.
func appendEntry(dst []byte, kind uint8, key, value []byte, cost uint32) []byte {
	start := len(dst)
	n := pad8(entrySize(len(key), len(value)))
	dst = append(dst, make([]byte, n)...)
	e := dst[start:]
	e[4] = kind
	binary.LittleEndian.PutUint16(e[6:], uint16(len(key)))
	binary.LittleEndian.PutUint32(e[8:], uint32(len(value)))
	binary.LittleEndian.PutUint32(e[12:], cost)
	copy(e[entryHeaderSize:], key)
	copy(e[entryHeaderSize+len(key):], value)
	binary.LittleEndian.PutUint32(e[0:], crc(e[4:entrySize(len(key), len(value))]))
	return dst
}

type entry struct {
	kind  uint8
	cost  uint32
	key   []byte
	value []byte
	size  int // unpadded
}

// parseEntry decodes the entry at the start of b; check verifies its
// checksum. It returns a reason when the entry is malformed.
func parseEntry(b []byte, check bool) (entry, string) {
	if len(b) < entryHeaderSize {
		return entry{}, "entry header past the end of its data"
	}
	klen := int(binary.LittleEndian.Uint16(b[6:]))
	vlen := int(binary.LittleEndian.Uint32(b[8:]))
	n := entrySize(klen, vlen)
	if vlen > len(b) || n > len(b) {
		return entry{}, fmt.Sprintf("entry of %d bytes past the end of its data (%d bytes)", n, len(b))
	}
	if check && binary.LittleEndian.Uint32(b[0:]) != crc(b[4:n]) {
		return entry{}, "entry checksum mismatch"
	}
	kind := b[4]
	if kind != kindSet && kind != kindDelete {
		return entry{}, fmt.Sprintf("unknown entry kind %d", kind)
	}
	return entry{
		kind:  kind,
		cost:  binary.LittleEndian.Uint32(b[12:]),
		key:   b[entryHeaderSize : entryHeaderSize+klen],
		value: b[entryHeaderSize+klen : n],
		size:  n,
	}, ""
}
