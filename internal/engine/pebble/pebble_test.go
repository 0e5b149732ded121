package pebbleengine_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

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

// TestTuning: the engine takes a Tuning (a block cache of its size) and
// refuses any other type there.
func TestTuning(t *testing.T) {
	if _, err := pebbleengine.Open(engine.Options{Dir: t.TempDir(), Tuning: 42}); err == nil || !strings.Contains(err.Error(), "want a pebble Tuning") {
		t.Fatalf("Tuning 42: err = %v", err)
	}
	e := open(t, engine.Options{Dir: t.TempDir(), Tuning: pebbleengine.Tuning{CacheBytes: 64 << 10}})
	defer e.Close()
	if err := e.Apply(&engine.Batch{Version: 1, Writes: []engine.Write{enginetest.Set("k", "v")}}); err != nil {
		t.Fatal(err)
	}
	if v, ok, err := e.Get([]byte("k")); err != nil || !ok || string(v) != "v" {
		t.Fatalf("Get = %q %v %v", v, ok, err)
	}
}

// TestApplyCountsOldValues checks the exact Keys and Bytes counters when a
// batch overwrites and clears keys that exist, sets a key twice, and
// clears a key it set earlier (Apply reads the old values of such batches
// several at a time, before it builds the batch), against a recount.
func TestApplyCountsOldValues(t *testing.T) {
	e, err := pebbleengine.Open(engine.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	key := func(i int) []byte { return fmt.Appendf(nil, "k%03d", i) }
	val := func(n int) []byte { return bytes.Repeat([]byte{'v'}, n) }
	first := &engine.Batch{Version: 1}
	for i := range 40 {
		first.Writes = append(first.Writes, engine.Write{Key: key(i), Value: val(i + 1)})
	}
	if err := e.Apply(first); err != nil {
		t.Fatal(err)
	}
	second := &engine.Batch{Version: 2, Writes: []engine.Write{
		{Key: key(1), Value: val(100)}, // overwrite
		{Key: key(2)},                  // clear
		{Key: key(50), Value: val(7)},  // new
		{Key: key(50), Value: val(9)},  // the same key again
		{Key: key(3), Value: val(5)},   // overwrite...
		{Key: key(3)},                  // ...then clear
		{Key: key(60)},                 // clear of an absent key
		{Key: key(4), Value: val(1)},
	}}
	for i := 10; i < 30; i++ {
		second.Writes = append(second.Writes, engine.Write{Key: key(i), Value: val(3)})
	}
	if err := e.Apply(second); err != nil {
		t.Fatal(err)
	}
	third := &engine.Batch{Version: 3, Writes: []engine.Write{
		{Key: key(35), End: key(38)}, // a clear-range: read through the batch
		{Key: key(36), Value: val(11)},
		{Key: key(1), Value: val(2)},
	}}
	if err := e.Apply(third); err != nil {
		t.Fatal(err)
	}
	var n, size int64
	if err := e.Scan(nil, nil, false, func(k, v []byte) bool {
		n++
		size += int64(len(k) + len(v))
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if st := e.Stats(); st.Keys != n || st.Bytes != size {
		t.Fatalf("counters: %d keys, %d bytes; a recount finds %d keys, %d bytes", st.Keys, st.Bytes, n, size)
	}
	if n != 37 {
		t.Fatalf("%d keys, want 37 (40 - k002 - k003 + k050 - k035 - k037)", n)
	}
}

// A block cache smaller than a memtable still caches blocks: Pebble
// charges its memtables to the cache, and a 1 MiB [pool.pebble] cache once
// held nothing (every read, index and filter blocks included, went to the
// device).
func TestSmallBlockCacheHoldsBlocks(t *testing.T) {
	e, err := pebbleengine.Open(engine.Options{Dir: t.TempDir(), Tuning: pebbleengine.Tuning{CacheBytes: 1 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	key := func(i int) []byte { return fmt.Appendf(nil, "k%06d", i) }
	b := &engine.Batch{Version: 1}
	for i := range 2000 {
		b.Writes = append(b.Writes, engine.Write{Key: key(i), Value: make([]byte, 1000)})
	}
	if err := e.Apply(b); err != nil {
		t.Fatal(err)
	}
	if err := pebbleengine.Flush(e); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		for i := 0; i < 200; i++ { // about 200 KB of blocks: fits in 1 MiB
			if _, ok, err := e.Get(key(i)); err != nil || !ok {
				t.Fatalf("Get(%s) = %v, %v", key(i), ok, err)
			}
		}
	}
	c := map[string]int64{}
	for _, ec := range e.Counters() {
		c[ec.Name] = ec.Value
	}
	if c["block_cache_hits"] < 200 {
		t.Fatalf("a second read of 200 keys that fit in the 1 MiB block cache hit it %d times (misses %d), want >= 200", c["block_cache_hits"], c["block_cache_misses"])
	}
	if c["read_amp"] < 1 || c["sstables"] < 1 {
		t.Fatalf("counters after a flush: %v, want read_amp and sstables >= 1", c)
	}
	// Nor does it hold more than asked for while Pebble's memtables are
	// small (they grow from 256 KiB): reading all 2 MB of blocks again
	// and again leaves about 1 MiB of them in the cache.
	deadline := time.Now().Add(10 * time.Second)
	for {
		for i := range 2000 {
			if _, _, err := e.Get(key(i)); err != nil {
				t.Fatal(err)
			}
		}
		var blocks int64
		for _, ec := range e.Counters() {
			if ec.Name == "block_cache_bytes" {
				blocks = ec.Value
			}
		}
		if blocks > 512<<10 && blocks <= 1280<<10 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the 1 MiB block cache holds %d bytes of blocks after 10 s of reads of 2 MB", blocks)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Compact leaves every pair in one level: a read consults one table.
func TestCompactSettlesTheLSM(t *testing.T) {
	e, err := pebbleengine.Open(engine.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	for v := 1; v <= 3; v++ { // three flushes
		b := &engine.Batch{Version: kv.Version(v)}
		for i := range 100 {
			b.Writes = append(b.Writes, engine.Write{Key: fmt.Appendf(nil, "k%03d", i), Value: fmt.Appendf(nil, "v%d", v)})
		}
		if err := e.Apply(b); err != nil {
			t.Fatal(err)
		}
		if err := pebbleengine.Flush(e); err != nil {
			t.Fatal(err)
		}
	}
	counters := func() map[string]int64 {
		c := map[string]int64{}
		for _, ec := range e.Counters() {
			c[ec.Name] = ec.Value
		}
		return c
	}
	if c := counters(); c["read_amp"] < 2 {
		t.Fatalf("before Compact: %v, want a read amplification of 2 or more (three flushes)", c)
	}
	if err := e.Compact(); err != nil {
		t.Fatal(err)
	}
	if c := counters(); c["l0_files"] != 0 || c["read_amp"] != 1 {
		t.Fatalf("after Compact: %v, want no L0 file and read_amp 1", c)
	}
	if v, ok, err := e.Get([]byte("k042")); err != nil || !ok || string(v) != "v3" {
		t.Fatalf("Get after Compact = %q %v %v", v, ok, err)
	}
}

// TestLockedCallReturnsOnFailure: a call that takes Pebble's lock
// (Metrics, Compact) and blocks, as it does behind a commit that failed
// for good holding the lock, returns the engine's error once the engine
// fails, and every later such call fails at once.
func TestLockedCallReturnsOnFailure(t *testing.T) {
	e := open(t, engine.Options{Dir: t.TempDir()}).(*pebbleengine.Engine)
	if err := pebbleengine.Apart(e, func() {}); err != nil {
		t.Fatalf("apart on a working engine: %v", err)
	}
	held := make(chan struct{})
	defer close(held)
	got := make(chan error, 1)
	go func() { got <- pebbleengine.Apart(e, func() { <-held }) }()
	select {
	case err := <-got:
		t.Fatalf("a blocked call returned %v before the engine failed", err)
	case <-time.After(50 * time.Millisecond):
	}
	cause := errors.New("fatal commit error")
	pebbleengine.Fail(e, cause)
	select {
	case err := <-got:
		if !errors.Is(err, cause) {
			t.Fatalf("blocked call returned %v; want the engine's error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a blocked call did not return when the engine failed")
	}
	if err := e.Compact(); !errors.Is(err, cause) {
		t.Fatalf("Compact on a failed engine: %v", err)
	}
	if n := len(e.Counters()); n != 0 {
		t.Fatalf("a failed engine reports %d counters", n)
	}
	e.Close()
}
