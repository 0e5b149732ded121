package coord

import (
	"bytes"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func TestStore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "raft")
	s, err := openStore(nil, dir)
	if err != nil {
		t.Fatal(err)
	}
	if f, _ := s.FirstIndex(); f != 0 {
		t.Fatalf("empty store: first index %d", f)
	}
	var logs []*raft.Log
	for i := uint64(1); i <= 5; i++ {
		logs = append(logs, &raft.Log{Index: i, Term: 2, Type: raft.LogCommand, Data: []byte{byte(i)}, AppendedAt: time.Unix(int64(i), 0)})
	}
	if err := s.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteRange(1, 2); err != nil {
		t.Fatal(err)
	}
	if err := s.SetUint64([]byte("CurrentTerm"), 7); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get([]byte("missing")); err == nil || err.Error() != "not found" {
		t.Fatalf("missing key: %v", err)
	}
	s.Close()

	// Everything is on disk.
	if s, err = openStore(nil, dir); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	f, _ := s.FirstIndex()
	l, _ := s.LastIndex()
	if f != 3 || l != 5 {
		t.Fatalf("indexes %d..%d, want 3..5", f, l)
	}
	var got raft.Log
	if err := s.GetLog(4, &got); err != nil || got.Term != 2 || !bytes.Equal(got.Data, []byte{4}) || !got.AppendedAt.Equal(time.Unix(4, 0)) {
		t.Fatalf("log 4: %+v %v", got, err)
	}
	if err := s.GetLog(1, &got); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("deleted log: %v", err)
	}
	if v, err := s.GetUint64([]byte("CurrentTerm")); v != 7 || err != nil {
		t.Fatalf("term %d %v", v, err)
	}
}
