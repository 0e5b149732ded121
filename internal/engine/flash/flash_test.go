package flash_test

import (
	"fmt"
	"math/rand"
	"strings"
	"testing"

	"github.com/distash/distash/internal/engine"
	"github.com/distash/distash/internal/engine/engines"
	"github.com/distash/distash/internal/engine/enginetest"
	"github.com/distash/distash/internal/engine/flash"
	"github.com/distash/distash/internal/kv"
)

func openWith(cfg flash.Config) func(t *testing.T, opts engine.Options) engine.Engine {
	return func(t *testing.T, opts engine.Options) engine.Engine {
		t.Helper()
		e, err := flash.OpenConfig(opts, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
}

// crash is the suite's crash simulation: flash.Crash, with a torn frame
// of 0 to 199 bytes (0: the kill came between two writes).
func crash(t *testing.T, e engine.Engine, opts engine.Options) engine.Options {
	t.Helper()
	if err := flash.Crash(e.(*flash.Engine), rand.Intn(200)); err != nil {
		t.Fatalf("Crash: %v", err)
	}
	return opts
}

func TestConformance(t *testing.T) {
	t.Parallel()
	open := openWith(flash.Config{})
	enginetest.Run(t, open, open, crash)
}

// TestConformanceDevices runs the suite with the engine's files on each
// emulated device (ssd, hdd, nvm; latencies scaled down), with small
// segments so that rotations and cleaning go through the device too.
func TestConformanceDevices(t *testing.T) {
	t.Parallel()
	enginetest.RunDevices(t, openWith(flash.Config{SegmentBytes: 64 << 10, WriteBufferBytes: 64 << 10, CacheBytes: 32 << 10}), crash)
}

// TestConformanceSmall runs the suite with tiny segments, write buffer and
// cache, so that rotation, cleaning, buffer misses and cache evictions all
// happen while it runs.
func TestConformanceSmall(t *testing.T) {
	t.Parallel()
	open := openWith(flash.Config{SegmentBytes: 16 << 10, WriteBufferBytes: 64 << 10, CacheBytes: 32 << 10, IndexBuckets: 1})
	enginetest.Run(t, open, open, crash)
}

// TestFaults runs the disk-fault suite, with small segments so that
// rotations (and their manifest writes) happen under the faults too.
func TestFaults(t *testing.T) {
	t.Parallel()
	for _, cfg := range []flash.Config{{}, {SegmentBytes: 16 << 10, WriteBufferBytes: -1, CacheBytes: -1}} {
		t.Run(fmt.Sprintf("segment=%d", cfg.SegmentBytes), func(t *testing.T) {
			enginetest.RunFaults(t, func(opts engine.Options) (engine.Engine, error) {
				return flash.OpenConfig(opts, cfg)
			}, "*.seg")
		})
	}
}

func TestConformanceEphemeral(t *testing.T) {
	t.Parallel()
	enginetest.RunEphemeral(t, openWith(flash.Config{}), crash)
}

// TestConformanceDirectIO runs the suite with every read going to the
// file through O_DIRECT (no write buffer, no cache).
func TestConformanceDirectIO(t *testing.T) {
	t.Parallel()
	open := openWith(flash.Config{DirectIO: true, WriteBufferBytes: -1, CacheBytes: -1, SegmentBytes: 64 << 10})
	enginetest.Run(t, open, open, crash)
}

func TestAbsentKeysCostNoDeviceRead(t *testing.T) {
	e, err := flash.Open(engine.Options{Dir: t.TempDir()})
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
	if n := e.Stats().FilterNegatives; n < 95 {
		t.Fatalf("only %d of 100 absent lookups answered by the index", n)
	}
}

// TestRegisteredTakesTuning: the engine registered as "flash" takes its
// flash.Config from engine.Options.Tuning and refuses anything else there.
func TestRegisteredTakesTuning(t *testing.T) {
	if _, err := engines.Open("flash", engine.Options{Dir: t.TempDir(), Tuning: 42}); err == nil ||
		!strings.Contains(err.Error(), "want a flash.Config") {
		t.Fatalf("Tuning 42: err = %v", err)
	}
	dir := t.TempDir()
	e, err := engines.Open("flash", engine.Options{Dir: dir, Tuning: flash.Config{SegmentBytes: 64 << 10}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	for v := 1; v <= 8; v++ {
		if err := e.Apply(&engine.Batch{Version: kv.Version(v), Writes: []engine.Write{{Key: []byte(fmt.Sprint(v)), Value: make([]byte, 32<<10)}}}); err != nil {
			t.Fatal(err)
		}
	}
	if n := e.(*flash.Engine).Metrics().Segments; n < 3 {
		t.Fatalf("256 KiB written into 64 KiB segments left %d segments: the Tuning was not applied", n)
	}
}

// TestPeekHasNoSideEffects: Peek (status, accounting) reads the value but
// fills no cache and moves no counter, where Get does both.
func TestPeekHasNoSideEffects(t *testing.T) {
	dir := t.TempDir()
	e, err := flash.Open(engine.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Apply(&engine.Batch{Version: 1, Writes: []engine.Write{{Key: []byte("k"), Value: []byte("v")}}}); err != nil {
		t.Fatal(err)
	}
	e.Close()
	// Reopened, the value is only in the file: a Get reads it and caches it.
	e, err = flash.Open(engine.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	counters := func() map[string]int64 {
		m := map[string]int64{}
		for _, c := range e.Counters() {
			m[c.Name] = c.Value
		}
		return m
	}
	before := counters()
	for i := 0; i < 3; i++ {
		if v, ok, err := e.Peek([]byte("k")); err != nil || !ok || string(v) != "v" {
			t.Fatalf("Peek = %q, %v, %v", v, ok, err)
		}
	}
	if _, ok, err := e.Peek([]byte("absent")); err != nil || ok {
		t.Fatalf("Peek(absent) = %v, %v", ok, err)
	}
	if after := counters(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("Peek moved counters: %v -> %v", before, after)
	}
	e.Get([]byte("k"))
	e.Get([]byte("k"))
	if c := counters(); c["file_reads"] != before["file_reads"]+1 || c["cache_hits"] != before["cache_hits"]+1 {
		t.Fatalf("Get: counters %v (before %v); want one file read, then a cache hit", c, before)
	}
}
