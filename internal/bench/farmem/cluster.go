package farmem

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"image/color"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/distash/distash"
	"github.com/distash/distash/internal/embedded"
	"github.com/distash/distash/internal/farmem"
	"github.com/distash/distash/internal/farmem/model"
)

// The cluster mode (distash bench farmem --cluster) measures the serving
// path end to end: YCSB-C-like point reads (one key per read-only
// transaction, uniform keys) through the public client of an embedded
// cluster, on flash pools whose index is in far memory of each latency,
// with and without prefetching. Every (latency, prefetch) pair is a pool
// of its own in one cluster, so the rounds of all points alternate within
// seconds.

// ClusterOptions configure a cluster run. Zero values take the defaults.
type ClusterOptions struct {
	Latencies []time.Duration // default 0.1, 1, 2, 5, 10, 20 µs; the first is the baseline
	Records   int             // keys per pool (default 20,000)
	ValueSize int             // bytes per value (default 1,000, YCSB's 10×100)
	Threads   int             // client goroutines (default 64)
	// KeysPerRead > 1 makes each read one GetMulti of that many distinct
	// keys (default 1: one Get), so that the engine's share of a read's
	// CPU grows against the client's, gRPC's and the log's fixed cost per
	// transaction: the stash's lookups become the bottleneck, as the
	// paper's single-core engine was.
	KeysPerRead int
	Duration    time.Duration // measured time per point, split in Rounds (default 3s)
	Rounds      int           // default 5
	OutDir      string        // farmem-cluster.png and .csv (default bench-out)
	Dir         string        // the cluster's files (default temporary)
}

// ClusterPoint is one (latency, prefetch) point.
type ClusterPoint struct {
	Latency  time.Duration
	Prefetch bool
	OpsPerS  float64 // the fastest round
	Norm     float64 // median over rounds of ops/s over the baseline's in the same round
	// Per read (a transaction of KeysPerRead keys), from the stash's
	// far-memory counters: lines fetched, stall µs, the schedulers' own
	// CPU µs.
	Lines, StallUs, EngineUs float64
	CPUUs                    float64 // the process's CPU µs per read (client, gRPC, log, stash, engine)
	Model, ModelCounted      float64 // normalised: the engine alone; with the rest of the CPU counted
}

func (o ClusterOptions) withDefaults() ClusterOptions {
	if len(o.Latencies) == 0 {
		for _, us := range []float64{0.1, 1, 2, 5, 10, 20} {
			o.Latencies = append(o.Latencies, time.Duration(us*1000))
		}
	}
	if o.Records == 0 {
		o.Records = 20000
	}
	if o.ValueSize == 0 {
		o.ValueSize = 1000
	}
	if o.Threads == 0 {
		o.Threads = 64
	}
	if o.KeysPerRead < 1 {
		o.KeysPerRead = 1
	}
	if o.Duration == 0 {
		o.Duration = 3 * time.Second
	}
	if o.Rounds == 0 {
		o.Rounds = 5
	}
	if o.OutDir == "" {
		o.OutDir = "bench-out"
	}
	return o
}

func poolName(lat time.Duration, prefetch bool) string {
	p := "p"
	if !prefetch {
		p = "n"
	}
	return fmt.Sprintf("fm%dns%s", lat.Nanoseconds(), p)
}

// clusterTOML is one flash pool per point, one stash each, replication 1,
// ephemeral (no fsync: the point is the reads); a short MVCC window so
// that reads reach the engines rather than the stashes' windows.
func clusterTOML(o ClusterOptions) string {
	var b strings.Builder
	b.WriteString("[cluster]\nmvcc_window = \"1s\"\n\n[log]\nreplicas = 1\n")
	for _, l := range o.Latencies {
		for _, pf := range []bool{true, false} {
			n := poolName(l, pf)
			fmt.Fprintf(&b, "\n[[pool]]\nname = %q\nprefix = \"%s/\"\nmedium = \"ssd\"\nmode = \"ephemeral\"\nengine = \"flash\"\nstashes = 1\nreplication = 1\ncapacity = \"1GiB\"\n\n[pool.flash]\nfar_memory = %q\nprefetch = %v\n",
				n, n, l.String(), pf)
		}
	}
	return b.String()
}

