package failure

// `distash bench failure --layouts 1stash,2stash` (paper §5.2.3, Figures
// 13-16): what a failed stash costs each layout of a cache-augmented
// store, and `--local-log`: the hit rate after a DRAM stash restarts with
// and without its local log (paper §4).

import (
	"context"
	"encoding/binary"
	"encoding/csv"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"google.golang.org/grpc"

	"github.com/distash/distash"
	"github.com/distash/distash/internal/clustertest"
	"github.com/distash/distash/internal/coordrpc"
	"github.com/distash/distash/internal/wire"
	"github.com/distash/distash/patterns/cacheaug"
)

// LayoutOptions are the flags of the layouts bench; the phases, sizes of
// the data and the cluster settings come from Options.
type LayoutOptions struct {
	Layouts            []string
	LocalLog           bool
	TxNodes            int
	SSDStashes         int
	DRAMStashes        int
	SSDReplication     int
	ResultsReplication int // 0: 1 with --local-log, else min(3, DRAMStashes-1)
	DeviceProfile      string
	Queries            int
	QueryReads         int
	ResultSize         int
	WriteFraction      float64
	LookupTimeout      time.Duration
	HitWindow          time.Duration
}

// The pools of the layouts.
const (
	layoutSSDPool, layoutSSDPrefix   = "ssd", "d/"
	layoutDRAMPool, layoutDRAMPrefix = "dram", "c/"
	layoutFamily                     = "q"
	layoutOneStash, layoutTwoStash   = "1stash", "2stash"
)

// layoutRun is one run: a layout, with or without the local log.
type layoutRun struct {
	Layout   string
	LocalLog bool
}

func (r layoutRun) name() string {
	if r.LocalLog {
		return r.Layout + "+local_log"
	}
	return r.Layout
}

// file is the run's name in file names.
func (r layoutRun) file() string { return strings.ReplaceAll(r.name(), "+local_log", "-locallog") }

// resultsPool is the pool of the cached results, whose stash is killed.
func (r layoutRun) resultsPool() string {
	if r.Layout == layoutTwoStash {
		return layoutDRAMPool
	}
	return layoutSSDPool
}

// layoutRuns checks the options and lists the runs.
func layoutRuns(o Options, lo *LayoutOptions) ([]layoutRun, error) {
	switch {
	case o.Clients < 1 || o.Keys < 1 || o.Interval <= 0:
		return nil, errors.New("--clients, --keys and --interval must be positive")
	case lo.TxNodes < 1:
		return nil, errors.New("--tx-nodes: want at least 1")
	case lo.SSDStashes < 1 || lo.DRAMStashes < 1:
		return nil, errors.New("--ssd-stashes and --dram-stashes: want at least 1")
	case lo.SSDReplication < 1 || lo.SSDReplication > lo.SSDStashes:
		return nil, fmt.Errorf("--ssd-replication %d: want 1..--ssd-stashes (%d)", lo.SSDReplication, lo.SSDStashes)
	case lo.ResultsReplication < 0 || lo.ResultsReplication > lo.DRAMStashes:
		return nil, fmt.Errorf("--results-replication %d: want 1..--dram-stashes (%d)", lo.ResultsReplication, lo.DRAMStashes)
	case lo.Queries < 1 || lo.QueryReads < 1 || lo.ResultSize < 8:
		return nil, errors.New("--queries and --query-reads: want at least 1; --result-size at least 8")
	case lo.WriteFraction < 0 || lo.WriteFraction > 1:
		return nil, fmt.Errorf("--write-fraction %g: want 0..1", lo.WriteFraction)
	case lo.LookupTimeout <= 0:
		return nil, errors.New("--lookup-timeout must be positive")
	}
	switch lo.DeviceProfile {
	case "none", "ssd", "hdd", "nvm":
	default:
		return nil, fmt.Errorf("--device-profile %q: want none, ssd, hdd or nvm", lo.DeviceProfile)
	}
	if lo.ResultsReplication == 0 {
		lo.ResultsReplication = max(1, min(3, lo.DRAMStashes-1))
		if lo.LocalLog {
			lo.ResultsReplication = 1
		}
	}
	var runs []layoutRun
	for _, l := range lo.Layouts {
		switch l {
		case layoutOneStash:
			runs = append(runs, layoutRun{Layout: l})
		case layoutTwoStash:
			if lo.LocalLog {
				runs = append(runs, layoutRun{Layout: l}, layoutRun{Layout: l, LocalLog: true})
			} else {
				runs = append(runs, layoutRun{Layout: l})
			}
		default:
			return nil, fmt.Errorf("--layouts: unknown layout %q (want %s or %s)", l, layoutOneStash, layoutTwoStash)
		}
	}
	if len(runs) == 0 {
		return nil, errors.New("--layouts: no layout")
	}
	return runs, nil
}

// layoutConfig is the cluster configuration of a run.
func layoutConfig(o Options, lo LayoutOptions, run layoutRun) string {
	var b strings.Builder
	fmt.Fprintf(&b, `[cluster]
failure_wait = %q
shard_bytes = %q

[log]
replicas = %d

[[pool]]
name = %q
prefix = %q
medium = "ssd"
mode = "durable"
engine = "pebble"
stashes = %d
replication = %d
`, o.FailureWait.String(), o.ShardBytes, min(3, lo.TxNodes), layoutSSDPool, layoutSSDPrefix, lo.SSDStashes, lo.SSDReplication)
	if lo.DeviceProfile != "none" {
		fmt.Fprintf(&b, "\n[pool.device]\nprofile = %q\n", lo.DeviceProfile)
	}
	if run.Layout == layoutTwoStash {
		fmt.Fprintf(&b, `
[[pool]]
name = %q
prefix = %q
medium = "dram"
mode = "ephemeral"
engine = "memory"
stashes = %d
replication = %d
capacity = "256MiB"
`, layoutDRAMPool, layoutDRAMPrefix, lo.DRAMStashes, lo.ResultsReplication)
		if run.LocalLog {
			b.WriteString("local_log = true\n")
		}
	}
	return b.String()
}

