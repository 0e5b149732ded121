package raftstore

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/distash/distash/internal/engine/pebble/guard"
	"github.com/distash/distash/internal/fsys"
	"github.com/distash/distash/internal/fsys/faultfs"
)

// failRecorder is an OnFail that records its calls.
type failRecorder struct {
	mu   sync.Mutex
	errs []error
}

func (r *failRecorder) onFail(err error) {
	r.mu.Lock()
	r.errs = append(r.errs, err)
	r.mu.Unlock()
}

func (r *failRecorder) get() []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]error(nil), r.errs...)
}

// storeFixture is a raft store on a faultfs over a strict in-memory FS,
// with the indexes it acknowledged.
type storeFixture struct {
	t     *testing.T
	fs    *faultfs.FS
	dir   string
	s     *Store
	fails *failRecorder
	acked uint64 // every record up to acked was acknowledged
}

func newStoreFixture(t *testing.T) *storeFixture {
	fs := faultfs.NewMem()
	if err := fs.MkdirAll("/log", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := fsys.SyncDir(fs, "/"); err != nil {
		t.Fatal(err)
	}
	f := &storeFixture{t: t, fs: fs, dir: "/log/raft"}
	f.reopen()
	t.Cleanup(func() { f.s.Close() })
	return f
}

func (f *storeFixture) reopen() {
	f.t.Helper()
	f.fails = &failRecorder{}
	s, err := Open(f.fs, f.dir, f.fails.onFail)
	if err != nil {
		f.t.Fatalf("open: %v", err)
	}
	f.s = s
}

// faultRecord is the raft record at index i: big enough that a small disk
// fills within a few hundred.
func faultRecord(i uint64) *raft.Log {
	return &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: []byte(fmt.Sprintf("%d:%s", i, strings.Repeat("x", 900))), AppendedAt: time.Unix(0, int64(i))}
}

// store stores the next batch of n records; acked moves only on success.
func (f *storeFixture) store(n int) error {
	var ls []*raft.Log
	for i := range n {
		ls = append(ls, faultRecord(f.acked+1+uint64(i)))
	}
	err := f.s.StoreLogs(ls)
	if err == nil {
		f.acked += uint64(n)
	}
	return err
}

// check checks that the store holds every acknowledged record and, of the
// failed batch [acked+1, acked+n], all or nothing.
func (f *storeFixture) check(n int) {
	f.t.Helper()
	last, _ := f.s.LastIndex()
	first, _ := f.s.FirstIndex()
	if first != 1 || (last != f.acked && last != f.acked+uint64(n)) {
		f.t.Fatalf("store holds [%d, %d]; acknowledged up to %d, failed batch of %d", first, last, f.acked, n)
	}
	for i := uint64(1); i <= last; i++ {
		var l raft.Log
		if err := f.s.GetLog(i, &l); err != nil {
			f.t.Fatalf("GetLog(%d): %v (acknowledged up to %d)", i, err, f.acked)
		}
		if want := faultRecord(i); !raftLogsEqual(&l, want) {
			f.t.Fatalf("GetLog(%d) = %+v", i, l)
		}
	}
	f.acked = last
}

