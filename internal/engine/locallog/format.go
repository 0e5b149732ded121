package locallog

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/distash/distash/internal/engine"
	"github.com/distash/distash/internal/fsys"
	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/version"
)

// Every file is a sequence of records: a 4-byte little-endian payload
// length, the payload's 4-byte CRC-32C (fsys.Checksum), the payload. The
// payload's first byte is its kind.
const (
	recHeader   = 'H' // a log file's first record: magic, seq, start version
	recBatch    = 'B' // one Apply: version, writes
	recSnapshot = 'S' // a snapshot file's first record: magic, seq, version
	recPairs    = 'P' // a chunk of a snapshot's pairs
	recEnd      = 'E' // a snapshot's last record: pair count
)

// magic follows the kind byte of header and snapshot records.
const magic = "distash-locallog-1"

// FormatKind and FormatVersion state the files' format in the directory's
// marker (fsys.OpenFormat); bump FormatVersion with any change to them.
const (
	FormatKind    = "local-log"
	FormatVersion = 1
)

func init() { version.RegisterFormat(FormatKind, FormatVersion) }

// maxRecord bounds a record's length: a length field above it is a torn or
// damaged record, not an allocation to make. A batch holds at most what a
// stash flushes at once (its MVCC window budget, 64 MiB by default, or a
// 1 MiB fetch chunk); twice the largest window allowed is ample.
const maxRecord = 1 << 30

// Write kinds inside a batch record.
const (
	opSet        = 0
	opClear      = 1
	opClearRange = 2
)

// appendRecord frames payload (which starts with its kind byte) onto dst.
func appendRecord(dst, payload []byte) []byte {
	var h [8]byte
	binary.LittleEndian.PutUint32(h[:4], uint32(len(payload)))
	binary.LittleEndian.PutUint32(h[4:], fsys.Checksum(payload))
	dst = append(dst, h[:]...)
	return append(dst, payload...)
}

// frame reserves a record header at the start of buf and returns buf;
// seal fills it in once the payload is appended.
func frame(buf []byte) []byte { return append(buf[:0], 0, 0, 0, 0, 0, 0, 0, 0) }

func seal(buf []byte) []byte {
	p := buf[8:]
	binary.LittleEndian.PutUint32(buf[:4], uint32(len(p)))
	binary.LittleEndian.PutUint32(buf[4:8], fsys.Checksum(p))
	return buf
}

func appendBytes(dst, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

// appendBatch appends b as a framed batch record to buf[:0].
func appendBatch(buf []byte, b *engine.Batch) []byte {
	buf = frame(buf)
	buf = append(buf, recBatch)
	buf = binary.AppendUvarint(buf, uint64(b.Version))
	buf = binary.AppendUvarint(buf, uint64(len(b.Writes)))
	for _, w := range b.Writes {
		switch {
		case w.IsClearRange():
			buf = append(buf, opClearRange)
			buf = appendBytes(buf, w.Key)
			buf = appendBytes(buf, w.End)
		case w.IsClear():
			buf = append(buf, opClear)
			buf = appendBytes(buf, w.Key)
		default:
			buf = append(buf, opSet)
			buf = appendBytes(buf, w.Key)
			buf = appendBytes(buf, w.Value)
			buf = binary.AppendUvarint(buf, uint64(w.Cost))
		}
	}
	return seal(buf)
}

// header is the first record of a file. A log file names the file it
// follows and that file's length when it was left (prevSeq 0: none), so
// that replay goes on only across files that follow each other byte for
// byte; a snapshot has no predecessor.
type header struct {
	seq     uint64
	version kv.Version // a log: the version it starts at; a snapshot: its version
	prevSeq uint64
	prevEnd int64
}

func (h header) payload(kind byte) []byte {
	p := append([]byte{kind}, magic...)
	p = binary.AppendUvarint(p, h.seq)
	p = binary.AppendUvarint(p, uint64(h.version))
	p = binary.AppendUvarint(p, h.prevSeq)
	return binary.AppendUvarint(p, uint64(h.prevEnd))
}

// errTorn is a record cut short or failing its checksum: where a log file
// was being written when its process died, or damage.
var errTorn = errors.New("torn or damaged record")

// reader reads records of one file.
type reader struct {
	r   *bufio.Reader
	off int64 // offset of the next record
	buf []byte
}

func newReader(f io.Reader) *reader { return &reader{r: bufio.NewReaderSize(f, 1<<20)} }

// next returns the next record's payload, valid until the next call;
// io.EOF at a clean end of file, errTorn (wrapped, with the offset) for a
// partial or damaged record.
func (rd *reader) next() ([]byte, error) {
	var h [8]byte
	n, err := io.ReadFull(rd.r, h[:])
	if err == io.EOF {
		return nil, io.EOF
	}
	if err != nil {
		if err == io.ErrUnexpectedEOF {
			return nil, fmt.Errorf("%w at offset %d: %d of 8 header bytes", errTorn, rd.off, n)
		}
		return nil, err
	}
	size := binary.LittleEndian.Uint32(h[:4])
	if size == 0 || size > maxRecord {
		return nil, fmt.Errorf("%w at offset %d: length %d", errTorn, rd.off, size)
	}
	if cap(rd.buf) < int(size) {
		rd.buf = make([]byte, size)
	}
	p := rd.buf[:size]
	if n, err := io.ReadFull(rd.r, p); err != nil {
		if err == io.ErrUnexpectedEOF || err == io.EOF {
			return nil, fmt.Errorf("%w at offset %d: %d of %d payload bytes", errTorn, rd.off, n, size)
		}
		return nil, err
	}
	if fsys.Checksum(p) != binary.LittleEndian.Uint32(h[4:]) {
		return nil, fmt.Errorf("%w at offset %d: checksum mismatch", errTorn, rd.off)
	}
	rd.off += 8 + int64(size)
	return p, nil
}

// decoder reads the fields of one payload.
type decoder struct {
	p   []byte
	err error
}

var errShort = errors.New("record shorter than its fields")

func (d *decoder) byte() byte {
	if d.err != nil || len(d.p) == 0 {
		d.err = errShort
		return 0
	}
	b := d.p[0]
	d.p = d.p[1:]
	return b
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.p)
	if n <= 0 {
		d.err = errShort
		return 0
	}
	d.p = d.p[n:]
	return v
}

