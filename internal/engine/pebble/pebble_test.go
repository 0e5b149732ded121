package pebbleengine_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/distash/distash/internal/engine"
	"github.com/distash/distash/internal/engine/enginetest"
	pebbleengine "github.com/distash/distash/internal/engine/pebble"
	"github.com/distash/distash/internal/fsys"
	"github.com/distash/distash/internal/kv"
)

func open(t *testing.T, opts engine.Options) engine.Engine {
	t.Helper()
	e, err := pebbleengine.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// crash simulates a crash on a checkpoint taken while e is open (see
// Checkpoint), then closes e.
func crash(t *testing.T, e engine.Engine, opts engine.Options) engine.Options {
	t.Helper()
	opts.Dir = filepath.Join(t.TempDir(), "crashed")
	err := pebbleengine.Checkpoint(e.(*pebbleengine.Engine), opts.Dir)
	e.Close()
	if err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	return opts
}

func TestConformance(t *testing.T) {
	enginetest.Run(t, open, open, crash)
}

// TestConformanceDevices runs the suite with the engine's files on each
// emulated device (ssd, hdd, nvm; latencies scaled down).
func TestConformanceDevices(t *testing.T) {
	enginetest.RunDevices(t, open, crash)
}

func TestNoDir(t *testing.T) {
	if _, err := pebbleengine.Open(engine.Options{}); err == nil {
		t.Fatal("Open without a Dir succeeded")
	}
}

func TestClosed(t *testing.T) {
	enginetest.RunClosed(t, open(t, engine.Options{Dir: t.TempDir()}), pebbleengine.ErrClosed)
}

func BenchmarkApply(b *testing.B) {
	e, err := pebbleengine.Open(engine.Options{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	enginetest.BenchmarkApply(b, e)
}

func BenchmarkGet(b *testing.B) {
	e, err := pebbleengine.Open(engine.Options{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	enginetest.BenchmarkGet(b, e)
}

// TestFaults runs the disk-fault suite: Pebble's WAL and MANIFEST errors,
// which Pebble itself treats as fatal (Fatalf, panics), come back as
// errors of the engine's methods, and the engine fails for good.
func TestFaults(t *testing.T) {
	enginetest.RunFaults(t, func(opts engine.Options) (engine.Engine, error) {
		return pebbleengine.Open(opts)
	}, "*")
}

// TestDamageAtRest damages a closed engine's files and checks that the
// engine fails with a *fsys.DamageError (at Open, or at the first read of
// the damaged data) rather than serving less or wrong data.
func TestDamageAtRest(t *testing.T) {
	// fill writes enough to leave sstables (Close flushes nothing: a
	// manual flush makes them) and returns the directory.
	fill := func(t *testing.T) string {
		dir := t.TempDir()
		e, err := pebbleengine.Open(engine.Options{Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		for v := 1; v <= 6; v++ {
			var ws []engine.Write
			for i := 0; i < 20; i++ {
				ws = append(ws, enginetest.Set(fmt.Sprintf("k%03d-%02d", i, v), enginetest.BigValue(i, v)))
			}
			if err := e.Apply(&engine.Batch{Version: kv.Version(v), Writes: ws}); err != nil {
				t.Fatal(err)
			}
		}
		if err := pebbleengine.Flush(e); err != nil {
			t.Fatal(err)
		}
		e.Close()
		return dir
	}
	// readAll opens dir and reads everything: the damage must show as a
	// DamageError naming want (a base name) at one of the two steps.
	check := func(t *testing.T, dir, want string) {
		t.Helper()
		e, err := pebbleengine.Open(engine.Options{Dir: dir})
		if err == nil {
			defer e.Close()
			err = e.Scan(nil, nil, false, func(k, v []byte) bool { return true })
		}
		var de *fsys.DamageError
		if !errors.As(err, &de) || !errors.Is(err, fsys.ErrDamaged) {
			t.Fatalf("err = %v; want a *fsys.DamageError", err)
		}
		if want != "" && !strings.Contains(de.Path, want) {
			t.Fatalf("damage names %s (%v); want %s", de.Path, err, want)
		}
	}
	files := func(t *testing.T, dir, glob string) []string {
		names, _ := filepath.Glob(filepath.Join(dir, glob))
		if len(names) == 0 {
			t.Fatalf("no %s in %s", glob, dir)
		}
		sort.Strings(names)
		return names
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
		check(t, dir, "")
	})
	t.Run("truncated-manifest", func(t *testing.T) {
		dir := fill(t)
		m := files(t, dir, "MANIFEST-*")
		path := m[len(m)-1]
		st, _ := os.Stat(path)
		os.Truncate(path, st.Size()/2)
		check(t, dir, "")
	})
	t.Run("missing-manifest", func(t *testing.T) {
		dir := fill(t)
		for _, m := range files(t, dir, "MANIFEST-*") {
			os.Remove(m)
		}
		check(t, dir, "")
	})
}
