package enginetest

import (
	"bytes"
	"fmt"
	"math/rand"
	"testing"
	"time"

	"github.com/distash/distash/internal/engine"
	"github.com/distash/distash/internal/kv"
)

// RunEphemeral runs the capacity and eviction checks for ephemeral engines.
// open is given options with Ephemeral, CapacityBytes and Eviction ("lru"
// or "camp") set. Ephemeral engines are volatile: restarted with open,
// after Close or after crash (if not nil), they must come back empty.
func RunEphemeral(t *testing.T, open OpenFunc, crash CrashFunc) {
	rs := restarters(open, nil, crash)
	for _, pol := range []string{"lru", "camp"} {
		t.Run("Capacity/"+pol, func(t *testing.T) { testCapacity(t, open, pol, rs) })
		t.Run("Oversize/"+pol, func(t *testing.T) { testOversize(t, open, pol) })
		t.Run("NoPressure/"+pol, func(t *testing.T) { testNoPressure(t, open, pol) })
	}
	t.Run("LRUOrder", func(t *testing.T) { testLRUOrder(t, open) })
	t.Run("CAMPKeepsCostly", func(t *testing.T) { testCAMPKeepsCostly(t, open) })
}

func ephemeralOpts(capacity int64, pol string) engine.Options {
	return engine.Options{Ephemeral: true, CapacityBytes: capacity, Eviction: pol}
}

// testCapacity writes 20 times the capacity in random batches and checks
// after every Apply that the engine is within capacity, and regularly that
// every present key holds its latest value and Stats match the content.
// It restarts the engine with each of rs in turn after each of the first
// four eighths of the writes (the last half must still fill and evict):
// each time it must come back empty.
func testCapacity(t *testing.T, open OpenFunc, pol string, rs []restarter) {
	const capacity = 1 << 20
	total := int64(20 << 20)
	if testing.Short() {
		total = 5 << 20
	}
	h := newHarness(t, open, ephemeralOpts(capacity, pol))
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewSource(seed))
	latest := model{} // the latest write of every key; absent when cleared
	var written int64
	restarts := 0
	key := func() string { return fmt.Sprintf("e%05d", rng.Intn(20000)) }
	for v := kv.Version(1); written < total; v++ {
		var ws []engine.Write
		for i := 0; i < 1+rng.Intn(10); i++ {
			switch r := rng.Intn(100); {
			case r < 90:
				n := 100 + rng.Intn(10000)
				if rng.Intn(50) == 0 {
					n = BigValueBytes
				}
				val := randomBytes(rng, n)
				ws = append(ws, engine.Write{Key: []byte(key()), Value: val, Cost: uint32(rng.Intn(1000))})
				written += int64(len(val) + 6)
			case r < 97:
				ws = append(ws, Clear(key()))
			default:
				a := key()
				ws = append(ws, ClearRange(a, a[:4]+"9"))
			}
		}
		e := h.e
		apply(t, e, v, ws...)
		latest.apply(ws)
		s := e.Stats()
		if s.Bytes > capacity || s.Bytes < 0 || s.Keys < 0 {
			t.Fatalf("after Apply(%d): Stats = %+v; capacity %d", v, s, capacity)
		}
		for i := 0; i < 3; i++ {
			k := key()
			got, ok, err := e.Get([]byte(k))
			if err != nil {
				t.Fatal(err)
			}
			want, present := latest[k]
			if ok && (!present || string(got) != want) {
				t.Fatalf("Get(%q) returned a value that is not its latest (present in model: %v)", k, present)
			}
		}
		if v%50 == 0 {
			checkEphemeralContent(t, e, latest)
		}
		if len(rs) > 0 && restarts < 4 && written >= int64(restarts+1)*total/8 {
			h.restart(rs[restarts%len(rs)], latest, v)
			restarts++
		}
	}
	e := h.e
	checkEphemeralContent(t, e, latest)
	s := e.Stats()
	if s.Evictions == 0 {
		t.Fatalf("no evictions after writing %d bytes into %d: %+v", written, capacity, s)
	}
	if s.Bytes < capacity/2 {
		t.Errorf("engine holds only %d of %d bytes after heavy writes", s.Bytes, capacity)
	}
	// Everything evicted reads absent.
	for k := range latest {
		got, ok, err := e.Get([]byte(k))
		if err != nil {
			t.Fatal(err)
		}
		if ok && string(got) != latest[k] {
			t.Fatalf("Get(%q) is stale", k)
		}
	}
}