// The phases of a run, for the latency histograms and hit rates.
var layoutPhases = [3]string{"before the kill", "kill to restart", "after the restart"}

// layoutSample is one sampling instant of a run.
type layoutSample struct {
	T                              float64 // seconds since the measured load began
	Lookups, Hits, Misses, Failed  int64   // in the interval
	Writes, WriteFailed            int64   // in the interval
	HitP50, HitP95, HitP99         float64 // ms, cache-hit lookups in the interval (NaN: none)
	UnderReplicated, Moving        int32   // the results' pool (-1: unknown)
	Repairs                        int32   // the results' pool's moves for unhealthy teams, in flight or queued
	QPS, Bytes, CPU, Busy, ShareKB []float64
	Tags                           []uint32
	TxCPU                          []float64
}

func (s layoutSample) hitRate() float64 {
	if s.Lookups == 0 {
		return math.NaN()
	}
	return float64(s.Hits) / float64(s.Lookups)
}

// LayoutResult is what one run measured.
type LayoutResult struct {
	Run             layoutRun
	Samples         []layoutSample
	StashNames      []string // ssd1.., dram1..
	StashPools      []string
	TxNames         []string
	Victim          string
	KillT, RestartT float64
	ReReplicated    time.Duration // kill to the results' pool back to R replicas (0: not seen)
	Balanced        time.Duration // restart to the results' pool's shares within ±20% (0: not reached)
	HitLatency      [3]*hdrhistogram.Histogram
	Lookups, Hits   [3]int64
	Failed          [3]int64
	WindowLookups   int64 // in --hit-window after the restart
	WindowHits      int64
	WindowFailed    int64
	TagBefore       uint32
	TagAfter        uint32 // the victim's tag at its first answer after the restart
	BytesAfter      float64
	HaveDevice      bool
}

// layoutBench is one run's cluster and load.
type layoutBench struct {
	o         Options
	lo        LayoutOptions
	run       layoutRun
	out       io.Writer
	tx        []*node
	stashes   []*node
	pools     []string // per stash node
	coords    string
	cc        *coordrpc.Client
	stateless string

	phase                              atomic.Int32
	lookups, hits, misses, failed      atomic.Int64
	writes, writeFailed                atomic.Int64
	last                               [6]int64
	mu                                 sync.Mutex
	cur                                *hdrhistogram.Histogram // cache hits since the last sample
	phaseHits                          [3]*hdrhistogram.Histogram
	phaseLookups, phaseHitN, phaseFail [3]atomic.Int64
	start                              time.Time
	// Per stash node: its device's busy seconds at the last sample.
	lastBusy  []float64
	lastBusyT []time.Time
}

// RunLayouts runs every layout on a fresh cluster, one after the
// other, and prints the comparison.
func RunLayouts(ctx context.Context, o Options, lo LayoutOptions, out io.Writer) ([]*LayoutResult, error) {
	runs, err := layoutRuns(o, &lo)
	if err != nil {
		return nil, err
	}
	dir, cleanup, err := failureBenchDir(&o, out)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	fmt.Fprintf(out, "cache-augmented failure bench (paper Figs. 13-16), layouts %s; per layout a fresh cluster of real processes:\n", strings.Join(lo.Layouts, ","))
	fmt.Fprintf(out, "  %d transaction nodes; SSD pool %q: %d stash nodes (pebble, durable, R=%d, device profile %s)", lo.TxNodes, layoutSSDPool, lo.SSDStashes, lo.SSDReplication, lo.DeviceProfile)
	if slices.Contains(lo.Layouts, layoutTwoStash) {
		fmt.Fprintf(out, "; 2stash's DRAM pool %q: %d stash nodes (memory, ephemeral, R=%d)", layoutDRAMPool, lo.DRAMStashes, lo.ResultsReplication)
	}
	fmt.Fprintf(out, "\n  %d data keys of %d B, %d queries (each reads %d data keys, result %d B), %d clients, %.1f%% write-around updates; failure_wait %v, shard_bytes %s\n",
		o.Keys, o.ValueSize, lo.Queries, lo.QueryReads, lo.ResultSize, o.Clients, 100*lo.WriteFraction, o.FailureWait, o.ShardBytes)
	if lo.DeviceProfile == "none" {
		fmt.Fprintln(out, "  no device emulation: the SSD pool's files are on this machine's disk and mostly in its page cache")
	} else {
		fmt.Fprintf(out, "  each SSD stash's files go through an emulated %s device ([pool.device] profile = %q, the preset's figures: docs/devices.md)\n", lo.DeviceProfile, lo.DeviceProfile)
	}
	if lo.LocalLog {
		fmt.Fprintf(out, "  --local-log: the DRAM results pool has R=%d, so the victim's results have no other replica: the hit rate after its restart shows what it kept\n", lo.ResultsReplication)
		if o.Down >= o.FailureWait {
			fmt.Fprintf(out, "  warning: --down %v is not below failure_wait %v: a restarted stash rejoins empty even with its local log\n", o.Down, o.FailureWait)
		}
	}
	var results []*LayoutResult
	for _, run := range runs {
		fmt.Fprintf(out, "\n== %s ==\n", run.name())
		r, err := runLayout(ctx, o, lo, run, filepath.Join(dir, run.file()), out)
		if err != nil {
			return results, fmt.Errorf("%s: %w", run.name(), err)
		}
		results = append(results, r)
	}
	layoutSummary(out, o, lo, results)
	if o.Out != "" {
		if err := writeLayoutSummary(filepath.Join(o.Out, "failure-layouts.csv"), results); err != nil {
			return results, err
		}
		fmt.Fprintf(out, "wrote %s\n", filepath.Join(o.Out, "failure-layouts.csv"))
	}
	return results, nil
}

