// Package graph is the social-graph benchmark of the DiStash paper's §5.3
// (Table 1): a read-dominated mix of graph queries, about 45% of them
// answered from cached query results kept consistent by the cacheaug
// pattern's dependencies, run on two layouts of one machine's stashes:
//
//	1Stash  the SSD pool (Pebble, durable) holds the graph and the cached
//	        query results
//	2Stash  the same SSD pool holds the graph; a DRAM pool (ephemeral)
//	        holds the query results
//
// The graph is synthetic: Options.Vertices vertices, each a profile record
// and an adjacency list, with power-law degrees (a few vertices with many
// friends, most with few). The five query templates, as in the paper's
// eBay workload, of which three are cached:
//
//	friends      cached  20%  names of v's friends (1 hop: adjacency + profiles)
//	fof          cached  15%  distinct friends of friends of v (2 hops)
//	top          cached  10%  v's five friends of highest score (1 hop)
//	profile      direct  35%  v's profile and degree
//	mutual       direct  20%  profiles of the friends a and b share
//
// plus Options.WriteFraction of profile updates through the store's
// write-around policy (the update and the deletion of every cached result
// that read the profile, one transaction). Vertices are chosen zipfian, so
// the hot queries' results stay cached. Each layout gets a fresh embedded
// cluster, the same graph, a warm-up, then a measured run; at the end of
// each, cacheaug's Verify checks that every cached result equals its
// recomputation from the graph.
package graph

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"image/color"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/schollz/progressbar/v3"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/distash/distash"
	"github.com/distash/distash/config"
	"github.com/distash/distash/internal/bench/timeline"
	benchycsb "github.com/distash/distash/internal/bench/ycsb"
	"github.com/distash/distash/internal/clusterstatus"
	"github.com/distash/distash/internal/embedded"
	"github.com/distash/distash/internal/wire"
	"github.com/distash/distash/patterns/cacheaug"
)

// Options configure a run. Zero values take the defaults given.
type Options struct {
	// Vertices is the graph's size (default 20,000).
	Vertices int
	// AvgDegree is the mean number of friends (default 16).
	AvgDegree int
	// ProfileBytes is a profile record's size (default 200).
	ProfileBytes int
	// Clients is the number of concurrent clients (default 64).
	Clients int
	// Rate, if > 0, runs the mix open loop: queries arrive at Rate per
	// second (Poisson arrivals, the same sequence for every layout) and
	// the Clients serve them, each query's latency counted from its
	// arrival (time spent queued for a free client included), as the
	// paper's light and moderate workloads are offered loads. 0: closed
	// loop, each client issuing its next query when the last returns.
	Rate float64
	// Warmup runs before each measurement (default 5 s; negative: none).
	Warmup time.Duration
	// Duration is each layout's measured run (default 20 s).
	Duration time.Duration
	// Rounds > 1 starts every layout at once and measures them in
	// Rounds alternating rounds of Duration/Rounds each (ABBA...), so
	// that other work on the machine falls on both layouts alike;
	// 0 or 1: one layout after the other.
	Rounds int
	// WriteFraction is the fraction of operations that update a profile
	// (default 0.01; negative: none).
	WriteFraction float64
	// Prefill, if > 0, caches the results of the Prefill most popular
	// vertices (every cached family) after the load, before the warm-up,
	// and lets them come to rest with the graph: the steady state of the
	// paper's hour-long runs (a hit rate of about 100%, the results on the
	// SSDs in 1Stash) rather than a cache still filling.
	Prefill int
	// Zipf is the exponent of the vertex popularity (default 1.1, > 1).
	Zipf float64
	// SSDStashes and DRAMStashes size the pools (default 4 and 1, the
	// paper's 40 SSDs and 5 DRAMs scaled down).
	SSDStashes, DRAMStashes int
	// Layouts to run, among "1stash" and "2stash" (default both).
	Layouts []string
	// Dir holds the embedded clusters' files (default: temporary).
	Dir string
	// OutDir receives graph.png and graph.csv (default bench-out).
	OutDir string
	// Seed makes the graph and the query sequence repeatable (default 1).
	Seed uint64
	// Progress shows progress bars.
	Progress bool
	// DeviceProfile, if not "none" (or ""), puts the SSD pool's stashes on
	// emulated devices of that profile (timeline.ApplyDevice), scaled by
	// DeviceScale (> 1: slower). The DRAM pool has none.
	DeviceProfile string
	DeviceScale   float64
	// PebbleCache, if not 0, is the SSD stashes' block cache
	// ([pool.pebble] cache): small, so that reads reach the device.
	PebbleCache config.Size
	// NoVerify skips the check of every cached result after the run (one
	// read transaction recomputing them all: on a slow emulated device it
	// takes minutes) and runs the cluster with the default MVCC window
	// (5 s) instead of the 30 s that check needs.
	NoVerify bool
}

// The layouts.
const (
	OneStash = "1stash"
	TwoStash = "2stash"
)

func (o Options) withDefaults() (Options, error) {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.Vertices, 20000)
	def(&o.AvgDegree, 16)
	def(&o.ProfileBytes, 200)
	def(&o.Clients, 64)
	def(&o.SSDStashes, 4)
	def(&o.DRAMStashes, 1)
	if o.Warmup == 0 {
		o.Warmup = 5 * time.Second
	}
	if o.Warmup < 0 {
		o.Warmup = 0
	}
	if o.Duration == 0 {
		o.Duration = 20 * time.Second
	}
	if o.WriteFraction == 0 {
		o.WriteFraction = 0.01
	}
	if o.WriteFraction < 0 {
		o.WriteFraction = 0
	}
	if o.Zipf == 0 {
		o.Zipf = 1.1
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	if len(o.Layouts) == 0 {
		o.Layouts = []string{OneStash, TwoStash}
	}
	if o.OutDir == "" {
		o.OutDir = "bench-out"
	}
	switch {
	case o.Vertices < 10:
		return o, fmt.Errorf("graph: --vertices %d: want at least 10", o.Vertices)
	case o.AvgDegree < 1 || o.AvgDegree > 1000:
		return o, fmt.Errorf("graph: --degree %d: want 1..1000", o.AvgDegree)
	case o.ProfileBytes < 16 || o.ProfileBytes > 10000:
		return o, fmt.Errorf("graph: --profile-bytes %d: want 16..10000", o.ProfileBytes)
	case o.Clients < 1:
		return o, fmt.Errorf("graph: --clients %d: want at least 1", o.Clients)
	case o.Rate < 0 || o.Rate > 1e6:
		return o, fmt.Errorf("graph: --rate %g: want 0 (closed loop) up to 1e6 queries/s", o.Rate)
	case o.Duration <= 0:
		return o, errors.New("graph: --duration must be > 0")
	case o.Rounds < 0 || (o.Rounds > 1 && o.Duration/time.Duration(o.Rounds) < time.Second):
		return o, fmt.Errorf("graph: --rounds %d: want 0..%d (each round at least 1 s of --duration %v)", o.Rounds, int(o.Duration/time.Second), o.Duration)
	case o.Prefill < 0 || o.Prefill > o.Vertices:
		return o, fmt.Errorf("graph: --prefill %d: want 0..%d (the vertices)", o.Prefill, o.Vertices)
	case o.WriteFraction > 1:
		return o, fmt.Errorf("graph: --write-fraction %g: want 0..1", o.WriteFraction)
	case o.Zipf <= 1:
		return o, fmt.Errorf("graph: --zipf %g: want > 1", o.Zipf)
	case o.SSDStashes < 1 || o.DRAMStashes < 1:
		return o, errors.New("graph: --ssd-stashes and --dram-stashes must be at least 1")
	}
	for _, l := range o.Layouts {
		if l != OneStash && l != TwoStash {
			return o, fmt.Errorf("graph: unknown layout %q (want %s or %s)", l, OneStash, TwoStash)
		}
	}
	return o, nil
}

