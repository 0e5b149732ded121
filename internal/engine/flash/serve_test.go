package flash_test

import (
	"fmt"
	"math/rand"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distash/distash/internal/engine"
	"github.com/distash/distash/internal/engine/enginetest"
	"github.com/distash/distash/internal/engine/flash"
	"github.com/distash/distash/internal/farmem/ult"
	"github.com/distash/distash/internal/testutil/wait"
)

// served is a flash engine read only through its schedulers: Get is the
// engine's (a lookup with far memory), Scan is ScanServed, whose pairs are
// collected on the scheduler thread and handed to fn afterwards (fn may
// block or read, which a scheduler thread must not).
type served struct{ *flash.Engine }

func (s served) Scan(begin, end []byte, reverse bool, fn func(k, v []byte) bool) error {
	var ks, vs [][]byte
	err := s.ScanServed(begin, end, reverse, func(k, v []byte) bool {
		ks = append(ks, append([]byte(nil), k...))
		vs = append(vs, append([]byte(nil), v...))
		return true
	})
	if err != nil {
		return err
	}
	for i := range ks {
		if !fn(ks[i], vs[i]) {
			break
		}
	}
	return nil
}

func openServed(cfg flash.Config) enginetest.OpenFunc {
	return func(t *testing.T, opts engine.Options) engine.Engine {
		t.Helper()
		e, err := flash.OpenConfig(opts, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if !e.ServesReads() {
			t.Fatal("far memory configured, but the engine does not serve reads")
		}
		return served{e}
	}
}

func crashServed(t *testing.T, e engine.Engine, opts engine.Options) engine.Options {
	return crash(t, e.(served).Engine, opts)
}

// TestConformanceFarMemory runs the suite with the index in 2 µs far memory,
// every read a lookup on the engine's user-level threads; small segments,
// buffer and cache make reads reach the device (through the schedulers'
// IO) and the cleaner move entries under the lookups.
func TestConformanceFarMemory(t *testing.T) {
	t.Parallel()
	open := openServed(flash.Config{FarMemory: 2 * time.Microsecond, LookupThreads: 16,
		SegmentBytes: 16 << 10, WriteBufferBytes: 64 << 10, CacheBytes: 32 << 10, IndexBuckets: 1})
	enginetest.Run(t, open, open, crashServed)
}

// TestDeviceReadsThroughEachIO reads values from the segment files (no
// buffer, no cache) with each IO backend, concurrently.
func TestDeviceReadsThroughEachIO(t *testing.T) {
	for _, io := range []ult.IOMode{ult.IOAuto, ult.IOThreads, ult.IOUring} {
		t.Run(io.String(), func(t *testing.T) {
			e, err := flash.OpenConfig(engine.Options{Dir: t.TempDir()}, flash.Config{FarMemory: 2 * time.Microsecond, IO: io,
				WriteBufferBytes: -1, CacheBytes: -1})
			if err != nil {
				t.Skip(err) // io_uring refused by the kernel
			}
			defer e.Close()
			keys := loadKeys(t, e, 500)
			before, _ := e.ServeStats()
			vals, ok, err := e.GetMany(keys)
			if err != nil {
				t.Fatal(err)
			}
			for i := range keys {
				if !ok[i] || string(vals[i]) != fmt.Sprint(i) {
					t.Fatalf("GetMany: key %s = %q, %v", keys[i], vals[i], ok[i])
				}
			}
			// Cores publish their counters when they run out of lookups,
			// just after releasing the caller.
			var after ult.ServeStats
			wait.Until(2*time.Second, func() bool {
				after, _ = e.ServeStats()
				return after.DeviceReads-before.DeviceReads >= int64(len(keys))
			})
			if n := after.DeviceReads - before.DeviceReads; n != int64(len(keys)) {
				t.Errorf("%d device reads for %d keys read from the files", n, len(keys))
			}
			if io != ult.IOAuto && after.IOMode != io {
				t.Errorf("IO mode %v, want %v", after.IOMode, io)
			}
		})
	}
}

// TestConformanceFarMemoryDevice runs the suite on an emulated device:
// reads through a file system that is not the OS's are handed off by the
// lookup (Task.Block) instead of blocking its core.
func TestConformanceFarMemoryDevice(t *testing.T) {
	t.Parallel()
	enginetest.RunDevices(t, openServed(flash.Config{FarMemory: 2 * time.Microsecond, NoPrefetch: true,
		SegmentBytes: 64 << 10, WriteBufferBytes: 64 << 10, CacheBytes: 32 << 10}), crashServed)
}

func loadKeys(t *testing.T, e *flash.Engine, n int) [][]byte {
	t.Helper()
	keys := make([][]byte, n)
	var ws []engine.Write
	for i := range keys {
		keys[i] = []byte(fmt.Sprintf("key%06d", i))
		ws = append(ws, engine.Write{Key: keys[i], Value: []byte(fmt.Sprint(i))})
	}
	if err := e.Apply(&engine.Batch{Version: 1, Writes: ws}); err != nil {
		t.Fatal(err)
	}
	return keys
}

// TestLookupWaits: with one lookup at a time, a read at 20 µs takes at
// least the latency of each line it fetched from far memory, one after
// the other: the scheduler does not skip the clock.
func TestLookupWaits(t *testing.T) {
	const lat = 20 * time.Microsecond
	e := mustOpen(t, t.TempDir(), flash.Config{FarMemory: lat, Cores: 1, IndexBuckets: 1 << 14})
	defer e.Close()
	keys := loadKeys(t, e, 2000)
	before, _ := e.ServeStats()
	start := time.Now()
	const reads = 200
	for i := 0; i < reads; i++ {
		k := keys[(i*7919)%len(keys)]
		if v, ok, err := e.Get(k); err != nil || !ok || string(v) != fmt.Sprint((i*7919)%len(keys)) {
			t.Fatalf("Get(%s) = %q, %v, %v", k, v, ok, err)
		}
	}
	elapsed := time.Since(start)
	// A core publishes its counters when it runs out of lookups, just
	// after it released the last caller: wait for the last lookup's.
	var after ult.ServeStats
	wait.Until(2*time.Second, func() bool {
		after, _ = e.ServeStats()
		return after.Lookups-before.Lookups >= reads
	})
	fetches := after.Prefetches - before.Prefetches
	if fetches < reads/2 { // a bucket fetched before may still be in the core's cache
		t.Fatalf("%d reads fetched %d lines from far memory; want about one each", reads, fetches)
	}
	if min := time.Duration(fetches) * lat; elapsed < min {
		t.Fatalf("%d reads fetching %d lines at %v took %v, less than the %v their fetches take in sequence", reads, fetches, lat, elapsed, min)
	}
	stall := time.Duration(after.StallNs - before.StallNs)
	t.Logf("%d reads, %d lines fetched, %v (%.1f µs a read, stalled %.1f µs a read)", reads, fetches, elapsed,
		float64(elapsed.Microseconds())/reads, float64(stall.Microseconds())/reads)
	if after.Lookups-before.Lookups != reads {
		t.Errorf("lookups counted %d, want %d", after.Lookups-before.Lookups, reads)
	}
}

// rate returns the lookups per second of clients goroutines reading keys
// for d.
func rate(t *testing.T, e *flash.Engine, keys [][]byte, clients int, d time.Duration) float64 {
	var n atomic.Int64
	var wg sync.WaitGroup
	stop := time.Now().Add(d)
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func(seed int64) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(seed))
			for time.Now().Before(stop) {
				if _, ok, err := e.Get(keys[rng.Intn(len(keys))]); err != nil || !ok {
					t.Errorf("Get: %v, %v", ok, err)
					return
				}
				n.Add(1)
			}
		}(int64(c))
	}
	wg.Wait()
	return float64(n.Load()) / d.Seconds()
}