// checkEphemeralContent checks that the engine holds a subset of latest
// with the latest values, and that Stats count exactly what Scan returns.
func checkEphemeralContent(t *testing.T, e engine.Engine, latest model) {
	t.Helper()
	var keys, size int64
	var prev []byte
	err := e.Scan(nil, nil, false, func(k, v []byte) bool {
		if prev != nil && bytes.Compare(prev, k) >= 0 {
			t.Fatalf("scan out of order: %q then %q", prev, k)
		}
		prev = bytes.Clone(k)
		want, ok := latest[string(k)]
		if !ok || want != string(v) {
			t.Fatalf("engine holds %q with a value that is not its latest write (present: %v)", k, ok)
		}
		keys++
		size += int64(len(k) + len(v))
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	checkStats(t, e, keys, size)
}

func testOversize(t *testing.T, open OpenFunc, pol string) {
	h := newHarness(t, open, ephemeralOpts(1000, pol))
	e := h.e
	apply(t, e, 1, Set("small", "v"), Set("k", "old"))
	apply(t, e, 2, Set("big", string(make([]byte, 2000))))
	checkGet(t, e, "big", "", false)
	checkGet(t, e, "small", "v", true)
	// An oversize overwrite must not leave the old value readable.
	apply(t, e, 3, Set("k", string(make([]byte, 1000))))
	checkGet(t, e, "k", "", false)
	checkStats(t, e, 1, 6)
	// Exactly the capacity fits (costly, so that camp evicts "small" rather
	// than the new pair).
	apply(t, e, 4, engine.Write{Key: []byte("x"), Value: make([]byte, 999), Cost: 1 << 30})
	checkGet(t, e, "x", string(make([]byte, 999)), true)
	checkStats(t, e, 1, 1000)
	checkGet(t, e, "small", "", false)
	checkEphemeralContent(t, e, model{"x": string(make([]byte, 999)), "small": "v"})
}

func testNoPressure(t *testing.T, open OpenFunc, pol string) {
	h := newHarness(t, open, ephemeralOpts(1<<20, pol))
	e := h.e
	m := model{}
	rng := rand.New(rand.NewSource(5))
	for i := 1; i <= 100; i++ {
		ws := randomBatch(rng, 100, false)
		apply(t, e, kv.Version(i), ws...)
		m.apply(ws)
	}
	checkModel(t, e, m)
	if ev := e.Stats().Evictions; ev != 0 {
		t.Fatalf("%d evictions while far below capacity", ev)
	}
}

// pairOf100 returns a Write whose key and value total 100 bytes.
func pairOf100(key string, cost uint32) engine.Write {
	return engine.Write{Key: []byte(key), Value: bytes.Repeat([]byte{'v'}, 100-len(key)), Cost: cost}
}

func testLRUOrder(t *testing.T, open OpenFunc) {
	h := newHarness(t, open, ephemeralOpts(1000, "lru")) // room for 10 pairs
	e := h.e
	v := kv.Version(0)
	put := func(k string) {
		v++
		apply(t, e, v, pairOf100(k, 0))
	}
	present := func(k string) bool {
		_, ok, err := e.Get([]byte(k))
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	for i := 0; i < 10; i++ {
		put(fmt.Sprintf("e%02d", i))
	}
	if ev := e.Stats().Evictions; ev != 0 {
		t.Fatalf("%d evictions with the capacity exactly full", ev)
	}
	if !present("e00") { // e00 is now the most recently used
		t.Fatal("e00 absent before any eviction")
	}
	put("e10") // evicts e01, the least recently used
	if present("e01") {
		t.Fatal("e01 (least recently used) survived; the read of e00 should have saved e00 instead")
	}
	if !present("e00") {
		t.Fatal("e00, read recently, was evicted")
	}
	// Recency is now e02..e09, e10, e00 (oldest first); rewrite e02.
	put("e02")
	put("e11") // evicts e03
	if present("e03") || !present("e02") {
		t.Fatal("a rewrite did not count as a use: e03 should go before e02")
	}
	for _, k := range []string{"e04", "e05", "e06", "e07", "e08", "e09", "e10", "e00", "e02", "e11"} {
		if !present(k) {
			t.Fatalf("%s evicted; only e01 and e03 should have been", k)
		}
	}
	if ev := e.Stats().Evictions; ev != 2 {
		t.Fatalf("Evictions = %d; want 2", ev)
	}
	checkStats(t, e, 10, 1000)
}

func testCAMPKeepsCostly(t *testing.T, open OpenFunc) {
	h := newHarness(t, open, ephemeralOpts(1000, "camp")) // room for 10 pairs
	e := h.e
	v := kv.Version(0)
	put := func(k string, cost uint32) {
		v++
		apply(t, e, v, pairOf100(k, cost))
	}
	// Interleave costly and cheap pairs so that age alone cannot explain
	// the outcome.
	for i := 0; i < 5; i++ {
		put(fmt.Sprintf("cheap%d", i), 1)
		put(fmt.Sprintf("dear%d", i), 1000)
	}
	for i := 0; i < 10; i++ {
		put(fmt.Sprintf("new%d", i), 1)
	}
	for i := 0; i < 5; i++ {
		checkGet(t, e, fmt.Sprintf("dear%d", i), string(bytes.Repeat([]byte{'v'}, 95)), true)
		checkGet(t, e, fmt.Sprintf("cheap%d", i), "", false)
	}
	// Among equally cheap pairs, the most recent ones stay.
	checkGet(t, e, "new9", string(bytes.Repeat([]byte{'v'}, 96)), true)
	checkGet(t, e, "new0", "", false)
	if ev := e.Stats().Evictions; ev != 10 {
		t.Fatalf("Evictions = %d; want 10", ev)
	}
	checkStats(t, e, 10, 1000)
}
