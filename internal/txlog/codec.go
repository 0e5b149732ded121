package txlog

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/logentry"
)

// Raft log records are hand-encoded:
//
//	record     = kind:byte codecVersion:byte body
//	entry      = version:varint prevVersion:varint nMutations:uvarint mutation*
//	epochEntry = epoch:uvarint entry             (epoch > 0)
//	mutation   = type:byte cost:uvarint keyLen:uvarint key paramLen:uvarint param nTags:uvarint tag:uvarint*
//	pop        = nTags:uvarint (tag:uvarint popped:varint)*
//	generation = epoch:uvarint                   (epoch > 0)
//
// An Entry of epoch 0 (embedded mode, and every record written before
// epochs existed) is a plain entry record; one of a higher epoch is an
// epochEntry record, so the encoding stays canonical and old logs decode
// unchanged.
//
// Decoding never panics: every count and length is checked against the bytes
// that remain, and trailing garbage is an error.
const (
	recEntry      byte = 1
	recPop        byte = 2
	recEpochEntry byte = 3 // decodes to a record of kind recEntry
	recGeneration byte = 4

	codecVersion byte = 1

	// minMutationBytes is the smallest encoding of one mutation (type, cost,
	// key length, param length, tag count).
	minMutationBytes = 5
)

// ErrCorrupt is returned (wrapped) when a log record or snapshot cannot be
// decoded.
var ErrCorrupt = errors.New("txlog: corrupt record")

// TagVersion is one tag's popped version, as carried by a pop command.
type TagVersion struct {
	Tag     kv.Tag
	Version kv.Version
}

// record is one decoded raft log command.
type record struct {
	kind  byte
	entry logentry.Entry // kind == recEntry
	pops  []TagVersion   // kind == recPop
	epoch uint64         // kind == recGeneration
}

// entrySize is an upper bound of the encoded size of e.
func entrySize(e *logentry.Entry) int {
	n := 2 + 3*binary.MaxVarintLen64 + binary.MaxVarintLen64
	for i := range e.Mutations {
		m := &e.Mutations[i]
		n += 1 + 3*binary.MaxVarintLen32 + len(m.Key) + len(m.Param) + binary.MaxVarintLen32 + len(m.Tags)*binary.MaxVarintLen32
	}
	return n
}

// encodeEntry returns the raft command for e.
func encodeEntry(e *logentry.Entry) []byte {
	return appendEntry(make([]byte, 0, entrySize(e)), e)
}

func appendEntry(b []byte, e *logentry.Entry) []byte {
	if e.Epoch == 0 {
		b = append(b, recEntry, codecVersion)
	} else {
		b = append(b, recEpochEntry, codecVersion)
		b = binary.AppendUvarint(b, e.Epoch)
	}
	b = binary.AppendVarint(b, int64(e.Version))
	b = binary.AppendVarint(b, int64(e.PrevVersion))
	b = binary.AppendUvarint(b, uint64(len(e.Mutations)))
	for i := range e.Mutations {
		m := &e.Mutations[i]
		b = append(b, byte(m.Type))
		b = binary.AppendUvarint(b, uint64(m.Cost))
		b = binary.AppendUvarint(b, uint64(len(m.Key)))
		b = append(b, m.Key...)
		b = binary.AppendUvarint(b, uint64(len(m.Param)))
		b = append(b, m.Param...)
		b = binary.AppendUvarint(b, uint64(len(m.Tags)))
		for _, t := range m.Tags {
			b = binary.AppendUvarint(b, uint64(t))
		}
	}
	return b
}

// encodePop returns the raft command carrying the popped version of every
// tag of the current tag set (sorted by tag, then version, so equal sets
// encode equally: the decoder accepts a tag listed twice, and an unstable
// sort on the tag alone could order such a pair either way).
func encodePop(pops []TagVersion) []byte {
	pops = slices.Clone(pops)
	slices.SortFunc(pops, func(a, b TagVersion) int {
		if c := cmp.Compare(a.Tag, b.Tag); c != 0 {
			return c
		}
		return cmp.Compare(a.Version, b.Version)
	})
	b := make([]byte, 0, 3+len(pops)*(binary.MaxVarintLen32+binary.MaxVarintLen64))
	b = append(b, recPop, codecVersion)
	b = binary.AppendUvarint(b, uint64(len(pops)))
	for _, p := range pops {
		b = binary.AppendUvarint(b, uint64(p.Tag))
		b = binary.AppendVarint(b, int64(p.Version))
	}
	return b
}

// encodeGeneration returns the raft command that starts generation epoch
// (> 0).
func encodeGeneration(epoch uint64) []byte {
	b := make([]byte, 0, 2+binary.MaxVarintLen64)
	b = append(b, recGeneration, codecVersion)
	return binary.AppendUvarint(b, epoch)
}

// reader decodes from a byte slice, remembering the first error.
type reader struct {
	b   []byte
	off int
	err error
	// what names the field being read, for the error message; decoders set
	// it before each field (a constant string, so it costs nothing).
	what string
}

func (r *reader) fail(format string, args ...any) {
	if r.err != nil {
		return
	}
	msg := fmt.Sprintf(format, args...)
	if r.what != "" {
		msg = r.what + ": " + msg
	}
	r.err = fmt.Errorf("%w: %s at offset %d", ErrCorrupt, msg, r.off)
}