// TestPrefetchOverlaps: at 5 µs, 32 concurrent lookups on one core with
// prefetching go at least 1.5 times as fast as the same 32 lookups
// without prefetching, and at least twice as fast as one lookup at a
// time: a prefetching thread yields while its line is in flight, so the
// core runs the others, while a thread that does not prefetch stalls the
// core for the whole latency. (Measured 1.8-2.1x and 3-5x; with
// prefetching disabled in the thread body the first ratio was 0.9-1.2x.
// The ">= 5x one lookup" held only while a lone lookup paid ~40
// µs of hand-off: with a lookup's CPU time C ~3 µs here, (L+C)/C is at
// most ~2.7 at L = 5 µs.) The two engines are measured in alternating
// rounds (this machine's speed drifts) and the median ratio of the rounds
// is compared. The ratios are skipped under the race detector; the
// counters are checked always: with prefetching nearly every line is
// prefetched and the stall per read is well below the latency, without
// it no line is prefetched and every access stalls for the whole latency.
func TestPrefetchOverlaps(t *testing.T) {
	const lat = 5 * time.Microsecond
	open := func(noPrefetch bool) (*flash.Engine, [][]byte) {
		e := mustOpen(t, t.TempDir(), flash.Config{FarMemory: lat, Cores: 1, NoPrefetch: noPrefetch, IndexBuckets: 1 << 16})
		t.Cleanup(func() { e.Close() })
		keys := loadKeys(t, e, 50000)
		rate(t, e, keys, 32, 50*time.Millisecond) // warm up
		return e, keys
	}
	pe, pkeys := open(false)
	ne, nkeys := open(true)
	// Three rounds per attempt; on a machine loaded by other work (where
	// CPU contention swamps the 5 µs) up to three attempts, the ratios
	// taken from the best attempt. Prefetching disabled fails all three.
	const rounds, attempts = 3, 3
	const d = 150 * time.Millisecond
	var overOne, overNo []float64
	p0, _ := pe.ServeStats()
	n0, _ := ne.ServeStats()
	for a := 0; a < attempts; a++ {
		var one1, no1 []float64
		for r := 0; r < rounds; r++ {
			one := rate(t, pe, pkeys, 1, d)
			many := rate(t, pe, pkeys, 32, d)
			no := rate(t, ne, nkeys, 32, d)
			t.Logf("attempt %d round %d: prefetch 1 lookup %.0f/s, 32 lookups %.0f/s (%.1fx); no prefetch 32 lookups %.0f/s (prefetch %.1fx as fast)",
				a, r, one, many, many/one, no, many/no)
			one1 = append(one1, many/one)
			no1 = append(no1, many/no)
		}
		if overNo == nil || median(no1) > median(overNo) {
			overOne, overNo = one1, no1
		}
		if raceEnabled || (median(overOne) >= 2 && median(overNo) >= 1.5) {
			break
		}
	}
	p1, _ := pe.ServeStats()
	n1, _ := ne.ServeStats()
	per := func(a, b ult.ServeStats) (lookups, lines, prefetches, stallUs float64) {
		n := float64(b.Lookups - a.Lookups)
		return n, float64(b.Accesses-a.Accesses) / n, float64(b.Prefetches-a.Prefetches) / n, float64(b.StallNs-a.StallNs) / 1e3 / n
	}
	pn, pLines, pPref, pStall := per(p0, p1)
	nn, nLines, nPref, nStall := per(n0, n1)
	t.Logf("prefetch: %.0f reads, %.2f lines, %.2f prefetches, %.2f µs stalled per read", pn, pLines, pPref, pStall)
	t.Logf("no prefetch: %.0f reads, %.2f lines, %.2f prefetches, %.2f µs stalled per read", nn, nLines, nPref, nStall)
	if pLines < 0.9 || nLines < 0.9 {
		t.Fatalf("lines per read %.2f (prefetch), %.2f (no prefetch): the reads did not reach far memory", pLines, nLines)
	}
	if pPref < 0.9*pLines {
		t.Errorf("with prefetching %.2f prefetches per read for %.2f lines", pPref, pLines)
	}
	if nPref != 0 {
		t.Errorf("without prefetching %.2f prefetches per read", nPref)
	}
	if min := 0.9 * nLines * float64(lat.Nanoseconds()) / 1e3; nStall < min {
		t.Errorf("without prefetching %.2f µs stalled per read for %.2f lines at %v; want >= %.2f", nStall, nLines, lat, min)
	}
	if pStall > nStall/2 {
		t.Errorf("with prefetching %.2f µs stalled per read, without %.2f: prefetching hid little of the latency", pStall, nStall)
	}
	if raceEnabled {
		return
	}
	if r := median(overOne); r < 2 {
		t.Errorf("32 concurrent lookups at %v go %.1fx as fast as one (median of %v); want >= 2x", lat, r, overOne)
	}
	if r := median(overNo); r < 1.5 {
		t.Errorf("32 concurrent lookups at %v go %.1fx as fast with prefetching as without (median of %v); want >= 1.5x", lat, r, overNo)
	}
}