// config is the embedded cluster of a layout, and lines saying what
// devices its pools emulate.
func (o Options) config(layout string) (*config.Config, []string, error) {
	cfg, err := config.Parse([]byte(o.configTOML(layout)))
	if err != nil {
		return nil, nil, err
	}
	for i := range cfg.Pools {
		if p := &cfg.Pools[i]; p.Engine == "pebble" && o.PebbleCache > 0 {
			size := o.PebbleCache
			p.Pebble = &config.Pebble{Cache: &size}
		}
	}
	notes, err := timeline.ApplyDevice(cfg, o.DeviceProfile, o.DeviceScale)
	if err != nil {
		return nil, nil, err
	}
	return cfg, notes, cfg.Validate()
}

func (o Options) configTOML(layout string) string {
	window := ""
	if !o.NoVerify {
		// The check at the end (cacheaug's Verify) reads every cached
		// result and recomputes it in one read transaction, which must
		// fit in the window.
		window = `mvcc_window = "30s"`
	}
	c := fmt.Sprintf(`
[cluster]
%s

[log]
replicas = 1

[[pool]]
name = "ssd"
prefix = "d/"
medium = "ssd"
mode = "durable"
engine = "pebble"
stashes = %d
replication = 1
`, window, o.SSDStashes)
	if layout == TwoStash {
		c += fmt.Sprintf(`
[[pool]]
name = "dram"
prefix = "c/"
medium = "dram"
mode = "ephemeral"
engine = "memory"
stashes = %d
replication = 1
capacity = "2GiB"
`, o.DRAMStashes)
	}
	return c
}

// Query kinds, in the order of the table.
var kinds = []string{"friends", "fof", "top", "profile", "mutual", "update"}

// mix is the cumulative share of each query kind (the rest, updates).
var mix = []struct {
	kind  string
	share float64
}{{"friends", 0.20}, {"fof", 0.15}, {"top", 0.10}, {"profile", 0.35}, {"mutual", 0.20}}

func cached(kind string) bool { return kind == "friends" || kind == "fof" || kind == "top" }

// Percentiles are a latency distribution's.
type Percentiles struct {
	Count         int64
	P50, P95, P99 time.Duration
}

func percentiles(h *hdrhistogram.Histogram) Percentiles {
	us := func(q float64) time.Duration { return time.Duration(h.ValueAtQuantile(q)) * time.Microsecond }
	return Percentiles{Count: h.TotalCount(), P50: us(50), P95: us(95), P99: us(99)}
}

// Result is one layout's measured run.
type Result struct {
	Layout       string
	Seconds      float64
	QueriesPerS  float64
	All          Percentiles            // every operation
	CacheHits    Percentiles            // cached kinds answered from the cache
	CacheMisses  Percentiles            // cached kinds computed and filled
	Uncached     Percentiles            // profile and mutual
	PerKind      map[string]Percentiles // by kind
	HitRate      float64                // cached kinds: hits / (hits + misses)
	Errors       int64
	FirstErr     string
	Verified     int // cached entries checked by Verify after the run
	Mismatches   int
	LoadSeconds  float64
	CacheEntries int
	// Samples are the cluster's status once a second during the measured
	// run; DeviceBusyPct the mean utilisation of the SSD pool's emulated
	// devices over it (NaN: none emulated).
	Samples           []timeline.Sample
	DeviceBusyPct     float64
	SSDReadsPerQuery  float64 // device reads of the SSD stashes per query in the measured rounds (NaN: no device)
	BlockCacheHitRate float64 // of the SSD stashes' Pebble block caches in the measured rounds (NaN: no lookup)
	// Timeline is the run second by second, warm-up included (the
	// warm-up's seconds are negative): queries, their latency and the
	// cluster's state (graph-timeline.csv).
	Timeline []Second
}

// Second is one second of a layout's run.
type Second struct {
	T         float64 // seconds since the measured run started (< 0: warm-up)
	Queries   int64
	P50, P99  time.Duration
	RateLimit float64 // transactions/s the ratekeeper allowed (0: unlimited)
	Reason    string
	// SSD stashes: mean device utilisation (%), most I/Os queued, worst
	// durability lag (s), window bytes of all (MiB).
	BusyPct, MaxQueue, MaxLagS, WindowMiB float64
	// OwnCPU is the cores this process used over the second, MachineCPU
	// the cores every process of the machine used (/proc/stat; NaN where
	// unknown): a slow second with MachineCPU near the core count and
	// OwnCPU well below it was one other work took the cores from.
	OwnCPU, MachineCPU float64
}

// ssdStash keeps the stashes of the SSD pool.
// lsmShape says, per SSD stash, what a read at rest costs: its Pebble
// read amplification and L0 files.
func lsmShape(st *wire.StatusResponse) string {
	var parts []string
	for _, s := range st.Stashes {
		if s.Pool != "ssd" {
			continue
		}
		c := map[string]int64{}
		for _, ec := range s.EngineCounters {
			c[ec.Name] = ec.Value
		}
		parts = append(parts, fmt.Sprintf("read amp %d (L0 %d files, %d sstables, debt %d KiB)", c["read_amp"], c["l0_files"], c["sstables"], c["compaction_debt_bytes"]>>10))
	}
	return strings.Join(parts, "; ")
}

func ssdStash(p timeline.StashPoint) bool { return p.Pool == "ssd" }

func pct(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", v)
}

