package txlog

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/logentry"
)

func sampleEntry() *logentry.Entry {
	return &logentry.Entry{
		Version:     1_000_123,
		PrevVersion: 999_000,
		Mutations: []logentry.TaggedMutation{
			{Mutation: kv.Mutation{Type: kv.MutSet, Key: []byte("c/key"), Param: []byte("value"), Cost: 7}, Tags: []kv.Tag{1, 2}},
			{Mutation: kv.Mutation{Type: kv.MutClear, Key: []byte("d/x")}, Tags: []kv.Tag{3}},
			{Mutation: kv.Mutation{Type: kv.MutClearRange, Key: []byte("a"), Param: []byte("b")}, Tags: []kv.Tag{1<<32 - 1}},
			{Mutation: kv.Mutation{Type: kv.MutAdd, Key: []byte("n"), Param: []byte{1, 0, 0, 0, 0, 0, 0, 0}}},
		},
	}
}

// normEntry maps empty slices to nil so decoded and original entries compare.
func normEntry(e logentry.Entry) logentry.Entry {
	out := logentry.Entry{Version: e.Version, PrevVersion: e.PrevVersion}
	for _, m := range e.Mutations {
		if len(m.Key) == 0 {
			m.Key = nil
		}
		if len(m.Param) == 0 {
			m.Param = nil
		}
		if len(m.Tags) == 0 {
			m.Tags = nil
		}
		out.Mutations = append(out.Mutations, m)
	}
	return out
}

func TestCodecRoundTrip(t *testing.T) {
	e := sampleEntry()
	b := encodeEntry(e)
	if len(b) > entrySize(e) {
		t.Fatalf("encoded %d bytes > bound %d", len(b), entrySize(e))
	}
	rec, err := decodeRecord(b)
	if err != nil {
		t.Fatal(err)
	}
	if rec.kind != recEntry || !reflect.DeepEqual(normEntry(rec.entry), normEntry(*e)) {
		t.Fatalf("round trip: got %+v want %+v", rec.entry, *e)
	}
	empty := &logentry.Entry{Version: 5, PrevVersion: 4}
	rec, err = decodeRecord(encodeEntry(empty))
	if err != nil || rec.entry.Version != 5 || rec.entry.PrevVersion != 4 || len(rec.entry.Mutations) != 0 {
		t.Fatalf("empty entry: %+v %v", rec, err)
	}
	pops := []TagVersion{{Tag: 9, Version: 100}, {Tag: 2, Version: -1}, {Tag: 5, Version: 1 << 40}}
	rec, err = decodeRecord(encodePop(pops))
	if err != nil {
		t.Fatal(err)
	}
	want := []TagVersion{{Tag: 2, Version: -1}, {Tag: 5, Version: 1 << 40}, {Tag: 9, Version: 100}}
	if rec.kind != recPop || !reflect.DeepEqual(rec.pops, want) {
		t.Fatalf("pop round trip: %+v", rec)
	}
	// decoded keys alias the record but cannot grow into their neighbours
	rec, _ = decodeRecord(b)
	k := rec.entry.Mutations[0].Key
	if cap(k) != len(k) {
		t.Fatalf("key capacity %d > length %d", cap(k), len(k))
	}
}

func TestDecodeRejectsCorrupt(t *testing.T) {
	b := encodeEntry(sampleEntry())
	for n := 0; n < len(b); n++ {
		if _, err := decodeRecord(b[:n]); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("truncated to %d bytes: err %v", n, err)
		}
	}
	bad := [][]byte{
		append(bytes.Clone(b), 0),                                                                      // trailing byte
		append([]byte{9, codecVersion}, b[2:]...),                                                      // unknown kind
		append([]byte{recEntry, 2}, b[2:]...),                                                          // unknown codec version
		{recEntry, codecVersion, 2, 0, 0xff, 0xff, 0xff, 0xff, 0x0f},                                   // huge count
		{recEntry, codecVersion, 2, 0, 1, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f, 0, 0},                    // huge key length
		{recEntry, codecVersion, 2, 0, 1, 77, 0, 0, 0, 0},                                              // bad mutation type
		{recPop, codecVersion, 1, 0xff, 0xff, 0xff, 0xff, 0x7f, 0},                                     // tag overflows uint32
		{recPop, codecVersion, 1, 1, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80}, // bad varint
	}
	for i, c := range bad {
		if _, err := decodeRecord(c); !errors.Is(err, ErrCorrupt) {
			t.Errorf("case %d (%x): err %v, want ErrCorrupt", i, c, err)
		}
	}
}
