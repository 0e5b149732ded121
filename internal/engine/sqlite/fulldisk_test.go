package sqliteengine_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/distash/distash/internal/engine"
	sqliteengine "github.com/distash/distash/internal/engine/sqlite"
	"github.com/distash/distash/internal/fsys"
	"github.com/distash/distash/internal/kv"
)

// mountTmpfs mounts a tmpfs of size bytes on a new directory and unmounts
// it when the test ends. SQLite's files bypass the file-system seam
// (modernc's driver takes no writable VFS), so a full disk is a real,
// small file system; mounting one needs root.
func mountTmpfs(t *testing.T, size int64) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipped: mounting a small tmpfs to fill needs root")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
		t.Skipf("skipped: cannot mount a tmpfs on %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
			syscall.Unmount(dir, syscall.MNT_DETACH)
		}
	})
	return dir
}

// TestFullDisk: on a full file system Apply fails with an error matching
// fsys.IsNoSpace (so the stash can tell a full disk from a broken one),
// and once space is freed the engine takes writes again and, reopened,
// holds every acknowledged batch.
func TestFullDisk(t *testing.T) {
	mnt := mountTmpfs(t, 4<<20)
	// Ballast: space to free once the disk is full.
	ballast := filepath.Join(mnt, "ballast")
	if err := os.WriteFile(ballast, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	opts := engine.Options{Dir: filepath.Join(mnt, "engine")}
	e, err := sqliteengine.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { e.Close() }()
	acked := map[string][]byte{}
	var v kv.Version
	batch := func(v kv.Version) []engine.Write {
		var ws []engine.Write
		for i := range 16 {
			ws = append(ws, engine.Write{Key: []byte(fmt.Sprintf("k/%05d/%02d", v, i)), Value: bytes.Repeat([]byte{byte(v)}, 4000)})
		}
		return ws
	}
	apply := func() error {
		ws := batch(v + 1)
		err := e.Apply(&engine.Batch{Version: v + 1, Writes: ws})
		if err == nil {
			v++
			for _, w := range ws {
				acked[string(w.Key)] = w.Value
			}
		}
		return err
	}
	check := func(e *sqliteengine.Engine) {
		t.Helper()
		if got := e.Version(); got != v {
			t.Fatalf("version %d, want %d (the last acknowledged)", got, v)
		}
		n := 0
		if err := e.Scan(nil, nil, false, func(k, val []byte) bool {
			n++
			if want, ok := acked[string(k)]; !ok || !bytes.Equal(val, want) {
				t.Fatalf("key %q: not acknowledged, or a wrong value", k)
			}
			return true
		}); err != nil {
			t.Fatal(err)
		}
		if n != len(acked) {
			t.Fatalf("%d keys, %d acknowledged", n, len(acked))
		}
	}
	for i := 0; i < 1000 && err == nil; i++ {
		err = apply()
	}
	if err == nil {
		t.Fatal("the disk never filled")
	}
	if !fsys.IsNoSpace(err) {
		t.Fatalf("Apply on a full disk: %v; want an error matching fsys.IsNoSpace", err)
	}
	t.Logf("full after %d batches: %v", v, err)
	if err := apply(); err == nil || !fsys.IsNoSpace(err) {
		t.Fatalf("Apply on a full disk again: %v", err)
	}
	check(e) // reads still work, and see only what was acknowledged

	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := apply(); err != nil {
			t.Fatalf("Apply after space was freed: %v", err)
		}
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if e, err = sqliteengine.Open(opts); err != nil {
		t.Fatal(err)
	}
	check(e)
}