func cpuNs() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// RunCluster runs the cluster mode, prints a table and writes
// farmem-cluster.png and farmem-cluster.csv into OutDir.
func RunCluster(ctx context.Context, o ClusterOptions, out io.Writer) ([]ClusterPoint, error) {
	o = o.withDefaults()
	c, err := embedded.StartTOML(ctx, clusterTOML(o), embedded.Options{Dir: o.Dir, TempPattern: "distash-bench-farmem-"})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	db := c.DB
	type pt struct {
		name   string
		prefix string
		keys   [][]byte
		rounds []float64
		cpu    int64
		ops    int64
		*ClusterPoint
	}
	var pts []*pt
	val := make([]byte, o.ValueSize)
	for i := range val {
		val[i] = byte('a' + i%26)
	}
	fmt.Fprintf(out, "# loading %d keys of %d bytes into %d flash pools\n", o.Records, o.ValueSize, 2*len(o.Latencies))
	for _, l := range o.Latencies {
		for _, pf := range []bool{true, false} {
			p := &pt{name: poolName(l, pf), ClusterPoint: &ClusterPoint{Latency: l, Prefetch: pf}}
			pool, err := db.Pool(p.name)
			if err != nil {
				return nil, err
			}
			for i := 0; i < o.Records; i++ {
				p.keys = append(p.keys, pool.Key(fmt.Appendf(nil, "user%08d", i)))
			}
			for i := 0; i < len(p.keys); i += 200 {
				batch := p.keys[i:min(i+200, len(p.keys))]
				if err := db.Transact(ctx, func(tr *distash.Tx) error {
					for _, k := range batch {
						tr.Set(k, val)
					}
					return nil
				}); err != nil {
					return nil, fmt.Errorf("load %s: %w", p.name, err)
				}
			}
			pts = append(pts, p)
		}
	}
	// Past the MVCC window, reads go to the engines.
	time.Sleep(2 * time.Second)
	read := func(p *pt, d time.Duration) (float64, error) {
		var n atomic.Int64
		var firstErr error
		var once sync.Once
		var wg sync.WaitGroup
		stop := time.Now().Add(d)
		for t := 0; t < o.Threads; t++ {
			wg.Add(1)
			go func(seed int64) {
				defer wg.Done()
				rng := rand.New(rand.NewSource(seed))
				keys := make([][]byte, o.KeysPerRead)
				for time.Now().Before(stop) && ctx.Err() == nil {
					pickKeys(rng, p.keys, keys)
					err := db.ReadTransact(ctx, func(tr *distash.Tx) error {
						if len(keys) == 1 {
							v, err := tr.Get(keys[0])
							return checkValue(keys[0], v, err, o.ValueSize)
						}
						vals, err := tr.GetMulti(keys)
						for i := 0; err == nil && i < len(keys); i++ {
							err = checkValue(keys[i], vals[i], nil, o.ValueSize)
						}
						return err
					})
					if err != nil {
						once.Do(func() { firstErr = err })
						return
					}
					n.Add(1)
				}
			}(rand.Int63())
		}
		wg.Wait()
		return float64(n.Load()) / d.Seconds(), firstErr
	}
	stats := func() map[string][4]float64 { // lookups, accesses, stall ns, busy ns
		m := map[string][4]float64{}
		for _, s := range c.Server.Stashes() {
			if f := s.FarMemory; f != nil {
				m[s.Pool] = [4]float64{float64(f.Lookups), float64(f.Accesses), float64(f.StallNs), float64(f.BusyNs)}
			}
		}
		return m
	}
	for _, p := range pts { // warm up
		if _, err := read(p, 100*time.Millisecond); err != nil {
			return nil, err
		}
	}
	before := stats()
	slice := o.Duration / time.Duration(o.Rounds)
	fmt.Fprintf(out, "# %d rounds of %v per point, %d client goroutines, %d key(s) per read\n", o.Rounds, slice, o.Threads, o.KeysPerRead)
	for r := 0; r < o.Rounds; r++ {
		for _, p := range pts {
			c0 := cpuNs()
			rate, err := read(p, slice)
			if err != nil {
				return nil, err
			}
			p.cpu += cpuNs() - c0
			p.ops += int64(rate * slice.Seconds())
			p.rounds = append(p.rounds, rate)
		}
	}
	after := stats()
	base := map[bool]*pt{}
	for _, p := range pts {
		// Per read transaction (KeysPerRead lookups each), so that the
		// model's parameters and the CPU per read count the same thing.
		a, b := after[p.name], before[p.name]
		if n := float64(p.ops); n > 0 && a[0] > b[0] {
			p.Lines, p.StallUs, p.EngineUs = (a[1]-b[1])/n, (a[2]-b[2])/1e3/n, (a[3]-b[3])/1e3/n
		}
		if p.ops > 0 {
			p.CPUUs = float64(p.cpu) / 1e3 / float64(p.ops)
		}
		p.OpsPerS = slices.Max(p.rounds)
		if p.Latency == o.Latencies[0] {
			base[p.Prefetch] = p
		}
	}
	// The model: parameters from the baseline of each series. The engine
	// alone is F lines per read and the schedulers' CPU per read; counted,
	// the rest of the process's CPU per read (client, gRPC, log, stash) is
	// one more suboperation per read without prefetches.
	params := func(b *pt, counted bool) model.Params {
		f := max(b.Lines, 1e-3)
		pr := model.Params{M: f, A: b.EngineUs * 1e3 / f, F: f, P: farmem.DefaultPrefetches}
		if !b.Prefetch {
			pr.Misses = f
		}
		if counted {
			pr.Others = []model.Class{{Name: "client+gRPC+log", N: 1, D: max(b.CPUUs-b.EngineUs, 0) * 1e3}}
		}
		return pr
	}
	l0 := float64(o.Latencies[0].Nanoseconds())
	for _, p := range pts {
		b := base[p.Prefetch]
		var ratios []float64
		for i := range p.rounds {
			ratios = append(ratios, p.rounds[i]/b.rounds[i])
		}
		slices.Sort(ratios)
		p.Norm = ratios[len(ratios)/2]
		l := float64(p.Latency.Nanoseconds())
		p.Model = params(b, false).Normalized(model.Probabilistic, l, l0)
		p.ModelCounted = params(b, true).Normalized(model.Probabilistic, l, l0)
	}
	var res []ClusterPoint
	for _, p := range pts {
		res = append(res, *p.ClusterPoint)
	}
	printCluster(out, res)
	if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
		return res, err
	}
	csvPath := filepath.Join(o.OutDir, "farmem-cluster.csv")
	if err := writeClusterCSV(csvPath, res); err != nil {
		return res, err
	}
	png := filepath.Join(o.OutDir, "farmem-cluster.png")
	if err := plotCluster(png, res, o.Latencies); err != nil {
		return res, err
	}
	fmt.Fprintf(out, "wrote %s, %s\n", csvPath, png)
	return res, nil
}

