package faultfs

import (
	"errors"
	"io"
	"syscall"
	"testing"

	"github.com/distash/distash/internal/fsys"
)

func mustWrite(t *testing.T, fs *FS, name, data string, sync bool) {
	t.Helper()
	f, err := fs.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte(data)); err != nil {
		t.Fatal(err)
	}
	if sync {
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func read(fs *FS, name string) (string, error) {
	b, err := fsys.ReadFile(fs, name)
	return string(b), err
}

func TestRulesFailByKindAndPathUntilHealed(t *testing.T) {
	fs := NewMem()
	if err := fs.MkdirAll("d", 0o755); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, fs, "d/a.seg", "segment", false)
	mustWrite(t, fs, "d/b.meta", "meta", false)

	fs.Fail(Rule{Ops: OpRead, Path: "*.seg"})
	if _, err := read(fs, "d/a.seg"); !errors.Is(err, syscall.EIO) {
		t.Fatalf("read of a.seg: %v, want EIO", err)
	}
	if got, err := read(fs, "d/b.meta"); err != nil || got != "meta" {
		t.Fatalf("read of b.meta: %q %v, want it untouched", got, err)
	}
	fs.Fail(Rule{Ops: OpSync, Err: syscall.EROFS, Times: 1})
	f, _ := fs.Create("d/c")
	if err := f.Sync(); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("sync: %v, want the rule's error", err)
	}
	if err := f.Sync(); err != nil {
		t.Fatalf("second sync: %v, want the rule retired after Times", err)
	}
	f.Close()
	if fs.Injected() != 2 || fs.Count(OpRead) == 0 || fs.Count(OpSync) != 2 {
		t.Fatalf("injected %d reads %d syncs %d", fs.Injected(), fs.Count(OpRead), fs.Count(OpSync))
	}
	fs.Heal()
	if got, err := read(fs, "d/a.seg"); err != nil || got != "segment" {
		t.Fatalf("after Heal: %q %v", got, err)
	}
}

func TestSkipLetsOperationsThrough(t *testing.T) {
	fs := NewMem()
	fs.Fail(Rule{Ops: OpWrite, Skip: 2})
	f, _ := fs.Create("x")
	for i := 0; i < 2; i++ {
		if _, err := f.Write([]byte("ok")); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	if _, err := f.Write([]byte("no")); !errors.Is(err, syscall.EIO) {
		t.Fatalf("third write: %v, want EIO", err)
	}
}

func TestPartialWriteLeavesAShortWrite(t *testing.T) {
	fs := NewMem()
	mustWrite(t, fs, "log", "", true)
	f, _ := fs.OpenReadWrite("log")
	fs.Fail(Rule{Ops: OpWrite, Partial: true, Times: 1})
	n, err := f.WriteAt([]byte("abcdefgh"), 0)
	if n != 4 || !errors.Is(err, syscall.EIO) {
		t.Fatalf("WriteAt = %d, %v; want 4 bytes and EIO", n, err)
	}
	if got, _ := read(fs, "log"); got != "abcd" {
		t.Fatalf("file holds %q, want the first half", got)
	}
}

func TestSmallDiskFillsAndFrees(t *testing.T) {
	fs := NewMem()
	fs.SetSpace(10)
	f, _ := fs.Create("a")
	if _, err := f.Write([]byte("0123456")); err != nil {
		t.Fatal(err)
	}
	n, err := f.Write([]byte("789abc"))
	if n != 3 || !fsys.IsNoSpace(err) {
		t.Fatalf("write past the space: %d, %v; want 3 bytes and ENOSPC", n, err)
	}
	// Overwriting in place spends nothing.
	if _, err := f.WriteAt([]byte("xx"), 0); err != nil {
		t.Fatalf("overwrite: %v", err)
	}
	f.Close()
	if fs.Space() != 0 {
		t.Fatalf("space %d, want 0", fs.Space())
	}
	if err := fs.Remove("a"); err != nil {
		t.Fatal(err)
	}
	if fs.Space() != 10 {
		t.Fatalf("space after remove %d, want 10", fs.Space())
	}
	mustWrite(t, fs, "b", "0123456789", false)
	fs.SetSpace(-1)
	mustWrite(t, fs, "c", "unlimited again", false)
}

func TestCrashDropsExactlyTheUnsyncedWrites(t *testing.T) {
	fs := NewMem()
	if err := fs.MkdirAll("d", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := fsys.SyncDir(fs, ""); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, fs, "d/synced", "kept", true)
	if err := fsys.SyncDir(fs, "d"); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, fs, "d/unsynced-dir", "file synced, directory not", true)
	f, _ := fs.OpenReadWrite("d/synced")
	if _, err := f.WriteAt([]byte(" and more"), 4); err != nil {
		t.Fatal(err)
	}
	l, err := fs.Lock("d/LOCK")
	if err != nil {
		t.Fatal(err)
	}
	_ = l

	fs.Crash()
	if got, err := read(fs, "d/synced"); err != nil || got != "kept" {
		t.Fatalf("synced file after crash: %q %v, want %q", got, err, "kept")
	}
	if ok, _ := fsys.Exists(fs, "d/unsynced-dir"); ok {
		t.Fatal("a file whose directory was never synced survived the crash")
	}
	if _, err := f.WriteAt([]byte("zombie"), 0); !errors.Is(err, ErrCrashed) {
		t.Fatalf("write through a file of the crashed process: %v, want ErrCrashed", err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("close of a dead file: %v", err)
	}
	l2, err := fs.Lock("d/LOCK")
	if err != nil {
		t.Fatalf("lock after crash: %v, want the dead process's lock released", err)
	}
	l2.Close()
}

func TestFilesHaveNoDescriptor(t *testing.T) {
	fs := New(nil)
	dir := t.TempDir()
	f, err := fs.Create(fs.PathJoin(dir, "x"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Fd() != ^uintptr(0) {
		t.Fatal("a faultfs file exposes its descriptor")
	}
	var _ io.Closer = f
}