// waitDurable waits until every stash of the SSD pool has made durable
// what was committed when it was called (at most two minutes).
func waitDurable(ctx context.Context, status timeline.StatusFunc) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var target int64
	for {
		st, err := status(ctx)
		if err == nil {
			if target == 0 {
				target = st.CommittedVersion
			}
			done := true
			for _, s := range st.Stashes {
				if s.Pool == "ssd" && s.DurableVersion < target {
					done = false
				}
			}
			if done {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the stashes to make the graph durable: %w (last status error: %v)", ctx.Err(), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Run builds the graph in each layout and runs the mix on it.
func Run(ctx context.Context, o Options, out io.Writer) ([]Result, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	g := newGraph(o)
	load := "closed loop"
	if o.Rate > 0 {
		load = fmt.Sprintf("open loop at %g queries/s (Poisson arrivals; latency from each query's arrival)", o.Rate)
	}
	fmt.Fprintf(out, "social graph: %d vertices, %d edges (mean degree %.1f, max %d), %d-byte profiles; %d clients, %s, warm-up %v, %v per layout, %.1f%% updates\n",
		o.Vertices, g.edges, float64(g.edges)/float64(o.Vertices), g.maxDegree, o.ProfileBytes, o.Clients, load, o.Warmup, o.Duration, 100*o.WriteFraction)
	results, err := runLayouts(ctx, o, g, out)
	if err != nil {
		return results, err
	}
	fmt.Fprintln(out)
	PrintTable(out, results)
	if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
		return results, err
	}
	png := filepath.Join(o.OutDir, "graph.png")
	if err := Plot(png, results); err != nil {
		return results, err
	}
	csv := filepath.Join(o.OutDir, "graph.csv")
	if err := writeCSV(csv, results); err != nil {
		return results, err
	}
	if err := writeUtilisation(o.OutDir, results); err != nil {
		return results, err
	}
	if err := writeTimeline(filepath.Join(o.OutDir, TimelineCSV), results); err != nil {
		return results, err
	}
	fmt.Fprintf(out, "wrote %s, %s, %s, %s and %s\n", png, csv, filepath.Join(o.OutDir, Fig11PNG), filepath.Join(o.OutDir, Fig11CSV), filepath.Join(o.OutDir, TimelineCSV))
	return results, nil
}

// runLayouts runs every layout: one after another, or with Rounds > 1
// all started at once and measured in alternating rounds (ABBA...), so
// that whatever else the machine runs meanwhile falls on every layout
// alike.
func runLayouts(ctx context.Context, o Options, g *graphData, out io.Writer) ([]Result, error) {
	var results []Result
	if o.Rounds <= 1 || len(o.Layouts) < 2 {
		for _, layout := range o.Layouts {
			lr, err := startLayout(ctx, o, g, layout, out)
			if err != nil {
				return results, fmt.Errorf("%s: %w", layout, err)
			}
			err = lr.measure(ctx, o.Duration, layout+" measure", out, o.Seed+2)
			var r Result
			if err == nil {
				r, err = lr.finish(ctx, out)
			}
			lr.close()
			if err != nil {
				return results, fmt.Errorf("%s: %w", layout, err)
			}
			results = append(results, r)
		}
		return results, nil
	}
	var runs []*layoutRun
	defer func() {
		for _, lr := range runs {
			lr.close()
		}
	}()
	for _, layout := range o.Layouts {
		lr, err := startLayout(ctx, o, g, layout, out)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", layout, err)
		}
		runs = append(runs, lr)
	}
	d := o.Duration / time.Duration(o.Rounds)
	fmt.Fprintf(out, "measuring %d rounds of %v per layout, alternating\n", o.Rounds, d)
	order := slices.Clone(runs)
	for round := range o.Rounds {
		for _, lr := range order {
			phase := fmt.Sprintf("%s round %d/%d", lr.res.Layout, round+1, o.Rounds)
			if err := lr.measure(ctx, d, phase, out, o.Seed+2+uint64(round)); err != nil {
				return nil, fmt.Errorf("%s: %w", lr.res.Layout, err)
			}
			m := lr.m.last
			fmt.Fprintf(out, "  %s: %.0f queries/s, p95 %s, p99 %s\n", phase, float64(m.all.TotalCount())/m.seconds,
				benchycsb.FormatLatency(percentiles(m.all).P95), benchycsb.FormatLatency(percentiles(m.all).P99))
		}
		slices.Reverse(order)
	}
	for _, lr := range runs {
		r, err := lr.finish(ctx, out)
		if err != nil {
			return results, fmt.Errorf("%s: %w", lr.res.Layout, err)
		}
		results = append(results, r)
	}
	return results, nil
}

// graphData is the generated graph: adjacency lists and profile seeds.
type graphData struct {
	adj       [][]uint32
	edges     int
	maxDegree int
}

// newGraph draws a graph with power-law degrees: vertex i gets about
// AvgDegree·w(i)/mean(w) friend slots with w(i) = 1/(i+1)^0.5 (shuffled
// ids, so popular vertices spread over the key space), each slot a
// friendship with a random vertex; friendships are symmetric.
func newGraph(o Options) *graphData {
	rng := rand.New(rand.NewPCG(o.Seed, 0x9e3779b97f4a7c15))
	n := o.Vertices
	perm := rng.Perm(n)
	w := make([]float64, n)
	sum := 0.0
	for i := range w {
		w[i] = 1 / math.Sqrt(1+float64(i))
		sum += w[i]
	}
	sets := make([]map[uint32]bool, n)
	for i := range sets {
		sets[i] = map[uint32]bool{}
	}
	for i := range n {
		v := perm[i]
		slots := int(float64(o.AvgDegree) / 2 * w[i] / (sum / float64(n)))
		slots = max(1, min(slots, n/2))
		for range slots {
			u := rng.IntN(n)
			if u == v {
				continue
			}
			sets[v][uint32(u)] = true
			sets[u][uint32(v)] = true
		}
	}
	g := &graphData{adj: make([][]uint32, n)}
	for v, s := range sets {
		l := make([]uint32, 0, len(s))
		for u := range s {
			l = append(l, u)
		}
		slices.Sort(l)
		g.adj[v] = l
		g.edges += len(l)
		g.maxDegree = max(g.maxDegree, len(l))
	}
	g.edges /= 2
	return g
}

// Keys of the graph (data keys of the cacheaug store's backend).
func profileKey(v uint32) []byte { return binary.BigEndian.AppendUint32([]byte("v/"), v) }
func adjKey(v uint32) []byte     { return binary.BigEndian.AppendUint32([]byte("a/"), v) }

func encodeAdj(l []uint32) []byte {
	b := make([]byte, 0, 4*len(l))
	for _, u := range l {
		b = binary.BigEndian.AppendUint32(b, u)
	}
	return b
}

func decodeAdj(b []byte) []uint32 {
	l := make([]uint32, len(b)/4)
	for i := range l {
		l[i] = binary.BigEndian.Uint32(b[4*i:])
	}
	return l
}

// profile is a vertex's record: an 8-byte score, the length of its name,
// the name, padding to size. The version makes updates change it.
func profile(v uint32, version uint64, size int) []byte {
	b := make([]byte, size)
	binary.BigEndian.PutUint64(b, uint64(v)*2654435761+version*40503)
	name := fmt.Appendf(nil, "user%d.%d", v, version)
	name = name[:min(len(name), size-9)]
	b[8] = byte(len(name))
	copy(b[9:], name)
	// Pseudo-random letters: profiles that, like real ones, do not
	// compress to a tenth (a repeated pattern did, and the whole graph
	// then fitted in a small block cache).
	x := uint64(v)*0x9e3779b97f4a7c15 + version*0xbf58476d1ce4e5b9 + 1
	for i := 9 + len(name); i < size; i++ {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[i] = byte('a' + x%26)
	}
	return b
}

func score(p []byte) uint64 {
	if len(p) < 8 {
		return 0
	}
	return binary.BigEndian.Uint64(p)
}

func name(p []byte) []byte {
	if len(p) < 9 || len(p) < 9+int(p[8]) {
		return nil
	}
	return p[9 : 9+int(p[8])]
}

// maxFanout bounds the friends a query follows (the first ones by id), so
// that a vertex of very high degree costs a bounded number of reads.
const maxFanout = 50

// families are the three cached query templates.
func families() []cacheaug.Family {
	friendsOf := func(r *cacheaug.Reader, v []byte) ([]uint32, error) {
		b, err := r.Get(append([]byte("a/"), v...))
		if err != nil {
			return nil, err
		}
		l := decodeAdj(b)
		return l[:min(len(l), maxFanout)], nil
	}
	friendProfiles := func(r *cacheaug.Reader, v []byte) ([][]byte, error) {
		l, err := friendsOf(r, v)
		if err != nil {
			return nil, err
		}
		keys := make([][]byte, len(l))
		for i, u := range l {
			keys[i] = profileKey(u)
		}
		return r.GetMulti(keys)
	}
	return []cacheaug.Family{
		{Name: "friends", Compute: func(r *cacheaug.Reader, args []byte) ([]byte, error) {
			ps, err := friendProfiles(r, args)
			if err != nil {
				return nil, err
			}
			var out []byte
			for _, p := range ps {
				out = append(append(out, name(p)...), ',')
			}
			return out, nil
		}},
		{Name: "fof", Compute: func(r *cacheaug.Reader, args []byte) ([]byte, error) {
			l, err := friendsOf(r, args)
			if err != nil {
				return nil, err
			}
			keys := make([][]byte, len(l))
			for i, u := range l {
				keys[i] = adjKey(u)
			}
			adjs, err := r.GetMulti(keys)
			if err != nil {
				return nil, err
			}
			seen := map[uint32]bool{}
			for _, b := range adjs {
				for _, u := range decodeAdj(b) {
					seen[u] = true
				}
			}
			return strconv.AppendInt(nil, int64(len(seen)), 10), nil
		}},
		{Name: "top", Compute: func(r *cacheaug.Reader, args []byte) ([]byte, error) {
			ps, err := friendProfiles(r, args)
			if err != nil {
				return nil, err
			}
			idx := make([]int, len(ps))
			for i := range idx {
				idx[i] = i
			}
			sort.SliceStable(idx, func(a, b int) bool { return score(ps[idx[a]]) > score(ps[idx[b]]) })
			var out []byte
			for _, i := range idx[:min(5, len(idx))] {
				out = append(append(out, name(ps[i])...), ',')
			}
			return out, nil
		}},
	}
}

func vertexArg(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }

// layoutRun is one layout's cluster, store and counters.
type layoutRun struct {
	o       Options
	g       *graphData
	db      *distash.DB
	store   *cacheaug.Store
	backend cacheaug.Backend
	version atomic.Uint64 // profile versions written by updates

	cluster *embedded.Cluster
	status  timeline.StatusFunc
	sampler *timeline.Sampler
	res     Result
	warm    *measurement // the warm-up (nil: none)
	m       *measurement // every measured round, merged
	warmEnd float64      // when the warm-up ended, in the sampler's seconds
	windows [][2]float64 // the measured rounds, in the sampler's seconds
	io      ssdCounts    // the SSD stashes' reads during the measured rounds
}

// startLayout starts a layout's cluster, loads the graph (and, on
// emulated devices, waits for it to be durable), starts sampling the
// cluster's status and runs the warm-up.
func startLayout(ctx context.Context, o Options, g *graphData, layout string, out io.Writer) (_ *layoutRun, err error) {
	dir := ""
	if o.Dir != "" {
		dir = filepath.Join(o.Dir, layout)
	}
	cfg, notes, err := o.config(layout)
	if err != nil {
		return nil, err
	}
	c, err := embedded.Start(ctx, cfg, embedded.Options{Dir: dir, TempPattern: "distash-bench-graph-"})
	if err != nil {
		return nil, err
	}
	lr := &layoutRun{o: o, g: g, db: c.DB, cluster: c, res: Result{Layout: layout}}
	defer func() {
		if err != nil {
			lr.close()
		}
	}()
	lr.status = func(ctx context.Context) (*wire.StatusResponse, error) {
		return clusterstatus.Gather(ctx, c.Server.ClusterString(), nil)
	}
	cachePool := "ssd"
	if layout == TwoStash {
		cachePool = "dram"
	}
	if lr.store, err = cacheaug.New(c.DB, cacheaug.Options{CachePools: []string{cachePool}, DataPool: "ssd", Families: families()}); err != nil {
		return nil, err
	}
	lr.backend = lr.store.Backend()
	desc := fmt.Sprintf("%d SSD stashes (Pebble) for the graph and the query results", o.SSDStashes)
	if layout == TwoStash {
		desc = fmt.Sprintf("%d SSD stashes (Pebble) for the graph, %d DRAM stash(es) for the query results", o.SSDStashes, o.DRAMStashes)
	}
	fmt.Fprintf(out, "%s: %s\n", layout, desc)
	for _, n := range notes {
		fmt.Fprintf(out, "  %s\n", n)
	}

	start := time.Now()
	if err := lr.load(ctx, out); err != nil {
		return nil, err
	}
	lr.res.LoadSeconds = time.Since(start).Seconds()
	fmt.Fprintf(out, "  loaded in %.1f s\n", lr.res.LoadSeconds)
	if o.Prefill > 0 {
		t0 := time.Now()
		n, err := lr.prefill(ctx)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(out, "  cached %d results of the %d most popular vertices in %.1f s\n", n, o.Prefill, time.Since(t0).Seconds())
	}
	if len(notes) > 0 {
		// On emulated devices, measure the graph (and the prefilled
		// results) at rest, as the paper's were: not still in the
		// stashes' MVCC windows, where a read costs no device I/O.
		t0 := time.Now()
		if err := waitDurable(ctx, lr.status); err != nil {
			return nil, err
		}
		fmt.Fprintf(out, "  stashes made the graph durable after %.1f s more\n", time.Since(t0).Seconds())
		// And in the shape an hour of running leaves it: compacted into
		// the last level, the same in every layout and run (left as the
		// load left them, the LSMs differed from one cluster to the next
		// and so did the cost of a read).
		t0 = time.Now()
		if err := c.Server.CompactStashes("ssd"); err != nil {
			return nil, err
		}
		fmt.Fprintf(out, "  compacted the SSD stashes' LSMs in %.1f s\n", time.Since(t0).Seconds())
		if st, err := lr.status(ctx); err == nil {
			fmt.Fprintf(out, "  SSD stashes' LSMs: %s\n", lsmShape(st))
		}
	}

	// Sampled from the warm-up's start, so that the timeline shows how
	// the run reached its steady state.
	lr.sampler = timeline.Start(ctx, lr.status, time.Second)
	if o.Warmup > 0 {
		if lr.warm, err = lr.drive(ctx, o.Warmup, layout+" warm-up", out, o.Seed+1); err != nil {
			return nil, err
		}
	}
	lr.warmEnd = time.Since(lr.sampler.Started()).Seconds()
	return lr, nil
}

// prefill computes and caches the results of the Prefill most popular
// vertices (the zipf draws' lowest ranks) for every cached family, from
// Clients goroutines, and returns how many it cached.
func (lr *layoutRun) prefill(ctx context.Context) (int, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next, filled atomic.Int64
	var families []string
	for _, kind := range kinds {
		if cached(kind) {
			families = append(families, kind)
		}
	}
	total := int64(lr.o.Prefill * len(families))
	var wg sync.WaitGroup
	for range lr.o.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1) - 1; i < total && ctx.Err() == nil; i = next.Add(1) - 1 {
				kind, v := families[i%int64(len(families))], uint32(i/int64(len(families)))
				level, err := lr.op(ctx, kind, v, 0)
				if err != nil {
					cancel(fmt.Errorf("prefill %s of vertex %d: %w", kind, v, err))
					return
				}
				if level < 0 {
					filled.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return int(filled.Load()), context.Cause(ctx)
}

// measure runs one measured round of d and adds it to the layout's
// measurement; seed picks the round's query sequence (the same for both
// layouts, so that their rounds are paired).
func (lr *layoutRun) measure(ctx context.Context, d time.Duration, phase string, out io.Writer, seed uint64) error {
	from := time.Since(lr.sampler.Started()).Seconds()
	before := lr.ssdIO(ctx)
	m, err := lr.drive(ctx, d, phase, out, seed)
	if err != nil {
		return err
	}
	lr.io.add(lr.ssdIO(ctx).minus(before))
	lr.windows = append(lr.windows, [2]float64{from, time.Since(lr.sampler.Started()).Seconds()})
	if lr.m == nil {
		lr.m = m
	} else {
		lr.m.merge(m)
	}
	return nil
}

// ssdCounts are the SSD stashes' cumulative device reads and block cache
// lookups, summed.
type ssdCounts struct {
	reads, readBytes, cacheHits, cacheMisses int64
}

func (a ssdCounts) minus(b ssdCounts) ssdCounts {
	return ssdCounts{a.reads - b.reads, a.readBytes - b.readBytes, a.cacheHits - b.cacheHits, a.cacheMisses - b.cacheMisses}
}

func (a *ssdCounts) add(b ssdCounts) {
	a.reads += b.reads
	a.readBytes += b.readBytes
	a.cacheHits += b.cacheHits
	a.cacheMisses += b.cacheMisses
}

// ssdIO reads the SSD stashes' counts from the cluster's status (zero if
// it cannot: the figures are then missing, not wrong by much, as a
// round's delta of two zeros is zero).
func (lr *layoutRun) ssdIO(ctx context.Context) ssdCounts {
	var c ssdCounts
	st, err := lr.status(ctx)
	if err != nil {
		return c
	}
	for _, s := range st.Stashes {
		if s.Pool != "ssd" {
			continue
		}
		if d := s.Device; d != nil {
			c.reads += d.Reads
			c.readBytes += d.ReadBytes
		}
		for _, ec := range s.EngineCounters {
			switch ec.Name {
			case "block_cache_hits":
				c.cacheHits += ec.Value
			case "block_cache_misses":
				c.cacheMisses += ec.Value
			}
		}
	}
	return c
}

// measuredSamples are the status samples taken during the layout's own
// measured rounds, on the measured run's clock (seconds of measurement
// since its first round began; warm-up samples negative, other layouts'
// rounds left out).
func (lr *layoutRun) measuredSamples(all []timeline.Sample) (warm, measured []timeline.Sample) {
	for _, smp := range all {
		if smp.T < lr.warmEnd {
			smp.T -= lr.warmEnd
			warm = append(warm, smp)
			continue
		}
		offset := 0.0
		for _, w := range lr.windows {
			if smp.T >= w[0] && smp.T <= w[1]+0.05 {
				smp.T = offset + smp.T - w[0]
				measured = append(measured, smp)
				break
			}
			offset += w[1] - w[0]
		}
	}
	return warm, measured
}

// finish stops sampling and makes the layout's result from its rounds,
// checking the cached results unless NoVerify.
func (lr *layoutRun) finish(ctx context.Context, out io.Writer) (Result, error) {
	res, m := lr.res, lr.m
	all := lr.sampler.Stop()
	if n, err := lr.sampler.Errors(); n > 0 {
		fmt.Fprintf(out, "  %s: %d status samples failed, last: %v\n", res.Layout, n, err)
	}
	warmSamples, measured := lr.measuredSamples(all)
	res.Samples = measured
	res.Timeline = timelineOf(lr.warm, m, append(warmSamples, measured...), lr.warmEnd)
	res.DeviceBusyPct = timeline.MeanBusy(res.Samples, ssdStash)
	res.Seconds = m.seconds
	res.Errors, res.FirstErr = m.errors.Load(), m.firstErr()
	res.All = percentiles(m.all)
	res.CacheHits = percentiles(m.hits)
	res.CacheMisses = percentiles(m.misses)
	res.Uncached = percentiles(m.uncached)
	res.PerKind = map[string]Percentiles{}
	for k, h := range m.kinds {
		if h.TotalCount() > 0 {
			res.PerKind[k] = percentiles(h)
		}
	}
	res.QueriesPerS = float64(res.All.Count) / res.Seconds
	if n := res.CacheHits.Count + res.CacheMisses.Count; n > 0 {
		res.HitRate = float64(res.CacheHits.Count) / float64(n)
	}
	res.SSDReadsPerQuery, res.BlockCacheHitRate = math.NaN(), math.NaN()
	if io := lr.io; res.All.Count > 0 && (io.reads > 0 || io.cacheHits+io.cacheMisses > 0) {
		q := float64(res.All.Count)
		res.SSDReadsPerQuery = float64(io.reads) / q
		if io.cacheHits+io.cacheMisses > 0 {
			res.BlockCacheHitRate = float64(io.cacheHits) / float64(io.cacheHits+io.cacheMisses)
		}
		fmt.Fprintf(out, "  %s: SSD stashes per query: %.1f device reads, %.1f KiB read (%.1f KiB per read); block cache hit rate %.1f%%\n",
			res.Layout, float64(io.reads)/q, float64(io.readBytes)/1024/q, float64(io.readBytes)/1024/max(1, float64(io.reads)),
			100*float64(io.cacheHits)/max(1, float64(io.cacheHits+io.cacheMisses)))
	}
	if lr.o.NoVerify {
		fmt.Fprintf(out, "  %s: %.0f queries/s, p50 %s p95 %s p99 %s, hit rate %.1f%%, SSD devices %s busy, %d errors; cached results not verified\n",
			res.Layout, res.QueriesPerS, benchycsb.FormatLatency(res.All.P50), benchycsb.FormatLatency(res.All.P95), benchycsb.FormatLatency(res.All.P99), 100*res.HitRate, pct(res.DeviceBusyPct), res.Errors)
		return res, nil
	}
	fmt.Fprintf(out, "  %s: checking every cached result against its recomputation...\n", res.Layout)
	vctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	rep, err := lr.store.Verify(vctx)
	cancel()
	if err != nil {
		return res, fmt.Errorf("verify (one read transaction over every cached result; fewer --vertices make it shorter): %w", err)
	}
	res.Verified, res.Mismatches = rep.Entries, len(rep.Mismatches)
	fmt.Fprintf(out, "  %s: %.0f queries/s, p50 %s p95 %s p99 %s, hit rate %.1f%%, %d errors; cache consistent: %d entries checked, %d mismatches\n",
		res.Layout, res.QueriesPerS, benchycsb.FormatLatency(res.All.P50), benchycsb.FormatLatency(res.All.P95), benchycsb.FormatLatency(res.All.P99), 100*res.HitRate, res.Errors, res.Verified, res.Mismatches)
	for i, mm := range rep.Mismatches {
		if i == 5 {
			break
		}
		fmt.Fprintf(out, "    mismatch: %s\n", mm)
	}
	return res, nil
}

// close stops the layout's sampler (if still running) and cluster.
func (lr *layoutRun) close() {
	if lr.sampler != nil {
		lr.sampler.Stop()
	}
	lr.cluster.Close()
}

// timelineOf is the run second by second: the warm-up's seconds (from
// warm, may be nil; it lasted warmLen seconds) then the measured run's
// (m), each with the state of the cluster at the latest sample taken by
// its end (samples' T on the measured run's clock: warm-up negative).
func timelineOf(warm, m *measurement, samples []timeline.Sample, warmLen float64) []Second {
	var secs []Second
	add := func(ms *measurement, offset float64) {
		if ms == nil {
			return
		}
		for i, h := range ms.perSec {
			sec := Second{T: float64(i) + offset, Queries: h.TotalCount(), RateLimit: math.NaN(), BusyPct: math.NaN(), MaxQueue: math.NaN(), MaxLagS: math.NaN(), WindowMiB: math.NaN(),
				OwnCPU: math.NaN(), MachineCPU: math.NaN()}
			if i < len(ms.cpu) {
				sec.OwnCPU, sec.MachineCPU = ms.cpu[i].own, ms.cpu[i].machine
			}
			if h.TotalCount() > 0 {
				sec.P50 = time.Duration(h.ValueAtQuantile(50)) * time.Microsecond
				sec.P99 = time.Duration(h.ValueAtQuantile(99)) * time.Microsecond
			}
			end := sec.T + 1
			var last *timeline.Sample
			for j := range samples {
				if samples[j].T <= end+0.05 {
					last = &samples[j]
				}
			}
			if last != nil {
				sec.RateLimit, sec.Reason = last.RateLimit, last.RateLimitReason
				sec.BusyPct = timeline.MeanBusy([]timeline.Sample{*last}, ssdStash)
				sec.MaxQueue, sec.MaxLagS, sec.WindowMiB = 0, 0, 0
				for _, p := range last.Stashes {
					if !ssdStash(p) {
						continue
					}
					sec.MaxQueue = max(sec.MaxQueue, float64(p.QueueLength))
					sec.MaxLagS = max(sec.MaxLagS, p.DurableLagS)
					sec.WindowMiB += float64(p.WindowBytes) / (1 << 20)
				}
			}
			secs = append(secs, sec)
		}
	}
	add(warm, -warmLen)
	add(m, 0)
	return secs
}

// TimelineCSV is the file of every layout's run second by second.
const TimelineCSV = "graph-timeline.csv"

func writeTimeline(path string, results []Result) error {
	ms := func(d time.Duration) string { return timeline.F(float64(d)/float64(time.Millisecond), 3) }
	var rows [][]string
	for _, r := range results {
		for _, s := range r.Timeline {
			rows = append(rows, []string{r.Layout, timeline.F(s.T, 0), strconv.FormatInt(s.Queries, 10), ms(s.P50), ms(s.P99),
				timeline.F(s.RateLimit, 0), s.Reason, timeline.F(s.BusyPct, 1), timeline.F(s.MaxQueue, 0), timeline.F(s.MaxLagS, 2), timeline.F(s.WindowMiB, 1),
				timeline.F(s.OwnCPU, 2), timeline.F(s.MachineCPU, 2)})
		}
	}
	return timeline.WriteCSV(path, []string{"layout", "time_s", "queries", "p50_ms", "p99_ms", "rate_limit", "rate_limit_reason",
		"ssd_busy_pct", "ssd_max_queue", "ssd_max_durable_lag_s", "ssd_window_mib", "own_cpu_cores", "machine_cpu_cores"}, rows)
}

// load writes every vertex's profile and adjacency list, 250 vertices per
// transaction, from 8 writers.
func (lr *layoutRun) load(ctx context.Context, out io.Writer) error {
	n := len(lr.g.adj)
	const batch = 250
	var bar *progressbar.ProgressBar
	if lr.o.Progress {
		bar = progressbar.NewOptions(n, progressbar.OptionSetWriter(out), progressbar.OptionSetDescription("  load"),
			progressbar.OptionShowCount(), progressbar.OptionClearOnFinish(), progressbar.OptionThrottle(200*time.Millisecond))
	}
	next := atomic.Int64{}
	errc := make(chan error, 8)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				lo := int(next.Add(batch)) - batch
				if lo >= n {
					return
				}
				hi := min(lo+batch, n)
				err := lr.db.Transact(ctx, func(tr *distash.Tx) error {
					for v := lo; v < hi; v++ {
						_ = lr.backend.PutTx(tr, profileKey(uint32(v)), profile(uint32(v), 0, lr.o.ProfileBytes))
						_ = lr.backend.PutTx(tr, adjKey(uint32(v)), encodeAdj(lr.g.adj[v]))
					}
					return nil
				})
				if err != nil {
					errc <- err
					return
				}
				if bar != nil {
					_ = bar.Add(hi - lo)
				}
			}
		}()
	}
	wg.Wait()
	if bar != nil {
		_ = bar.Finish()
	}
	select {
	case err := <-errc:
		return err
	default:
		return nil
	}
}