// runLayout starts one run's cluster, loads it, warms the cache, runs the
// timeline and writes its CSV and PNGs.
func runLayout(ctx context.Context, o Options, lo LayoutOptions, run layoutRun, dir string, out io.Writer) (*LayoutResult, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var specs []clustertest.Spec
	add := func(name, class, pool string) {
		specs = append(specs, clustertest.Spec{Name: name, Class: class, Pool: pool, DC: "dc1", Zone: "z-" + name})
	}
	for i := 0; i < lo.TxNodes; i++ {
		add(fmt.Sprintf("tx%d", i+1), clustertest.Transaction, "")
	}
	for i := 0; i < lo.SSDStashes; i++ {
		add(fmt.Sprintf("ssd%d", i+1), clustertest.Stash, layoutSSDPool)
	}
	if run.Layout == layoutTwoStash {
		for i := 0; i < lo.DRAMStashes; i++ {
			add(fmt.Sprintf("dram%d", i+1), clustertest.Stash, layoutDRAMPool)
		}
	}
	c, err := newCluster(o, dir, layoutConfig(o, lo, run), specs)
	if err != nil {
		return nil, err
	}
	defer c.close()
	nStash := len(specs) - lo.TxNodes
	b := &layoutBench{o: o, lo: lo, run: run, out: out, coords: c.Coordinators, tx: c.nodes[:lo.TxNodes], stashes: c.nodes[lo.TxNodes:],
		lastBusy: make([]float64, nStash), lastBusyT: make([]time.Time, nStash)}
	for _, n := range b.stashes {
		b.pools = append(b.pools, n.Pool)
	}
	victimName := run.resultsPool() + "1"
	if o.Victim != "" && o.Victim != "s1" { // s1 is Figure 12's default
		victimName = o.Victim
	}
	var victim *node
	for i, n := range b.stashes {
		if n.Name == victimName {
			if b.pools[i] != run.resultsPool() {
				return nil, fmt.Errorf("--victim %s: want a stash node of the results' pool %q", victimName, run.resultsPool())
			}
			victim = n
		}
	}
	if victim == nil {
		return nil, fmt.Errorf("--victim %s: no such stash node of pool %q", victimName, run.resultsPool())
	}
	all := c.nodes
	began := time.Now()
	if err := c.start(ctx); err != nil {
		return nil, err
	}
	b.cc = c.cc
	fmt.Fprintf(out, "%d nodes serving after %v\n", len(all), time.Since(began).Round(100*time.Millisecond))
	if err := b.load(ctx); err != nil {
		return nil, err
	}
	if err := b.waitSettled(ctx); err != nil {
		return nil, err
	}
	r, err := b.timeline(ctx, victim)
	if err != nil {
		return nil, err
	}
	r.report(out, o, lo)
	return r, r.write(o.Out, out)
}

// layoutDataKey is data key i.
func layoutDataKey(i int) []byte { return fmt.Appendf(nil, "k%08d", i) }

// layoutQuery is query q: its args are q, big-endian.
func layoutQuery(q int) cacheaug.Query {
	return cacheaug.Query{Family: layoutFamily, Args: binary.BigEndian.AppendUint32(nil, uint32(q))}
}

// layoutQueryKeys are the data keys query q reads: spread by a hash, so a
// data key has about queries × query-reads / keys dependent results.
func (lo LayoutOptions) queryKeys(q, keys int) [][]byte {
	out := make([][]byte, lo.QueryReads)
	for j := range out {
		h := fnv.New64a()
		_ = binary.Write(h, binary.BigEndian, [2]uint32{uint32(q), uint32(j)})
		out[j] = layoutDataKey(int(h.Sum64() % uint64(keys)))
	}
	return out
}

// family is the cached query: a ResultSize-byte digest of the data keys
// it reads (a function of the data and the args only, as cacheaug needs).
func (lo LayoutOptions) family(keys int) cacheaug.Family {
	return cacheaug.Family{Name: layoutFamily, Compute: func(r *cacheaug.Reader, args []byte) ([]byte, error) {
		if len(args) != 4 {
			return nil, fmt.Errorf("query args %x: want 4 bytes", args)
		}
		vals, err := r.GetMulti(lo.queryKeys(int(binary.BigEndian.Uint32(args)), keys))
		if err != nil {
			return nil, err
		}
		h := fnv.New64a()
		for _, v := range vals {
			h.Write(v)
			h.Write([]byte{0})
		}
		res := make([]byte, lo.ResultSize)
		sum := h.Sum64()
		for i := 0; i+8 <= len(res); i += 8 {
			binary.LittleEndian.PutUint64(res[i:], sum+uint64(i))
		}
		return res, nil
	}}
}

// open connects a client and its cacheaug store.
func (b *layoutBench) open(ctx context.Context) (*distash.DB, *cacheaug.Store, error) {
	octx, cancel := context.WithTimeout(ctx, time.Minute)
	db, err := distash.Open(octx, b.coords)
	cancel()
	if err != nil {
		return nil, nil, err
	}
	s, err := cacheaug.New(db, cacheaug.Options{CachePools: []string{b.run.resultsPool()}, DataPool: layoutSSDPool,
		Families: []cacheaug.Family{b.lo.family(b.o.Keys)}})
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return db, s, nil
}

// layoutValue is data key i's value at version ver.
func layoutValue(i, ver, size int) []byte {
	v := make([]byte, size)
	for j := range v {
		v[j] = byte(i + j + ver)
	}
	return v
}