// TestPrefetchOverlapsRangeReads is the check as it stands, on
// lookups that touch far memory many times: at 5 µs, 32 concurrent range
// reads of 16 keys on one core go at least 5 times as fast as one at a
// time. A lone range read waits for each of its ~16 lines in turn
// (16·L ≈ 80 µs) while its own CPU time is a few µs, so overlapping the
// lines of 32 of them pays back far more than for a point read's one line
// (see TestPrefetchOverlaps for why that is bounded near (L+C)/C).
// Alternating rounds, median ratio; skipped under the race detector.
func TestPrefetchOverlapsRangeReads(t *testing.T) {
	if raceEnabled {
		t.Skip("ratios of throughput mean nothing under the race detector")
	}
	const lat = 5 * time.Microsecond
	e := mustOpen(t, t.TempDir(), flash.Config{FarMemory: lat, Cores: 1, IndexBuckets: 1 << 16})
	t.Cleanup(func() { e.Close() })
	keys := loadKeys(t, e, 50000)
	scans := func(clients int, d time.Duration) float64 {
		var n atomic.Int64
		var wg sync.WaitGroup
		stop := time.Now().Add(d)
		for c := 0; c < clients; c++ {
			wg.Add(1)
			go func(seed int64) {
				defer wg.Done()
				rng := rand.New(rand.NewSource(seed))
				for time.Now().Before(stop) {
					i := rng.Intn(len(keys) - 16)
					got := 0
					err := e.ScanServed(keys[i], keys[i+16], false, func(k, v []byte) bool { got++; return true })
					if err != nil || got != 16 {
						t.Errorf("range read from %s: %d keys, %v", keys[i], got, err)
						return
					}
					n.Add(1)
				}
			}(int64(c))
		}
		wg.Wait()
		return float64(n.Load()) / d.Seconds()
	}
	scans(32, 50*time.Millisecond) // warm up
	s0, _ := e.ServeStats()
	var ratios []float64
	for r := 0; r < 5; r++ {
		one := scans(1, 100*time.Millisecond)
		many := scans(32, 100*time.Millisecond)
		t.Logf("round %d: 1 range read at a time %.0f/s, 32 at once %.0f/s (%.1fx)", r, one, many, many/one)
		ratios = append(ratios, many/one)
	}
	s1, _ := e.ServeStats()
	lines := float64(s1.Accesses-s0.Accesses) / float64(s1.Lookups-s0.Lookups)
	if lines < 10 {
		t.Fatalf("%.1f far-memory lines per range read of 16 keys: the reads did not walk far memory", lines)
	}
	if r := median(ratios); r < 5 {
		t.Errorf("32 concurrent range reads at %v go %.1fx as fast as one (median of %v); want >= 5x", lat, r, ratios)
	}
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// The serving path's hand-off: a caller's goroutine hands lookups to the
// schedulers' locked threads and waits for them. Far memory at 0.1 µs,
// so that the figures are the hand-off and the lookup's own work.
func benchServe(b *testing.B, run func(e *flash.Engine, keys [][]byte, i int)) {
	e, err := flash.OpenConfig(engine.Options{Dir: b.TempDir()}, flash.Config{FarMemory: 100 * time.Nanosecond})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	keys := make([][]byte, 10000)
	var ws []engine.Write
	for i := range keys {
		keys[i] = []byte(fmt.Sprintf("key%06d", i))
		ws = append(ws, engine.Write{Key: keys[i], Value: []byte(fmt.Sprint(i))})
	}
	if err := e.Apply(&engine.Batch{Version: 1, Writes: ws}); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	run(e, keys, 0)
}

// BenchmarkServeGet: one Get at a time (the latency of a lone read).
func BenchmarkServeGet(b *testing.B) {
	benchServe(b, func(e *flash.Engine, keys [][]byte, _ int) {
		for i := 0; i < b.N; i++ {
			if _, ok, err := e.Get(keys[i%len(keys)]); !ok || err != nil {
				b.Fatal(ok, err)
			}
		}
	})
}

// BenchmarkServeGetParallel: Gets from 32 goroutines (ns per Get).
func BenchmarkServeGetParallel(b *testing.B) {
	benchServe(b, func(e *flash.Engine, keys [][]byte, _ int) {
		b.SetParallelism(16) // 32 goroutines on 2 cores
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				if _, ok, err := e.Get(keys[i%len(keys)]); !ok || err != nil {
					b.Error(ok, err)
					return
				}
				i += 7919
			}
		})
	})
}

// BenchmarkServeGetMany: GetMany of 16 keys, one call at a time (ns per call).
func BenchmarkServeGetMany(b *testing.B) {
	benchServe(b, func(e *flash.Engine, keys [][]byte, _ int) {
		for i := 0; i < b.N; i++ {
			j := (i * 16) % (len(keys) - 16)
			if _, _, err := e.GetMany(keys[j : j+16]); err != nil {
				b.Fatal(err)
			}
		}
	})
}
