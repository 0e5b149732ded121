// Package ingest is the ingest benchmark of the DiStash paper's Figures 9,
// 10 and 11: concurrent clients inserting single-key transactions into a
// DRAM ephemeral pool and into SSD durable pools (Pebble and SQLite),
// reporting transactions per second and commit latency percentiles, and,
// per second, throughput (Figure 9), latency (Figure 10) and the emulated
// devices' utilisation (Figure 11) as CSV and PNG. With a device profile
// the durable pools' stashes run on emulated devices (internal/fsys/devfs)
// instead of this machine's disk and page cache.
package ingest

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/schollz/progressbar/v3"
	"gonum.org/v1/plot/plotter"

	"github.com/distash/distash"
	"github.com/distash/distash/config"
	"github.com/distash/distash/internal/bench/timeline"
	"github.com/distash/distash/internal/clusterstatus"
	"github.com/distash/distash/internal/embedded"
	"github.com/distash/distash/internal/wire"
)

// Options configure a run.
type Options struct {
	Pools     []string      // pool names to ingest into: dram, pebble, sqlite
	Clients   []int         // concurrent clients per run
	Duration  time.Duration // per run
	ValueSize int
	OutDir    string // where the PNG goes
	Dir       string // cluster directory (default: a temporary one)
	Progress  bool
	// Cluster, if set, is the cluster string of a running cluster (a
	// multi-process cluster's coordinators) to ingest into instead of an
	// embedded one; the pools named in Pools must exist there.
	Cluster string
	// ConfigTOML, if set, replaces Config for the embedded cluster (to
	// compare with a multi-process cluster of the same configuration).
	ConfigTOML string
	// DeviceProfile, if not "none" (or ""), gives the embedded cluster's
	// pools other than DRAM an emulated device of that profile (ssd, hdd,
	// nvm; ApplyDevice), scaled by DeviceScale.
	DeviceProfile string
	// DeviceScale slows the profile down (> 1: latencies ×, IOPS and
	// bandwidth ÷), so that two cores can drive the device to saturation;
	// 0 or 1: the profile as published.
	DeviceScale float64
}

// Result is one run's figures.
type Result struct {
	Pool          string
	Clients       int
	Txns          int64
	Errors        int64
	Seconds       float64
	TxnPerSec     float64
	P50, P95, P99 time.Duration
	Timeline      []float64 // txn/s per interval
	PerSecond     []Second  // each whole second of the run
	// Samples are the cluster's status once a second during the run.
	Samples []timeline.Sample
	// DeviceBusyPct is the mean utilisation of the pool's emulated
	// devices over the run (NaN: none emulated).
	DeviceBusyPct float64
	// ThrottledSeconds is how long the ratekeeper limited the rate.
	ThrottledSeconds float64
}

// Interval is the timeline's bucket width.
const Interval = 250 * time.Millisecond

// TwoPools is a cluster of one DRAM pool and one Pebble pool, one stash
// each, replication 1, one log replica (the YCSB benchmark's too).
const TwoPools = `
[cluster]
mvcc_window = "5s"

[log]
replicas = 1

[[pool]]
name = "dram"
prefix = "m/"
medium = "dram"
mode = "ephemeral"
engine = "memory"
stashes = 1
replication = 1
capacity = "4GiB"

[[pool]]
name = "pebble"
prefix = "p/"
medium = "ssd"
mode = "durable"
engine = "pebble"
stashes = 1
replication = 1
`

// Config is the benchmark's cluster: TwoPools and a SQLite pool, one
// stash per pool, replication 1.
const Config = TwoPools + `
[[pool]]
name = "sqlite"
prefix = "s/"
medium = "ssd"
mode = "durable"
engine = "sqlite"
stashes = 1
replication = 1
`

