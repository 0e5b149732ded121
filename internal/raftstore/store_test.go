package raftstore

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble"
	"github.com/hashicorp/raft"
)

func TestRaftLogCodecRoundTrip(t *testing.T) {
	now := time.Now()
	for _, l := range []*raft.Log{
		{Index: 7, Term: 3, Type: raft.LogCommand, Data: []byte("cmd"), Extensions: []byte("ext"), AppendedAt: now},
		{Index: 1 << 63, Term: 1<<64 - 1, Type: raft.LogBarrier, AppendedAt: time.Unix(0, -1)},
		// raft's bootstrap record has no append time.
		{Index: 1, Term: 1, Type: raft.LogConfiguration, Data: []byte{0}},
	} {
		var got raft.Log
		if err := decodeRaftLog(encodeRaftLog(l), &got); err != nil {
			t.Fatalf("%+v: %v", l, err)
		}
		if !raftLogsEqual(&got, l) {
			t.Fatalf("round trip: got %+v want %+v", got, *l)
		}
	}
}

// TestRaftLogZeroAppendedAt pins the stored form of a zero append time to
// what earlier versions wrote (time.Time{}.UnixNano()), so their stores read
// back a zero time rather than a date in 1754.
func TestRaftLogZeroAppendedAt(t *testing.T) {
	if got := (time.Time{}).UnixNano(); got != zeroAppendedAt {
		t.Fatalf("time.Time{}.UnixNano() = %d, zeroAppendedAt = %d", got, zeroAppendedAt)
	}
	var l raft.Log
	if err := decodeRaftLog(encodeRaftLog(&raft.Log{Index: 1, Term: 1}), &l); err != nil || !l.AppendedAt.IsZero() {
		t.Fatalf("zero AppendedAt decodes to %v, %v", l.AppendedAt, err)
	}
}

func TestDecodeRaftLogRejectsCorrupt(t *testing.T) {
	b := encodeRaftLog(&raft.Log{Index: 300, Term: 2, Data: []byte("data"), Extensions: []byte("x"), AppendedAt: time.Now()})
	for n := 0; n < len(b); n++ {
		var l raft.Log
		if err := decodeRaftLog(b[:n], &l); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("truncated to %d bytes: err %v", n, err)
		}
	}
	for _, c := range []struct {
		b    []byte
		want string // in the error message
	}{
		{append(bytes.Clone(b), 0), "1 trailing bytes"},
		{[]byte{1, 1, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f}, "raft record data: length 4294967295 exceeds the 0 bytes left"},
		{[]byte{1, 1, 0, 0, 0, 9, 1}, "raft record extensions: length 9 exceeds"},
		{[]byte{1, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01}, "raft record term: varint overflows 64 bits"},
		{[]byte{1, 1}, "raft record type: truncated"},
	} {
		var l raft.Log
		err := decodeRaftLog(c.b, &l)
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%x: err %v, want ErrCorrupt with %q", c.b, err, c.want)
		}
	}
}

// TestPebbleStoreCorruption: damaged values and keys in the raft store are
// errors naming what is wrong, not panics or wrong records.
func TestPebbleStoreCorruption(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(nil, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.StoreLogs([]*raft.Log{{Index: 1, Term: 1, Data: []byte("a")}, {Index: 2, Term: 1, Data: []byte("b")}}); err != nil {
		t.Fatal(err)
	}
	var l raft.Log
	if err := s.GetLog(2, &l); err != nil || string(l.Data) != "b" {
		t.Fatalf("GetLog(2) = %+v, %v", l, err)
	}
	// a garbled record
	if err := s.db.Set(logKey(1), []byte{1, 1}, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := s.GetLog(1, &l); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "raft log 1:") {
		t.Fatalf("GetLog of a garbled record: %v", err)
	}
	// a well-formed record under another index
	if err := s.db.Set(logKey(2), encodeRaftLog(&raft.Log{Index: 9, Term: 1}), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := s.GetLog(2, &l); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "holds index 9") {
		t.Fatalf("GetLog of a misplaced record: %v", err)
	}
	// a stable value of the wrong length
	if err := s.Set([]byte("CurrentTerm"), []byte{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetUint64([]byte("CurrentTerm")); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("GetUint64 of a 3-byte value: %v", err)
	}
	// a stray key in the log's key range, found when the store opens
	if err := s.db.Set([]byte("l\x00\x01"), nil, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err := Open(nil, dir, nil); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "raft log key 6c0001") {
		if err == nil {
			s.Close()
		}
		t.Fatalf("opening a store with a short log key: %v", err)
	}
}

// TestStoreAfterClose: raft's metrics goroutine can read the store after
// the replica shut it down; a closed store answers with an error instead of
// a panic inside Pebble.
func TestStoreAfterClose(t *testing.T) {
	s, err := Open(nil, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.StoreLogs([]*raft.Log{{Index: 1, Term: 1, Data: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	var l raft.Log
	if err := s.GetLog(1, &l); !errors.Is(err, errStoreClosed) {
		t.Fatalf("GetLog after Close = %v", err)
	}
	if err := s.StoreLogs([]*raft.Log{{Index: 2, Term: 1}}); !errors.Is(err, errStoreClosed) {
		t.Fatalf("StoreLogs after Close = %v", err)
	}
	if _, err := s.Get([]byte("k")); !errors.Is(err, errStoreClosed) {
		t.Fatalf("Get after Close = %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}
}