// TestRaftStoreFaults: a raft store whose disk fails an fsync, returns
// EIO on a write or fills never acknowledges the batch, fails for good
// (later batches fail even on a healthy disk), calls onFail once with an
// error naming the cause, blocks raft's term and vote writes instead of
// failing them, and after a crash that drops the unsynced writes holds
// every acknowledged record.
func TestRaftStoreFaults(t *testing.T) {
	for _, tc := range []struct {
		name   string
		inject func(fs *faultfs.FS)
		cause  func(error) bool
	}{
		{"fsync", func(fs *faultfs.FS) { fs.Fail(faultfs.Rule{Ops: faultfs.OpSync}) }, isEIO},
		{"write", func(fs *faultfs.FS) { fs.Fail(faultfs.Rule{Ops: faultfs.OpWrite}) }, isEIO},
		{"torn-write", func(fs *faultfs.FS) { fs.Fail(faultfs.Rule{Ops: faultfs.OpWrite, Partial: true}) }, isEIO},
		{"no-space", func(fs *faultfs.FS) { fs.SetSpace(48 << 10) }, fsys.IsNoSpace},
	} {
		for _, crash := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/crash=%v", tc.name, crash), func(t *testing.T) {
				f := newStoreFixture(t)
				for range 10 {
					if err := f.store(4); err != nil {
						t.Fatal(err)
					}
				}
				if err := f.s.SetUint64([]byte("CurrentTerm"), 1); err != nil {
					t.Fatal(err)
				}
				tc.inject(f.fs)
				var err error
				for i := 0; i < 1000 && err == nil; i++ {
					err = f.store(4)
				}
				if err == nil {
					t.Fatal("no batch failed")
				}
				if !tc.cause(err) {
					t.Fatalf("StoreLogs: %v; the error does not name the cause", err)
				}
				fails := f.fails.get()
				if len(fails) != 1 || !tc.cause(fails[0]) {
					t.Fatalf("onFail calls: %v; want one naming the cause", fails)
				}
				// The disk works again: the store must not take a sync
				// that now succeeds as making anything durable.
				f.fs.Heal()
				if err := f.store(4); err == nil {
					t.Fatal("StoreLogs succeeded after the store failed")
				}
				if len(f.fails.get()) != 1 {
					t.Fatalf("onFail called %d times", len(f.fails.get()))
				}
				// A term or vote write fails too (raft's own block instead:
				// see TestLogReplicaDiskFails).
				if err := f.s.SetUint64([]byte("CurrentTerm"), 2); err == nil {
					t.Fatal("a term write on a failed store succeeded")
				}
				// The process dies: the failed store is closed (Close
				// returns its error) and its disk crashes or is killed.
				if err := f.s.Close(); err == nil {
					t.Fatal("Close of a failed store returned nil")
				}
				if crash {
					f.fs.Crash()
				} else {
					f.fs.Kill()
				}
				f.reopen()
				f.check(4)
				if v, err := f.s.GetUint64([]byte("CurrentTerm")); err != nil || v != 1 {
					t.Fatalf("CurrentTerm = %d, %v; want 1", v, err)
				}
				if err := f.store(4); err != nil {
					t.Fatalf("StoreLogs after reopening on a healthy disk: %v", err)
				}
			})
		}
	}
}

func isEIO(err error) bool { return errors.Is(err, syscall.EIO) }

// TestRaftStoreCrash: a crash that drops exactly the unsynced writes loses
// no acknowledged record, term or vote, and deleted ranges stay deleted.
func TestRaftStoreCrash(t *testing.T) {
	f := newStoreFixture(t)
	for round := range 3 {
		for range 20 {
			if err := f.store(3); err != nil {
				t.Fatal(err)
			}
		}
		if err := f.s.SetUint64([]byte("CurrentTerm"), uint64(round+1)); err != nil {
			t.Fatal(err)
		}
		f.fs.Crash()
		f.s.Close()
		f.reopen()
		f.check(0)
		if v, err := f.s.GetUint64([]byte("CurrentTerm")); err != nil || v != uint64(round+1) {
			t.Fatalf("CurrentTerm = %d, %v after the crash; want %d", v, err, round+1)
		}
	}
	// Compaction of the log's head survives a crash too.
	if err := f.s.DeleteRange(1, 100); err != nil {
		t.Fatal(err)
	}
	f.fs.Crash()
	f.s.Close()
	f.reopen()
	if first, _ := f.s.FirstIndex(); first != 101 {
		t.Fatalf("first index %d after a crash, want 101", first)
	}
}

// TestRaftStoreDefaultOnFail: with no onFail the process exits with one
// line naming the store and the cause (guard.Exit), not a panic.
func TestRaftStoreDefaultOnFail(t *testing.T) {
	var (
		mu   sync.Mutex
		msgs []string
	)
	exit := guard.Exit
	guard.Exit = func(msg string) {
		mu.Lock()
		msgs = append(msgs, msg)
		mu.Unlock()
	}
	t.Cleanup(func() { guard.Exit = exit })
	fs := faultfs.NewMem()
	s, err := Open(fs, "/raft", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.StoreLogs([]*raft.Log{faultRecord(1)}); err != nil {
		t.Fatal(err)
	}
	fs.SetSpace(0)
	if err := s.StoreLogs([]*raft.Log{faultRecord(2)}); err == nil {
		t.Fatal("StoreLogs on a full disk succeeded")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(msgs) != 1 {
		t.Fatalf("exit called %d times: %q", len(msgs), msgs)
	}
	if m := msgs[0]; strings.Contains(m, "\n") || !strings.Contains(m, "/raft") || !strings.Contains(m, "no space left on device") {
		t.Fatalf("exit message %q: want one line naming the store and the cause", m)
	}
	t.Logf("exit message: %s", msgs[0])
}
