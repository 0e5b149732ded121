package sqliteengine_test

import (
	"fmt"
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

func TestConformance(t *testing.T) {
	enginetest.Run(t, open, open)
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