// varintFail reports why binary.Uvarint or binary.Varint returned n <= 0.
func (r *reader) varintFail(n int) {
	if n == 0 {
		r.fail("truncated varint")
	} else {
		r.fail("varint overflows 64 bits")
	}
}

func (r *reader) remaining() int { return len(r.b) - r.off }

func (r *reader) byte() byte {
	if r.err != nil {
		return 0
	}
	if r.off >= len(r.b) {
		r.fail("truncated")
		return 0
	}
	c := r.b[r.off]
	r.off++
	return c
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b[r.off:])
	if n <= 0 {
		r.varintFail(n)
		return 0
	}
	r.off += n
	return v
}

func (r *reader) uint32() uint32 {
	v := r.uvarint()
	if v > math.MaxUint32 {
		r.fail("value %d overflows uint32", v)
		return 0
	}
	return uint32(v)
}

func (r *reader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b[r.off:])
	if n <= 0 {
		r.varintFail(n)
		return 0
	}
	r.off += n
	return v
}

// bytes returns the next n bytes, aliasing the input (capacity clipped so an
// append by a reader never overwrites the neighbours). nil for n == 0.
func (r *reader) bytes(n uint64) []byte {
	if r.err != nil {
		return nil
	}
	if n > uint64(r.remaining()) {
		r.fail("length %d exceeds the %d bytes left", n, r.remaining())
		return nil
	}
	if n == 0 {
		return nil
	}
	s := r.b[r.off : r.off+int(n) : r.off+int(n)]
	r.off += int(n)
	return s
}

// count reads an element count and checks that at least min bytes per
// element remain, so corrupt counts cannot cause huge allocations.
func (r *reader) count(min int) int {
	n := r.uvarint()
	if r.err != nil {
		return 0
	}
	if n > uint64(r.remaining()/min) {
		r.fail("count %d too large for %d bytes left", n, r.remaining())
		return 0
	}
	return int(n)
}

// decodeRecord decodes one raft command. Keys and params of the decoded
// mutations alias b.
func decodeRecord(b []byte) (record, error) {
	r := &reader{b: b, what: "record kind"}
	var rec record
	rec.kind = r.byte()
	r.what = "codec version"
	if v := r.byte(); r.err == nil && v != codecVersion {
		r.fail("unknown codec version %d", v)
	}
	if r.err != nil {
		return record{}, r.err
	}
	switch rec.kind {
	case recEntry:
		decodeEntryBody(r, &rec.entry)
	case recEpochEntry:
		rec.kind = recEntry
		r.what = "entry epoch"
		rec.entry.Epoch = r.uvarint()
		if r.err == nil && rec.entry.Epoch == 0 {
			// epoch 0 has the plain entry record: one encoding per entry
			r.fail("epoch 0 in an epoch entry record")
		}
		decodeEntryBody(r, &rec.entry)
	case recGeneration:
		r.what = "generation epoch"
		rec.epoch = r.uvarint()
		if r.err == nil && rec.epoch == 0 {
			r.fail("generation of epoch 0")
		}
	case recPop:
		r.what = "pop count"
		n := r.count(2)
		if n > 0 {
			rec.pops = make([]TagVersion, n)
		}
		for i := 0; i < n && r.err == nil; i++ {
			r.what = "pop tag"
			t := kv.Tag(r.uint32())
			r.what = "pop version"
			rec.pops[i] = TagVersion{Tag: t, Version: kv.Version(r.varint())}
		}
	default:
		r.what = "record kind"
		r.fail("unknown record kind %d", rec.kind)
	}
	r.what = ""
	if r.err == nil && r.remaining() != 0 {
		r.fail("%d trailing bytes", r.remaining())
	}
	if r.err != nil {
		return record{}, r.err
	}
	return rec, nil
}

func decodeEntryBody(r *reader, e *logentry.Entry) {
	r.what = "entry version"
	e.Version = kv.Version(r.varint())
	r.what = "entry prev version"
	e.PrevVersion = kv.Version(r.varint())
	r.what = "mutation count"
	n := r.count(minMutationBytes)
	if r.err != nil {
		return
	}
	if n > 0 {
		e.Mutations = make([]logentry.TaggedMutation, n)
	}
	var tagBuf []kv.Tag // tags of several mutations share one backing array
	for i := 0; i < n && r.err == nil; i++ {
		m := &e.Mutations[i]
		r.what = "mutation type"
		m.Type = kv.MutationType(r.byte())
		if r.err == nil && (m.Type < kv.MutSet || m.Type > kv.MutMin) {
			r.fail("unknown mutation type %d", m.Type)
		}
		r.what = "mutation cost"
		m.Cost = r.uint32()
		r.what = "mutation key"
		m.Key = r.bytes(r.uvarint())
		r.what = "mutation param"
		m.Param = r.bytes(r.uvarint())
		r.what = "mutation tag count"
		nt := r.count(1)
		if r.err != nil || nt == 0 {
			continue
		}
		if cap(tagBuf)-len(tagBuf) < nt {
			tagBuf = make([]kv.Tag, 0, max(nt, 2*(n-i)))
		}
		start := len(tagBuf)
		r.what = "mutation tag"
		for j := 0; j < nt; j++ {
			tagBuf = append(tagBuf, kv.Tag(r.uint32()))
		}
		m.Tags = tagBuf[start:len(tagBuf):len(tagBuf)]
	}
}