// load writes the data keys, then fills every query's result once
// (read-through), so the measured run starts with a warm cache.
func (b *layoutBench) load(ctx context.Context) error {
	db, s, err := b.open(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	backend := s.Backend()
	const batch = 500
	began := time.Now()
	var next atomic.Int64
	// work runs fn over [0, n) in steps from workers goroutines.
	work := func(n, step, workers int, fn func(lo, hi int) error) error {
		next.Store(0)
		errc := make(chan error, workers)
		for w := 0; w < workers; w++ {
			go func() {
				for {
					lo := int(next.Add(int64(step))) - step
					if lo >= n {
						errc <- nil
						return
					}
					if err := fn(lo, min(lo+step, n)); err != nil {
						errc <- err
						return
					}
				}
			}()
		}
		var first error
		for w := 0; w < workers; w++ {
			if err := <-errc; err != nil && first == nil {
				first = err
				next.Store(int64(n)) // the others stop at their next batch
			}
		}
		return first
	}
	err = work(b.o.Keys, batch, 4, func(lo, hi int) error {
		return db.Transact(ctx, func(tr *distash.Tx) error {
			for i := lo; i < hi; i++ {
				if err := backend.PutTx(tr, layoutDataKey(i), layoutValue(i, 0, b.o.ValueSize)); err != nil {
					return err
				}
			}
			return nil
		})
	})
	if err != nil {
		return fmt.Errorf("load: %w", err)
	}
	loaded := time.Since(began)
	// A fill is a small transaction (read the cache, the data and the
	// dependency records; write the result and its dependencies): many
	// at once keep the commits batched.
	err = work(b.lo.Queries, 1, 16, func(q, _ int) error {
		_, err := s.Get(ctx, layoutQuery(q))
		return err
	})
	if err != nil {
		return fmt.Errorf("cache fill: %w", err)
	}
	fmt.Fprintf(b.out, "loaded %d data keys in %v; filled %d results in %v\n", b.o.Keys, loaded.Round(10*time.Millisecond),
		b.lo.Queries, (time.Since(began) - loaded).Round(10*time.Millisecond))
	return nil
}

// roles asks the node of the stateless roles for the distributor's view
// of every pool and the stashes' shares (by tag).
func (b *layoutBench) roles(ctx context.Context) (map[string]*wire.PoolDistribution, map[uint32]*wire.StashShare, error) {
	if b.stateless == "" {
		v, err := b.cc.View(ctx)
		if err != nil {
			return nil, nil, err
		}
		b.stateless = v.StatelessAddress
	}
	var conn *grpc.ClientConn
	for _, n := range b.tx {
		if n.Addr == b.stateless {
			conn = n.conn
		}
	}
	if conn == nil {
		err := fmt.Errorf("the stateless roles are on %q, not a transaction node", b.stateless)
		b.stateless = ""
		return nil, nil, err
	}
	st, err := wire.NewDiStashClient(conn).Status(ctx, &wire.StatusRequest{})
	if err != nil {
		b.stateless = ""
		return nil, nil, err
	}
	dist := map[string]*wire.PoolDistribution{}
	for _, d := range st.Distribution {
		dist[d.Pool] = d
	}
	if len(dist) == 0 {
		b.stateless = ""
		return nil, nil, fmt.Errorf("no distribution status on %s", st.GetNode().GetAddress())
	}
	shares := map[uint32]*wire.StashShare{}
	for _, s := range st.StashShares {
		shares[s.Id] = s
	}
	return dist, shares, nil
}

// nodeStash is a stash node's status of its stash.
func nodeStash(ctx context.Context, n *node) (*wire.StashStatus, error) {
	st, err := wire.NewDiStashClient(n.conn).Status(ctx, &wire.StatusRequest{})
	if err != nil {
		return nil, err
	}
	if len(st.Stashes) == 0 {
		return nil, fmt.Errorf("node %s serves no stash", n.Name)
	}
	return st.Stashes[0], nil
}

// waitSettled waits until the distributor has nothing under-replicated,
// moving or queued in any pool, every stash holds shards, and nothing
// changed for 3 s.
func (b *layoutBench) waitSettled(ctx context.Context) error {
	began := time.Now()
	var last, stable string
	var stableSince time.Time
	for time.Since(began) < 3*time.Minute {
		if err := ctx.Err(); err != nil {
			return err
		}
		qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		dist, shares, err := b.roles(qctx)
		holding := 0
		var held []string
		if err == nil {
			for _, n := range b.stashes {
				s, serr := nodeStash(qctx, n)
				if serr != nil {
					held = append(held, fmt.Sprintf("%s: %v", n.Name, serr))
					continue
				}
				sh := shares[s.Id]
				held = append(held, fmt.Sprintf("%s: %d shards", n.Name, sh.GetShards()))
				if sh.GetShards() > 0 {
					holding++
				}
			}
		}
		cancel()
		quiet := err == nil
		state := ""
		for _, p := range []string{layoutSSDPool, layoutDRAMPool} { // in order: the state is compared
			if d := dist[p]; d != nil {
				quiet = quiet && d.UnderReplicated == 0 && d.Moving == 0 && d.Queued == 0
				state += fmt.Sprintf("%s:%d:%d ", p, d.Shards, d.MovesDone)
			}
		}
		if quiet && holding == len(b.stashes) {
			if state != stable {
				stable, stableSince = state, time.Now()
			}
			if time.Since(stableSince) >= 3*time.Second {
				fmt.Fprintf(b.out, "distributor settled after %v: %s\n", time.Since(began).Round(100*time.Millisecond), b.shardsLine(dist))
				return nil
			}
		} else {
			stable = ""
		}
		last = fmt.Sprintf("%s (%s; error %v)", b.shardsLine(dist), strings.Join(held, ", "), err)
		time.Sleep(250 * time.Millisecond)
	}
	return fmt.Errorf("the data distributor did not settle with shards on every stash in 3 min: %s", last)
}

func (b *layoutBench) shardsLine(dist map[string]*wire.PoolDistribution) string {
	var parts []string
	for _, p := range []string{layoutSSDPool, layoutDRAMPool} {
		if d := dist[p]; d != nil {
			parts = append(parts, fmt.Sprintf("pool %s %d shards, %d moves done, %d under-replicated", p, d.Shards, d.MovesDone, d.UnderReplicated))
		}
	}
	return strings.Join(parts, "; ")
}

func newLatencyHist() *hdrhistogram.Histogram {
	return hdrhistogram.New(1, int64(30*time.Second/time.Microsecond), 3)
}

// clients runs the workload until ctx ends; the returned func waits for
// the clients to stop.
func (b *layoutBench) clients(ctx context.Context) (func(), error) {
	type client struct {
		db *distash.DB
		s  *cacheaug.Store
	}
	var cs []client
	for c := 0; c < b.o.Clients; c++ {
		db, s, err := b.open(ctx)
		if err != nil {
			for _, c := range cs {
				c.db.Close()
			}
			return nil, err
		}
		cs = append(cs, client{db, s})
	}
	var wg sync.WaitGroup
	var versions atomic.Int64
	for _, c := range cs {
		wg.Add(1)
		go func(c client) {
			defer wg.Done()
			defer c.db.Close()
			for ctx.Err() == nil {
				if b.lo.WriteFraction > 0 && rand.Float64() < b.lo.WriteFraction {
					i := rand.IntN(b.o.Keys)
					wctx, cancel := context.WithTimeout(ctx, 5*b.lo.LookupTimeout)
					err := c.s.Set(wctx, layoutDataKey(i), layoutValue(i, int(versions.Add(1)), b.o.ValueSize), cacheaug.WriteAround)
					cancel()
					if ctx.Err() != nil {
						return
					}
					if err != nil {
						b.writeFailed.Add(1)
					} else {
						b.writes.Add(1)
					}
					continue
				}
				q := rand.IntN(b.lo.Queries)
				phase := b.phase.Load()
				t0 := time.Now()
				lctx, cancel := context.WithTimeout(ctx, b.lo.LookupTimeout)
				_, level, err := c.s.Lookup(lctx, layoutQuery(q))
				cancel()
				if ctx.Err() != nil {
					return
				}
				us := time.Since(t0).Microseconds()
				b.lookups.Add(1)
				if phase >= 0 {
					b.phaseLookups[phase].Add(1)
				}
				switch {
				case err != nil:
					b.failed.Add(1)
					if phase >= 0 {
						b.phaseFail[phase].Add(1)
					}
				case level >= 0:
					b.hits.Add(1)
					b.mu.Lock()
					_ = b.cur.RecordValue(us)
					if phase >= 0 {
						_ = b.phaseHits[phase].RecordValue(us)
						b.phaseHitN[phase].Add(1)
					}
					b.mu.Unlock()
				default:
					b.misses.Add(1)
				}
			}
		}(c)
	}
	return wg.Wait, nil
}

// sample takes one sample: the clients' counts and hit latency since the
// last one, each stash node's status and CPU, the distributor's view.
func (b *layoutBench) sample(ctx context.Context) layoutSample {
	now := time.Now()
	s := layoutSample{T: now.Sub(b.start).Seconds(), UnderReplicated: -1, Moving: -1}
	counts := [6]int64{b.lookups.Load(), b.hits.Load(), b.misses.Load(), b.failed.Load(), b.writes.Load(), b.writeFailed.Load()}
	d := [6]int64{}
	for i := range counts {
		d[i] = counts[i] - b.last[i]
	}
	b.last = counts
	s.Lookups, s.Hits, s.Misses, s.Failed, s.Writes, s.WriteFailed = d[0], d[1], d[2], d[3], d[4], d[5]
	b.mu.Lock()
	h := b.cur
	b.cur = newLatencyHist()
	b.mu.Unlock()
	s.HitP50, s.HitP95, s.HitP99 = math.NaN(), math.NaN(), math.NaN()
	if h.TotalCount() > 0 {
		ms := func(q float64) float64 { return float64(h.ValueAtQuantile(q)) / 1000 }
		s.HitP50, s.HitP95, s.HitP99 = ms(50), ms(95), ms(99)
	}
	n := len(b.stashes)
	s.QPS, s.Bytes, s.CPU, s.Busy, s.ShareKB = nanSlice(n), nanSlice(n), nanSlice(n), nanSlice(n), nanSlice(n)
	s.Tags = make([]uint32, n)
	s.TxCPU = nanSlice(len(b.tx))
	qctx, cancel := context.WithTimeout(ctx, b.o.Interval*8/10)
	defer cancel()
	var wg sync.WaitGroup
	var dist map[string]*wire.PoolDistribution
	var shares map[uint32]*wire.StashShare
	wg.Add(1)
	go func() {
		defer wg.Done()
		dist, shares, _ = b.roles(qctx)
	}()
	for i, n := range b.stashes {
		wg.Add(1)
		go func(i int, n *node) {
			defer wg.Done()
			if !n.Running() {
				n.haveReads, n.haveC = false, false
				b.lastBusyT[i] = time.Time{}
				return
			}
			st, err := nodeStash(qctx, n)
			t := time.Now()
			if err != nil {
				n.haveReads = false
			} else {
				n.tag, s.Tags[i] = st.Id, st.Id
				s.Bytes[i] = float64(stashBytes(st))
				if n.haveReads && st.Reads >= n.lastReads {
					s.QPS[i] = float64(st.Reads-n.lastReads) / t.Sub(n.lastReadsT).Seconds()
				}
				n.lastReads, n.lastReadsT, n.haveReads = st.Reads, t, true
				s.Busy[i] = b.deviceBusy(i, st, t)
			}
			s.CPU[i] = cpuPercent(n)
		}(i, n)
	}
	for i, n := range b.tx {
		s.TxCPU[i] = cpuPercent(n)
	}
	wg.Wait()
	if d := dist[b.run.resultsPool()]; d != nil {
		s.UnderReplicated, s.Moving = d.UnderReplicated, d.Moving
		for _, q := range d.Queue {
			if q.Reason == "unhealthy" {
				s.Repairs++
			}
		}
	}
	for i, n := range b.stashes {
		if sh, ok := shares[s.Tags[i]]; ok && n.Running() {
			s.ShareKB[i] = float64(sh.Bytes) / 1024
		}
	}
	return s
}

// timeline runs the load: warm-up, kill, restart, recovery, tail.
func (b *layoutBench) timeline(ctx context.Context, victim *node) (*LayoutResult, error) {
	o, lo := b.o, b.lo
	r := &LayoutResult{Run: b.run, Victim: victim.Name, KillT: math.NaN(), RestartT: math.NaN()}
	for i, n := range b.stashes {
		r.StashNames = append(r.StashNames, n.Name)
		r.StashPools = append(r.StashPools, b.pools[i])
	}
	for _, n := range b.tx {
		r.TxNames = append(r.TxNames, n.Name)
	}
	for i := range b.phaseHits {
		b.phaseHits[i] = newLatencyHist()
	}
	b.cur = newLatencyHist()
	b.phase.Store(-1)
	cctx, stopClients := context.WithCancel(ctx)
	defer stopClients()
	wait, err := b.clients(cctx)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(b.out, "%d clients: lookups (read-through) and write-around updates; %s killed after %v, restarted %v later\n",
		o.Clients, victim.Name, o.Warmup, o.Down)
	select { // the clients' first seconds (connections, shard map) are not measured
	case <-time.After(2 * time.Second):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	b.start = time.Now()
	b.phase.Store(0)
	b.sample(ctx) // baselines
	var killed, restarted, balancedAt time.Time
	sawUnder := false
	restartErr := make(chan error, 1)
	tick := time.NewTicker(o.Interval)
	defer tick.Stop()
	resultsIdx := func(i int) bool { return b.pools[i] == b.run.resultsPool() }
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case err := <-restartErr:
			if err != nil {
				return nil, fmt.Errorf("restart of %s: %w", victim.Name, err)
			}
			continue
		case <-tick.C:
		}
		s := b.sample(ctx)
		r.Samples = append(r.Samples, s)
		now := time.Now()
		switch {
		case killed.IsZero():
			if now.Sub(b.start) >= o.Warmup {
				r.TagBefore = victim.tag
				victim.Kill()
				killed = time.Now()
				r.KillT = killed.Sub(b.start).Seconds()
				b.phase.Store(1)
				fmt.Fprintf(b.out, "  %.1f s: killed %s (tag %d)\n", r.KillT, victim.Name, r.TagBefore)
			}
			continue
		case restarted.IsZero():
			if now.Sub(killed) >= o.Down {
				if err := victim.Start(o.Binary); err != nil {
					return nil, err
				}
				restarted = time.Now()
				r.RestartT = restarted.Sub(b.start).Seconds()
				b.phase.Store(2)
				fmt.Fprintf(b.out, "  %.1f s: restarted %s\n", r.RestartT, victim.Name)
				go func() { restartErr <- victim.WaitReady(ctx, 90*time.Second) }()
			}
		}
		if !killed.IsZero() {
			if s.UnderReplicated > 0 {
				sawUnder = true
			}
			// Rebalancing moves may go on: re-replicated is every shard
			// at R with no repair left in flight.
			if sawUnder && r.ReReplicated == 0 && s.UnderReplicated == 0 && s.Repairs == 0 {
				r.ReReplicated = now.Sub(killed)
				fmt.Fprintf(b.out, "  %.1f s: results' pool %s fully replicated again\n", s.T, b.run.resultsPool())
			}
		}
		if restarted.IsZero() {
			continue
		}
		vi := slices.Index(b.stashes, victim)
		if r.TagAfter == 0 && s.Tags[vi] != 0 {
			r.TagAfter, r.BytesAfter = s.Tags[vi], s.Bytes[vi]
		}
		if balancedAt.IsZero() {
			var shares []float64
			for i := range b.stashes {
				if resultsIdx(i) {
					shares = append(shares, s.ShareKB[i])
				}
			}
			switch {
			case balanced(shares) && r.TagAfter != 0 && s.Moving == 0:
				r.Balanced, balancedAt = now.Sub(restarted), now
				fmt.Fprintf(b.out, "  %.1f s: results' pool balanced\n", s.T)
			case now.Sub(restarted) >= o.BalanceTimeout:
				balancedAt = now
				fmt.Fprintf(b.out, "  %.1f s: results' pool not balanced %v after the restart\n", s.T, o.BalanceTimeout)
			}
			continue
		}
		if now.Sub(balancedAt) >= o.Tail && now.Sub(restarted) >= lo.HitWindow {
			break
		}
	}
	stopClients()
	wait()
	r.HitLatency = b.phaseHits
	for i := range r.Lookups {
		r.Lookups[i], r.Hits[i], r.Failed[i] = b.phaseLookups[i].Load(), b.phaseHitN[i].Load(), b.phaseFail[i].Load()
	}
	for _, s := range r.Samples {
		if s.T > r.RestartT && s.T <= r.RestartT+lo.HitWindow.Seconds()+1e-9 {
			r.WindowLookups += s.Lookups
			r.WindowHits += s.Hits
			r.WindowFailed += s.Failed
		}
		for _, v := range s.Busy {
			r.HaveDevice = r.HaveDevice || !math.IsNaN(v)
		}
	}
	return r, nil
}

