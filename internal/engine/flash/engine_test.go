package flash_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/distash/distash/internal/engine"
	"github.com/distash/distash/internal/engine/engines"
	"github.com/distash/distash/internal/engine/flash"
	"github.com/distash/distash/internal/farmem"
	"github.com/distash/distash/internal/farmem/ult"
	"github.com/distash/distash/internal/kv"
)

func mustOpen(t *testing.T, dir string, cfg flash.Config) *flash.Engine {
	t.Helper()
	e, err := flash.OpenConfig(engine.Options{Dir: dir}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func set(k, v string) engine.Write { return engine.Write{Key: []byte(k), Value: []byte(v)} }

func apply(t *testing.T, e engine.Engine, v int, ws ...engine.Write) {
	t.Helper()
	if err := e.Apply(&engine.Batch{Version: kv.Version(v), Writes: ws}); err != nil {
		t.Fatal(err)
	}
}

func get(t *testing.T, e engine.Engine, k string) (string, bool) {
	t.Helper()
	v, ok, err := e.Get([]byte(k))
	if err != nil {
		t.Fatal(err)
	}
	return string(v), ok
}

func TestRegistered(t *testing.T) {
	e, err := engines.Open("flash", engine.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	e.Close()
}

// TestGarbageCollection overwrites a small key set many times and checks
// that cleaning keeps the log small and loses nothing, across a reopen.
func TestGarbageCollection(t *testing.T) {
	dir := t.TempDir()
	cfg := flash.Config{SegmentBytes: 8 << 10, NoBackgroundGC: true, WriteBufferBytes: 64 << 10}
	e := mustOpen(t, dir, cfg)
	want := map[string]string{}
	v := 0
	for round := 0; round < 50; round++ {
		for k := 0; k < 20; k++ {
			v++
			key, val := fmt.Sprintf("key%02d", k), fmt.Sprintf("%d-%0100d", round, k)
			apply(t, e, v, set(key, val))
			want[key] = val
		}
	}
	before := e.Metrics()
	if err := e.CollectGarbage(); err != nil {
		t.Fatal(err)
	}
	after := e.Metrics()
	t.Logf("before %+v\nafter %+v", before, after)
	if after.GCRuns == 0 || after.LogBytes >= before.LogBytes/2 {
		t.Fatalf("cleaning did not shrink the log: %d -> %d bytes", before.LogBytes, after.LogBytes)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.seg"))
	if len(files) != after.Segments {
		t.Fatalf("%d segment files for %d segments", len(files), after.Segments)
	}
	check := func(e *flash.Engine) {
		t.Helper()
		for k, val := range want {
			if got, ok := get(t, e, k); !ok || got != val {
				t.Fatalf("Get(%s) = %q, %v; want %q", k, got, ok, val)
			}
		}
		if s := e.Stats(); s.Keys != 20 {
			t.Fatalf("Stats = %+v", s)
		}
	}
	check(e)
	e.Close()
	e = mustOpen(t, dir, cfg)
	check(e)
	e.Close()
}

// TestTombstonesOutliveOlderRecords deletes a key whose record sits in a
// segment full of live data, cleans the segments holding the deletion and
// checks the key stays deleted across reopens, then cleans the old segment
// too and checks again.
func TestTombstonesOutliveOlderRecords(t *testing.T) {
	dir := t.TempDir()
	cfg := flash.Config{SegmentBytes: 4 << 10, NoBackgroundGC: true}
	e := mustOpen(t, dir, cfg)
	v := 0
	next := func() int { v++; return v }
	apply(t, e, next(), set("victim", "old value"))
	for i := 0; i < 40; i++ { // live data filling the first segments
		apply(t, e, next(), set(fmt.Sprintf("keep%02d", i), fmt.Sprintf("%0100d", i)))
	}
	apply(t, e, next(), engine.Write{Key: []byte("victim")})
	for i := 0; i < 200; i++ { // garbage: the deletion's segment ends up almost empty
		apply(t, e, next(), set("churn", fmt.Sprintf("%0100d", i)))
	}
	if err := e.CollectGarbage(); err != nil {
		t.Fatal(err)
	}
	if _, ok := get(t, e, "victim"); ok {
		t.Fatal("victim present after cleaning")
	}
	e.Close()
	e = mustOpen(t, dir, cfg)
	if val, ok := get(t, e, "victim"); ok {
		t.Fatalf("victim came back after reopen: %q", val)
	}
	// Now make the old segments garbage too and clean everything.
	for i := 0; i < 40; i++ {
		apply(t, e, next(), engine.Write{Key: []byte(fmt.Sprintf("keep%02d", i))})
	}
	for i := 0; i < 200; i++ {
		apply(t, e, next(), set("churn", fmt.Sprintf("%0100d", i)))
	}
	for i := 0; i < 3; i++ {
		if err := e.CollectGarbage(); err != nil {
			t.Fatal(err)
		}
	}
	m := e.Metrics()
	e.Close()
	e = mustOpen(t, dir, cfg)
	defer e.Close()
	if val, ok := get(t, e, "victim"); ok {
		t.Fatalf("victim came back: %q", val)
	}
	if s := e.Stats(); s.Keys != 1 {
		t.Fatalf("Stats = %+v; want only churn (metrics %+v)", s, m)
	}
	if m.Segments > 4 {
		t.Fatalf("%d segments left after cleaning everything", m.Segments)
	}
}

// TestGroupCommit applies from many goroutines at once and checks that
// commits were coalesced and nothing was lost.
func TestGroupCommit(t *testing.T) {
	dir := t.TempDir()
	e := mustOpen(t, dir, flash.Config{})
	const writers, each = 16, 40
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				if err := e.Apply(&engine.Batch{Version: kv.Version(i + 1), Writes: []engine.Write{set(fmt.Sprintf("w%02d/%03d", w, i), "x")}}); err != nil {
					t.Error(err)
					return
				}
			}
		}(w)
	}
	wg.Wait()
	m := e.Metrics()
	t.Logf("%d batches in %d commits", m.Batches, m.Commits)
	if m.Batches != writers*each || m.Commits >= m.Batches {
		t.Fatalf("%d batches in %d commits: no coalescing", m.Batches, m.Commits)
	}
	e.Close()
	e = mustOpen(t, dir, flash.Config{})
	defer e.Close()
	if s := e.Stats(); s.Keys != writers*each {
		t.Fatalf("Stats after reopen = %+v", s)
	}
}

func TestEphemeralStartsEmpty(t *testing.T) {
	dir := t.TempDir()
	e, err := flash.Open(engine.Options{Dir: dir, Ephemeral: true, CapacityBytes: 1 << 20, Eviction: "lru"})
	if err != nil {
		t.Fatal(err)
	}
	apply(t, e, 1, set("a", "1"))
	e.Close()
	if files, _ := filepath.Glob(filepath.Join(dir, "*.seg")); len(files) != 0 {
		t.Fatalf("ephemeral engine left %v", files)
	}
	e, err = flash.Open(engine.Options{Dir: dir, Ephemeral: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if _, ok := get(t, e, "a"); ok || e.Version() != 0 {
		t.Fatal("ephemeral engine recovered data")
	}
}

func TestDirLocked(t *testing.T) {
	dir := t.TempDir()
	e := mustOpen(t, dir, flash.Config{})
	defer e.Close()
	if _, err := flash.Open(engine.Options{Dir: dir}); err == nil {
		t.Fatal("a second engine opened the same directory")
	}
}

func TestClosed(t *testing.T) {
	e := mustOpen(t, t.TempDir(), flash.Config{})
	e.Close()
	if _, _, err := e.Get([]byte("k")); err != flash.ErrClosed {
		t.Fatalf("Get after Close: %v", err)
	}
	if err := e.Apply(&engine.Batch{}); err != flash.ErrClosed {
		t.Fatalf("Apply after Close: %v", err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestLookupsOnUserLevelThreads runs GetCtx on threads of a virtual-time
// scheduler with far memory of 5 µs and checks every answer, that the
// index was prefetched rather than missed, and that the reads overlapped.
func TestLookupsOnUserLevelThreads(t *testing.T) {
	dir := t.TempDir()
	e := mustOpen(t, dir, flash.Config{WriteBufferBytes: -1, CacheBytes: 64 << 10, CacheFar: true})
	defer e.Close()
	const n = 2000
	var ws []engine.Write
	for i := 0; i < n; i++ {
		ws = append(ws, set(fmt.Sprintf("key%05d", i), fmt.Sprintf("value-%d", i)))
	}
	apply(t, e, 1, ws...)
	s, err := ult.New(ult.Config{Tasks: 32, Mem: farmem.Config{Latency: 5 * time.Microsecond, Virtual: true},
		IO: ult.IOConfig{Latency: 50 * time.Microsecond}, SwitchCost: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var bad []string
	r, err := s.Run(context.Background(), ult.RunOptions{MaxOps: 5000}, func(tk *ult.Task) {
		for tk.Running() {
			i := tk.Rand().Intn(n + n/10)
			v, ok, err := e.GetCtx(tk, []byte(fmt.Sprintf("key%05d", i)))
			if err != nil || ok != (i < n) || (ok && string(v) != fmt.Sprintf("value-%d", i)) {
				bad = append(bad, fmt.Sprintf("key%05d: %q %v %v", i, v, ok, err))
			}
			tk.EndOp()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(bad) > 0 {
		t.Fatalf("%d wrong answers, e.g. %s", len(bad), bad[0])
	}
	t.Logf("%d ops, %.0f ops/s virtual, mem %+v, kinds %+v", r.Ops, r.Throughput(), r.Mem, r.Kinds)
	if r.Mem.Prefetches == 0 || r.Mem.Misses > r.Mem.Prefetches/10 {
		t.Fatalf("far memory traffic %+v: lookups should prefetch", r.Mem)
	}
	if r.Kinds[ult.KindPre].Count == 0 || r.IdleNs > r.ElapsedNs/2 {
		t.Fatalf("reads did not overlap: %+v idle %d of %d", r.Kinds, r.IdleNs, r.ElapsedNs)
	}
	_ = os.Getenv
}

func TestColdest(t *testing.T) {
	e, err := flash.Open(engine.Options{Dir: t.TempDir(), Ephemeral: true, CapacityBytes: 1 << 20, Eviction: "lru"})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	apply(t, e, 1, set("a", "1"), set("b", "2"), set("c", "3"))
	get(t, e, "a") // a becomes the most recent
	if got := fmt.Sprintf("%q", e.Coldest(2)); got != `["b" "c"]` {
		t.Fatalf("Coldest(2) = %s", got)
	}
	d := mustOpen(t, t.TempDir(), flash.Config{})
	defer d.Close()
	if d.Coldest(5) != nil {
		t.Fatal("a durable engine has an eviction order")
	}
}
