package stash

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/vfs"

	"github.com/distash/distash/internal/engine"
	pebbleengine "github.com/distash/distash/internal/engine/pebble"
	"github.com/distash/distash/internal/fsys"
	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/logentry"
	"github.com/distash/distash/internal/shardmap"
	"github.com/distash/distash/internal/testutil/wait"
)

// fullDisk is a disk that fills and empties on command: files created
// through fullFS and engine writes through fullEngine fail with ENOSPC
// while full is set.
type fullDisk struct{ full atomic.Bool }

var errNoSpace = fmt.Errorf("write: %w", syscall.ENOSPC)

type fullFS struct {
	vfs.FS
	d *fullDisk
}

func (f fullFS) Create(name string) (vfs.File, error) {
	file, err := f.FS.Create(name)
	if err != nil {
		return nil, err
	}
	return fullFile{File: file, d: f.d}, nil
}

type fullFile struct {
	vfs.File
	d *fullDisk
}

func (f fullFile) Write(p []byte) (int, error) {
	if f.d.full.Load() {
		return 0, errNoSpace
	}
	return f.File.Write(p)
}

// fullEngine fails Apply with ENOSPC while the disk is full; stuck keeps
// failing it after the disk has room (an engine stuck on its error).
type fullEngine struct {
	engine.Engine
	d     *fullDisk
	stuck *atomic.Bool
}

func (e fullEngine) Apply(b *engine.Batch) error {
	if e.d.full.Load() || (e.stuck != nil && e.stuck.Load()) {
		return fmt.Errorf("pebble engine: apply: %w", errNoSpace)
	}
	return e.Engine.Apply(b)
}

