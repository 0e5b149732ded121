package anomalies

import (
	"bytes"
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func TestCodec(t *testing.T) {
	if v, ok := parseData(dataValue(42)); !ok || v != 42 {
		t.Fatalf("parseData(dataValue(42)) = %d, %v", v, ok)
	}
	for _, origin := range []byte{originFill, originWrite} {
		v, o, ok := parseCache(cacheValue(dataValue(7), origin))
		if !ok || v != 7 || o != origin {
			t.Fatalf("parseCache(cacheValue(7, %c)) = %d, %c, %v", origin, v, o, ok)
		}
	}
	for _, bad := range []string{"", "7", "7 x", "x f", "-1 f", "7 fw"} {
		if _, _, ok := parseCache(bad); ok {
			t.Errorf("parseCache(%q) ok", bad)
		}
	}
	if _, ok := parseData("-3"); ok {
		t.Error(`parseData("-3") ok`)
	}
}

func TestAudit(t *testing.T) {
	keys := []string{"a", "b", "c", "d", "e", "f", "g"}
	cache := map[string]string{
		"a": cacheValue("3", originFill),  // equal
		"b": cacheValue("5", originWrite), // equal
		"c": cacheValue("1", originFill),  // 3 behind, by a fill
		"d": cacheValue("4", originWrite), // 1 behind, by a write
		"e": cacheValue("9", originWrite), // newer than the data
		"f": "garbage",                    // malformed
		// g: not cached
	}
	data := map[string]string{"a": "3", "b": "5", "c": "4", "d": "5", "e": "8", "f": "1", "g": "2"}
	a := audit(keys, cache, data)
	want := Audit{Keys: 7, Cached: 6, Stale: 4, StaleFill: 1, StaleWrite: 2, Newer: 1, Malformed: 1, MaxLag: 3}
	a.Examples = nil
	if a.Keys != want.Keys || a.Cached != want.Cached || a.Stale != want.Stale || a.StaleFill != want.StaleFill ||
		a.StaleWrite != want.StaleWrite || a.Newer != want.Newer || a.Malformed != want.Malformed || a.MaxLag != want.MaxLag {
		t.Fatalf("audit = %+v, want %+v", a, want)
	}
	// A cached key missing from the data is an anomaly too.
	if a := audit([]string{"x"}, map[string]string{"x": cacheValue("0", originFill)}, map[string]string{}); a.Stale != 1 || a.Malformed != 1 {
		t.Fatalf("missing data: %+v", a)
	}
	if a := audit(keys, nil, data); a.Cached != 0 || a.Stale != 0 {
		t.Fatalf("empty cache: %+v", a)
	}
}

func TestKeyPicker(t *testing.T) {
	for _, theta := range []float64{0.5, 0.99, 1.5} {
		pick := newKeyPicker(100, theta, rand.New(rand.NewPCG(1, 2)))
		counts := make([]int, 100)
		for i := 0; i < 100000; i++ {
			k := pick()
			if k < 0 || k >= 100 {
				t.Fatalf("theta %g: key %d out of range", theta, k)
			}
			counts[k]++
		}
		if counts[0] <= counts[1] || counts[1] <= counts[50] {
			t.Errorf("theta %g: counts[0]=%d counts[1]=%d counts[50]=%d, want decreasing", theta, counts[0], counts[1], counts[50])
		}
	}
	// YCSB zipf 0.99 over 100 keys gives key 0 about 1/zeta(100, 0.99) ≈ 19%.
	pick := newKeyPicker(100, 0.99, rand.New(rand.NewPCG(3, 4)))
	n0 := 0
	for i := 0; i < 100000; i++ {
		if pick() == 0 {
			n0++
		}
	}
	if n0 < 17000 || n0 > 21000 {
		t.Errorf("zipf 0.99: key 0 drawn %d times of 100000, want about 19000", n0)
	}
}

func TestOptions(t *testing.T) {
	o, err := Options{}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if o.Clients != 32 || o.Keys != 100 || o.Duration != 10*time.Second || o.ReadFraction != 0.5 || o.Zipf != 0.99 ||
		o.Delay != 0 || o.Evict != 0.1 || len(o.Setups) != 2 {
		t.Fatalf("defaults: %+v", o)
	}
	if o, _ := (Options{Evict: -1}).withDefaults(); o.Evict != 0 {
		t.Fatalf("Evict -1 gives %g, want 0", o.Evict)
	}
	for _, bad := range []Options{
		{Clients: -1}, {Keys: -2}, {ReadFraction: 1.5}, {Zipf: 1}, {Evict: 2}, {Delay: -time.Second},
		{Setups: []string{"memcached"}}, {Setups: []string{SetupDiStash, SetupDiStash}},
	} {
		if _, err := bad.withDefaults(); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
}

// TestDiStashNoAnomalies runs the workload on DiStash for a couple of
// seconds: every read-through fill and write-through write is one
// transaction, so no cached value may disagree with the data.
func TestDiStashNoAnomalies(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	res, err := Run(ctx, Options{
		Clients: 16, Keys: 20, Duration: 2 * time.Second, Evict: 0.3,
		Setups: []string{SetupDiStash}, Dir: t.TempDir(), Seed: 1,
	}, &out)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	r := res.Setup(SetupDiStash)
	if r == nil {
		t.Fatal("no DiStash result")
	}
	if r.Reads == 0 || r.Writes == 0 || r.Fills == 0 || r.Evictions == 0 {
		t.Fatalf("workload did not exercise reads, writes, fills and evictions: %+v", r)
	}
	if r.Errors != 0 {
		t.Errorf("%d operations failed", r.Errors)
	}
	if r.Audit.Stale != 0 || r.StaleReads != 0 {
		t.Fatalf("DiStash shows %d anomalies and %d stale reads: %+v", r.Audit.Stale, r.StaleReads, r.Audit)
	}
	if r.Audit.Cached == 0 {
		t.Fatal("nothing cached after the run")
	}
	if !strings.Contains(out.String(), "distash: 0 anomalies") {
		t.Fatalf("table does not report 0 anomalies:\n%s", out.String())
	}
}

// figure7 plays the race of the paper's Figure 7 step by step on b: client
// 2 misses the cache and reads the data; client 1's write-through then runs
// to completion; then client 2 fills the cache. It returns whether client
// 2's read hit the cache and after how many attempts, the version a
// subsequent read returns (the write made it 1), and the audit of the key.
func figure7(t *testing.T, ctx context.Context, b backend) (hit bool, attempts int, later int64, a Audit) {
	t.Helper()
	keys := []string{"k"}
	if err := b.load(ctx, keys); err != nil {
		t.Fatal(err)
	}
	c1, err := b.newClient(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c1.close()
	c2, err := b.newClient(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.close()
	wrote := false
	_, origin, attempts, err := c2.read(ctx, "k", func() {
		if wrote {
			return
		}
		wrote = true
		if _, _, err := c1.write(ctx, "k"); err != nil {
			t.Errorf("client 1 write: %v", err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if later, _, _, err = c1.read(ctx, "k", func() {}); err != nil {
		t.Fatal(err)
	}
	cache, data, err := b.snapshot(ctx, keys)
	if err != nil {
		t.Fatal(err)
	}
	return origin != 0, attempts, later, audit(keys, cache, data)
}

// TestDiStashFigure7 plays the Figure 7 interleaving on DiStash: the
// filling transaction conflicts with the write and is retried, and its
// retry finds the write's cache entry.
func TestDiStashFigure7(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := startDiStash(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer b.close()
	hit, attempts, later, a := figure7(t, ctx, b)
	if a.Stale != 0 || later != 1 {
		t.Fatalf("DiStash left a stale entry: %+v; a later read returned version %d, want 1", a, later)
	}
	if attempts != 2 || !hit {
		t.Fatalf("client 2's read: hit %v after %d attempts, want a hit on the 2nd attempt (the 1st aborted)", hit, attempts)
	}
}