// Run runs every (pool, clients) combination and prints a table; with
// OutDir it writes the figures over time there (Figures 9, 10, 11).
func Run(ctx context.Context, o Options, out io.Writer) ([]Result, error) {
	if o.DeviceProfile == "" {
		o.DeviceProfile = "none"
	}
	var db *distash.DB
	var cluster string
	if o.Cluster != "" {
		if o.DeviceProfile != "none" {
			return nil, fmt.Errorf("--device-profile is for the embedded cluster; a running cluster emulates the devices its configuration gives ([pool.device])")
		}
		var err error
		if db, err = distash.Open(ctx, o.Cluster); err != nil {
			return nil, err
		}
		defer db.Close()
		cluster = o.Cluster
		fmt.Fprintf(out, "cluster %s\n", o.Cluster)
	} else {
		toml := Config
		if o.ConfigTOML != "" {
			toml = o.ConfigTOML
		}
		cfg, err := config.Parse([]byte(toml))
		if err != nil {
			return nil, err
		}
		notes, err := timeline.ApplyDevice(cfg, o.DeviceProfile, o.DeviceScale)
		if err != nil {
			return nil, err
		}
		c, err := embedded.Start(ctx, cfg, embedded.Options{Dir: o.Dir, TempPattern: "distash-bench-ingest-"})
		if err != nil {
			return nil, err
		}
		defer c.Close()
		db = c.DB
		cluster = c.Server.ClusterString()
		fmt.Fprintln(out, "embedded cluster")
		for _, n := range notes {
			fmt.Fprintln(out, n)
		}
	}

	var results []Result
	for _, poolName := range o.Pools {
		pool, err := db.Pool(poolName)
		if err != nil {
			return nil, err
		}
		for _, clients := range o.Clients {
			fmt.Fprintf(out, "ingest into %s (%s, %s) with %d client(s) for %s\n", poolName, pool.Engine(), pool.Medium(), clients, o.Duration)
			r, err := runOne(ctx, db, cluster, pool, clients, o, out)
			if err != nil {
				return nil, err
			}
			results = append(results, r)
		}
	}
	fmt.Fprintf(out, "\n%-8s %8s %10s %10s %9s %9s %9s %7s %13s %9s %9s\n", "pool", "clients", "txns", "txn/s", "p50", "p95", "p99", "errors", "txn/s min-max", "throttled", "dev busy")
	for _, r := range results {
		lo, hi := r.secondsRange()
		busy := "-"
		if !math.IsNaN(r.DeviceBusyPct) {
			busy = fmt.Sprintf("%.0f%%", r.DeviceBusyPct)
		}
		fmt.Fprintf(out, "%-8s %8d %10d %10.0f %9s %9s %9s %7d %13s %8.0fs %9s\n", r.Pool, r.Clients, r.Txns, r.TxnPerSec,
			r.P50.Round(time.Microsecond), r.P95.Round(time.Microsecond), r.P99.Round(time.Microsecond), r.Errors,
			fmt.Sprintf("%.0f-%.0f", lo, hi), r.ThrottledSeconds, busy)
	}
	if o.OutDir != "" {
		files, err := writeFigures(o.OutDir, results)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(out, "\nwrote %s\n", strings.Join(files, ", "))
	}
	return results, nil
}

// Second is one second of a run.
type Second struct {
	T         float64 // end of the second, since the run's start
	TxnPerSec float64
	P50, P99  time.Duration // commit latency of the transactions of that second (0: none)
}

// secondsRange is the lowest and highest per-second throughput.
func (r Result) secondsRange() (lo, hi float64) {
	if len(r.PerSecond) == 0 {
		return 0, 0
	}
	lo = math.Inf(1)
	for _, s := range r.PerSecond {
		lo, hi = min(lo, s.TxnPerSec), max(hi, s.TxnPerSec)
	}
	return lo, hi
}

// histMaxUs bounds the latencies recorded (10 s).
const histMaxUs = int64(10 * time.Second / time.Microsecond)