// bytes returns the next length-prefixed field, aliasing the payload.
func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if d.err != nil || uint64(len(d.p)) < n {
		d.err = errShort
		return nil
	}
	b := d.p[:n:n]
	d.p = d.p[n:]
	return b
}

// decodeHeader decodes a header payload of kind.
func decodeHeader(p []byte, kind byte) (header, error) {
	d := decoder{p: p}
	if d.byte() != kind {
		return header{}, fmt.Errorf("first record is not a %q record", kind)
	}
	if len(d.p) < len(magic) || string(d.p[:len(magic)]) != magic {
		return header{}, errors.New("bad magic")
	}
	d.p = d.p[len(magic):]
	var h header
	h.seq = d.uvarint()
	h.version = kv.Version(d.uvarint())
	h.prevSeq = d.uvarint()
	h.prevEnd = int64(d.uvarint())
	if d.err == nil && len(d.p) != 0 {
		d.err = errors.New("bytes after the header")
	}
	return h, d.err
}

// decodeBatch decodes a batch payload. The writes' slices alias p: the
// caller applies them before reading the next record (the memory engine
// copies what it keeps).
func decodeBatch(p []byte) (*engine.Batch, error) {
	d := decoder{p: p[1:]}
	b := &engine.Batch{Version: kv.Version(d.uvarint())}
	n := d.uvarint()
	if d.err == nil && n > uint64(len(d.p)) {
		return nil, errShort
	}
	b.Writes = make([]engine.Write, 0, n)
	for i := uint64(0); i < n && d.err == nil; i++ {
		switch op := d.byte(); op {
		case opSet:
			k := d.bytes()
			v := d.bytes()
			if v == nil {
				v = []byte{} // a set of an empty value, not a clear
			}
			b.Writes = append(b.Writes, engine.Write{Key: k, Value: v, Cost: uint32(d.uvarint())})
		case opClear:
			b.Writes = append(b.Writes, engine.Write{Key: d.bytes()})
		case opClearRange:
			k := d.bytes()
			end := d.bytes()
			if end == nil {
				end = []byte{}
			}
			b.Writes = append(b.Writes, engine.Write{Key: k, End: end})
		default:
			if d.err == nil {
				d.err = fmt.Errorf("unknown write kind %d", op)
			}
		}
	}
	if d.err == nil && len(d.p) != 0 {
		d.err = errors.New("bytes after the last write")
	}
	if d.err != nil {
		return nil, d.err
	}
	return b, nil
}