// measurement collects one run's latencies (microseconds).
type measurement struct {
	mu                          sync.Mutex
	all, hits, misses, uncached *hdrhistogram.Histogram
	kinds                       map[string]*hdrhistogram.Histogram
	perSec                      []*hdrhistogram.Histogram // by second since start
	cpu                         []cpuSecond               // by second since start
	start                       time.Time
	errors                      atomic.Int64
	first                       atomic.Pointer[string]
	seconds                     float64
	last                        *measurement // the latest round merged in (itself if none)
}

func newHist() *hdrhistogram.Histogram { return hdrhistogram.New(1, 60_000_000, 3) }

func newMeasurement() *measurement {
	m := &measurement{all: newHist(), hits: newHist(), misses: newHist(), uncached: newHist(), kinds: map[string]*hdrhistogram.Histogram{}, start: time.Now()}
	for _, k := range kinds {
		m.kinds[k] = newHist()
	}
	m.last = m
	return m
}

// merge adds a later round's measurement to m (its seconds after m's).
func (m *measurement) merge(r *measurement) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.all.Merge(r.all)
	m.hits.Merge(r.hits)
	m.misses.Merge(r.misses)
	m.uncached.Merge(r.uncached)
	for k, h := range r.kinds {
		m.kinds[k].Merge(h)
	}
	m.perSec = append(m.perSec, r.perSec...)
	m.cpu = append(m.cpu, r.cpu...)
	m.seconds += r.seconds
	m.errors.Add(r.errors.Load())
	if m.first.Load() == nil {
		m.first.Store(r.first.Load())
	}
	m.last = r
}

