// Package failure is `distash bench failure`: the paper's Fig. 12 (a
// stash of a DRAM pool with replication 3 across two DCs killed and
// restarted under uniform reads: reads/s, data and CPU of every stash over
// time, the time to full re-replication and to balance, the read
// throughput dip; Run) and its Figures 13-16 (a cache-augmented workload
// on an SSD pool alone or with its results in a DRAM pool, a stash of the
// results' pool killed and restarted, with or without its local log;
// RunLayouts). Each run starts a cluster of real `distash server`
// processes (internal/clustertest) from Options.Binary.
package failure

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/schollz/progressbar/v3"
	"google.golang.org/grpc"

	"github.com/distash/distash"
	"github.com/distash/distash/internal/clustertest"
	"github.com/distash/distash/internal/coordrpc"
	"github.com/distash/distash/internal/wire"
)

// Options configure `distash bench failure`.
type Options struct {
	Binary         string // the distash binary run as `server` (default: this one)
	Out            string // PNGs and CSV
	Dir            string // node data directories (default: a temporary one)
	Keep           bool   // keep Dir
	Keys           int
	ValueSize      int
	Clients        int
	Victim         string // the stash node killed and restarted (s1..s8)
	FailureWait    time.Duration
	ShardBytes     string
	DCDelay        time.Duration
	Warmup         time.Duration // read load before the kill
	Down           time.Duration // from the kill to the restart
	BalanceTimeout time.Duration // longest wait for balance after the restart
	Tail           time.Duration // after balance
	Interval       time.Duration // sampling interval
	Progress       bool
	Verbose        bool // nodes log at info level (into DIR/<node>.log)
	LocalLog       bool // the pool gets local_log = true
}

// failurePool is the benchmark's pool name and key prefix.
const failurePool, failurePrefix = "bench", "b/"

func failureConfig(o Options) string {
	localLog := ""
	if o.LocalLog {
		localLog = "local_log = true\n"
	}
	return fmt.Sprintf(`[cluster]
failure_wait = %q
shard_bytes = %q
dc_delay = %q

[log]
replicas = 3

[[pool]]
name = %q
prefix = %q
medium = "dram"
mode = "ephemeral"
engine = "memory"
stashes = 8
replication = 3
capacity = "512MiB"
across_dcs = true
%s`, o.FailureWait.String(), o.ShardBytes, o.DCDelay.String(), failurePool, failurePrefix, localLog)
}

// node is one server process of the benchmark's cluster, with the
// sampler's state.
type node struct {
	*clustertest.Proc
	conn *grpc.ClientConn

	// The sampler's state.
	tag              uint32
	lastReads        int64
	lastReadsT       time.Time
	lastCPU          float64
	lastCPUPid       int
	lastCPUT         time.Time
	haveReads, haveC bool
}

// cluster is a run's server processes, each with a connection, and a
// client of the coordinators.
type cluster struct {
	*clustertest.Procs
	nodes []*node // in layout order
	cc    *coordrpc.Client
}

// newCluster lays out specs running toml in dir; every node logs into
// dir/<name>.log. No node is started yet (start).
func newCluster(o Options, dir, toml string, specs []clustertest.Spec) (*cluster, error) {
	procs, err := clustertest.NewProcs(clustertest.ProcsOptions{Binary: o.Binary, Dir: dir, TOML: toml, Nodes: specs,
		Verbose: o.Verbose, Logs: true, StopTimeout: 10 * time.Second})
	if err != nil {
		return nil, err
	}
	c := &cluster{Procs: procs}
	for _, p := range procs.Nodes {
		c.nodes = append(c.nodes, &node{Proc: p})
	}
	return c, nil
}

// start starts every node, waits until each serves and connects to them.
func (c *cluster) start(ctx context.Context) error {
	if err := c.Start(ctx); err != nil {
		return err
	}
	for _, n := range c.nodes {
		conn, err := c.Conn(n.Addr)
		if err != nil {
			return err
		}
		n.conn = conn
	}
	var err error
	c.cc, err = coordrpc.NewClient(c.Coordinators, coordrpc.ClientOptions{})
	return err
}

// close stops every node (their connections too).
func (c *cluster) close() {
	_ = c.StopAll()
	if c.cc != nil {
		c.cc.Close()
	}
}

