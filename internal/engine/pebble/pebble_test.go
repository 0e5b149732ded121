package pebbleengine_test

import (
	"path/filepath"
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
