package txlog

// Fuzz targets for every decoder of bytes that come from disk: raft commands
// (decodeRecord, also what a follower applies), the state machine's snapshots
// (decodeSnapshot); the raft store's records are fuzzed in internal/raftstore.
// Each must reject any input with an error wrapping ErrCorrupt, never panic,
// and whatever it accepts must survive encoding and decoding again unchanged.
//
// `go test` replays the f.Add seeds and testdata/fuzz/<target>/; to search,
// fuzz one target at a time (docs/development.md, "Fuzzing").

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"reflect"
	"slices"
	"testing"

	"github.com/distash/distash/internal/fuzzseed"
	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/logentry"
)

// mustBeCorrupt fails unless err tells the caller the bytes are corrupt.
func mustBeCorrupt(t *testing.T, err error) {
	t.Helper()
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("error %q does not wrap ErrCorrupt", err)
	}
}

// encodeRecord is the encoder of a decoded record.
func encodeRecord(t *testing.T, rec record) []byte {
	t.Helper()
	switch rec.kind {
	case recEntry:
		return encodeEntry(&rec.entry)
	case recPop:
		return encodePop(rec.pops)
	case recGeneration:
		return encodeGeneration(rec.epoch)
	}
	t.Fatalf("decoded a record of unknown kind %d", rec.kind)
	return nil
}

// FuzzDecodeRecord: raft commands, read back from each replica's raft log
// and applied by its state machine (a corrupt one must fail that apply, not
// crash the replica).
func FuzzDecodeRecord(f *testing.F) {
	f.Add(encodeEntry(sampleEntry()))
	f.Add(encodeEntry(&logentry.Entry{Version: 1}))
	f.Add(encodePop([]TagVersion{{Tag: 1, Version: 10}, {Tag: 2, Version: 20}}))
	f.Add(encodePop(nil))
	f.Add(encodeEntry(&logentry.Entry{Version: 3, PrevVersion: 2, Epoch: 5, Mutations: sampleEntry().Mutations}))
	f.Add(encodeGeneration(5))
	f.Add([]byte{})
	f.Add([]byte{recEntry, codecVersion, 2, 0, 1, 1, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		rec, err := decodeRecord(b)
		if err != nil {
			mustBeCorrupt(t, err)
			return
		}
		// Decoded keys, params and tags alias b with their capacity clipped,
		// so a consumer appending to one cannot overwrite the next.
		for i, m := range rec.entry.Mutations {
			if cap(m.Key) != len(m.Key) || cap(m.Param) != len(m.Param) || cap(m.Tags) != len(m.Tags) {
				t.Fatalf("mutation %d: a slice has spare capacity", i)
			}
		}
		// decode(encode(x)) == x for every x the decoder produces.
		b1 := encodeRecord(t, rec)
		if rec.kind == recEntry && len(b1) > entrySize(&rec.entry) {
			t.Fatalf("entry encodes to %d bytes, more than entrySize's bound %d", len(b1), entrySize(&rec.entry))
		}
		rec1, err := decodeRecord(b1)
		if err != nil {
			t.Fatalf("re-encoded record does not decode: %v", err)
		}
		if rec.kind == recPop {
			// encodePop sorts; the state machine's result does not depend on
			// the order of the pops.
			rec.pops = encodePopOrder(rec.pops)
		}
		if !reflect.DeepEqual(rec, rec1) {
			t.Fatalf("round trip changed the record:\n got %+v\nwant %+v", rec1, rec)
		}
		// The encoding is canonical: equal records encode equally.
		if b2 := encodeRecord(t, rec1); !bytes.Equal(b1, b2) {
			t.Fatalf("encoding is not canonical:\n%x\n%x", b1, b2)
		}
	})
}

// encodePopOrder returns pops in the order encodePop writes them.
func encodePopOrder(pops []TagVersion) []TagVersion {
	rec, err := decodeRecord(encodePop(pops))
	if err != nil {
		panic(err)
	}
	return rec.pops
}