// failureSample is one sampling instant.
type failureSample struct {
	T          float64   // seconds since the read load began
	Reads      float64   // the clients' reads/s over the interval
	ReadErrors int64     // client read errors so far
	QPS        []float64 // per stash node: reads/s it served (NaN: down)
	Bytes      []float64 // per stash node: bytes it holds (NaN: down)
	CPU        []float64 // per stash node: % of one core (NaN: down)
	Share      []float64 // per stash node: the distributor's estimate of its shards' bytes
	TxCPU      []float64 // per transaction node: % of one core
	Tags       []uint32  // per stash node: its stash's tag (0: unknown)
	Dist       *wire.PoolDistribution
	// The ratekeeper's limit on read versions (0: none) and its reason.
	RateLimit       float64
	RateLimitReason string
}

// Result is what the benchmark measured.
type Result struct {
	Samples         []failureSample
	StashNames      []string
	TxNames         []string
	KillT, RestartT float64       // seconds since the read load began
	ReReplicated    time.Duration // from the kill to under_replicated back to 0 (0: not measured)
	Balanced        time.Duration // from the restart to every stash within ±20% of the mean bytes (0: not measured)
	ShareBalanced   time.Duration // same, by the distributor's estimate of each stash's shards
	BaseReads       float64       // mean client reads/s before the kill
	MinReads        float64       // lowest client reads/s after the kill, until the restart
	MinReadsT       float64
	Dip             time.Duration // how long reads/s stayed below 80% of BaseReads after the kill
	RestartMin      float64       // lowest client reads/s from the restart to the end
	Reads, Errors   int64
	Latency         [5]*hdrhistogram.Histogram // per failurePhases
}

var failurePhases = [5]string{"before the kill", "kill to re-replicated", "re-replicated, 7 up", "restart to balanced", "after balance"}

type failureBench struct {
	o         Options
	out       io.Writer
	nodes     []*node // tx1..tx3, s1..s8
	coords    string
	cc        *coordrpc.Client
	stateless string

	reads, readErrs atomic.Int64
	phase           atomic.Int32
	lastReads       int64
	lastT           time.Time
	start           time.Time
}

func (b *failureBench) stashNodes() []*node { return b.nodes[3:] }
func (b *failureBench) txNodes() []*node    { return b.nodes[:3] }

// Run runs the whole benchmark and prints its figures to out.
func Run(ctx context.Context, o Options, out io.Writer) (*Result, error) {
	if o.Clients < 1 || o.Keys < 1 || o.Interval <= 0 {
		return nil, fmt.Errorf("--clients, --keys and --interval must be positive")
	}
	dir, cleanup, err := failureBenchDir(&o, out)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	var specs []clustertest.Spec
	for i := 0; i < 3; i++ {
		specs = append(specs, clustertest.Spec{Name: fmt.Sprintf("tx%d", i+1), Class: clustertest.Transaction, DC: "dc3", Zone: fmt.Sprintf("z-tx%d", i+1)})
	}
	for i := 0; i < 8; i++ {
		dc := "dc1"
		if i >= 4 {
			dc = "dc2"
		}
		specs = append(specs, clustertest.Spec{Name: fmt.Sprintf("s%d", i+1), Class: clustertest.Stash, Pool: failurePool, DC: dc, Zone: fmt.Sprintf("z-s%d", i+1)})
	}
	c, err := newCluster(o, dir, failureConfig(o), specs)
	if err != nil {
		return nil, err
	}
	defer c.close()
	b := &failureBench{o: o, out: out, nodes: c.nodes, coords: c.Coordinators}
	var victim *node
	for _, n := range b.stashNodes() {
		if n.Name == o.Victim {
			victim = n
		}
	}
	if victim == nil {
		return nil, fmt.Errorf("--victim %q: want one of s1..s8", o.Victim)
	}

	fmt.Fprintf(out, "cluster: 3 transaction nodes in dc3, 8 dram stash nodes (4 in dc1, 4 in dc2), R=3 across DCs; failure_wait %v, shard_bytes %s, dc_delay %v\n",
		o.FailureWait, o.ShardBytes, o.DCDelay)
	began := time.Now()
	if err := c.start(ctx); err != nil {
		return nil, err
	}
	b.cc = c.cc
	fmt.Fprintf(out, "11 nodes serving after %v\n", time.Since(began).Round(100*time.Millisecond))

	if err := b.load(ctx); err != nil {
		return nil, err
	}
	if err := b.waitSpread(ctx); err != nil {
		return nil, err
	}
	return b.run(ctx, victim)
}

