package graph

import (
	"bytes"
	"context"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/distash/distash/internal/bench/timeline"
)

func TestGraphIsSymmetricWithPowerLawDegrees(t *testing.T) {
	o, err := Options{Vertices: 5000}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	g := newGraph(o)
	for v, l := range g.adj {
		for _, u := range l {
			if int(u) == v {
				t.Fatalf("vertex %d is its own friend", v)
			}
			if _, ok := slices.BinarySearch(g.adj[u], uint32(v)); !ok {
				t.Fatalf("%d lists %d as a friend but not the other way round", v, u)
			}
		}
	}
	mean := float64(2*g.edges) / float64(o.Vertices)
	if mean < float64(o.AvgDegree)/2 || mean > float64(o.AvgDegree)*1.5 {
		t.Fatalf("mean degree %.1f, want about %d", mean, o.AvgDegree)
	}
	if g.maxDegree < 5*o.AvgDegree {
		t.Fatalf("max degree %d: no heavy vertices (mean %.1f)", g.maxDegree, mean)
	}
	if g2 := newGraph(o); !slices.EqualFunc(g.adj, g2.adj, slices.Equal) {
		t.Fatal("same seed, different graph")
	}
}

func TestProfileRoundTrip(t *testing.T) {
	p := profile(42, 7, 40)
	if got := string(name(p)); got != "user42.7" {
		t.Fatalf("name %q", got)
	}
	if len(p) != 40 || score(p) == score(profile(42, 8, 40)) {
		t.Fatal("size or score wrong")
	}
	if got := name(profile(123456, 99, 16)); len(got) != 7 {
		t.Fatalf("a short profile keeps a truncated name, got %q", got)
	}
}