func (m *measurement) firstErr() string {
	if p := m.first.Load(); p != nil {
		return *p
	}
	return ""
}

// record adds one operation of kind; level is the cache answer of a
// cached kind (>= 0 a hit, -1 a miss).
func (m *measurement) record(kind string, d time.Duration, level int) {
	us := max(1, d.Microseconds())
	m.mu.Lock()
	defer m.mu.Unlock()
	sec := int(time.Since(m.start) / time.Second)
	for len(m.perSec) <= sec {
		m.perSec = append(m.perSec, newHist())
	}
	_ = m.perSec[sec].RecordValue(us)
	_ = m.all.RecordValue(us)
	_ = m.kinds[kind].RecordValue(us)
	switch {
	case cached(kind) && level >= 0:
		_ = m.hits.RecordValue(us)
	case cached(kind):
		_ = m.misses.RecordValue(us)
	case kind != "update":
		_ = m.uncached.RecordValue(us)
	}
}

// drive runs the mix from Clients goroutines for d.
func (lr *layoutRun) drive(ctx context.Context, d time.Duration, phase string, out io.Writer, seed uint64) (*measurement, error) {
	m := newMeasurement()
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var done atomic.Int64
	var bar *progressbar.ProgressBar
	if lr.o.Progress {
		bar = progressbar.NewOptions(int(d/time.Second), progressbar.OptionSetWriter(out), progressbar.OptionSetDescription("  "+phase),
			progressbar.OptionClearOnFinish(), progressbar.OptionSetPredictTime(false))
		go func() {
			t := time.NewTicker(time.Second)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					_ = bar.Add(1)
					bar.Describe(fmt.Sprintf("  %s: %d queries", phase, done.Load()))
				}
			}
		}()
	}
	start := m.start
	cpuDone := make(chan struct{})
	go func() { // the CPU this process and the machine used, per second
		defer close(cpuDone)
		prev := readCPU()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			cur := readCPU()
			m.mu.Lock()
			m.cpu = append(m.cpu, cur.since(prev))
			m.mu.Unlock()
			prev = cur
		}
	}()
	serve := func(kind string, v, w uint32, since time.Time) {
		level, err := lr.op(ctx, kind, v, w)
		if ctx.Err() != nil {
			return // cut short by the end of the run: not counted
		}
		if err != nil {
			if m.errors.Add(1) == 1 {
				s := fmt.Sprintf("%s: %v", kind, err)
				m.first.Store(&s)
			}
			return
		}
		m.record(kind, time.Since(since), level)
		done.Add(1)
	}
	var wg sync.WaitGroup
	if lr.o.Rate > 0 {
		lr.driveOpen(ctx, d, seed, serve, &wg)
	} else {
		for c := range lr.o.Clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(seed, uint64(c)))
				zipf := rand.NewZipf(rng, lr.o.Zipf, 1, uint64(len(lr.g.adj)-1))
				for ctx.Err() == nil {
					kind := pick(rng, lr.o.WriteFraction)
					v := uint32(zipf.Uint64())
					serve(kind, v, uint32(zipf.Uint64()), time.Now())
				}
			}()
		}
	}
	wg.Wait()
	<-cpuDone
	m.seconds = time.Since(start).Seconds()
	if bar != nil {
		_ = bar.Finish()
	}
	return m, nil
}

