// Package ycsb runs go-ycsb's core workloads (github.com/pingcap/go-ycsb,
// in-process: its pkg/workload generates the operations and keys) against
// DiStash through the public client and the driver of package
// github.com/distash/distash/ycsb, and against private peer servers
// (Redis, PostgreSQL, etcd) with small adapters, and prints one table of
// throughput and latency percentiles per operation type.
//
// Every store is loaded with Options.Records records (go-ycsb's load
// phase), then runs the chosen workloads in order on that data, each for
// Options.Operations operations from Options.Threads threads. The
// workloads are YCSB's standard A–F:
//
//	A  50% read, 50% update                     zipfian
//	B  95% read, 5% update                      zipfian
//	C  100% read                                zipfian
//	D  95% read, 5% insert                      latest
//	E  95% scan (1–100 records), 5% insert      zipfian
//	F  50% read, 50% read-modify-write          zipfian
//
// (Options.Distribution replaces the request distribution of all.) Reads
// and scans read all fields; updates write one field (go-ycsb's defaults,
// readallfields=true, writeallfields=false). Latency is measured around
// each of go-ycsb's operations; a read-modify-write (a read and an update
// of one record, two client calls) is reported as its own operation type,
// READ_MODIFY_WRITE, not as a READ and an UPDATE.
package ycsb

import (
	"context"
	"errors"
	"fmt"
	"github.com/distash/distash/internal/bench/ingest"
	"image/color"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/magiconair/properties"
	"github.com/pingcap/go-ycsb/pkg/measurement"
	"github.com/pingcap/go-ycsb/pkg/prop"
	_ "github.com/pingcap/go-ycsb/pkg/workload" // registers the core workload
	goycsb "github.com/pingcap/go-ycsb/pkg/ycsb"
	"github.com/schollz/progressbar/v3"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/distash/distash"
	"github.com/distash/distash/internal/bench/peerserver"
	"github.com/distash/distash/internal/embedded"
	dycsb "github.com/distash/distash/ycsb"
)

// The peers Options.Peers may name.
const (
	PeerRedis    = "redis"
	PeerPostgres = "postgres"
	PeerEtcd     = "etcd"
)

// Load is the name of the load phase in results.
const Load = "load"

// Options configure a run. Zero values take the defaults given.
type Options struct {
	// Workloads lists YCSB workloads among a–f, run in this order after
	// the load (default a,b,c,d,e,f). A workload may come more than once
	// (c,a,c: reads of data at rest right after the load, then reads of
	// data A just rewrote); its repeats are labelled c#2, c#3 (Phases).
	Workloads []string
	// Records is the number of records loaded (default 20,000).
	Records int
	// Operations is the number of operations per workload (default
	// 100,000).
	Operations int
	// Threads is the number of client threads (default 64).
	Threads int
	// FieldCount and FieldLength shape a record (default 10 fields of
	// 100 bytes).
	FieldCount, FieldLength int
	// Distribution, if set, replaces every workload's request distribution:
	// zipfian, uniform, latest, hotspot or sequential.
	Distribution string
	// Pools are the DiStash pools to run on, each a store of its own
	// (default dram).
	Pools []string
	// Layouts are the driver's record layouts to run each pool with
	// (dycsb.LayoutRecord, dycsb.LayoutFields; default record). A store
	// of the fields layout is named "distash:<pool>:fields".
	Layouts []string
	// Cluster, if set, is the cluster string of a running cluster to use
	// instead of an embedded one.
	Cluster string
	// ConfigTOML replaces Config for the embedded cluster.
	ConfigTOML string
	// Dir holds the embedded cluster's files (default: temporary).
	Dir string
	// Peers lists peer stores to run too: redis, postgres, etcd.
	Peers []string
	// NoInstall disables installing missing peers with apt-get.
	NoInstall bool
	// OutDir receives ycsb.png (default bench-out).
	OutDir string
	// Progress shows progress bars.
	Progress bool
}

// Config is the default embedded cluster: a DRAM pool and a Pebble pool,
// one stash each, replication 1, one log replica.
const Config = ingest.TwoPools

// OpStats are one operation type's figures in one phase.
type OpStats struct {
	Op       string
	Count    int64 // successful operations
	Errors   int64
	P50, P99 time.Duration
}

