package raftstore

// Fuzz target for the raft store's records (decodeRaftLog). `go test`
// replays the f.Add seeds and testdata/fuzz/FuzzDecodeRaftLog/; to search,
// see docs/development.md, "Fuzzing".

import (
	"bytes"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/distash/distash/internal/fuzzseed"
)

// sampleCommand is the transaction log's encoding of its sample entry
// (internal/txlog's sampleEntry): a real command as raft stores it.
var sampleCommand = []byte{0x1, 0x1, 0xf6, 0x8a, 0x7a, 0xb0, 0xf9, 0x79, 0x4, 0x1, 0x7, 0x5, 0x63, 0x2f, 0x6b, 0x65, 0x79, 0x5, 0x76, 0x61, 0x6c, 0x75, 0x65, 0x2, 0x1, 0x2, 0x2, 0x0, 0x3, 0x64, 0x2f, 0x78, 0x0, 0x1, 0x3, 0x3, 0x0, 0x1, 0x61, 0x1, 0x62, 0x1, 0xff, 0xff, 0xff, 0xff, 0xf, 0x4, 0x0, 0x1, 0x6e, 0x8, 0x1, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0}

// mustBeCorrupt fails unless err tells the caller the bytes are corrupt.
func mustBeCorrupt(t *testing.T, err error) {
	t.Helper()
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("error %q does not wrap ErrCorrupt", err)
	}
}

// FuzzDecodeRaftLog: the values of the Pebble raft log store, decoded by
// GetLog for raft. Each is rejected with an error wrapping ErrCorrupt, never
// a panic, and what is accepted survives encoding and decoding unchanged.
func FuzzDecodeRaftLog(f *testing.F) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	f.Add(encodeRaftLog(&raft.Log{Index: 7, Term: 3, Type: raft.LogCommand, Data: sampleCommand, AppendedAt: at}))
	f.Add(encodeRaftLog(&raft.Log{Index: 1, Term: 1, Type: raft.LogConfiguration, Data: []byte{1, 2, 3}}))
	f.Add(encodeRaftLog(&raft.Log{Index: 1 << 63, Term: 1<<64 - 1, Type: raft.LogNoop, Extensions: []byte("ext"), AppendedAt: at}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		in := bytes.Clone(b)
		var l raft.Log
		if err := decodeRaftLog(in, &l); err != nil {
			mustBeCorrupt(t, err)
			return
		}
		// Data and Extensions are copies: Pebble reuses the buffer.
		data, ext := bytes.Clone(l.Data), bytes.Clone(l.Extensions)
		for i := range in {
			in[i] ^= 0xff
		}
		if !bytes.Equal(l.Data, data) || !bytes.Equal(l.Extensions, ext) {
			t.Fatal("the decoded record aliases its input")
		}
		b1 := encodeRaftLog(&l)
		var l1 raft.Log
		if err := decodeRaftLog(b1, &l1); err != nil {
			t.Fatalf("re-encoded record does not decode: %v", err)
		}
		if !raftLogsEqual(&l, &l1) {
			t.Fatalf("round trip changed the record:\n got %+v\nwant %+v", l1, l)
		}
		if b2 := encodeRaftLog(&l1); !bytes.Equal(b1, b2) {
			t.Fatalf("encoding is not canonical:\n%x\n%x", b1, b2)
		}
	})
}

// raftLogsEqual compares every field raft reads, AppendedAt as an instant.
func raftLogsEqual(a, b *raft.Log) bool {
	return a.Index == b.Index && a.Term == b.Term && a.Type == b.Type &&
		a.AppendedAt.Equal(b.AppendedAt) && a.AppendedAt.IsZero() == b.AppendedAt.IsZero() &&
		bytes.Equal(a.Data, b.Data) && bytes.Equal(a.Extensions, b.Extensions)
}

// fuzzSeeds returns the generated seeds of FuzzDecodeRaftLog by file
// name (see fuzzseed.Check).
func fuzzSeeds() map[string]map[string][]byte {
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	cmd := encodeRaftLog(&raft.Log{Index: 7, Term: 3, Type: raft.LogCommand, Data: sampleCommand, AppendedAt: at})
	raftLog := map[string][]byte{
		"valid-command":         cmd,
		"valid-bootstrap":       encodeRaftLog(&raft.Log{Index: 1, Term: 1, Type: raft.LogConfiguration, Data: []byte{0, 1, 2}}),
		"valid-extremes":        encodeRaftLog(&raft.Log{Index: math.MaxUint64, Term: math.MaxUint64, Type: 255, Extensions: []byte("ext"), AppendedAt: time.Unix(0, math.MinInt64)}),
		"valid-no-data":         encodeRaftLog(&raft.Log{Index: 2, Term: 1, Type: raft.LogNoop, AppendedAt: at}),
		"bad-trailing-byte":     append(bytes.Clone(cmd), 0),
		"bad-data-length":       {1, 1, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f},
		"bad-term-overflow":     {1, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01},
		"bad-extensions-length": {1, 1, 0, 0, 0, 9, 1},
	}
	fuzzseed.Cuts(raftLog, "trunc", cmd, 0, 1, 3, 10, len(cmd)-1)

	return map[string]map[string][]byte{"FuzzDecodeRaftLog": raftLog}
}

// TestFuzzSeeds checks the generated seeds in testdata/fuzz against the
// encoder and the decoder (see fuzzseed.Check).
func TestFuzzSeeds(t *testing.T) {
	fuzzseed.Check(t, fuzzSeeds(), ErrCorrupt, func(_ string, b []byte) error { return decodeRaftLog(b, new(raft.Log)) })
}