// driveOpen offers the mix at Rate queries per second until ctx ends:
// one goroutine draws the arrivals (exponential gaps, kinds and vertices
// from seed), Clients goroutines serve them in arrival order, and serve
// counts each query's latency from its arrival. The queue holds every
// arrival of the run (up to 2^20), so a cluster that falls behind shows it
// as latency rather than as arrivals held back (coordinated omission).
func (lr *layoutRun) driveOpen(ctx context.Context, d time.Duration, seed uint64, serve func(kind string, v, w uint32, since time.Time), wg *sync.WaitGroup) {
	type arrival struct {
		at   time.Time
		kind string
		v, w uint32
	}
	queue := make(chan arrival, min(int(lr.o.Rate*d.Seconds())+1024, 1<<20))
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(queue)
		rng := rand.New(rand.NewPCG(seed, 0))
		zipf := rand.NewZipf(rng, lr.o.Zipf, 1, uint64(len(lr.g.adj)-1))
		gap := float64(time.Second) / lr.o.Rate
		next := time.Now()
		t := time.NewTimer(0)
		defer t.Stop()
		for {
			next = next.Add(time.Duration(rng.ExpFloat64() * gap))
			t.Reset(time.Until(next))
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			a := arrival{at: next, kind: pick(rng, lr.o.WriteFraction), v: uint32(zipf.Uint64()), w: uint32(zipf.Uint64())}
			select {
			case queue <- a:
			case <-ctx.Done():
				return
			}
		}
	}()
	for range lr.o.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for a := range queue {
				if ctx.Err() != nil {
					return
				}
				serve(a.kind, a.v, a.w, a.at)
			}
		}()
	}
}