// deviceBusy is the busy fraction of stash node i's emulated device since
// the last sample, from the difference of its cumulative busy seconds
// (NaN: no device model, or no earlier figure from this process).
func (b *layoutBench) deviceBusy(i int, st *wire.StashStatus, t time.Time) float64 {
	d := st.GetDevice()
	if d == nil {
		return math.NaN()
	}
	out := math.NaN()
	if !b.lastBusyT[i].IsZero() && d.BusySeconds >= b.lastBusy[i] {
		out = (d.BusySeconds - b.lastBusy[i]) / t.Sub(b.lastBusyT[i]).Seconds()
	}
	b.lastBusy[i], b.lastBusyT[i] = d.BusySeconds, t
	return out
}

func rate(num, den int64) string {
	if den == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(num)/float64(den))
}

func histMs(h *hdrhistogram.Histogram, q float64) string {
	if h == nil || h.TotalCount() == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", float64(h.ValueAtQuantile(q))/1000)
}

// report prints one run's figures.
func (r *LayoutResult) report(out io.Writer, o Options, lo LayoutOptions) {
	if r.ReReplicated > 0 {
		fmt.Fprintf(out, "results' pool fully replicated again %.1f s after the kill (failure_wait %v)\n", r.ReReplicated.Seconds(), o.FailureWait)
	} else {
		fmt.Fprintln(out, "results' pool re-replication: not measured (under_replicated never seen above 0 and back to 0)")
	}
	if r.Balanced > 0 {
		fmt.Fprintf(out, "results' pool balanced %.1f s after the restart (every stash's shards within ±20%% of the mean)\n", r.Balanced.Seconds())
	}
	kept := "a new tag"
	if r.TagAfter != 0 && r.TagAfter == r.TagBefore {
		kept = "its tag"
	}
	fmt.Fprintf(out, "%s came back with %s (%d, before %d) holding %.0f KiB\n", r.Victim, kept, r.TagAfter, r.TagBefore, r.BytesAfter/1024)
	fmt.Fprintf(out, "%-18s %9s %9s %8s %8s %8s %8s\n", "cache-hit lookups", "lookups", "hit rate", "failed", "p50 ms", "p95 ms", "p99 ms")
	for i, h := range r.HitLatency {
		fmt.Fprintf(out, "%-18s %9d %9s %8d %8s %8s %8s\n", layoutPhases[i], r.Lookups[i], rate(r.Hits[i], r.Lookups[i]), r.Failed[i], histMs(h, 50), histMs(h, 95), histMs(h, 99))
	}
	fmt.Fprintf(out, "hit rate in the %v after the restart: %s of %d lookups (%d failed)\n", lo.HitWindow, rate(r.WindowHits, r.WindowLookups), r.WindowLookups, r.WindowFailed)
}

