package sqliteengine_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/distash/distash/internal/engine"
	"github.com/distash/distash/internal/engine/enginetest"
	sqliteengine "github.com/distash/distash/internal/engine/sqlite"
)

func open(t *testing.T, opts engine.Options) engine.Engine {
	t.Helper()
	e, err := sqliteengine.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// crash simulates a crash on a copy of the database and its write-ahead
// log taken while e is open and idle (the engine writes only inside Apply,
// and a commit is synced before Apply returns): the files a kill -9 would
// leave. SQLite recovers the log when it opens the copy (the shared-memory
// index, not copied, is rebuilt from it). e is closed after the copy.
func crash(t *testing.T, e engine.Engine, opts engine.Options) engine.Options {
	t.Helper()
	dir := t.TempDir()
	for _, name := range []string{sqliteengine.FileName, sqliteengine.FileName + "-wal"} {
		data, err := os.ReadFile(filepath.Join(opts.Dir, name))
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, name), data, 0o644)
		}
		if err != nil && !os.IsNotExist(err) {
			e.Close()
			t.Fatalf("copy %s: %v", name, err)
		}
	}
	e.Close()
	opts.Dir = dir
	return opts
}

func TestConformance(t *testing.T) {
	enginetest.Run(t, open, open, crash)
}

func TestNoDir(t *testing.T) {
	if _, err := sqliteengine.Open(engine.Options{}); err == nil {
		t.Fatal("Open without a Dir succeeded")
	}
}

func TestClosed(t *testing.T) {
	enginetest.RunClosed(t, open(t, engine.Options{Dir: t.TempDir()}), sqliteengine.ErrClosed)
}

func BenchmarkApply(b *testing.B) {
	e, err := sqliteengine.Open(engine.Options{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	enginetest.BenchmarkApply(b, e)
}

func BenchmarkGet(b *testing.B) {
	e, err := sqliteengine.Open(engine.Options{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	enginetest.BenchmarkGet(b, e)
}

func TestAbsentKeysCostNoQuery(t *testing.T) {
	e, err := sqliteengine.Open(engine.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if err := e.Apply(&engine.Batch{Version: 1, Writes: []engine.Write{{Key: []byte("present"), Value: []byte("v")}}}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100; i++ {
		if _, ok, err := e.Get([]byte(fmt.Sprintf("absent-%d", i))); ok || err != nil {
			t.Fatal(ok, err)
		}
	}
	if v, ok, _ := e.Get([]byte("present")); !ok || string(v) != "v" {
		t.Fatal("present key filtered out")
	}
	if n := e.Stats().FilterNegatives; n < 90 {
		t.Fatalf("only %d of 100 absent lookups answered by the filter", n)
	}
}