// Result is one phase (the load or a workload) on one store.
type Result struct {
	Store     string // "distash:<pool>" or a peer's name
	Workload  string // the phase's label: Load, a–f, or a repeat such as c#2 (Phases)
	Ops       int64  // operations done, errors included
	Errors    int64
	Seconds   float64
	OpsPerSec float64
	PerOp     []OpStats // sorted by operation name
	FirstErr  string    // one error, if any
}

var workloadProps = map[string]map[string]string{
	"a": {prop.ReadProportion: "0.5", prop.UpdateProportion: "0.5", prop.RequestDistribution: "zipfian"},
	"b": {prop.ReadProportion: "0.95", prop.UpdateProportion: "0.05", prop.RequestDistribution: "zipfian"},
	"c": {prop.ReadProportion: "1", prop.UpdateProportion: "0", prop.RequestDistribution: "zipfian"},
	"d": {prop.ReadProportion: "0.95", prop.UpdateProportion: "0", prop.InsertProportion: "0.05", prop.RequestDistribution: "latest"},
	"e": {prop.ReadProportion: "0", prop.UpdateProportion: "0", prop.ScanProportion: "0.95", prop.InsertProportion: "0.05",
		prop.RequestDistribution: "zipfian", prop.MaxScanLength: "100", prop.ScanLengthDistribution: "uniform"},
	"f": {prop.ReadProportion: "0.5", prop.UpdateProportion: "0", prop.ReadModifyWriteProportion: "0.5", prop.RequestDistribution: "zipfian"},
}

func (o Options) withDefaults() (Options, error) {
	if len(o.Workloads) == 0 {
		o.Workloads = []string{"a", "b", "c", "d", "e", "f"}
	}
	for i, w := range o.Workloads {
		w = strings.ToLower(strings.TrimPrefix(strings.ToLower(w), "workload"))
		if _, ok := workloadProps[w]; !ok {
			return o, fmt.Errorf("ycsb: unknown workload %q (want a–f)", o.Workloads[i])
		}
		o.Workloads[i] = w
	}
	if o.Records == 0 {
		o.Records = 20000
	}
	if o.Operations == 0 {
		o.Operations = 100000
	}
	if o.Threads == 0 {
		o.Threads = 64
	}
	if o.FieldCount == 0 {
		o.FieldCount = 10
	}
	if o.FieldLength == 0 {
		o.FieldLength = 100
	}
	if o.Records < o.Threads || o.Operations < o.Threads {
		return o, fmt.Errorf("ycsb: --records (%d) and --operations (%d) must be at least --threads (%d)", o.Records, o.Operations, o.Threads)
	}
	switch o.Distribution {
	case "", "zipfian", "uniform", "latest", "hotspot", "sequential":
	default:
		return o, fmt.Errorf("ycsb: unknown distribution %q (zipfian, uniform, latest, hotspot, sequential)", o.Distribution)
	}
	if len(o.Pools) == 0 {
		o.Pools = []string{"dram"}
	}
	if len(o.Layouts) == 0 {
		o.Layouts = []string{dycsb.LayoutRecord}
	}
	for _, l := range o.Layouts {
		if err := dycsb.New(nil, nil).SetLayout(l); err != nil {
			return o, fmt.Errorf("ycsb: --layout: %w", err)
		}
	}
	for _, p := range o.Peers {
		switch p {
		case PeerRedis, PeerPostgres, PeerEtcd:
		default:
			return o, fmt.Errorf("ycsb: unknown peer %q (redis, postgres, etcd)", p)
		}
	}
	if o.OutDir == "" {
		o.OutDir = "bench-out"
	}
	return o, nil
}

// properties are go-ycsb's for one phase.
func (o Options) properties(workload string) *properties.Properties {
	p := properties.NewProperties()
	set := func(k, v string) { p.Set(k, v) }
	set(prop.Workload, "core")
	set(prop.RecordCount, fmt.Sprint(o.Records))
	set(prop.OperationCount, fmt.Sprint(o.Operations))
	set(prop.ThreadCount, fmt.Sprint(o.Threads))
	set(prop.FieldCount, fmt.Sprint(o.FieldCount))
	set(prop.FieldLength, fmt.Sprint(o.FieldLength))
	set(prop.ReadAllFields, "true")
	set(prop.Silence, "true")
	if workload == Load {
		set(prop.DoTransactions, "false")
		return p
	}
	for k, v := range workloadProps[workload] {
		set(k, v)
	}
	if o.Distribution != "" {
		set(prop.RequestDistribution, o.Distribution)
	}
	return p
}