// layoutSummary prints the comparison of the runs.
func layoutSummary(out io.Writer, o Options, lo LayoutOptions, rs []*LayoutResult) {
	if len(rs) == 0 {
		return
	}
	fmt.Fprintf(out, "\nsummary (victim: a stash of the results' pool, killed -9 after %v, restarted %v later; hit latencies in ms, p50/p95/p99)\n", o.Warmup, o.Down)
	fmt.Fprintf(out, "%-17s %8s %8s %-17s %-17s %-17s %8s %8s %8s %10s\n", "layout", "re-repl", "balance", "hits before", "hits kill-restart", "hits after", "hit% bef", "hit% down", "hit% win", "failed")
	sec := func(d time.Duration) string {
		if d == 0 {
			return "-"
		}
		return fmt.Sprintf("%.1fs", d.Seconds())
	}
	for _, r := range rs {
		var lat [3]string
		for i, h := range r.HitLatency {
			lat[i] = histMs(h, 50) + "/" + histMs(h, 95) + "/" + histMs(h, 99)
		}
		fmt.Fprintf(out, "%-17s %8s %8s %-17s %-17s %-17s %8s %8s %8s %10d\n", r.Run.name(), sec(r.ReReplicated), sec(r.Balanced), lat[0], lat[1], lat[2],
			rate(r.Hits[0], r.Lookups[0]), rate(r.Hits[1], r.Lookups[1]), rate(r.WindowHits, r.WindowLookups), r.Failed[0]+r.Failed[1]+r.Failed[2])
	}
	fmt.Fprintf(out, "hit%% win: the %v after the restart; a failed lookup (not answered within --lookup-timeout %v) counts as a lookup without a hit\n", lo.HitWindow, lo.LookupTimeout)
}