// load writes the keys in batches from a few concurrent transactions.
func (b *failureBench) load(ctx context.Context) error {
	octx, cancel := context.WithTimeout(ctx, time.Minute)
	db, err := distash.Open(octx, b.coords)
	cancel()
	if err != nil {
		return err
	}
	defer db.Close()
	const batch, loaders = 500, 4
	var bar *progressbar.ProgressBar
	if b.o.Progress {
		bar = progressbar.NewOptions(b.o.Keys, progressbar.OptionSetWriter(b.out), progressbar.OptionSetDescription("  loading"),
			progressbar.OptionThrottle(200*time.Millisecond), progressbar.OptionClearOnFinish())
	}
	began := time.Now()
	next := atomic.Int64{}
	errc := make(chan error, loaders)
	for l := 0; l < loaders; l++ {
		go func() {
			value := make([]byte, b.o.ValueSize)
			for {
				lo := int(next.Add(batch)) - batch
				if lo >= b.o.Keys {
					errc <- nil
					return
				}
				hi := min(lo+batch, b.o.Keys)
				err := db.Transact(ctx, func(tr *distash.Tx) error {
					for i := lo; i < hi; i++ {
						for j := range value {
							value[j] = byte(i + j)
						}
						tr.Set(failureKey(i), value)
					}
					return nil
				})
				if err != nil {
					errc <- fmt.Errorf("load keys %d..%d: %w", lo, hi, err)
					return
				}
				if bar != nil {
					_ = bar.Add(hi - lo)
				}
			}
		}()
	}
	for l := 0; l < loaders; l++ {
		if err := <-errc; err != nil {
			return err
		}
	}
	if bar != nil {
		_ = bar.Finish()
	}
	d := time.Since(began)
	fmt.Fprintf(b.out, "loaded %d keys of %d B in %v (%.0f keys/s)\n", b.o.Keys, b.o.ValueSize, d.Round(10*time.Millisecond), float64(b.o.Keys)/d.Seconds())
	return nil
}

// failureKey is key i: its first byte after the prefix cycles through
// every value, so the keys cover the pool's initial shards (cut by that
// byte) evenly.
func failureKey(i int) []byte {
	return fmt.Appendf(append([]byte(failurePrefix), byte(i)), "%08d", i)
}

// distribution asks the node holding the stateless roles for the data
// distributor's view of the pool and its stashes' shares (by tag).
func (b *failureBench) distribution(ctx context.Context) (*wire.PoolDistribution, map[uint32]*wire.StashShare, error) {
	d, shares, _, err := b.rolesStatus(ctx)
	return d, shares, err
}

// rolesStatus is distribution with the whole status of the roles' node
// (its ratekeeper's limit).
func (b *failureBench) rolesStatus(ctx context.Context) (*wire.PoolDistribution, map[uint32]*wire.StashShare, *wire.StatusResponse, error) {
	if b.stateless == "" {
		v, err := b.cc.View(ctx)
		if err != nil {
			return nil, nil, nil, err
		}
		b.stateless = v.StatelessAddress
	}
	var conn *grpc.ClientConn
	for _, n := range b.txNodes() {
		if n.Addr == b.stateless {
			conn = n.conn
		}
	}
	if conn == nil {
		err := fmt.Errorf("the stateless roles are on %q, not a transaction node", b.stateless)
		b.stateless = ""
		return nil, nil, nil, err
	}
	st, err := wire.NewDiStashClient(conn).Status(ctx, &wire.StatusRequest{})
	if err != nil {
		b.stateless = "" // ask the coordinators again next time
		return nil, nil, nil, err
	}
	shares := map[uint32]*wire.StashShare{}
	for _, s := range st.StashShares {
		shares[s.Id] = s
	}
	for _, d := range st.Distribution {
		if d.Pool == failurePool {
			return d, shares, st, nil
		}
	}
	b.stateless = ""
	return nil, shares, st, fmt.Errorf("no distribution status for pool %q on %s", failurePool, st.GetNode().GetAddress())
}