var (
	measureOnce sync.Once
	stdoutMu    sync.Mutex
)

// newWorkload creates go-ycsb's core workload, which prints a line on
// stdout as it does: stdout goes to /dev/null meanwhile.
func newWorkload(p *properties.Properties) (goycsb.Workload, error) {
	// The core workload measures READ_MODIFY_WRITE in go-ycsb's global
	// measurement, which must exist; the figures reported are this
	// package's own.
	measureOnce.Do(func() { measurement.InitMeasure(properties.NewProperties()) })
	stdoutMu.Lock()
	defer stdoutMu.Unlock()
	if null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0); err == nil {
		saved := os.Stdout
		os.Stdout = null
		defer func() { os.Stdout = saved; null.Close() }()
	}
	return goycsb.GetWorkloadCreator("core").Create(p)
}

// store is one system under test.
type store struct {
	name  string
	db    goycsb.DB
	close func()
}

// Run loads every store and runs the workloads on it, prints the table
// and writes ycsb.png.
func Run(ctx context.Context, o Options, out io.Writer) ([]Result, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	var stores []store
	defer func() {
		for i := len(stores) - 1; i >= 0; i-- {
			stores[i].close()
		}
	}()

	// DiStash.
	var db *distash.DB
	if o.Cluster != "" {
		if db, err = distash.Open(ctx, o.Cluster); err != nil {
			return nil, err
		}
		stores = append(stores, store{name: "", close: func() { db.Close() }})
		fmt.Fprintf(out, "DiStash cluster %s\n", o.Cluster)
	} else {
		cfg := Config
		if o.ConfigTOML != "" {
			cfg = o.ConfigTOML
		}
		c, err := embedded.StartTOML(ctx, cfg, embedded.Options{Dir: o.Dir, TempPattern: "distash-bench-ycsb-"})
		if err != nil {
			return nil, err
		}
		db = c.DB
		stores = append(stores, store{name: "", close: c.Close})
		fmt.Fprintln(out, "DiStash embedded cluster")
	}
	for _, name := range o.Pools {
		pool, err := db.Pool(name)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(out, "  pool %s: %s, %s, prefix %q\n", name, pool.Engine(), pool.Medium(), pool.Prefix())
		for _, layout := range o.Layouts {
			// A private prefix per run and layout, so that a running
			// cluster's earlier runs do not show in scans.
			prefix := pool.Key(fmt.Appendf(nil, "ycsb-%d-%s/", time.Now().UnixNano(), layout))
			d := dycsb.New(db, prefix)
			if err := d.SetLayout(layout); err != nil {
				return nil, err
			}
			sname := "distash:" + name
			if layout != dycsb.LayoutRecord {
				sname += ":" + layout
			}
			stores = append(stores, store{name: sname, db: d, close: func() {}})
		}
	}

	// Peers.
	if len(o.Peers) > 0 {
		peers, err := startPeers(ctx, o, out)
		if peers != nil {
			stores = append(stores, store{name: "", close: peers.stop})
		}
		if err != nil {
			return nil, err
		}
		stores = append(stores, peers.stores...)
	}

	fmt.Fprintf(out, "YCSB: %d records of %d×%d bytes, %d operations per workload, %d threads, workloads %s\n",
		o.Records, o.FieldCount, o.FieldLength, o.Operations, o.Threads, strings.Join(o.Workloads, ","))
	// The stores take turns phase by phase (every store's load, then every
	// store's first workload, ...), each store's phases in order on its
	// own data: the figures a ratio compares are measured seconds apart,
	// not minutes, on a machine whose speed drifts (docs/benchmarks.md).
	phases := Phases(o.Workloads)
	var results []Result
	for _, w := range phases {
		for _, s := range stores {
			if s.db == nil {
				continue
			}
			if err := ctx.Err(); err != nil {
				return results, err
			}
			r, err := runPhase(ctx, o, s, w, out)
			if err != nil {
				return results, err
			}
			fmt.Fprintf(out, "  %-21s %-4s %9.0f ops/s  %7d ops in %5.1f s, %d errors%s\n", s.name, r.Workload, r.OpsPerSec, r.Ops, r.Seconds, r.Errors, errSuffix(r))
			results = append(results, r)
		}
	}
	// The table and the chart list each store's phases together.
	order := map[string]int{}
	for _, s := range stores {
		if s.db != nil {
			order[s.name] = len(order)
		}
	}
	slices.SortStableFunc(results, func(a, b Result) int { return order[a.Store] - order[b.Store] })
	fmt.Fprintln(out)
	PrintTable(out, results)
	if len(o.Workloads) > len(slices.Compact(slices.Sorted(slices.Values(o.Workloads)))) {
		// A workload ran more than once: say what ran before each run.
		var order []string
		for i := range phases {
			order = append(order, PhaseTitle(phases, i))
		}
		fmt.Fprintf(out, "phases in order: %s\n", strings.Join(order, ", "))
	}
	if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
		return results, err
	}
	png := filepath.Join(o.OutDir, "ycsb.png")
	if err := Plot(png, results, o); err != nil {
		return results, err
	}
	fmt.Fprintf(out, "wrote %s\n", png)
	return results, nil
}