func fnum(v float64) string {
	if math.IsNaN(v) {
		return ""
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// write writes the run's CSV and PNGs into dir.
func (r *LayoutResult) write(dir string, out io.Writer) error {
	if dir == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	base := "failure-" + r.Run.file()
	csvPath := filepath.Join(dir, base+".csv")
	f, err := os.Create(csvPath)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	head := []string{"t_s", "lookups", "hits", "misses", "failed", "writes", "write_failed", "hit_rate", "hit_p50_ms", "hit_p95_ms", "hit_p99_ms", "under_replicated", "moving", "repairs"}
	for _, n := range r.StashNames {
		head = append(head, n+"_reads_per_s", n+"_bytes", n+"_share_kib", n+"_cpu_pct", n+"_device_busy", n+"_tag")
	}
	for _, n := range r.TxNames {
		head = append(head, n+"_cpu_pct")
	}
	_ = w.Write(head)
	for _, s := range r.Samples {
		row := []string{fnum(s.T), fmt.Sprint(s.Lookups), fmt.Sprint(s.Hits), fmt.Sprint(s.Misses), fmt.Sprint(s.Failed), fmt.Sprint(s.Writes), fmt.Sprint(s.WriteFailed),
			fnum(s.hitRate()), fnum(s.HitP50), fnum(s.HitP95), fnum(s.HitP99), fmt.Sprint(s.UnderReplicated), fmt.Sprint(s.Moving), fmt.Sprint(s.Repairs)}
		for i := range r.StashNames {
			tag := ""
			if s.Tags[i] != 0 {
				tag = fmt.Sprint(s.Tags[i])
			}
			row = append(row, fnum(s.QPS[i]), fnum(s.Bytes[i]), fnum(s.ShareKB[i]), fnum(s.CPU[i]), fnum(s.Busy[i]), tag)
		}
		for i := range r.TxNames {
			row = append(row, fnum(s.TxCPU[i]))
		}
		_ = w.Write(row)
	}
	w.Flush()
	if err := errors.Join(w.Error(), f.Close()); err != nil {
		return err
	}
	files := []string{csvPath}
	xs := make([]float64, len(r.Samples))
	for j, s := range r.Samples {
		xs[j] = s.T
	}
	series := func(get func(layoutSample) float64) []float64 {
		ys := make([]float64, len(r.Samples))
		for j, s := range r.Samples {
			ys[j] = get(s)
		}
		return ys
	}
	perStash := func(pool string, get func(layoutSample) []float64, scale float64) ([]string, [][]float64) {
		var names []string
		var ys [][]float64
		for i, n := range r.StashNames {
			if pool != "" && r.StashPools[i] != pool {
				continue
			}
			names = append(names, n)
			ys = append(ys, series(func(s layoutSample) float64 { return get(s)[i] * scale }))
		}
		return names, ys
	}
	marks := []timeMark{{r.KillT, "kill -9 " + r.Victim}, {r.RestartT, "restart"}}
	title := func(t string) string {
		return fmt.Sprintf("DiStash %s, stash failure (paper Figs. 13-16): %s", r.Run.name(), t)
	}
	type png struct {
		file, title, ylabel string
		names               []string
		ys                  [][]float64
	}
	pngs := []png{
		{base + "-hit-latency.png", title("cache-hit lookup latency"), "ms", []string{"p50", "p95", "p99"}, [][]float64{
			series(func(s layoutSample) float64 { return s.HitP50 }), series(func(s layoutSample) float64 { return s.HitP95 }),
			series(func(s layoutSample) float64 { return s.HitP99 })}},
		{base + "-hit-rate.png", title("hit rate of lookups"), "%", []string{"hit rate"}, [][]float64{
			series(func(s layoutSample) float64 { return 100 * s.hitRate() })}},
	}
	names, ys := perStash("", func(s layoutSample) []float64 { return s.CPU }, 1)
	pngs = append(pngs, png{base + "-cpu.png", title("CPU of each stash process"), "% of one core", names, ys})
	if r.HaveDevice {
		names, ys := perStash(layoutSSDPool, func(s layoutSample) []float64 { return s.Busy }, 100)
		pngs = append(pngs, png{base + "-device.png", title("emulated device utilisation of each SSD stash"), "% busy", names, ys})
	}
	for _, p := range pngs {
		path := filepath.Join(dir, p.file)
		if err := plotLines(path, p.title, p.ylabel, xs, p.names, p.ys, marks); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		files = append(files, path)
	}
	fmt.Fprintf(out, "wrote %s\n", strings.Join(files, ", "))
	return nil
}

// writeLayoutSummary writes one row per run.
func writeLayoutSummary(path string, rs []*LayoutResult) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	head := []string{"layout", "victim", "rereplicated_s", "balanced_s", "tag_kept"}
	for _, p := range []string{"before", "down", "after"} {
		head = append(head, p+"_lookups", p+"_hit_rate", p+"_failed", p+"_hit_p50_ms", p+"_hit_p95_ms", p+"_hit_p99_ms")
	}
	head = append(head, "window_lookups", "window_hit_rate", "window_failed")
	_ = w.Write(head)
	hr := func(n, d int64) string {
		if d == 0 {
			return ""
		}
		return fnum(float64(n) / float64(d))
	}
	q := func(h *hdrhistogram.Histogram, p float64) string {
		if h == nil || h.TotalCount() == 0 {
			return ""
		}
		return fnum(float64(h.ValueAtQuantile(p)) / 1000)
	}
	for _, r := range rs {
		row := []string{r.Run.name(), r.Victim, fnum(r.ReReplicated.Seconds()), fnum(r.Balanced.Seconds()), fmt.Sprint(r.TagAfter != 0 && r.TagAfter == r.TagBefore)}
		for i, h := range r.HitLatency {
			row = append(row, fmt.Sprint(r.Lookups[i]), hr(r.Hits[i], r.Lookups[i]), fmt.Sprint(r.Failed[i]), q(h, 50), q(h, 95), q(h, 99))
		}
		row = append(row, fmt.Sprint(r.WindowLookups), hr(r.WindowHits, r.WindowLookups), fmt.Sprint(r.WindowFailed))
		_ = w.Write(row)
	}
	w.Flush()
	return errors.Join(w.Error(), f.Close())
}

// victimTags describes what the victim of Figure 12's bench came back
// as: its tag before the kill and at its first answer after the restart,
// and the bytes it held then (with --local-log it should keep both).
func (r *Result) victimTags(victim string) string {
	vi := slices.Index(r.StashNames, victim)
	if vi < 0 {
		return ""
	}
	var before, after uint32
	bytes := math.NaN()
	for _, s := range r.Samples {
		switch {
		case s.T < r.KillT && s.Tags[vi] != 0:
			before = s.Tags[vi]
		case s.T > r.RestartT && after == 0 && s.Tags[vi] != 0:
			after, bytes = s.Tags[vi], s.Bytes[vi]
		}
	}
	kept := "a new tag"
	if after != 0 && after == before {
		kept = "its tag"
	}
	return fmt.Sprintf("%s came back with %s (%d, before %d) holding %.0f KiB at its first answer", victim, kept, after, before, bytes/1024)
}
