package raftstore

import (
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/distash/distash/internal/fsys"
)

// TestRaftStoreDamage: a raft store whose files are damaged at rest (an
// sstable missing or with a flipped byte, its MANIFEST missing) fails to
// open with a *fsys.DamageError naming the file, before raft reads a
// record (raft panics when a record it applies cannot be read).
func TestRaftStoreDamage(t *testing.T) {
	// fill writes records and flushes them to sstables.
	fill := func(t *testing.T) string {
		dir := filepath.Join(t.TempDir(), "raft")
		s, err := Open(nil, dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := uint64(1); i <= 200; i += 4 {
			if err := s.StoreLogs([]*raft.Log{faultRecord(i), faultRecord(i + 1), faultRecord(i + 2), faultRecord(i + 3)}); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.SetUint64([]byte("CurrentTerm"), 3); err != nil {
			t.Fatal(err)
		}
		if err := s.db.Flush(); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	files := func(t *testing.T, dir, glob string) []string {
		names, _ := filepath.Glob(filepath.Join(dir, glob))
		if len(names) == 0 {
			t.Fatalf("no %s in %s", glob, dir)
		}
		sort.Strings(names)
		return names
	}
	// check opens the store: it must fail with a DamageError naming want.
	check := func(t *testing.T, dir, want string) {
		t.Helper()
		s, err := Open(nil, dir, nil)
		if err == nil {
			s.Close()
			t.Fatal("a damaged raft store opened")
		}
		var de *fsys.DamageError
		if !errors.As(err, &de) || !errors.Is(err, fsys.ErrDamaged) {
			t.Fatalf("open: %v; want a *fsys.DamageError", err)
		}
		if !strings.Contains(de.Path, want) {
			t.Fatalf("damage names %s (%v); want %s", de.Path, err, want)
		}
		t.Logf("%v", err)
	}
	t.Run("missing-sstable", func(t *testing.T) {
		dir := fill(t)
		sst := files(t, dir, "*.sst")[0]
		os.Remove(sst)
		check(t, dir, filepath.Base(sst))
	})
	t.Run("flipped-sstable-byte", func(t *testing.T) {
		dir := fill(t)
		sst := files(t, dir, "*.sst")[0]
		b, _ := os.ReadFile(sst)
		b[len(b)/3] ^= 0x10 // a data block
		os.WriteFile(sst, b, 0o644)
		check(t, dir, filepath.Base(sst))
	})
	t.Run("truncated-manifest", func(t *testing.T) {
		// Pebble reads a MANIFEST's cut tail as a torn write, the edits
		// in it as never made: here it replays the WAL it kept instead
		// and loses nothing. Either way the store must not hold less.
		dir := fill(t)
		m := files(t, dir, "MANIFEST-*")
		path := m[len(m)-1]
		st, _ := os.Stat(path)
		os.Truncate(path, st.Size()/2)
		s, err := Open(nil, dir, nil)
		if err != nil {
			check(t, dir, filepath.Base(path))
			return
		}
		defer s.Close()
		for i := uint64(1); i <= 200; i++ {
			var l raft.Log
			if err := s.GetLog(i, &l); err != nil || !raftLogsEqual(&l, faultRecord(i)) {
				t.Fatalf("a store with a truncated MANIFEST opened without record %d: %v", i, err)
			}
		}
		if v, err := s.GetUint64([]byte("CurrentTerm")); err != nil || v != 3 {
			t.Fatalf("a store with a truncated MANIFEST opened with term %d, %v", v, err)
		}
	})
	t.Run("missing-manifest", func(t *testing.T) {
		dir := fill(t)
		for _, m := range files(t, dir, "MANIFEST-*") {
			os.Remove(m)
		}
		check(t, dir, "MANIFEST")
	})
}