func errSuffix(r Result) string {
	if r.FirstErr == "" {
		return ""
	}
	return " (e.g. " + r.FirstErr + ")"
}

// peerSet are the started peer servers and their stores.
type peerSet struct {
	dir    string
	stop   func()
	stores []store
}

func startPeers(ctx context.Context, o Options, out io.Writer) (*peerSet, error) {
	need := map[string]struct {
		pkg   string
		check func() error
	}{
		PeerRedis:    {peerserver.RedisPackage, func() error { _, err := peerserver.RedisBinary(); return err }},
		PeerPostgres: {peerserver.PostgresPackage, func() error { _, _, err := peerserver.PostgresBinaries(); return err }},
		PeerEtcd:     {peerserver.EtcdPackage, func() error { _, err := peerserver.EtcdBinary(); return err }},
	}
	var missing []string
	for _, p := range o.Peers {
		if need[p].check() != nil {
			missing = append(missing, need[p].pkg)
		}
	}
	if len(missing) > 0 {
		if o.NoInstall {
			return nil, fmt.Errorf("ycsb: peers not installed: install them with `apt-get install -y %s`: %w", strings.Join(missing, " "), peerserver.ErrMissing)
		}
		fmt.Fprintf(out, "installing %s with apt-get (best effort)\n", strings.Join(missing, " "))
		if err := peerserver.Install(ctx, io.Discard, missing...); err != nil {
			fmt.Fprintf(out, "  %v\n", err)
		}
		for _, p := range o.Peers {
			if err := need[p].check(); err != nil {
				return nil, fmt.Errorf("ycsb: peer %s: %w (install it with `apt-get install -y %s`)", p, err, need[p].pkg)
			}
		}
	}
	dir, err := os.MkdirTemp("", "distash-bench-ycsb-peers-")
	if err != nil {
		return nil, err
	}
	ps := &peerSet{dir: dir}
	var stops []func()
	ps.stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
		os.RemoveAll(dir)
	}
	// The postgres user must reach its directory below this one.
	if err := os.Chmod(dir, 0o755); err != nil {
		return ps, err
	}
	for _, p := range o.Peers {
		switch p {
		case PeerRedis:
			r, err := peerserver.StartRedis(ctx, dir)
			if err != nil {
				return ps, err
			}
			stops = append(stops, r.Stop)
			d := newRedisDB(r.Addr, o.Threads)
			stops = append(stops, func() { d.Close() })
			ps.stores = append(ps.stores, store{name: p, db: d, close: func() {}})
			fmt.Fprintf(out, "  redis-server on %s (no persistence)\n", r.Addr)
		case PeerPostgres:
			pg, err := peerserver.StartPostgres(ctx, dir, o.Threads+20)
			if err != nil {
				return ps, err
			}
			stops = append(stops, pg.Stop)
			d, err := newPgDB(ctx, pg.ConnStr, prop.TableNameDefault, o.FieldCount)
			if err != nil {
				return ps, err
			}
			ps.stores = append(ps.stores, store{name: p, db: d, close: func() {}})
			fmt.Fprintf(out, "  postgres (durable, fsync on)\n")
		case PeerEtcd:
			e, err := peerserver.StartEtcd(ctx, dir)
			if err != nil {
				return ps, err
			}
			stops = append(stops, e.Stop)
			d, err := newEtcdDB(e.Endpoint)
			if err != nil {
				return ps, err
			}
			stops = append(stops, func() { d.Close() })
			ps.stores = append(ps.stores, store{name: p, db: d, close: func() {}})
			fmt.Fprintf(out, "  etcd on %s (durable, fsync per commit)\n", e.Endpoint)
		}
	}
	return ps, nil
}