// stashStatus is a stash node's own status of its stash.
func stashStatusOf(ctx context.Context, n *node) (*wire.StashStatus, error) {
	st, err := wire.NewDiStashClient(n.conn).Status(ctx, &wire.StatusRequest{})
	if err != nil {
		return nil, err
	}
	for _, s := range st.Stashes {
		if s.Pool == failurePool {
			return s, nil
		}
	}
	return nil, fmt.Errorf("node %s serves no stash of pool %s", n.Name, failurePool)
}

func stashBytes(s *wire.StashStatus) int64 {
	if s.Bytes > 0 {
		return s.Bytes
	}
	return s.EngineBytes // ephemeral pools count what the engine holds
}

// waitSpread waits until the distributor has settled (nothing
// under-replicated, moving or queued) with data on all 8 stashes.
func (b *failureBench) waitSpread(ctx context.Context) error {
	began := time.Now()
	var last, stable string
	var stableSince time.Time
	for time.Since(began) < 3*time.Minute {
		if err := ctx.Err(); err != nil {
			return err
		}
		qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		d, shares, err := b.distribution(qctx)
		holding := 0
		var held []string
		if err == nil {
			for _, n := range b.stashNodes() {
				s, serr := stashStatusOf(qctx, n)
				if serr != nil {
					held = append(held, fmt.Sprintf("%s: %v", n.Name, serr))
					continue
				}
				sh := shares[s.Id]
				held = append(held, fmt.Sprintf("%s: tag %d, %d shards, %d B", n.Name, s.Id, sh.GetShards(), sh.GetBytes()))
				if sh.GetShards() > 0 && sh.GetBytes() > 0 {
					holding++
				}
			}
		}
		cancel()
		if err == nil && d.UnderReplicated == 0 && d.Moving == 0 && d.Queued == 0 && holding == 8 {
			// Settled once nothing changed for 3 s (the distributor
			// looks at shard sizes every few seconds: splits come late).
			state := fmt.Sprint(d.Shards, d.MovesDone)
			if state != stable {
				stable, stableSince = state, time.Now()
			}
			if time.Since(stableSince) >= 3*time.Second {
				fmt.Fprintf(b.out, "distributor settled after %v: %d shards, %d moves, every stash holds data\n",
					time.Since(began).Round(100*time.Millisecond), d.Shards, d.MovesDone)
				return nil
			}
		} else {
			stable = ""
		}
		last = fmt.Sprintf("%v (stashes holding data: %d: %s; error %v)", d, holding, strings.Join(held, "; "), err)
		time.Sleep(250 * time.Millisecond)
	}
	return fmt.Errorf("the data distributor did not settle with data on all 8 stashes in 3 min: %s", last)
}

// sample takes one sample of every node and the distributor.
func (b *failureBench) sample(ctx context.Context) failureSample {
	now := time.Now()
	reads := b.reads.Load()
	s := failureSample{T: now.Sub(b.start).Seconds(), ReadErrors: b.readErrs.Load()}
	if dt := now.Sub(b.lastT).Seconds(); dt > 0 {
		s.Reads = float64(reads-b.lastReads) / dt
	}
	b.lastReads, b.lastT = reads, now
	stashes := b.stashNodes()
	s.QPS, s.Bytes, s.CPU, s.Share = nanSlice(8), nanSlice(8), nanSlice(8), nanSlice(8)
	s.TxCPU = nanSlice(3)
	s.Tags = make([]uint32, 8)
	qctx, cancel := context.WithTimeout(ctx, b.o.Interval*8/10)
	defer cancel()
	var wg sync.WaitGroup
	var shares map[uint32]*wire.StashShare
	wg.Add(1)
	go func() {
		defer wg.Done()
		d, sh, st, err := b.rolesStatus(qctx)
		if err == nil {
			s.Dist, shares = d, sh
			s.RateLimit, s.RateLimitReason = st.RateLimit, st.RateLimitReason
		}
	}()
	for i, n := range stashes {
		wg.Add(1)
		go func(i int, n *node) {
			defer wg.Done()
			if !n.Running() {
				n.haveReads, n.haveC = false, false
				return
			}
			st, err := stashStatusOf(qctx, n)
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
			}
			s.CPU[i] = cpuPercent(n)
		}(i, n)
	}
	for i, n := range b.txNodes() {
		s.TxCPU[i] = cpuPercent(n)
	}
	wg.Wait()
	for i, n := range stashes {
		if sh, ok := shares[n.tag]; ok && n.Running() {
			s.Share[i] = float64(sh.Bytes)
		}
	}
	return s
}

