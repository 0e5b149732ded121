package memory_test

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/distash/distash/internal/engine"
	"github.com/distash/distash/internal/engine/enginetest"
	"github.com/distash/distash/internal/engine/memory"
	"github.com/distash/distash/internal/kv"
)

func open(t *testing.T, opts engine.Options) engine.Engine {
	t.Helper()
	e, err := memory.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestConformance(t *testing.T) {
	enginetest.Run(t, open, nil, nil)
}

// TestConformanceEphemeralUnlimited runs the suite on ephemeral engines
// without a capacity: they keep an eviction order but never evict.
func TestConformanceEphemeralUnlimited(t *testing.T) {
	for _, pol := range []string{"lru", "camp"} {
		t.Run(pol, func(t *testing.T) {
			enginetest.Run(t, func(t *testing.T, opts engine.Options) engine.Engine {
				opts.Ephemeral, opts.Eviction = true, pol
				return open(t, opts)
			}, nil, nil)
		})
	}
}

// TestEphemeral runs the suite's capacity checks, which count key and value
// bytes exactly (a capacity of 1000 holds ten 100-byte pairs), so with no
// entry overhead; TestCapacityBoundsMemory checks the default.
func TestEphemeral(t *testing.T) {
	enginetest.RunEphemeral(t, func(t *testing.T, opts engine.Options) engine.Engine {
		opts.Tuning = memory.Config{EntryOverhead: -1}
		return open(t, opts)
	}, nil)
}

// liveHeap returns the bytes of live heap objects after a full collection.
func liveHeap() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// TestCapacityBoundsMemory fills ephemeral engines of the default entry
// overhead with small pairs, in key order (the worst case for the key
// tree), and checks the heap they hold against their capacity: counting
// key and value bytes only, the engine held 12 times its capacity.
func TestCapacityBoundsMemory(t *testing.T) {
	const capacity = 4 << 20
	const n = 200_000 // 3.6 MB of key and value bytes: below capacity without the overhead
	for _, pol := range []string{"lru", "camp"} {
		t.Run(pol, func(t *testing.T) {
			// The pairs' source bytes, allocated before the baseline: the
			// engine copies what it keeps.
			keys := make([][]byte, n)
			for i := range keys {
				keys[i] = fmt.Appendf(nil, "k%09d", i)
			}
			value := []byte("vvvvvvvv")
			before := liveHeap()
			e := open(t, engine.Options{Ephemeral: true, Eviction: pol, CapacityBytes: capacity})
			defer e.Close()
			for i := 0; i < n; i += 1000 {
				b := &engine.Batch{Version: kv.Version(i + 1)}
				for _, k := range keys[i : i+1000] {
					b.Writes = append(b.Writes, engine.Write{Key: k, Value: value})
				}
				if err := e.Apply(b); err != nil {
					t.Fatal(err)
				}
			}
			held := liveHeap() - before
			runtime.KeepAlive(keys)
			st := e.Stats()
			resident := counter(t, e, "resident_bytes")
			t.Logf("%d pairs, %d key and value bytes, %d resident bytes counted, %d heap bytes held (%.0f per pair)",
				st.Keys, st.Bytes, resident, held, float64(held)/float64(st.Keys))
			if st.Evictions == 0 || resident > capacity {
				t.Fatalf("Stats = %+v, resident %d: want evictions and at most %d resident bytes", st, resident, capacity)
			}
			// Not more than 10% above the capacity (the overhead is an
			// estimate), and not far below it either.
			if held > capacity*11/10 || held < capacity/2 {
				t.Fatalf("the engine holds %d heap bytes for a capacity of %d", held, capacity)
			}
		})
	}
}

func counter(t *testing.T, e engine.Engine, name string) int64 {
	t.Helper()
	for _, c := range e.(engine.Counted).Counters() {
		if c.Name == name {
			return c.Value
		}
	}
	t.Fatalf("no counter %q", name)
	return 0
}

func TestTuning(t *testing.T) {
	for _, tuning := range []any{nil, memory.Config{}, &memory.Config{EntryOverhead: 10}, (*memory.Config)(nil)} {
		e, err := memory.Open(engine.Options{Tuning: tuning})
		if err != nil {
			t.Fatalf("Tuning %#v: %v", tuning, err)
		}
		e.Close()
	}
	if _, err := memory.Open(engine.Options{Tuning: "big"}); err == nil {
		t.Fatal("Open accepted a string as Tuning")
	}
	// A pair that fits only without its overhead is dropped.
	e := open(t, engine.Options{Ephemeral: true, CapacityBytes: 100, Tuning: memory.Config{EntryOverhead: 50}})
	defer e.Close()
	if err := e.Apply(&engine.Batch{Version: 1, Writes: []engine.Write{enginetest.Set("a", string(make([]byte, 49))), enginetest.Set("b", string(make([]byte, 50)))}}); err != nil {
		t.Fatal(err)
	}
	if st := e.Stats(); st.Keys != 1 || st.Bytes != 50 || st.Evictions != 1 {
		t.Fatalf("Stats = %+v; want only a (50 bytes) kept and b dropped", st)
	}
	if r := counter(t, e, "resident_bytes"); r != 100 {
		t.Fatalf("resident_bytes = %d; want 100", r)
	}
}

func TestDurableNeverEvicts(t *testing.T) {
	e := open(t, engine.Options{CapacityBytes: 100, Eviction: "lru"})
	defer e.Close()
	for i := 0; i < 100; i++ {
		if err := e.Apply(&engine.Batch{Version: kv.Version(i + 1), Writes: []engine.Write{
			enginetest.Set(fmt.Sprintf("k%02d", i), "0123456789"),
		}}); err != nil {
			t.Fatal(err)
		}
	}
	if s := e.Stats(); s.Keys != 100 || s.Bytes != 1300 || s.Evictions != 0 {
		t.Fatalf("Stats = %+v; want 100 keys, 1300 bytes, no evictions", s)
	}
}

func TestUnknownEviction(t *testing.T) {
	if _, err := memory.Open(engine.Options{Ephemeral: true, Eviction: "fifo"}); err == nil {
		t.Fatal("Open accepted an unknown eviction policy")
	}
}

func TestClosed(t *testing.T) {
	enginetest.RunClosed(t, open(t, engine.Options{}), memory.ErrClosed)
}

func keys(ks [][]byte) []string {
	out := make([]string, len(ks))
	for i, k := range ks {
		out[i] = string(k)
	}
	return out
}

func TestColdest(t *testing.T) {
	for _, pol := range []string{"lru", "camp"} {
		t.Run(pol, func(t *testing.T) {
			e, err := memory.Open(engine.Options{Ephemeral: true, Eviction: pol, CapacityBytes: 1 << 20})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			for i, k := range []string{"a", "b", "c", "d"} {
				if err := e.Apply(&engine.Batch{Version: kv.Version(i + 1), Writes: []engine.Write{
					{Key: []byte(k), Value: []byte("123"), Cost: 1},
				}}); err != nil {
					t.Fatal(err)
				}
			}
			if got := fmt.Sprint(keys(e.Coldest(10))); got != "[a b c d]" {
				t.Fatalf("Coldest(10) = %s; want [a b c d]", got)
			}
			// Peek (status, accounting) is not a reference.
			if v, ok, err := e.Peek([]byte("a")); err != nil || !ok || string(v) != "123" {
				t.Fatalf("Peek(a) = %q, %v, %v", v, ok, err)
			}
			if got := fmt.Sprint(keys(e.Coldest(1))); got != "[a]" {
				t.Fatalf("Coldest(1) after peeking at a = %s; want [a]", got)
			}
			e.Get([]byte("a")) // a becomes the hottest
			if got := fmt.Sprint(keys(e.Coldest(2))); got != "[b c]" {
				t.Fatalf("Coldest(2) after reading a = %s; want [b c]", got)
			}
			if got := e.Coldest(0); len(got) != 0 {
				t.Fatalf("Coldest(0) = %q", got)
			}
		})
	}
	// camp: a costly pair is colder than nothing of the same size... it
	// is hotter than cheap ones.
	e, _ := memory.Open(engine.Options{Ephemeral: true, Eviction: "camp"})
	defer e.Close()
	e.Apply(&engine.Batch{Version: 1, Writes: []engine.Write{
		{Key: []byte("dear"), Value: []byte("xx"), Cost: 100},
		{Key: []byte("cheap"), Value: []byte("x"), Cost: 1},
	}})
	if got := fmt.Sprint(keys(e.Coldest(2))); got != "[cheap dear]" {
		t.Fatalf("camp Coldest = %s; want [cheap dear]", got)
	}
	// Without an eviction order there is nothing to report.
	d, _ := memory.Open(engine.Options{})
	defer d.Close()
	d.Apply(&engine.Batch{Version: 1, Writes: []engine.Write{enginetest.Set("k", "v")}})
	if got := d.Coldest(1); got != nil {
		t.Fatalf("Coldest of a durable engine = %q; want nil", got)
	}
}

// benchEachPolicy runs bench on a durable engine and on ephemeral ones of
// each eviction policy, of 8 MiB: enough that the Get benchmarks' 10,000
// pairs stay resident at 312 bytes of overhead each (4 MiB no longer did).
func benchEachPolicy(b *testing.B, bench func(*testing.B, engine.Engine)) {
	for _, c := range []struct {
		name string
		opts engine.Options
	}{
		{"durable", engine.Options{}},
		{"lru", engine.Options{Ephemeral: true, Eviction: "lru", CapacityBytes: 8 << 20}},
		{"camp", engine.Options{Ephemeral: true, Eviction: "camp", CapacityBytes: 8 << 20}},
	} {
		b.Run(c.name, func(b *testing.B) {
			e, err := memory.Open(c.opts)
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			bench(b, e)
		})
	}
}

func BenchmarkApply(b *testing.B) { benchEachPolicy(b, enginetest.BenchmarkApply) }

func BenchmarkGet(b *testing.B) { benchEachPolicy(b, enginetest.BenchmarkGet) }

func BenchmarkGetParallel(b *testing.B) { benchEachPolicy(b, enginetest.BenchmarkGetParallel) }

// BenchmarkGetLarge reads random keys of an lru engine holding 250,000
// pairs (a cache pool's working set, unlike BenchmarkGet's 10,000, which
// fit in the CPU's caches), from GOMAXPROCS×16 goroutines.
func BenchmarkGetLarge(b *testing.B) {
	e, err := memory.Open(engine.Options{Ephemeral: true, Eviction: "lru", CapacityBytes: 1 << 30})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	const n = 250_000
	val := make([]byte, 100)
	for i := 0; i < n; i += 1000 {
		batch := &engine.Batch{Version: kv.Version(i + 1)}
		for j := i; j < i+1000; j++ {
			batch.Writes = append(batch.Writes, engine.Write{Key: fmt.Appendf(nil, "m/user%08d", j), Value: val})
		}
		if err := e.Apply(batch); err != nil {
			b.Fatal(err)
		}
	}
	b.SetParallelism(16)
	b.ResetTimer()
	var seed atomic.Uint64
	b.RunParallel(func(pb *testing.PB) {
		rng := rand.New(rand.NewPCG(seed.Add(1), 1))
		key := make([]byte, 0, 16)
		for pb.Next() {
			key = fmt.Appendf(key[:0], "m/user%08d", rng.IntN(n))
			if _, ok, err := e.Get(key); !ok || err != nil {
				b.Errorf("Get(%s): %v %v", key, ok, err)
				return
			}
		}
	})
}

// TestGetSharedStaysValid checks the promise of engine.SharedGetter: the
// slice GetShared returns keeps its bytes after the key is overwritten,
// cleared and evicted, and a hit counts as a reference like Get's.
func TestGetSharedStaysValid(t *testing.T) {
	e := open(t, engine.Options{Ephemeral: true, Eviction: "lru", CapacityBytes: 3 * (2 + 5), Tuning: memory.Config{EntryOverhead: -1}}).(*memory.Engine)
	apply := func(v kv.Version, ws ...engine.Write) {
		t.Helper()
		if err := e.Apply(&engine.Batch{Version: v, Writes: ws}); err != nil {
			t.Fatal(err)
		}
	}
	apply(1, engine.Write{Key: []byte("k1"), Value: []byte("one..")}, engine.Write{Key: []byte("k2"), Value: []byte("two..")}, engine.Write{Key: []byte("k3"), Value: []byte("three")})
	v1, ok, err := e.GetShared([]byte("k1")) // k1 is now the most recently used
	if err != nil || !ok || string(v1) != "one.." {
		t.Fatalf("GetShared(k1) = %q, %v, %v", v1, ok, err)
	}
	apply(2, engine.Write{Key: []byte("k4"), Value: []byte("four.")}) // evicts k2, the coldest
	if _, ok, _ := e.Get([]byte("k2")); ok {
		t.Fatal("k2 survived: GetShared's hit on k1 did not count as a reference")
	}
	v3, _, _ := e.GetShared([]byte("k3"))
	apply(3, engine.Write{Key: []byte("k1"), Value: []byte("ONE!!")}, engine.Write{Key: []byte("k3")})
	if string(v1) != "one.." || string(v3) != "three" {
		t.Fatalf("shared values changed under later writes: %q, %q", v1, v3)
	}
}