// recorder collects the calls one go-ycsb operation made.
type recorder struct{ ops []string }

type recorderKey struct{}

// measuringDB notes each call in the thread's recorder.
type measuringDB struct{ goycsb.DB }

func note(ctx context.Context, op string) {
	if r, ok := ctx.Value(recorderKey{}).(*recorder); ok {
		r.ops = append(r.ops, op)
	}
}

func (m measuringDB) Read(ctx context.Context, table, key string, fields []string) (map[string][]byte, error) {
	note(ctx, "READ")
	return m.DB.Read(ctx, table, key, fields)
}

func (m measuringDB) Scan(ctx context.Context, table, startKey string, count int, fields []string) ([]map[string][]byte, error) {
	note(ctx, "SCAN")
	return m.DB.Scan(ctx, table, startKey, count, fields)
}

func (m measuringDB) Update(ctx context.Context, table, key string, values map[string][]byte) error {
	note(ctx, "UPDATE")
	return m.DB.Update(ctx, table, key, values)
}

func (m measuringDB) Insert(ctx context.Context, table, key string, values map[string][]byte) error {
	note(ctx, "INSERT")
	return m.DB.Insert(ctx, table, key, values)
}

func (m measuringDB) Delete(ctx context.Context, table, key string) error {
	note(ctx, "DELETE")
	return m.DB.Delete(ctx, table, key)
}

// opName names one go-ycsb operation by the calls it made.
func opName(ops []string) string {
	switch {
	case len(ops) == 1:
		return ops[0]
	case len(ops) == 2 && ops[0] == "READ" && ops[1] == "UPDATE":
		return "READ_MODIFY_WRITE"
	case len(ops) == 0:
		return "NONE"
	}
	return strings.Join(ops, "+")
}

const maxLatency = 60 * time.Second

type threadStats struct {
	hists  map[string]*hdrhistogram.Histogram
	errs   map[string]int64
	first  error
	nTotal int64
}

// Phases labels the load and the workloads in the order they run: a
// workload's first run is its letter, a repeat gets #2, #3, ... (c, a, c
// gives load, c, a, c#2), so that the table, the chart and any file tell
// "C right after the load" (reads of data at rest, served by the stash's
// engine) from "C after A" (reads of keys A just rewrote, many still in
// the stash's MVCC window).
func Phases(workloads []string) []string {
	seen := map[string]int{}
	out := []string{Load}
	for _, w := range workloads {
		seen[w]++
		if n := seen[w]; n > 1 {
			w = fmt.Sprintf("%s#%d", w, n)
		}
		out = append(out, w)
	}
	return out
}

// phaseWorkload is the workload a phase label runs (c#2: c).
func phaseWorkload(label string) string {
	w, _, _ := strings.Cut(label, "#")
	return w
}

// PhaseTitle names phases[i] for the chart: "load", "workload A", and
// for a workload that runs more than once, what ran before it:
// "workload C (after load)", "workload C#2 (after A)".
func PhaseTitle(phases []string, i int) string {
	ph := phases[i]
	if ph == Load {
		return ph
	}
	title := "workload " + strings.ToUpper(ph)
	repeated := false
	for j, other := range phases {
		if j != i && other != Load && phaseWorkload(other) == phaseWorkload(ph) {
			repeated = true
		}
	}
	if repeated && i > 0 {
		prev := phases[i-1]
		if prev != Load {
			prev = strings.ToUpper(prev)
		}
		title += " (after " + prev + ")"
	}
	return title
}