// cpuPercent is the node's CPU use since the last call, in % of one core.
func cpuPercent(n *node) float64 {
	if !n.Running() {
		n.haveC = false
		return math.NaN()
	}
	pid := n.Pid()
	c, err := clustertest.ProcessCPUSeconds(pid)
	now := time.Now()
	if err != nil {
		n.haveC = false
		return math.NaN()
	}
	out := math.NaN()
	if n.haveC && n.lastCPUPid == pid {
		out = 100 * (c - n.lastCPU) / now.Sub(n.lastCPUT).Seconds()
	}
	n.lastCPU, n.lastCPUPid, n.lastCPUT, n.haveC = c, pid, now, true
	return out
}

func nanSlice(n int) []float64 {
	s := make([]float64, n)
	for i := range s {
		s[i] = math.NaN()
	}
	return s
}

// balanced reports whether every value is known, positive and within
// ±20% of their mean.
func balanced(vals []float64) bool {
	sum := 0.0
	for _, v := range vals {
		if math.IsNaN(v) || v <= 0 {
			return false
		}
		sum += v
	}
	mean := sum / float64(len(vals))
	for _, v := range vals {
		if v < 0.8*mean || v > 1.2*mean {
			return false
		}
	}
	return true
}

// readers runs the read load until ctx ends; wait returns the merged
// latency histograms per phase.
func (b *failureBench) readers(ctx context.Context) (wait func() [5]*hdrhistogram.Histogram, err error) {
	var dbs []*distash.DB
	for c := 0; c < b.o.Clients; c++ {
		octx, cancel := context.WithTimeout(ctx, time.Minute)
		db, err := distash.Open(octx, b.coords, distash.WithDC([]string{"dc1", "dc2"}[c%2]))
		cancel()
		if err != nil {
			for _, d := range dbs {
				d.Close()
			}
			return nil, err
		}
		dbs = append(dbs, db)
	}
	newHists := func() [5]*hdrhistogram.Histogram {
		var h [5]*hdrhistogram.Histogram
		for i := range h {
			h[i] = hdrhistogram.New(1, int64(30*time.Second/time.Microsecond), 3)
		}
		return h
	}
	total := newHists()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, db := range dbs {
		wg.Add(1)
		go func(db *distash.DB) {
			defer wg.Done()
			defer db.Close()
			local := newHists()
			for ctx.Err() == nil {
				key := failureKey(rand.IntN(b.o.Keys))
				phase := b.phase.Load()
				t0 := time.Now()
				rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				err := db.ReadTransact(rctx, func(tr *distash.Tx) error {
					v, err := tr.Get(key)
					if err == nil && v == nil {
						return fmt.Errorf("key %q missing", key)
					}
					return err
				})
				cancel()
				if ctx.Err() != nil {
					break
				}
				if err != nil {
					b.readErrs.Add(1)
					continue
				}
				if phase >= 0 { // not during the clients' warm-up
					local[phase].RecordValue(time.Since(t0).Microseconds())
				}
				b.reads.Add(1)
			}
			mu.Lock()
			for i := range total {
				total[i].Merge(local[i])
			}
			mu.Unlock()
		}(db)
	}
	return func() [5]*hdrhistogram.Histogram { wg.Wait(); return total }, nil
}