// pickKeys fills keys with distinct keys drawn uniformly from all.
func pickKeys(rng *rand.Rand, all, keys [][]byte) {
	for i := range keys {
		for {
			keys[i] = all[rng.Intn(len(all))]
			if !slices.ContainsFunc(keys[:i], func(k []byte) bool { return &k[0] == &keys[i][0] }) {
				break
			}
		}
	}
}

// checkValue is an error unless a read of k returned a value of size bytes.
func checkValue(k, v []byte, err error, size int) error {
	if err == nil && len(v) != size {
		err = fmt.Errorf("read %q: %d bytes, want %d", k, len(v), size)
	}
	return err
}

func printCluster(out io.Writer, res []ClusterPoint) {
	fmt.Fprintf(out, "%-8s %-8s %10s %6s %7s %7s %6s %8s %8s %8s\n", "L_mem", "prefetch", "ops/s", "norm", "model", "counted", "lines", "stall µs", "engine µs", "CPU µs")
	for _, p := range res {
		fmt.Fprintf(out, "%-8v %-8v %10.0f %6.3f %7.3f %7.3f %6.2f %8.2f %8.2f %8.1f\n", p.Latency, p.Prefetch, p.OpsPerS, p.Norm, p.Model, p.ModelCounted, p.Lines, p.StallUs, p.EngineUs, p.CPUUs)
	}
}