func runOne(ctx context.Context, db *distash.DB, cluster string, pool *distash.Pool, clients int, o Options, out io.Writer) (Result, error) {
	hist := hdrhistogram.New(1, histMaxUs, 3)
	nSec := int(math.Ceil(o.Duration.Seconds()))
	perSec := make([]*hdrhistogram.Histogram, nSec)
	for i := range perSec {
		perSec[i] = hdrhistogram.New(1, histMaxUs, 2)
	}
	var histMu sync.Mutex
	buckets := make([]atomic.Int64, int(o.Duration/Interval)+2)
	var txns, errs atomic.Int64
	sampler := timeline.Start(ctx, func(ctx context.Context) (*wire.StatusResponse, error) {
		return clusterstatus.Gather(ctx, cluster, nil)
	}, time.Second)
	start := time.Now()
	deadline := start.Add(o.Duration)
	var bar *progressbar.ProgressBar
	if o.Progress {
		bar = progressbar.NewOptions64(int64(o.Duration/time.Millisecond), progressbar.OptionSetWriter(out),
			progressbar.OptionSetDescription("  running"), progressbar.OptionThrottle(200*time.Millisecond), progressbar.OptionClearOnFinish())
	}
	runID := rand.Uint32()
	var wg sync.WaitGroup
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			value := make([]byte, o.ValueSize)
			local := hdrhistogram.New(1, histMaxUs, 3)
			localSec := make([]*hdrhistogram.Histogram, nSec)
			for seq := 0; ; seq++ {
				now := time.Now()
				if now.After(deadline) || ctx.Err() != nil {
					break
				}
				key := pool.Key([]byte(fmt.Sprintf("%08x/%04d/%010d", runID, c, seq)))
				t0 := time.Now()
				err := db.Transact(ctx, func(tr *distash.Tx) error {
					tr.Set(key, value)
					return nil
				})
				lat := time.Since(t0)
				if err != nil {
					errs.Add(1)
					continue
				}
				us := lat.Microseconds()
				local.RecordValue(us)
				txns.Add(1)
				// A transaction counts in the interval and second it ends in.
				at := time.Since(start)
				if b := int(at / Interval); b < len(buckets) {
					buckets[b].Add(1)
				}
				if s := int(at / time.Second); s < nSec {
					if localSec[s] == nil {
						localSec[s] = hdrhistogram.New(1, histMaxUs, 2)
					}
					localSec[s].RecordValue(us)
				}
			}
			histMu.Lock()
			hist.Merge(local)
			for i, h := range localSec {
				if h != nil {
					perSec[i].Merge(h)
				}
			}
			histMu.Unlock()
		}(c)
	}
	if bar != nil {
		done := make(chan struct{})
		go func() {
			wg.Wait()
			close(done)
		}()
		t := time.NewTicker(200 * time.Millisecond)
	loop:
		for {
			select {
			case <-done:
				break loop
			case <-t.C:
				bar.Set64(int64(min(time.Since(start), o.Duration) / time.Millisecond))
			}
		}
		t.Stop()
		bar.Finish()
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	samples := sampler.Stop()
	if n, err := sampler.Errors(); n > 0 {
		fmt.Fprintf(out, "  %d status samples failed, last: %v\n", n, err)
	}
	r := Result{
		Pool: pool.Name(), Clients: clients, Txns: txns.Load(), Errors: errs.Load(), Seconds: secs,
		TxnPerSec: float64(txns.Load()) / secs,
		P50:       time.Duration(hist.ValueAtQuantile(50)) * time.Microsecond,
		P95:       time.Duration(hist.ValueAtQuantile(95)) * time.Microsecond,
		P99:       time.Duration(hist.ValueAtQuantile(99)) * time.Microsecond,
		Samples:   samples,
	}
	n := int(o.Duration / Interval)
	for i := 0; i < n && i < len(buckets); i++ {
		r.Timeline = append(r.Timeline, float64(buckets[i].Load())/Interval.Seconds())
	}
	// Whole seconds only: a last partial second would look like a dip.
	for i := 0; i < int(o.Duration/time.Second); i++ {
		h := perSec[i]
		r.PerSecond = append(r.PerSecond, Second{
			T: float64(i + 1), TxnPerSec: float64(h.TotalCount()),
			P50: time.Duration(h.ValueAtQuantile(50)) * time.Microsecond,
			P99: time.Duration(h.ValueAtQuantile(99)) * time.Microsecond,
		})
	}
	ofPool := func(p timeline.StashPoint) bool { return p.Pool == r.Pool }
	r.DeviceBusyPct = timeline.MeanBusy(samples, ofPool)
	for i, s := range samples {
		if i > 0 && s.RateLimit > 0 {
			r.ThrottledSeconds += s.T - samples[i-1].T
		}
	}
	lo, hi := r.secondsRange()
	fmt.Fprintf(out, "  %.0f txn/s (per second %.0f-%.0f), p50 %s, p99 %s", r.TxnPerSec, lo, hi, r.P50.Round(time.Microsecond), r.P99.Round(time.Microsecond))
	if !math.IsNaN(r.DeviceBusyPct) {
		fmt.Fprintf(out, ", device busy %.0f%%", r.DeviceBusyPct)
	}
	if r.ThrottledSeconds > 0 {
		fmt.Fprintf(out, ", ratekeeper limited the rate for %.0f s", r.ThrottledSeconds)
	}
	fmt.Fprintln(out)
	return r, nil
}

// The files writeFigures writes.
const (
	Fig9CSV     = "fig9-throughput.csv"
	Fig9PNG     = "fig9-throughput.png"
	Fig10CSV    = "fig10-latency.csv"
	Fig10PNG    = "fig10-latency.png"
	Fig11CSV    = "fig11-utilisation.csv"
	Fig11PNG    = "fig11-utilisation.png"
	TimelinePNG = "ingest.png"
)