// run is the timeline: warm-up, kill, restart, balance, tail.
func (b *failureBench) run(ctx context.Context, victim *node) (*Result, error) {
	o := b.o
	r := &Result{KillT: math.NaN(), RestartT: math.NaN()}
	for _, n := range b.stashNodes() {
		r.StashNames = append(r.StashNames, n.Name)
	}
	for _, n := range b.txNodes() {
		r.TxNames = append(r.TxNames, n.Name)
	}
	b.phase.Store(-1)
	rctx, stopReads := context.WithCancel(ctx)
	defer stopReads()
	waitReads, err := b.readers(rctx)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(b.out, "reading with %d clients (each its own connection, half in dc1, half in dc2); %s killed after %v, restarted %v later\n",
		o.Clients, victim.Name, o.Warmup, o.Down)
	// The clients' first seconds (connections, shard map, replica
	// latencies) are not measured.
	select {
	case <-time.After(2 * time.Second):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	b.start = time.Now()
	b.lastT = b.start
	b.phase.Store(0)
	b.sample(ctx) // baselines for the rates
	var bar *progressbar.ProgressBar
	estimate := o.Warmup + o.Down + o.BalanceTimeout/2 + o.Tail
	if o.Progress {
		bar = progressbar.NewOptions64(int64(estimate/time.Millisecond), progressbar.OptionSetWriter(b.out),
			progressbar.OptionSetDescription("  warm-up"), progressbar.OptionThrottle(200*time.Millisecond), progressbar.OptionClearOnFinish())
	}
	setPhase := func(p int32, desc string) {
		b.phase.Store(p)
		if bar != nil {
			bar.Describe("  " + desc)
		}
	}
	var killed, restarted, balancedAt time.Time
	sawUnder := false
	restartErr := make(chan error, 1)
	tick := time.NewTicker(o.Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case err := <-restartErr:
			if err != nil {
				return nil, fmt.Errorf("restart of %s: %w", victim.Name, err)
			}
		case <-tick.C:
		}
		s := b.sample(ctx)
		r.Samples = append(r.Samples, s)
		now := time.Now()
		if bar != nil {
			bar.Set64(min(int64(now.Sub(b.start)/time.Millisecond), int64(estimate/time.Millisecond)))
		}
		switch {
		case killed.IsZero():
			if now.Sub(b.start) >= o.Warmup {
				victim.Kill()
				killed = time.Now()
				r.KillT = killed.Sub(b.start).Seconds()
				setPhase(1, "killed "+victim.Name)
			}
		case restarted.IsZero():
			if s.Dist != nil && s.Dist.UnderReplicated > 0 {
				sawUnder = true
			}
			if sawUnder && r.ReReplicated == 0 && s.Dist != nil && s.Dist.UnderReplicated == 0 && s.Dist.Moving == 0 {
				r.ReReplicated = now.Sub(killed)
				setPhase(2, "re-replicated")
			}
			if now.Sub(killed) >= o.Down {
				if err := victim.Start(o.Binary); err != nil {
					return nil, err
				}
				restarted = time.Now()
				r.RestartT = restarted.Sub(b.start).Seconds()
				setPhase(3, "restarted "+victim.Name)
				go func() { restartErr <- victim.WaitReady(ctx, 90*time.Second) }()
			}
		case balancedAt.IsZero():
			if r.ReReplicated == 0 && sawUnder && s.Dist != nil && s.Dist.UnderReplicated == 0 && s.Dist.Moving == 0 {
				r.ReReplicated = now.Sub(killed) // after the restart: the new stash took replicas too
			}
			if r.ShareBalanced == 0 && balanced(s.Share) {
				r.ShareBalanced = now.Sub(restarted)
			}
			if balanced(s.Bytes) {
				r.Balanced = now.Sub(restarted)
				balancedAt = now
				setPhase(4, "balanced")
			} else if now.Sub(restarted) >= o.BalanceTimeout {
				balancedAt = now
				setPhase(4, "not balanced")
			}
		default:
			if r.ShareBalanced == 0 && balanced(s.Share) {
				r.ShareBalanced = now.Sub(restarted)
			}
			if now.Sub(balancedAt) >= o.Tail {
				stopReads()
				r.Latency = waitReads()
				if bar != nil {
					_ = bar.Finish()
				}
				r.Reads, r.Errors = b.reads.Load(), b.readErrs.Load()
				r.computeDip()
				if err := r.report(b.out, o); err != nil {
					return r, err
				}
				return r, r.write(o.Out, b.out)
			}
		}
	}
}

