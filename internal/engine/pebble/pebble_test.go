package pebbleengine_test

import (
	"testing"

	"github.com/distash/distash/internal/engine"
	"github.com/distash/distash/internal/engine/enginetest"
	pebbleengine "github.com/distash/distash/internal/engine/pebble"
)

func open(t *testing.T, opts engine.Options) engine.Engine {
	t.Helper()
	e, err := pebbleengine.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestConformance(t *testing.T) {
	enginetest.Run(t, open, open)
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