func TestOptionsRefuseBadInput(t *testing.T) {
	for _, o := range []Options{{Vertices: 3}, {AvgDegree: -1}, {Zipf: 0.5}, {Layouts: []string{"3stash"}}, {WriteFraction: 2}, {ProfileBytes: 8},
		{Rounds: -1}, {Duration: 2 * time.Second, Rounds: 4}, {Rate: -1}, {Prefill: -1}, {Vertices: 100, Prefill: 101}} {
		if _, err := o.withDefaults(); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}

// TestRunBothLayouts runs a tiny graph through both layouts: every query
// kind runs, cached results are hit, no errors, and every cached result
// equals its recomputation after concurrent updates.
func TestRunBothLayouts(t *testing.T) {
	out := t.TempDir()
	var buf bytes.Buffer
	res, err := Run(context.Background(), Options{Vertices: 300, Clients: 8, Warmup: -1, Duration: 1500 * time.Millisecond,
		WriteFraction: 0.05, SSDStashes: 2, OutDir: out}, &buf)
	if err != nil {
		t.Fatalf("%v\n%s", err, buf.String())
	}
	t.Log(buf.String())
	if len(res) != 2 || res[0].Layout != OneStash || res[1].Layout != TwoStash {
		t.Fatalf("results %+v", res)
	}
	for _, r := range res {
		if r.Errors > 0 {
			t.Errorf("%s: %d errors, first %s", r.Layout, r.Errors, r.FirstErr)
		}
		if r.Mismatches > 0 || r.Verified == 0 {
			t.Errorf("%s: %d of %d cached entries differ from their recomputation", r.Layout, r.Mismatches, r.Verified)
		}
		if r.CacheHits.Count == 0 || r.CacheMisses.Count == 0 {
			t.Errorf("%s: hits %d misses %d", r.Layout, r.CacheHits.Count, r.CacheMisses.Count)
		}
		for _, k := range kinds {
			if r.PerKind[k].Count == 0 {
				t.Errorf("%s: no %s operations", r.Layout, k)
			}
		}
	}
	for _, f := range []string{"graph.png", "graph.csv", Fig11PNG, Fig11CSV} {
		if st, err := os.Stat(filepath.Join(out, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	if !strings.Contains(buf.String(), "2stash vs 1stash") {
		t.Errorf("no comparison line:\n%s", buf.String())
	}
}

// TestRunOnEmulatedSSD runs both layouts for a moment, in two alternating
// rounds, with the SSD pool's stashes on emulated SSDs and a small block cache (the cached results are
// checked by TestRunBothLayouts: with the check, the run would wait 30 s
// for the graph to leave the longer MVCC window): Figure 11's CSV has every SSD stash's utilisation, a number in
// [0, 100], in both layouts; its PNG decodes.
func TestRunOnEmulatedSSD(t *testing.T) {
	out := t.TempDir()
	var buf bytes.Buffer
	res, err := Run(context.Background(), Options{Vertices: 300, Clients: 8, Warmup: -1, Duration: 2 * time.Second, Rounds: 2,
		SSDStashes: 2, OutDir: out, DeviceProfile: "ssd", DeviceScale: 1, PebbleCache: 64 << 10, NoVerify: true, Prefill: 100}, &buf)
	if err != nil {
		t.Fatalf("%v\n%s", err, buf.String())
	}
	t.Log(buf.String())
	for _, r := range res {
		if r.Errors > 0 || r.CacheHits.Count == 0 || math.IsNaN(r.DeviceBusyPct) {
			t.Errorf("%s: %d errors (%s), %d hits, SSD busy %v", r.Layout, r.Errors, r.FirstErr, r.CacheHits.Count, r.DeviceBusyPct)
		}
		// This graph stays in the memtables (no sstable, no block cache
		// lookup); the engine's tests check the cache itself.
		if r.BlockCacheHitRate < 0 || r.BlockCacheHitRate > 1 || r.SSDReadsPerQuery < 0 {
			t.Errorf("%s: block cache hit rate %v, SSD reads per query %v", r.Layout, r.BlockCacheHitRate, r.SSDReadsPerQuery)
		}
		// The 100 most popular vertices' results were cached before the
		// run: most cached queries hit.
		if r.HitRate < 0.5 {
			t.Errorf("%s: hit rate %.2f after a prefill of the 100 most popular vertices", r.Layout, r.HitRate)
		}
	}
	rows, err := timeline.ReadCSV(filepath.Join(out, Fig11CSV), timeline.UtilisationHeader("layout"), "time_s", "busy_pct", "queue_length", "read_mib_s", "write_mib_s")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, r := range rows {
		busy, _ := strconv.ParseFloat(r[3], 64)
		if busy < 0 || busy > 100 || !strings.HasPrefix(r[2], "ssd-") {
			t.Fatalf("row %q", r)
		}
		seen[r[1]+" "+r[2]] = true
	}
	for _, k := range []string{"1stash ssd-0", "1stash ssd-1", "2stash ssd-0", "2stash ssd-1"} {
		if !seen[k] {
			t.Errorf("no utilisation of %s in %s", k, Fig11CSV)
		}
	}
	f, err := os.Open(filepath.Join(out, Fig11PNG))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := png.Decode(f); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"1stash round 1/2", "2stash round 1/2", "1stash round 2/2", "2stash round 2/2"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("no %q in the output:\n%s", want, buf.String())
		}
	}
	for _, r := range res {
		if r.Seconds < 1.5 || r.Seconds > 3 {
			t.Errorf("%s: measured %.1f s in two rounds of 1 s", r.Layout, r.Seconds)
		}
	}
	if !strings.Contains(buf.String(), "cached 300 results of the 100 most popular vertices") {
		t.Errorf("the output does not report the prefill:\n%s", buf.String())
	}
	if !strings.Contains(buf.String(), "emulated ssd device per stash") {
		t.Errorf("the output does not say what the pools emulate:\n%s", buf.String())
	}
}

// TestRunOpenLoop offers 100 queries/s for 2 s: about 200 queries are
// served (a closed loop of 8 clients on this tiny graph serves thousands),
// and the output says the load was offered open loop.
func TestRunOpenLoop(t *testing.T) {
	var buf bytes.Buffer
	res, err := Run(context.Background(), Options{Vertices: 300, Clients: 8, Warmup: -1, Duration: 2 * time.Second, Rate: 100,
		SSDStashes: 2, Layouts: []string{TwoStash}, OutDir: t.TempDir(), NoVerify: true}, &buf)
	if err != nil {
		t.Fatalf("%v\n%s", err, buf.String())
	}
	t.Log(buf.String())
	if n := res[0].All.Count; n < 50 || n > 320 || res[0].Errors > 0 {
		t.Errorf("%d queries served at 100/s for 2 s (%d errors, %s)", n, res[0].Errors, res[0].FirstErr)
	}
	if !strings.Contains(buf.String(), "open loop at 100 queries/s") {
		t.Errorf("the output does not say the load was offered:\n%s", buf.String())
	}
}
