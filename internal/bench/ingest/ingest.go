// Package ingest is the ingest benchmark of the DiStash paper's Figures 9
// and 10: concurrent clients inserting single-key transactions into a DRAM
// ephemeral pool and into SSD durable pools (Pebble and SQLite), reporting
// transactions per second, commit latency percentiles and throughput over
// time as a PNG.
package ingest

import (
	"context"
	"fmt"
	"image/color"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/schollz/progressbar/v3"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/distash/distash"
	"github.com/distash/distash/internal/embedded"
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

// Run runs every (pool, clients) combination and prints a table.
func Run(ctx context.Context, o Options, out io.Writer) ([]Result, error) {
	var db *distash.DB
	if o.Cluster != "" {
		var err error
		if db, err = distash.Open(ctx, o.Cluster); err != nil {
			return nil, err
		}
		defer db.Close()
		fmt.Fprintf(out, "cluster %s\n", o.Cluster)
	} else {
		cfg := Config
		if o.ConfigTOML != "" {
			cfg = o.ConfigTOML
		}
		c, err := embedded.StartTOML(ctx, cfg, embedded.Options{Dir: o.Dir, TempPattern: "distash-bench-ingest-"})
		if err != nil {
			return nil, err
		}
		defer c.Close()
		db = c.DB
		fmt.Fprintln(out, "embedded cluster")
	}

	var results []Result
	for _, poolName := range o.Pools {
		pool, err := db.Pool(poolName)
		if err != nil {
			return nil, err
		}
		for _, clients := range o.Clients {
			fmt.Fprintf(out, "ingest into %s (%s, %s) with %d client(s) for %s\n", poolName, pool.Engine(), pool.Medium(), clients, o.Duration)
			r, err := runOne(ctx, db, pool, clients, o, out)
			if err != nil {
				return nil, err
			}
			results = append(results, r)
		}
	}
	fmt.Fprintf(out, "\n%-8s %8s %10s %10s %9s %9s %9s %7s\n", "pool", "clients", "txns", "txn/s", "p50", "p95", "p99", "errors")
	for _, r := range results {
		fmt.Fprintf(out, "%-8s %8d %10d %10.0f %9s %9s %9s %7d\n", r.Pool, r.Clients, r.Txns, r.TxnPerSec,
			r.P50.Round(time.Microsecond), r.P95.Round(time.Microsecond), r.P99.Round(time.Microsecond), r.Errors)
	}
	if o.OutDir != "" {
		path := filepath.Join(o.OutDir, "ingest.png")
		if err := plotTimeline(results, path); err != nil {
			return nil, err
		}
		fmt.Fprintf(out, "\nthroughput over time: %s\n", path)
	}
	return results, nil
}

func runOne(ctx context.Context, db *distash.DB, pool *distash.Pool, clients int, o Options, out io.Writer) (Result, error) {
	hist := hdrhistogram.New(1, int64(10*time.Second/time.Microsecond), 3)
	var histMu sync.Mutex
	buckets := make([]atomic.Int64, int(o.Duration/Interval)+2)
	var txns, errs atomic.Int64
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
			local := hdrhistogram.New(1, int64(10*time.Second/time.Microsecond), 3)
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
				local.RecordValue(lat.Microseconds())
				txns.Add(1)
				if b := int(time.Since(start) / Interval); b < len(buckets) {
					buckets[b].Add(1)
				}
			}
			histMu.Lock()
			hist.Merge(local)
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
	r := Result{
		Pool: pool.Name(), Clients: clients, Txns: txns.Load(), Errors: errs.Load(), Seconds: secs,
		TxnPerSec: float64(txns.Load()) / secs,
		P50:       time.Duration(hist.ValueAtQuantile(50)) * time.Microsecond,
		P95:       time.Duration(hist.ValueAtQuantile(95)) * time.Microsecond,
		P99:       time.Duration(hist.ValueAtQuantile(99)) * time.Microsecond,
	}
	n := int(o.Duration / Interval)
	for i := 0; i < n && i < len(buckets); i++ {
		r.Timeline = append(r.Timeline, float64(buckets[i].Load())/Interval.Seconds())
	}
	fmt.Fprintf(out, "  %.0f txn/s, p50 %s, p99 %s\n", r.TxnPerSec, r.P50.Round(time.Microsecond), r.P99.Round(time.Microsecond))
	return r, nil
}

func plotTimeline(results []Result, path string) error {
	p := plot.New()
	p.Title.Text = "DiStash ingest: single-key transactions (paper Fig. 9)"
	p.X.Label.Text = "time (s)"
	p.Y.Label.Text = "transactions/s"
	p.Legend.Top = true
	palette := []color.RGBA{{0x1f, 0x77, 0xb4, 255}, {0xff, 0x7f, 0x0e, 255}, {0x2c, 0xa0, 0x2c, 255}, {0xd6, 0x27, 0x28, 255},
		{0x94, 0x67, 0xbd, 255}, {0x8c, 0x56, 0x4b, 255}, {0xe3, 0x77, 0xc2, 255}, {0x7f, 0x7f, 0x7f, 255}, {0xbc, 0xbd, 0x22, 255}}
	maxY := 0.0
	for _, r := range results {
		for _, v := range r.Timeline {
			maxY = max(maxY, v)
		}
	}
	// Leave the top third free for the legend.
	p.Y.Min, p.Y.Max = 0, maxY*1.5
	p.Legend.Left = true
	for i, r := range results {
		pts := make(plotter.XYs, len(r.Timeline))
		for j, v := range r.Timeline {
			pts[j].X = float64(j) * Interval.Seconds()
			pts[j].Y = v
		}
		line, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		line.Color = palette[i%len(palette)]
		line.Width = vg.Points(1.5)
		p.Add(line)
		p.Legend.Add(fmt.Sprintf("%s, %d clients", r.Pool, r.Clients), line)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return p.Save(10*vg.Inch, 6*vg.Inch, path)
}