func pick(rng *rand.Rand, writeFraction float64) string {
	x := rng.Float64()
	if x < writeFraction {
		return "update"
	}
	x = (x - writeFraction) / (1 - writeFraction)
	acc := 0.0
	for _, e := range mix {
		acc += e.share
		if x < acc {
			return e.kind
		}
	}
	return mix[len(mix)-1].kind
}

// op runs one query (or update) on v (and w for mutual); level is the
// cache pool that answered a cached query, -1 if computed or not cached.
func (lr *layoutRun) op(ctx context.Context, kind string, v, w uint32) (int, error) {
	switch kind {
	case "friends", "fof", "top":
		_, level, err := lr.store.Lookup(ctx, cacheaug.Query{Family: kind, Args: vertexArg(v)})
		return level, err
	case "profile":
		return -1, lr.db.ReadTransact(ctx, func(tr *distash.Tx) error {
			vals, err := tr.GetMulti([][]byte{lr.dataKey(profileKey(v)), lr.dataKey(adjKey(v))})
			if err == nil && vals[0] == nil {
				err = fmt.Errorf("vertex %d has no profile", v)
			}
			return err
		})
	case "mutual":
		return -1, lr.db.ReadTransact(ctx, func(tr *distash.Tx) error {
			vals, err := tr.GetMulti([][]byte{lr.dataKey(adjKey(v)), lr.dataKey(adjKey(w))})
			if err != nil {
				return err
			}
			a, b := decodeAdj(vals[0]), decodeAdj(vals[1])
			var keys [][]byte
			for i, j := 0, 0; i < len(a) && j < len(b) && len(keys) < maxFanout; {
				switch {
				case a[i] < b[j]:
					i++
				case a[i] > b[j]:
					j++
				default:
					keys = append(keys, lr.dataKey(profileKey(a[i])))
					i++
					j++
				}
			}
			if len(keys) == 0 {
				return nil
			}
			_, err = tr.GetMulti(keys)
			return err
		})
	case "update":
		ver := lr.version.Add(1)
		return -1, lr.store.Set(ctx, profileKey(v), profile(v, ver, lr.o.ProfileBytes), cacheaug.WriteAround)
	}
	return -1, fmt.Errorf("unknown query kind %q", kind)
}