// computeDip fills BaseReads, MinReads, Dip and RestartMin from the
// samples.
func (r *Result) computeDip() {
	var sum float64
	var n int
	r.MinReads, r.RestartMin = math.Inf(1), math.Inf(1)
	for _, s := range r.Samples {
		switch {
		case s.T < r.KillT:
			sum += s.Reads
			n++
		case s.T > r.KillT && (math.IsNaN(r.RestartT) || s.T <= r.RestartT):
			if s.Reads < r.MinReads {
				r.MinReads, r.MinReadsT = s.Reads, s.T
			}
		case s.T > r.RestartT:
			r.RestartMin = min(r.RestartMin, s.Reads)
		}
	}
	if n > 0 {
		r.BaseReads = sum / float64(n)
	}
	// The dip: from the first sample after the kill below 80% of the
	// base to the first of two in a row at 80% or more again.
	var from float64 = -1
	prevT := r.KillT
	for i, s := range r.Samples {
		if s.T <= r.KillT {
			continue
		}
		low := s.Reads < 0.8*r.BaseReads
		if from < 0 {
			if low {
				from = prevT
			}
		} else if !low && (i+1 >= len(r.Samples) || r.Samples[i+1].Reads >= 0.8*r.BaseReads) {
			r.Dip = time.Duration((prevT - from) * float64(time.Second))
			return
		}
		prevT = s.T
	}
	if from >= 0 {
		r.Dip = time.Duration((prevT - from) * float64(time.Second))
	}
}

func (r *Result) report(out io.Writer, o Options) error {
	sec := func(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }
	fmt.Fprintln(out)
	if r.ReReplicated > 0 {
		fmt.Fprintf(out, "full re-replication: %s after the kill (failure_wait %v; the controller marks a node dead after 2 s)\n", sec(r.ReReplicated), o.FailureWait)
	} else {
		fmt.Fprintln(out, "full re-replication: not measured (under_replicated was never seen above 0 and back to 0)")
	}
	if r.Balanced > 0 {
		fmt.Fprintf(out, "balance: %s after the restart (every stash's data within ±20%% of the mean)\n", sec(r.Balanced))
	} else {
		fmt.Fprintf(out, "balance: not reached within %v of the restart\n", o.BalanceTimeout)
	}
	if r.ShareBalanced > 0 {
		fmt.Fprintf(out, "balance by the distributor's shard estimates: %s after the restart\n", sec(r.ShareBalanced))
	}
	fmt.Fprintf(out, "read throughput: %.0f reads/s before the kill; lowest %.0f reads/s (%.0f%%) at %.1f s after the kill; below 80%% of it for %s\n",
		r.BaseReads, r.MinReads, 100*r.MinReads/max(r.BaseReads, 1), r.MinReadsT-r.KillT, sec(r.Dip))
	if !math.IsInf(r.RestartMin, 1) {
		fmt.Fprintf(out, "read throughput from the restart to the end: lowest %.0f reads/s (%.0f%%)\n", r.RestartMin, 100*r.RestartMin/max(r.BaseReads, 1))
	}
	fmt.Fprintf(out, "%d reads, %d errors\n", r.Reads, r.Errors)
	if o.LocalLog {
		fmt.Fprintf(out, "local_log = true: %s\n", r.victimTags(o.Victim))
	}
	// When the ratekeeper limited read versions, and why.
	var from float64 = -1
	reason := ""
	for i, s := range r.Samples {
		if s.RateLimit > 0 && from < 0 {
			from, reason = s.T, ""
		}
		if s.RateLimit > 0 && reason == "" {
			reason = s.RateLimitReason
		}
		if from >= 0 && (s.RateLimit == 0 || i == len(r.Samples)-1) {
			fmt.Fprintf(out, "ratekeeper limited transactions from %.1f s to %.1f s (kill at %.1f s, restart at %.1f s): %s\n", from, s.T, r.KillT, r.RestartT, reason)
			from = -1
		}
	}
	fmt.Fprintln(out)
	fmt.Fprintf(out, "%-22s %9s %9s %9s %9s\n", "read latency", "reads", "p50", "p99", "max")
	for i, h := range r.Latency {
		if h == nil {
			continue
		}
		q := func(p float64) string {
			return (time.Duration(h.ValueAtQuantile(p)) * time.Microsecond).Round(10 * time.Microsecond).String()
		}
		fmt.Fprintf(out, "%-22s %9d %9s %9s %9s\n", failurePhases[i], h.TotalCount(), q(50), q(99), q(100))
	}
	return nil
}

