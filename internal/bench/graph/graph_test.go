package graph

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
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
	for _, o := range []Options{{Vertices: 3}, {AvgDegree: -1}, {Zipf: 0.5}, {Layouts: []string{"3stash"}}, {WriteFraction: 2}, {ProfileBytes: 8}} {
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
	for _, f := range []string{"graph.png", "graph.csv"} {
		if st, err := os.Stat(filepath.Join(out, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	if !strings.Contains(buf.String(), "2stash vs 1stash") {
		t.Errorf("no comparison line:\n%s", buf.String())
	}
}