// ClusterCSVHeader is the first row of farmem-cluster.csv.
var ClusterCSVHeader = []string{"latency_us", "prefetch", "ops_per_s", "normalized", "model", "model_counted", "lines_per_read", "stall_us_per_read", "engine_us_per_read", "cpu_us_per_read"}

func writeClusterCSV(path string, res []ClusterPoint) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	w.Write(ClusterCSVHeader)
	for _, p := range res {
		w.Write([]string{fmt.Sprintf("%g", float64(p.Latency.Nanoseconds())/1e3), fmt.Sprint(p.Prefetch),
			fmt.Sprintf("%.0f", p.OpsPerS), fmt.Sprintf("%.4f", p.Norm), fmt.Sprintf("%.4f", p.Model), fmt.Sprintf("%.4f", p.ModelCounted),
			fmt.Sprintf("%.3f", p.Lines), fmt.Sprintf("%.3f", p.StallUs), fmt.Sprintf("%.3f", p.EngineUs), fmt.Sprintf("%.2f", p.CPUUs)})
	}
	w.Flush()
	return errors.Join(w.Error(), f.Close())
}

// plotCluster draws measured points, the model of the engine alone
// (dashed) and the model with the rest of the CPU counted (solid).
func plotCluster(path string, res []ClusterPoint, lats []time.Duration) error {
	p := plot.New()
	p.Title.Text = "flash pool through the client: point reads, index in far memory"
	p.X.Label.Text = "memory latency L_mem [µs]"
	p.Y.Label.Text = fmt.Sprintf("throughput normalized to L_mem=%gµs", float64(lats[0].Nanoseconds())/1e3)
	p.X.Scale = plot.LogScale{}
	var ticks []plot.Tick
	for _, l := range lats {
		v := float64(l.Nanoseconds()) / 1e3
		ticks = append(ticks, plot.Tick{Value: v, Label: fmt.Sprintf("%g", v)})
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	p.Y.Min, p.Y.Max = 0, 1.2
	p.Legend.Top = false
	for i, pf := range []bool{true, false} {
		var meas, mod, cnt plotter.XYs
		for _, r := range res {
			if r.Prefetch != pf {
				continue
			}
			x := float64(r.Latency.Nanoseconds()) / 1e3
			meas = append(meas, plotter.XY{X: x, Y: r.Norm})
			mod = append(mod, plotter.XY{X: x, Y: r.Model})
			cnt = append(cnt, plotter.XY{X: x, Y: r.ModelCounted})
		}
		name := "prefetch"
		if !pf {
			name = "no prefetch"
		}
		col := []color.Color{seriesColors[0], seriesColors[4]}[i]
		sc, err := plotter.NewScatter(meas)
		if err != nil {
			return err
		}
		sc.Color = col
		sc.Shape = draw.CircleGlyph{}
		l1, err := plotter.NewLine(mod)
		if err != nil {
			return err
		}
		l1.Color, l1.Dashes = col, []vg.Length{vg.Points(4), vg.Points(3)}
		l2, err := plotter.NewLine(cnt)
		if err != nil {
			return err
		}
		l2.Color = col
		p.Add(sc, l1, l2)
		p.Legend.Add(name+" measured", sc)
		p.Legend.Add(name+" model, engine alone", l1)
		p.Legend.Add(name+" model, client+gRPC+log counted", l2)
	}
	return p.Save(8*vg.Inch, 5*vg.Inch, path)
}