// snapshotBytes writes f's snapshot as Persist would.
func snapshotBytes(t testing.TB, f *fsm) []byte {
	t.Helper()
	s, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release()
	var buf bytes.Buffer
	if err := s.(*fsmSnapshot).write(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// sampleSnapshot is a snapshot of two entries (a first one was trimmed by
// the pop) and two popped tags.
func sampleSnapshot(t testing.TB) []byte {
	f := newFSM(0, discardLogger(), func() {})
	last := sampleEntry()
	last.PrevVersion = 10
	for _, e := range []*logentry.Entry{{Version: 5}, {Version: 10, PrevVersion: 5}, last} {
		if err := f.applyLocked(encodeEntry(e)); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.applyLocked(encodePop([]TagVersion{{Tag: 1, Version: 5}, {Tag: 2, Version: 7}})); err != nil {
		t.Fatal(err)
	}
	return snapshotBytes(t, f)
}

// withCRC appends body's checksum, as fsmSnapshot.write does.
func withCRC(body []byte) []byte {
	return binary.BigEndian.AppendUint32(bytes.Clone(body), crc32.Checksum(body, crcTable))
}

// FuzzDecodeSnapshot fuzzes the body of a snapshot: the target appends the
// checksum itself, since mutated bytes would otherwise almost never get past
// it into the decoder proper. The seeds are bodies without their checksum.
func FuzzDecodeSnapshot(f *testing.F) {
	snap := sampleSnapshot(f)
	f.Add(snap[:len(snap)-4])
	empty := snapshotBytes(f, newFSM(0, discardLogger(), func() {}))
	f.Add(empty[:len(empty)-4])
	f.Add([]byte("TXLS"))
	epoch := body(f, &fsmSnapshot{last: 20, trimmed: 5, epoch: 3, popped: []TagVersion{{1, 5}}, entries: []fsmEntry{{raw: encodeEntry(&logentry.Entry{Version: 20, PrevVersion: 10, Epoch: 3})}}})
	f.Add(epoch)
	f.Add([]byte("TXLS\x01\x00\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, body []byte) {
		// As read from disk, unchecked: must not panic either.
		if _, err := decodeSnapshot(body, 0, discardLogger(), func() {}); err != nil {
			mustBeCorrupt(t, err)
		}
		nf, err := decodeSnapshot(withCRC(body), 0, discardLogger(), func() {})
		if err != nil {
			mustBeCorrupt(t, err)
			return
		}
		// Snapshotting the restored state machine and restoring that gives
		// the same state machine, and the same bytes again.
		s1 := snapshotBytes(t, nf)
		nf1, err := decodeSnapshot(s1, 0, discardLogger(), func() {})
		if err != nil {
			t.Fatalf("snapshot of a restored state machine does not decode: %v", err)
		}
		if !reflect.DeepEqual(fsmContents(nf), fsmContents(nf1)) {
			t.Fatalf("round trip changed the state machine:\n got %+v\nwant %+v", fsmContents(nf1), fsmContents(nf))
		}
		if s2 := snapshotBytes(t, nf1); !bytes.Equal(s1, s2) {
			t.Fatalf("snapshot encoding is not canonical:\n%x\n%x", s1, s2)
		}
	})
}

// fsmContents is the comparable part of a state machine.
func fsmContents(f *fsm) any {
	return struct {
		Entries []fsmEntry
		Index   map[kv.Tag][]tagMsg
		State   fsmState
	}{f.entries, f.index, f.state()}
}

// The seeds in testdata/fuzz/<target>/ with descriptive names are generated
// from the encoders: see TestFuzzSeeds and package fuzzseed.

// fuzzSeeds returns the generated seeds by target and file name. Names
// starting with "valid-" must decode; the others (truncated "trunc-" and
// damaged "bad-" inputs) must be rejected.
func fuzzSeeds(t *testing.T) map[string]map[string][]byte {

	entry := encodeEntry(sampleEntry())
	extremes := encodeEntry(&logentry.Entry{Version: math.MaxInt64, PrevVersion: math.MinInt64, Mutations: []logentry.TaggedMutation{
		{Mutation: kv.Mutation{Type: kv.MutSet, Cost: math.MaxUint32}, Tags: []kv.Tag{math.MaxUint32, 0, math.MaxUint32}},
		{Mutation: kv.Mutation{Type: kv.MutMin, Key: []byte{0xff, 0}, Param: bytes.Repeat([]byte{0x80}, 200)}},
		{Mutation: kv.Mutation{Type: kv.MutMax, Key: []byte("k")}, Tags: []kv.Tag{7}},
	}})
	pop := encodePop([]TagVersion{{Tag: 3, Version: 1 << 40}, {Tag: 1, Version: -1}})
	record := map[string][]byte{
		"valid-entry":              entry,
		"valid-entry-no-mutations": encodeEntry(&logentry.Entry{Version: 1}),
		"valid-entry-extremes":     extremes,
		"valid-pop":                pop,
		"valid-pop-empty":          encodePop(nil),
		"valid-pop-same-tag-twice": encodePop([]TagVersion{{Tag: 4, Version: 9}, {Tag: 4, Version: 2}}),
		"valid-entry-epoch":        encodeEntry(&logentry.Entry{Version: 3, PrevVersion: 2, Epoch: 1 << 40, Mutations: sampleEntry().Mutations}),
		"valid-generation":         encodeGeneration(7),
		"bad-entry-epoch-zero":     {recEpochEntry, codecVersion, 0, 6, 4, 0},
		"bad-generation-epoch-0":   {recGeneration, codecVersion, 0},
		"bad-generation-trailing":  {recGeneration, codecVersion, 1, 0},
		"bad-trailing-byte":        append(bytes.Clone(entry), 0),
		"bad-kind":                 append([]byte{9, codecVersion}, entry[2:]...),
		"bad-codec-version":        append([]byte{recEntry, codecVersion + 1}, entry[2:]...),
		"bad-mutation-count":       {recEntry, codecVersion, 2, 0, 0xff, 0xff, 0xff, 0xff, 0x0f},
		"bad-key-length":           {recEntry, codecVersion, 2, 0, 1, 1, 0, 0xff, 0xff, 0xff, 0xff, 0x0f, 0, 0},
		"bad-mutation-type":        {recEntry, codecVersion, 2, 0, 1, 77, 0, 0, 0, 0},
		"bad-tag-overflows-uint32": {recPop, codecVersion, 1, 0xff, 0xff, 0xff, 0xff, 0x7f, 0},
		"bad-varint-overflow":      {recPop, codecVersion, 1, 1, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01},
	}
	fuzzseed.Cuts(record, "trunc-entry", entry, 0, 1, 2, 6, 12, 20, len(entry)-1)
	fuzzseed.Cuts(record, "trunc-pop", pop, 3, len(pop)-1)

	body := func(s *fsmSnapshot) []byte { return body(t, s) }
	sample := sampleSnapshot(t)
	sample = sample[:len(sample)-4]
	e10 := encodeEntry(&logentry.Entry{Version: 10, PrevVersion: 5})
	e20 := encodeEntry(&logentry.Entry{Version: 20, PrevVersion: 10, Mutations: sampleEntry().Mutations})
	// A state written in the versions before per-tag gone versions (1 and
	// 2): its gone floor is its trimmed version.
	sampleV1 := body(&fsmSnapshot{last: 20, trimmed: 5, goneFloor: 5, popped: []TagVersion{{1, 5}, {2, 7}},
		entries: []fsmEntry{{raw: e10}, {raw: e20}}})
	snapshot := map[string][]byte{
		"valid-sample": sample,
		"valid-v1":     sampleV1,
		"valid-gone": body(&fsmSnapshot{last: 20, trimmed: 10, goneFloor: 2, epoch: 4, popped: []TagVersion{{1, 10}, {2, 12}},
			gone: []TagVersion{{1, 5}, {3, 10}}, entries: []fsmEntry{{raw: encodeEntry(&logentry.Entry{Version: 20, PrevVersion: 10, Epoch: 4})}}}),
		"bad-gone-above-trimmed": body(&fsmSnapshot{last: 20, trimmed: 10, gone: []TagVersion{{1, 11}}}),
		"bad-gone-below-floor":   body(&fsmSnapshot{last: 20, trimmed: 10, goneFloor: 6, gone: []TagVersion{{1, 6}}}),
		"bad-gone-duplicate":     body(&fsmSnapshot{last: 20, trimmed: 10, gone: []TagVersion{{1, 5}, {1, 7}}}),
		"valid-empty":            body(&fsmSnapshot{}),
		"valid-all-trimmed":      body(&fsmSnapshot{last: 30, trimmed: 30, goneFloor: 30, popped: []TagVersion{{1, 30}, {2, 40}}}),
		"valid-epoch": body(&fsmSnapshot{last: 20, trimmed: 5, goneFloor: 5, epoch: 3, popped: []TagVersion{{1, 5}},
			entries: []fsmEntry{{raw: encodeEntry(&logentry.Entry{Version: 20, PrevVersion: 10, Epoch: 3})}}}),
		"bad-v2-epoch-0":    append([]byte("TXLS\x02"), slices.Insert(bytes.Clone(sampleV1[5:]), v1HeaderLen(sampleV1)-5, 0)...),
		"bad-magic":         append([]byte("TXLX"), sample[4:]...),
		"bad-version":       append([]byte{'T', 'X', 'L', 'S', snapVersionGone + 1}, sample[5:]...),
		"bad-not-an-entry":  body(&fsmSnapshot{last: 10, entries: []fsmEntry{{raw: encodePop(nil)}}}),
		"bad-out-of-order":  body(&fsmSnapshot{last: 20, entries: []fsmEntry{{raw: e20}, {raw: e10}}}),
		"bad-trimmed-entry": body(&fsmSnapshot{last: 20, trimmed: 10, goneFloor: 10, entries: []fsmEntry{{raw: e10}, {raw: e20}}}),
		"bad-past-last":     body(&fsmSnapshot{last: 10, entries: []fsmEntry{{raw: e10}, {raw: e20}}}),
		"bad-entry":         body(&fsmSnapshot{last: 10, entries: []fsmEntry{{raw: e10[:len(e10)-1]}}}),
		"bad-trailing-byte": append(bytes.Clone(sample), 0),
	}
	fuzzseed.Cuts(snapshot, "trunc", sample, 0, 4, 5, 8, 30, len(sample)-1)

	return map[string]map[string][]byte{
		"FuzzDecodeRecord":   record,
		"FuzzDecodeSnapshot": snapshot,
	}
}

// body is a snapshot's bytes without their checksum.
func body(t testing.TB, s *fsmSnapshot) []byte {
	var buf bytes.Buffer
	if err := s.write(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()[:buf.Len()-4]
}

// v1HeaderLen is the length of a version 1 snapshot's magic, version, last
// and trimmed versions: where version 2 has its epoch.
func v1HeaderLen(snap []byte) int {
	off := 5
	for range 2 {
		_, n := binary.Varint(snap[off:])
		off += n
	}
	return off
}

// decodeSeed runs the decoder target fuzzes on one input.
func decodeSeed(target string, b []byte) error {
	switch target {
	case "FuzzDecodeRecord":
		_, err := decodeRecord(b)
		return err
	case "FuzzDecodeSnapshot":
		_, err := decodeSnapshot(withCRC(b), 0, discardLogger(), func() {})
		return err
	}
	return fmt.Errorf("no target %s", target)
}

// TestFuzzSeeds checks that the generated seeds in testdata/fuzz are what
// the encoders write today (so the encodings have not changed by accident,
// and the seeds still reach the decoders' success paths) and that each
// decodes or fails as its name says.
func TestFuzzSeeds(t *testing.T) {
	fuzzseed.Check(t, fuzzSeeds(t), ErrCorrupt, decodeSeed)
}