// runPhase runs the load or one workload (a phase label of Phases) on s.
func runPhase(ctx context.Context, o Options, s store, workload string, out io.Writer) (Result, error) {
	p := o.properties(phaseWorkload(workload))
	wl, err := newWorkload(p)
	if err != nil {
		return Result{}, err
	}
	defer wl.Close()
	total := o.Operations
	if workload == Load {
		total = o.Records
	}
	var bar *progressbar.ProgressBar
	if o.Progress {
		bar = progressbar.NewOptions(total, progressbar.OptionSetWriter(out),
			progressbar.OptionSetDescription(fmt.Sprintf("  %s %s", s.name, workload)),
			progressbar.OptionShowCount(), progressbar.OptionShowIts(), progressbar.OptionSetItsString("op"),
			progressbar.OptionThrottle(200*time.Millisecond), progressbar.OptionClearOnFinish())
	}
	var done atomic.Int64
	stopBar := make(chan struct{})
	barDone := make(chan struct{})
	go func() {
		defer close(barDone)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stopBar:
				if bar != nil {
					bar.Set(total)
					bar.Finish()
				}
				return
			case <-t.C:
				if bar != nil {
					bar.Set(int(done.Load()))
				}
			}
		}
	}()

	db := measuringDB{s.db}
	stats := make([]*threadStats, o.Threads)
	var wg sync.WaitGroup
	start := time.Now()
	for t := range o.Threads {
		n := total / o.Threads
		if t < total%o.Threads {
			n++
		}
		ts := &threadStats{hists: map[string]*hdrhistogram.Histogram{}, errs: map[string]int64{}}
		stats[t] = ts
		wg.Add(1)
		go func() {
			defer wg.Done()
			rec := &recorder{}
			tctx := wl.InitThread(ctx, t, o.Threads)
			tctx = s.db.InitThread(tctx, t, o.Threads)
			tctx = context.WithValue(tctx, recorderKey{}, rec)
			defer s.db.CleanupThread(tctx)
			defer wl.CleanupThread(tctx)
			for range n {
				if ctx.Err() != nil {
					return
				}
				rec.ops = rec.ops[:0]
				t0 := time.Now()
				var err error
				if workload == Load {
					err = wl.DoInsert(tctx, db)
				} else {
					err = wl.DoTransaction(tctx, db)
				}
				lat := time.Since(t0)
				op := opName(rec.ops)
				ts.nTotal++
				done.Add(1)
				if err != nil {
					ts.errs[op]++
					if ts.first == nil {
						ts.first = fmt.Errorf("%s: %w", op, err)
					}
					continue
				}
				h := ts.hists[op]
				if h == nil {
					h = hdrhistogram.New(1, int64(maxLatency/time.Microsecond), 3)
					ts.hists[op] = h
				}
				h.RecordValue(max(1, lat.Microseconds()))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(stopBar)
	<-barDone
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}

	r := Result{Store: s.name, Workload: workload, Seconds: elapsed.Seconds()}
	hists := map[string]*hdrhistogram.Histogram{}
	errs := map[string]int64{}
	for _, ts := range stats {
		r.Ops += ts.nTotal
		if ts.first != nil && r.FirstErr == "" {
			r.FirstErr = ts.first.Error()
		}
		for op, h := range ts.hists {
			if hists[op] == nil {
				hists[op] = hdrhistogram.New(1, int64(maxLatency/time.Microsecond), 3)
			}
			hists[op].Merge(h)
		}
		for op, n := range ts.errs {
			errs[op] += n
			r.Errors += n
		}
	}
	r.OpsPerSec = float64(r.Ops-r.Errors) / r.Seconds
	ops := map[string]bool{}
	for op := range hists {
		ops[op] = true
	}
	for op := range errs {
		ops[op] = true
	}
	for _, op := range slices.Sorted(maps.Keys(ops)) {
		st := OpStats{Op: op, Errors: errs[op]}
		if h := hists[op]; h != nil {
			st.Count = h.TotalCount()
			st.P50 = time.Duration(h.ValueAtQuantile(50)) * time.Microsecond
			st.P99 = time.Duration(h.ValueAtQuantile(99)) * time.Microsecond
		}
		r.PerOp = append(r.PerOp, st)
	}
	return r, nil
}

// FormatLatency prints d in milliseconds with two or three significant
// figures (the benchmarks' tables).
func FormatLatency(d time.Duration) string {
	switch {
	case d >= 10*time.Millisecond:
		return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
	case d >= time.Millisecond:
		return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
	}
}

// PrintTable prints one row per store, phase and operation type: the
// phase's throughput, each peer's throughput as a multiple of DiStash's
// (the first DiStash store's) in the same phase, and the operation's p50
// and p99.
func PrintTable(out io.Writer, results []Result) {
	base := map[string]float64{}
	baseName := ""
	for _, r := range results {
		if strings.HasPrefix(r.Store, "distash:") {
			if baseName == "" {
				baseName = r.Store
			}
			if r.Store == baseName {
				base[r.Workload] = r.OpsPerSec
			}
		}
	}
	fmt.Fprintf(out, "%-21s %-5s %10s %9s  %-18s %9s %9s %9s %7s\n", "store", "wl", "ops/s", "vs "+strings.TrimPrefix(baseName, "distash:"), "operation", "count", "p50", "p99", "errors")
	for _, r := range results {
		ratio := "-"
		if b := base[r.Workload]; b > 0 && r.Store != baseName {
			ratio = fmt.Sprintf("%.2f×", r.OpsPerSec/b)
		}
		for i, op := range r.PerOp {
			store, wl, ops, rt := r.Store, r.Workload, fmt.Sprintf("%.0f", r.OpsPerSec), ratio
			if i > 0 {
				store, wl, ops, rt = "", "", "", ""
			}
			fmt.Fprintf(out, "%-21s %-5s %10s %9s  %-18s %9d %9s %9s %7d\n", store, wl, ops, rt, op.Op, op.Count, FormatLatency(op.P50), FormatLatency(op.P99), op.Errors)
		}
	}
}

var colors = []color.RGBA{{0x1f, 0x77, 0xb4, 255}, {0xff, 0x7f, 0x0e, 255}, {0x2c, 0xa0, 0x2c, 255}, {0xd6, 0x27, 0x28, 255},
	{0x94, 0x67, 0xbd, 255}, {0x8c, 0x56, 0x4b, 255}, {0xe3, 0x77, 0xc2, 255}, {0x7f, 0x7f, 0x7f, 255}}

// Plot writes a grouped bar chart of ops/s per phase, one bar per store.
func Plot(path string, results []Result, o Options) error {
	var stores, phases []string
	for _, r := range results {
		if !slices.Contains(stores, r.Store) {
			stores = append(stores, r.Store)
		}
		if !slices.Contains(phases, r.Workload) {
			phases = append(phases, r.Workload)
		}
	}
	if len(results) == 0 {
		return errors.New("ycsb: nothing to plot")
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("YCSB (go-ycsb core workloads): %d records, %d ops, %d threads", o.Records, o.Operations, o.Threads)
	p.Y.Label.Text = "ops/s"
	p.Legend.Top = true
	w := vg.Points(60 / float64(max(1, len(stores))))
	maxY := 0.0
	for i, s := range stores {
		vals := make(plotter.Values, len(phases))
		for j, ph := range phases {
			for _, r := range results {
				if r.Store == s && r.Workload == ph {
					vals[j] = r.OpsPerSec
					maxY = max(maxY, r.OpsPerSec)
				}
			}
		}
		bars, err := plotter.NewBarChart(vals, w)
		if err != nil {
			return err
		}
		bars.Color = colors[i%len(colors)]
		bars.LineStyle.Width = 0
		bars.Offset = w * vg.Length(float64(i)-float64(len(stores)-1)/2)
		p.Add(bars)
		p.Legend.Add(s, bars)
	}
	names := make([]string, len(phases))
	perPhase := 1.3 // inches
	for i := range phases {
		names[i] = PhaseTitle(phases, i)
		if strings.Contains(names[i], "(after") {
			perPhase = 1.9 // room for the longer names
		}
	}
	p.NominalX(names...)
	p.Y.Min, p.Y.Max = 0, maxY*1.45 // the top for the legend
	p.Y.Tick.Marker = plot.TickerFunc(func(lo, hi float64) []plot.Tick {
		ts := plot.DefaultTicks{}.Ticks(lo, hi)
		for i := range ts {
			if ts[i].Label != "" {
				ts[i].Label = strconv.FormatFloat(ts[i].Value, 'f', -1, 64)
			}
		}
		return ts
	})
	return p.Save(vg.Length(max(6, perPhase*float64(len(phases))))*vg.Inch, 5*vg.Inch, path)
}