// dataKey is where the backend keeps data key k.
func (lr *layoutRun) dataKey(k []byte) []byte {
	return lr.backend.(*cacheaug.PoolBackend).Key(k)
}

// PrintTable prints the paper's Table 1 (p50/p95/p99 of every query) per
// layout, then the same for cache hits, misses and the uncached queries,
// and each kind.
func PrintTable(out io.Writer, results []Result) {
	fmt.Fprintf(out, "%-8s %-12s %9s %9s %9s %9s %11s\n", "layout", "queries", "count", "p50", "p95", "p99", "queries/s")
	row := func(layout, what string, p Percentiles, qps string) {
		if p.Count == 0 {
			return
		}
		fmt.Fprintf(out, "%-8s %-12s %9d %9s %9s %9s %11s\n", layout, what, p.Count, benchycsb.FormatLatency(p.P50), benchycsb.FormatLatency(p.P95), benchycsb.FormatLatency(p.P99), qps)
	}
	for _, r := range results {
		row(r.Layout, "all", r.All, fmt.Sprintf("%.0f", r.QueriesPerS))
		row("", "cache hits", r.CacheHits, fmt.Sprintf("%.1f%% hit", 100*r.HitRate))
		row("", "cache misses", r.CacheMisses, "")
		row("", "not cached", r.Uncached, "")
		for _, k := range kinds {
			row("", "  "+k, r.PerKind[k], "")
		}
	}
	fmt.Fprintf(out, "\nTable 1 (every query)  %9s %9s %9s %11s %9s %9s\n", "p50", "p95", "p99", "queries/s", "hit rate", "SSD busy")
	for _, r := range results {
		fmt.Fprintf(out, "%-22s %9s %9s %9s %11.0f %8.1f%% %9s\n", r.Layout, benchycsb.FormatLatency(r.All.P50), benchycsb.FormatLatency(r.All.P95),
			benchycsb.FormatLatency(r.All.P99), r.QueriesPerS, 100*r.HitRate, pct(r.DeviceBusyPct))
	}
	if len(results) == 2 && results[0].All.P95 > 0 && results[0].All.P99 > 0 && results[0].QueriesPerS > 0 {
		a, b := results[0], results[1]
		fmt.Fprintf(out, "%s vs %s: p50 %.2f×, p95 %.2f×, p99 %.2f×, throughput %.2f× (below 1× is lower latency)\n", b.Layout, a.Layout,
			ratio(b.All.P50, a.All.P50), ratio(b.All.P95, a.All.P95), ratio(b.All.P99, a.All.P99), b.QueriesPerS/a.QueriesPerS)
	}
}

// The files of Figure 11 (SSD utilisation over time of each layout).
const (
	Fig11CSV = "graph-fig11-utilisation.csv"
	Fig11PNG = "graph-fig11-utilisation.png"
)

// writeUtilisation writes Figure 11: every SSD stash's utilisation per
// second (CSV) and each layout's mean over its SSD stashes (PNG).
func writeUtilisation(dir string, results []Result) error {
	var rows [][]string
	var lines []timeline.Line
	for _, r := range results {
		rows = append(rows, timeline.UtilisationRows(r.Samples, ssdStash, r.Layout)...)
		var xy plotter.XYs
		for _, s := range r.Samples {
			one := timeline.MeanBusy([]timeline.Sample{s}, ssdStash)
			if !math.IsNaN(one) {
				xy = append(xy, plotter.XY{X: s.T, Y: one})
			}
		}
		if len(xy) > 0 {
			lines = append(lines, timeline.Line{Name: fmt.Sprintf("%s (mean of %d SSD stashes)", r.Layout, len(timeline.UtilisationLines(r.Samples, ssdStash, ""))), XY: xy})
		}
	}
	if err := timeline.WriteCSV(filepath.Join(dir, Fig11CSV), timeline.UtilisationHeader("layout"), rows); err != nil {
		return err
	}
	title := "Social graph: SSD utilisation over time (paper Fig. 11)"
	if len(lines) == 0 {
		title += ": no emulated device"
	}
	return timeline.Plot(filepath.Join(dir, Fig11PNG), timeline.Chart{Title: title, XLabel: "time (s)", YLabel: "utilisation (%)", YMax: 150}, lines)
}

func ratio(a, b time.Duration) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func writeCSV(path string, results []Result) error {
	var b []byte
	b = append(b, "layout,queries,count,p50_ms,p95_ms,p99_ms,queries_per_s,hit_rate,ssd_busy_pct\n"...)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	for _, r := range results {
		add := func(what string, p Percentiles) {
			b = fmt.Appendf(b, "%s,%s,%d,%.3f,%.3f,%.3f,%.1f,%.4f,%s\n", r.Layout, what, p.Count, ms(p.P50), ms(p.P95), ms(p.P99), r.QueriesPerS, r.HitRate, timeline.F(r.DeviceBusyPct, 1))
		}
		add("all", r.All)
		add("cache_hits", r.CacheHits)
		add("cache_misses", r.CacheMisses)
		add("not_cached", r.Uncached)
		for _, k := range kinds {
			if p, ok := r.PerKind[k]; ok {
				add(k, p)
			}
		}
	}
	return os.WriteFile(path, b, 0o644)
}

// Plot writes grouped bars of p50, p95 and p99 (ms) for every query and for
// the cache hits, one bar per layout.
func Plot(path string, results []Result) error {
	if len(results) == 0 {
		return errors.New("graph: nothing to plot")
	}
	p := plot.New()
	p.Title.Text = "Social graph (paper Table 1): latency by layout"
	p.Y.Label.Text = "ms"
	p.Legend.Top = true
	groups := []string{"all p50", "all p95", "all p99", "hits p50", "hits p95", "hits p99"}
	w := vg.Points(50 / float64(len(results)))
	maxY := 0.0
	for i, r := range results {
		ds := []time.Duration{r.All.P50, r.All.P95, r.All.P99, r.CacheHits.P50, r.CacheHits.P95, r.CacheHits.P99}
		vals := make(plotter.Values, len(ds))
		for j, d := range ds {
			vals[j] = float64(d) / float64(time.Millisecond)
			maxY = max(maxY, vals[j])
		}
		bars, err := plotter.NewBarChart(vals, w)
		if err != nil {
			return err
		}
		bars.Color = colors[i%len(colors)]
		bars.LineStyle.Width = 0
		bars.Offset = w * vg.Length(float64(i)-float64(len(results)-1)/2)
		p.Add(bars)
		p.Legend.Add(r.Layout, bars)
	}
	p.NominalX(groups...)
	p.Y.Min, p.Y.Max = 0, maxY*1.3
	return p.Save(8*vg.Inch, 4.5*vg.Inch, path)
}

var colors = []color.RGBA{{0x1f, 0x77, 0xb4, 255}, {0xff, 0x7f, 0x0e, 255}}