func openPebble(t *testing.T, dir string) engine.Engine {
	t.Helper()
	eng, err := pebbleengine.Open(engine.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	return eng
}

// setKeys pushes versions from..to, each setting "k<v>" to "v<v>".
func setKeys(l *fakeLog, from, to kv.Version) {
	for v := from; v <= to; v++ {
		l.push(logentry.Message{Version: v, Mutations: []kv.Mutation{{Type: kv.MutSet, Key: []byte(fmt.Sprintf("k%04d", v)), Param: []byte(fmt.Sprintf("v%d", v))}}})
	}
}

// TestDamagedOwnershipFailsTheStash: a durable stash whose ownership file
// is flipped, truncated or missing while its engine holds data fails as
// it opens with a *fsys.DamageError naming the file, instead of serving
// what it no longer knows it owns; a missing file is adopted only when
// the server says the directory predates the file (AdoptOwnership).
func TestDamagedOwnershipFailsTheStash(t *testing.T) {
	dir := t.TempDir()
	engDir := filepath.Join(dir, "engine")
	path := filepath.Join(dir, ownershipFile)
	log := newFakeLog(1)
	eng := openPebble(t, engDir)
	s := New(Options{Tag: 1, Engine: eng, Log: log, WindowVersions: 5, FlushInterval: time.Millisecond, TrackBytes: true, Logger: quiet, Dir: dir})
	s.SetOwned([]kv.KeyRange{{Begin: []byte("k"), End: []byte("l")}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	setKeys(log, 1, 50)
	wait.For(t, "flushed", func() bool { return s.Stats().Durable >= 40 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	s.Close()
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}

	open := func(adopt bool) *Stash {
		return New(Options{Tag: 1, Engine: openPebble(t, engDir), Log: log, TrackBytes: true, Logger: quiet, Dir: dir, AdoptOwnership: adopt})
	}
	flipped := append([]byte(nil), good...)
	flipped[len(flipped)-3] ^= 0x01
	for name, content := range map[string][]byte{"flipped": flipped, "truncated": good[:len(good)-4], "missing": nil} {
		t.Run(name, func(t *testing.T) {
			if content == nil {
				os.Remove(path)
			} else if err := os.WriteFile(path, content, 0o644); err != nil {
				t.Fatal(err)
			}
			s := open(false)
			defer s.Close()
			err := s.Failed()
			var de *fsys.DamageError
			if !errors.As(err, &de) || de.Path != path {
				t.Fatalf("stash opened with a %s ownership file: failure %v, want a DamageError naming %s", name, err, path)
			}
			if err := s.Run(context.Background()); !errors.Is(err, fsys.ErrDamaged) {
				t.Fatalf("Run: %v, want the damage", err)
			}
			if _, _, err := s.Get(context.Background(), 50, [][]byte{[]byte("k0001")}); kv.CodeOf(err) != kv.CodeStashUnavailable {
				t.Fatalf("read of a damaged stash: %v, want stash_unavailable", err)
			}
		})
	}
	// A directory of an older version: the file is written, the stash opens.
	os.Remove(path)
	s = open(true)
	if err := s.Failed(); err != nil {
		t.Fatalf("adopting: %v", err)
	}
	s.Close()
	if _, _, err := fsys.ReadChecked(nil, path); err != nil {
		t.Fatalf("adopted ownership file: %v", err)
	}
}

// TestFullDiskIsWaitedOut: a durable stash whose disk fills stays up in
// the disk-full state (no failure), serves reads of what it applied,
// answers newer reads at once with stash_unavailable, and once the disk
// has room again writes what it held and serves everything. An ownership
// change met on the full disk is written before any later version is
// made durable.
func TestFullDiskIsWaitedOut(t *testing.T) {
	defer func(d time.Duration) { diskFullRetry = d }(diskFullRetry)
	diskFullRetry = 20 * time.Millisecond
	d := &fullDisk{}
	dir := t.TempDir()
	log := newFakeLog(2)
	eng := fullEngine{Engine: openPebble(t, filepath.Join(dir, "engine")), d: d}
	var reported atomic.Int32
	s := New(Options{Tag: 1, Engine: eng, Log: log, WindowVersions: 5, WindowBytes: 64 << 10, FlushInterval: time.Millisecond,
		TrackBytes: true, Logger: quiet, Dir: dir, FS: fullFS{FS: vfs.Default, d: d}, FutureWait: 5 * time.Second,
		OnDiskFull: func(error) { reported.Add(1) }})
	s.SetOwned([]kv.KeyRange{{Begin: []byte("k"), End: []byte("l")}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() { cancel(); <-done; s.Close() }()
	setKeys(log, 1, 20)
	wait.For(t, "flushed", func() bool { return s.Stats().Durable >= 10 })

	d.full.Store(true)
	setKeys(log, 21, 2000)
	// Full, and past k0021's version: the flush that found the disk full
	// may have started before version 21 was applied.
	wait.For(t, "disk full", func() bool { _, _, full := s.DiskFull(); return full && s.AppliedVersion() >= 21 })
	applied := s.AppliedVersion()
	if err := s.Failed(); err != nil {
		t.Fatalf("the stash failed on a full disk: %v", err)
	}
	if _, cause, _ := s.DiskFull(); !fsys.IsNoSpace(cause) {
		t.Fatalf("disk-full cause %v", cause)
	}
	vals, _, err := s.Get(ctx, applied, [][]byte{[]byte("k0021")})
	if err != nil || string(vals[0]) != "v21" {
		t.Fatalf("read of an applied version on a full disk: %q %v", vals, err)
	}
	began := time.Now()
	_, _, err = s.Get(ctx, 5000, [][]byte{[]byte("k0021")})
	if kv.CodeOf(err) != kv.CodeStashUnavailable || time.Since(began) > time.Second || !strings.Contains(err.Error(), "disk is full") {
		t.Fatalf("read of a version not applied on a full disk: %v after %v, want stash_unavailable at once", err, time.Since(began))
	}
	// An assignment while the disk is full: kept in memory, written later.
	log.push(logentry.Message{Version: 2001, Mutations: []kv.Mutation{shardmap.AssignMutation(shardmap.Shard{Begin: []byte("m"), End: []byte("n"), Pool: "p", Team: []kv.Tag{1}})}})

	d.full.Store(false)
	// The assignment's ownership snapshot is written by the retry that
	// finds room, which may come a moment after the flushes.
	wait.For(t, "room again, everything durable, the assignment saved", func() bool {
		_, _, full := s.DiskFull()
		snaps, _, _, found, err := loadOwnership(nil, dir, s.Stats().Durable)
		return !full && s.Stats().Durable >= 1990 && err == nil && found && snaps[len(snaps)-1].Version == 2001
	})
	for v := kv.Version(21); v <= 2000; v += 97 {
		vals, _, err := s.Get(ctx, s.AppliedVersion(), [][]byte{[]byte(fmt.Sprintf("k%04d", v))})
		if err != nil || string(vals[0]) != fmt.Sprintf("v%d", v) {
			t.Fatalf("k%04d after the disk had room: %q %v", v, vals, err)
		}
	}
	snaps, _, _, found, err := loadOwnership(nil, dir, s.Stats().Durable)
	if err != nil || !found || snaps[len(snaps)-1].Version != 2001 {
		t.Fatalf("ownership after the disk had room: %+v found=%v err=%v, want the snapshot of version 2001", snaps, found, err)
	}
	if n := reported.Load(); n != 1 {
		t.Fatalf("OnDiskFull called %d times, want once", n)
	}
}

// TestEngineStuckAfterFullDiskFailsTheStash: an engine that keeps failing
// with ENOSPC after the disk has room again is stuck on its error: the
// stash fails (the server reopens it) rather than wait for ever.
func TestEngineStuckAfterFullDiskFailsTheStash(t *testing.T) {
	defer func(d time.Duration) { diskFullRetry = d }(diskFullRetry)
	diskFullRetry = 20 * time.Millisecond
	d := &fullDisk{}
	stuck := &atomic.Bool{}
	dir := t.TempDir()
	log := newFakeLog(3)
	s := New(Options{Tag: 1, Engine: fullEngine{Engine: openPebble(t, filepath.Join(dir, "engine")), d: d, stuck: stuck}, Log: log,
		WindowVersions: 5, FlushInterval: time.Millisecond, TrackBytes: true, Logger: quiet, Dir: dir, FS: fullFS{FS: vfs.Default, d: d}})
	s.SetOwned([]kv.KeyRange{{Begin: []byte("k"), End: []byte("l")}})
	done := make(chan error, 1)
	go func() { done <- s.Run(context.Background()) }()
	defer s.Close()
	d.full.Store(true)
	stuck.Store(true)
	setKeys(log, 1, 100)
	wait.For(t, "disk full", func() bool { _, _, full := s.DiskFull(); return full })
	d.full.Store(false)
	select {
	case err := <-done:
		if !fsys.IsNoSpace(err) || !strings.Contains(err.Error(), "still fails") {
			t.Fatalf("Run: %v, want the engine's no-space error saying it is stuck", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a stash whose engine is stuck after a full disk did not fail")
	}
}

// TestRemovedDirectoryFailsTheStash: removing a running durable stash's
// directory fails the stash with a DamageError naming its ownership file
// before its engine writes into the missing directory (Pebble panics
// when a new WAL file cannot be created).
func TestRemovedDirectoryFailsTheStash(t *testing.T) {
	dir := t.TempDir()
	log := newFakeLog(4)
	s := New(Options{Tag: 1, Engine: openPebble(t, filepath.Join(dir, "engine")), Log: log, WindowVersions: 5, FlushInterval: time.Millisecond,
		TrackBytes: true, Logger: quiet, Dir: dir})
	s.SetOwned([]kv.KeyRange{{Begin: []byte("k"), End: []byte("l")}})
	done := make(chan error, 1)
	go func() { done <- s.Run(context.Background()) }()
	defer s.Close()
	setKeys(log, 1, 20)
	wait.For(t, "flushed", func() bool { return s.Stats().Durable >= 10 })
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	setKeys(log, 21, 40)
	select {
	case err := <-done:
		var de *fsys.DamageError
		if !errors.As(err, &de) || de.Path != filepath.Join(dir, ownershipFile) {
			t.Fatalf("Run: %v, want a DamageError naming the ownership file", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the stash did not notice its directory was removed")
	}
}

// TestRemovedDirectoryIsDamage: a durable stash whose directory is removed
// while it runs fails as damaged when it next saves its ownership, not
// with a plain error: a plain failure had its supervisor reopen it empty
// and replay its tag from the log, which holds nothing of the ranges the
// stash fetched from other replicas (seen once in a loaded full suite).
func TestRemovedDirectoryIsDamage(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "stash")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	s := New(Options{Tag: 1, Engine: openPebble(t, t.TempDir()), Log: newFakeLog(1), TrackBytes: true, Logger: quiet, Dir: dir})
	defer s.Close()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	s.SetOwned([]kv.KeyRange{{Begin: []byte("k"), End: []byte("l")}}) // saves the ownership file
	var de *fsys.DamageError
	if err := s.Failed(); !errors.As(err, &de) || de.Path != filepath.Join(dir, ownershipFile) || !strings.Contains(de.Reason, "missing while the stash runs") {
		t.Fatalf("ownership saved into a removed directory: failure %v, want a DamageError naming %s", err, filepath.Join(dir, ownershipFile))
	}
}