// write writes failure.csv and the PNGs.
func (r *Result) write(dir string, out io.Writer) error {
	if dir == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "failure.csv"))
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	head := []string{"t_s", "client_reads_per_s", "client_read_errors", "under_replicated", "moving", "queued", "moves_done", "shards", "rate_limit", "rate_limit_reason", "relocations"}
	for _, n := range r.StashNames {
		head = append(head, n+"_reads_per_s", n+"_bytes", n+"_share_bytes", n+"_cpu_pct", n+"_tag")
	}
	for _, n := range r.TxNames {
		head = append(head, n+"_cpu_pct")
	}
	_ = w.Write(head)
	num := func(v float64) string {
		if math.IsNaN(v) {
			return ""
		}
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	for _, s := range r.Samples {
		row := []string{num(s.T), num(s.Reads), fmt.Sprint(s.ReadErrors)}
		if d := s.Dist; d != nil {
			row = append(row, fmt.Sprint(d.UnderReplicated), fmt.Sprint(d.Moving), fmt.Sprint(d.Queued), fmt.Sprint(d.MovesDone), fmt.Sprint(d.Shards))
		} else {
			row = append(row, "", "", "", "", "")
		}
		row = append(row, num(s.RateLimit), s.RateLimitReason, relocations(s.Dist))
		for i := range r.StashNames {
			tag := ""
			if s.Tags[i] != 0 {
				tag = fmt.Sprint(s.Tags[i])
			}
			row = append(row, num(s.QPS[i]), num(s.Bytes[i]), num(s.Share[i]), num(s.CPU[i]), tag)
		}
		for i := range r.TxNames {
			row = append(row, num(s.TxCPU[i]))
		}
		_ = w.Write(row)
	}
	w.Flush()
	if err := errors.Join(w.Error(), f.Close()); err != nil {
		return err
	}
	files := []string{filepath.Join(dir, "failure.csv")}
	plots := []struct {
		file, title, ylabel string
		get                 func(failureSample) []float64
		scale               float64
	}{
		{"failure-qps.png", "reads/s served by each stash", "reads/s", func(s failureSample) []float64 { return s.QPS }, 1},
		{"failure-bytes.png", "data held by each stash", "MiB", func(s failureSample) []float64 { return s.Bytes }, 1.0 / (1 << 20)},
		{"failure-cpu.png", "CPU of each stash process", "% of one core", func(s failureSample) []float64 { return s.CPU }, 1},
		{"failure-throughput.png", "client read throughput", "reads/s", func(s failureSample) []float64 { return []float64{s.Reads} }, 1},
	}
	for _, p := range plots {
		names := r.StashNames
		if p.file == "failure-throughput.png" {
			names = []string{"all clients"}
		}
		path := filepath.Join(dir, p.file)
		if err := r.plot(path, p.title, p.ylabel, names, p.get, p.scale); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		files = append(files, path)
	}
	fmt.Fprintf(out, "\nwrote %s\n", strings.Join(files, ", "))
	return nil
}

// relocations lists the distributor's moves, in flight first (marked *):
// "reason from>to".
func relocations(d *wire.PoolDistribution) string {
	var out []string
	for _, q := range d.GetQueue() {
		mark := ""
		if q.InFlight {
			mark = "*"
		}
		out = append(out, fmt.Sprintf("%s%s %v>%v", mark, q.Reason, q.From, q.To))
	}
	return strings.Join(out, "; ")
}

// failureBenchDir fills in o.Binary (default: this executable) and makes
// the nodes' directory (o.Dir, or a temporary one); cleanup removes it,
// unless o.Keep, which prints where it is.
func failureBenchDir(o *Options, out io.Writer) (dir string, cleanup func(), err error) {
	if o.Binary, err = clustertest.Executable(o.Binary); err != nil {
		return "", nil, err
	}
	return clustertest.Workdir(o.Dir, "distash-bench-failure-", o.Keep, out)
}
