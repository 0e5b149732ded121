package txlog

import (
	"cmp"
	"encoding/binary"
	"errors"
	"slices"

	"github.com/distash/distash/internal/decode"
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

// decodeRecord decodes one raft command. Keys and params of the decoded
// mutations alias b.
func decodeRecord(b []byte) (record, error) {
	r := &decode.Reader{B: b, Corrupt: ErrCorrupt, What: "record kind"}
	var rec record
	rec.kind = r.Byte()
	r.What = "codec version"
	if v := r.Byte(); r.Err() == nil && v != codecVersion {
		r.Fail("unknown codec version %d", v)
	}
	if r.Err() != nil {
		return record{}, r.Err()
	}
	switch rec.kind {
	case recEntry:
		decodeEntryBody(r, &rec.entry)
	case recEpochEntry:
		rec.kind = recEntry
		r.What = "entry epoch"
		rec.entry.Epoch = r.Uvarint()
		if r.Err() == nil && rec.entry.Epoch == 0 {
			// epoch 0 has the plain entry record: one encoding per entry
			r.Fail("epoch 0 in an epoch entry record")
		}
		decodeEntryBody(r, &rec.entry)
	case recGeneration:
		r.What = "generation epoch"
		rec.epoch = r.Uvarint()
		if r.Err() == nil && rec.epoch == 0 {
			r.Fail("generation of epoch 0")
		}
	case recPop:
		r.What = "pop count"
		n := r.Count(2)
		if n > 0 {
			rec.pops = make([]TagVersion, n)
		}
		for i := 0; i < n && r.Err() == nil; i++ {
			r.What = "pop tag"
			t := kv.Tag(r.Uint32())
			r.What = "pop version"
			rec.pops[i] = TagVersion{Tag: t, Version: kv.Version(r.Varint())}
		}
	default:
		r.What = "record kind"
		r.Fail("unknown record kind %d", rec.kind)
	}
	r.What = ""
	if r.Err() == nil && r.Remaining() != 0 {
		r.Fail("%d trailing bytes", r.Remaining())
	}
	if r.Err() != nil {
		return record{}, r.Err()
	}
	return rec, nil
}

func decodeEntryBody(r *decode.Reader, e *logentry.Entry) {
	r.What = "entry version"
	e.Version = kv.Version(r.Varint())
	r.What = "entry prev version"
	e.PrevVersion = kv.Version(r.Varint())
	r.What = "mutation count"
	n := r.Count(minMutationBytes)
	if r.Err() != nil {
		return
	}
	if n > 0 {
		e.Mutations = make([]logentry.TaggedMutation, n)
	}
	var tagBuf []kv.Tag // tags of several mutations share one backing array
	for i := 0; i < n && r.Err() == nil; i++ {
		m := &e.Mutations[i]
		r.What = "mutation type"
		m.Type = kv.MutationType(r.Byte())
		if r.Err() == nil && (m.Type < kv.MutSet || m.Type > kv.MutMin) {
			r.Fail("unknown mutation type %d", m.Type)
		}
		r.What = "mutation cost"
		m.Cost = r.Uint32()
		r.What = "mutation key"
		m.Key = r.Bytes(r.Uvarint())
		r.What = "mutation param"
		m.Param = r.Bytes(r.Uvarint())
		r.What = "mutation tag count"
		nt := r.Count(1)
		if r.Err() != nil || nt == 0 {
			continue
		}
		if cap(tagBuf)-len(tagBuf) < nt {
			tagBuf = make([]kv.Tag, 0, max(nt, 2*(n-i)))
		}
		start := len(tagBuf)
		r.What = "mutation tag"
		for j := 0; j < nt; j++ {
			tagBuf = append(tagBuf, kv.Tag(r.Uint32()))
		}
		m.Tags = tagBuf[start:len(tagBuf):len(tagBuf)]
	}
}