// writeFigures writes the paper's Figures 9, 10 and 11 (CSV, one row per
// second, and PNG) and the finer throughput timeline to dir.
func writeFigures(dir string, results []Result) ([]string, error) {
	label := func(r Result) string { return fmt.Sprintf("%s, %d clients", r.Pool, r.Clients) }
	ms := func(d time.Duration) string { return timeline.F(float64(d)/float64(time.Millisecond), 3) }
	// The ratekeeper's limit at each second (the sample nearest it).
	limitAt := func(r Result, t float64) (float64, string) {
		best, lim, why := math.Inf(1), 0.0, ""
		for _, s := range r.Samples {
			if d := math.Abs(s.T - t); d < best {
				best, lim, why = d, s.RateLimit, s.RateLimitReason
			}
		}
		return lim, why
	}
	var fig9, fig10 [][]string
	var lines9, lines10, lines11 []timeline.Line
	var colors10 []int
	for i, r := range results {
		var tp, p50, p99 plotter.XYs
		for _, s := range r.PerSecond {
			lim, why := limitAt(r, s.T)
			fig9 = append(fig9, []string{timeline.F(s.T, 0), r.Pool, strconv.Itoa(r.Clients), timeline.F(s.TxnPerSec, 0), timeline.F(lim, 0), why})
			fig10 = append(fig10, []string{timeline.F(s.T, 0), r.Pool, strconv.Itoa(r.Clients), strconv.FormatInt(int64(s.TxnPerSec), 10), ms(s.P50), ms(s.P99)})
			tp = append(tp, plotter.XY{X: s.T, Y: s.TxnPerSec})
			y50, y99 := math.NaN(), math.NaN()
			if s.TxnPerSec > 0 {
				y50, y99 = float64(s.P50)/float64(time.Millisecond), float64(s.P99)/float64(time.Millisecond)
			}
			p50 = append(p50, plotter.XY{X: s.T, Y: y50})
			p99 = append(p99, plotter.XY{X: s.T, Y: y99})
		}
		lines9 = append(lines9, timeline.Line{Name: label(r), XY: tp})
		lines10 = append(lines10, timeline.Line{Name: label(r) + " p50", XY: p50}, timeline.Line{Name: label(r) + " p99", XY: p99, Dashed: true})
		colors10 = append(colors10, i, i)
		ofPool := func(p timeline.StashPoint) bool { return p.Pool == r.Pool }
		lines11 = append(lines11, timeline.UtilisationLines(r.Samples, ofPool, fmt.Sprintf("%d clients: ", r.Clients))...)
	}
	var fig11 [][]string
	for _, r := range results {
		ofPool := func(p timeline.StashPoint) bool { return p.Pool == r.Pool }
		fig11 = append(fig11, timeline.UtilisationRows(r.Samples, ofPool, r.Pool, strconv.Itoa(r.Clients))...)
	}
	path := func(f string) string { return filepath.Join(dir, f) }
	steps := []func() error{
		func() error {
			return timeline.WriteCSV(path(Fig9CSV), []string{"time_s", "pool", "clients", "txn_per_s", "rate_limit", "rate_limit_reason"}, fig9)
		},
		func() error {
			return timeline.Plot(path(Fig9PNG), timeline.Chart{Title: "DiStash ingest: throughput over time (paper Fig. 9)", XLabel: "time (s)", YLabel: "transactions/s"}, lines9)
		},
		func() error {
			return timeline.WriteCSV(path(Fig10CSV), []string{"time_s", "pool", "clients", "txns", "p50_ms", "p99_ms"}, fig10)
		},
		func() error {
			return timeline.Plot(path(Fig10PNG), timeline.Chart{Title: "DiStash ingest: commit latency over time, p50 solid, p99 dashed (paper Fig. 10)",
				XLabel: "time (s)", YLabel: "latency (ms)", Colors: colors10}, lines10)
		},
		func() error {
			return timeline.WriteCSV(path(Fig11CSV), timeline.UtilisationHeader("pool", "clients"), fig11)
		},
		func() error {
			title := "DiStash ingest: emulated device utilisation per stash (paper Fig. 11)"
			if len(lines11) == 0 {
				title += ": no emulated device"
			}
			return timeline.Plot(path(Fig11PNG), timeline.Chart{Title: title, XLabel: "time (s)", YLabel: "utilisation (%)", YMax: 150}, lines11)
		},
		func() error { return plotTimeline(results, path(TimelinePNG)) },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return nil, err
		}
	}
	return []string{path(Fig9PNG), path(Fig10PNG), path(Fig11PNG), "their .csv", path(TimelinePNG)}, nil
}

// plotTimeline draws the throughput of every run in Interval steps.
func plotTimeline(results []Result, path string) error {
	var lines []timeline.Line
	for _, r := range results {
		pts := make(plotter.XYs, len(r.Timeline))
		for j, v := range r.Timeline {
			pts[j] = plotter.XY{X: float64(j) * Interval.Seconds(), Y: v}
		}
		lines = append(lines, timeline.Line{Name: fmt.Sprintf("%s, %d clients", r.Pool, r.Clients), XY: pts})
	}
	return timeline.Plot(path, timeline.Chart{Title: "DiStash ingest: single-key transactions (paper Fig. 9)", XLabel: "time (s)", YLabel: "transactions/s"}, lines)
}
