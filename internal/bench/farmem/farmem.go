// Package farmem is the benchmark behind `distash bench farmem`: it
// reproduces the experiments of Bando et al. (SIGMOD 2025) on emulated
// microsecond-latency memory (package internal/farmem) and compares them
// with the paper's throughput model (internal/farmem/model).
//
// Two workloads run on one emulated core (a scheduler of user-level
// threads, internal/farmem/ult):
//
//   - chase, the paper's microbenchmark: each operation follows a chain of
//     M pointers through far memory, then reads one 4 KiB block of a file;
//   - ycsb, the flash engine (internal/engine/flash) under a YCSB-like
//     read-mostly workload (95% reads, zipfian 0.99), its hash index and
//     read cache in far memory, updates committed by a writer goroutine.
//
// Each workload is swept over memory latencies with prefetching on and
// off and with IO on and off. For every series the model's parameters are
// measured from the run at the smallest latency; the table prints the
// measured throughput normalised to that run next to the model's
// prediction, and a PNG shows both.
package farmem

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sort"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/distash/distash/internal/bench/timeline"
	"github.com/distash/distash/internal/engine"
	"github.com/distash/distash/internal/engine/flash"
	"github.com/distash/distash/internal/farmem"
	"github.com/distash/distash/internal/farmem/chase"
	"github.com/distash/distash/internal/farmem/model"
	"github.com/distash/distash/internal/farmem/ult"
	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/workload"
)

// DefaultLatencies is the paper's sweep of L_mem.
var DefaultLatencies = []time.Duration{
	100 * time.Nanosecond, 500 * time.Nanosecond, time.Microsecond, 2 * time.Microsecond,
	3 * time.Microsecond, 5 * time.Microsecond, 10 * time.Microsecond, 20 * time.Microsecond,
}

// IO modes of Options.IOMode.
const (
	// IOEmulated reads the file for real through the page cache and makes
	// each read complete no earlier than DeviceLatency after submission: an
	// SSD with that latency and unbounded parallelism.
	IOEmulated = "emulated"
	// IODirect reads the device with O_DIRECT.
	IODirect = "direct"
	// IOCached reads through the page cache with no added latency.
	IOCached = "cached"
)

// Options configure a run; zero fields take the defaults in brackets.
type Options struct {
	Latencies []time.Duration // L_mem values [DefaultLatencies]
	Workloads []string        // "chase", "ycsb" [both]
	Prefetch  []bool          // [on, off]
	IO        []bool          // [on, off]
	// Virtual runs the microbenchmark in virtual time (deterministic, no
	// waiting); its compute costs are first measured in short real-time
	// runs, unless VirtualCosts gives them. The engine workload always
	// runs in real time.
	Virtual      bool
	VirtualCosts *VirtualCosts
	// BusyWait makes real-time stalls busy-wait on the clock, as a stalled
	// load occupies a core. By default they are skipped instead
	// (farmem.NewSkipClock): the code's own work is real and measured, the
	// stalls advance the clock but cost no real time. On a shared machine
	// a busy-wait of microseconds slows the code after it (measured by
	// farmem.MeasureWaitPenalty: 1.2-1.4x after 20 µs here), which a real
	// stalled load would not; skipping leaves the caches as they were.
	BusyWait bool
	Duration time.Duration // measured time per point in real time [2s]
	// Rounds, in real time, splits Duration into rounds over the whole
	// latency sweep and keeps each point's fastest round [10]: on a shared
	// machine a disturbance only ever slows a run down (measured on this
	// VM: the same point's rounds spread by ±10-20% with the thread on a
	// CPU all the time; five rounds left single points 15-20% off). A point whose
	// best round still shows the core's thread preempted (CPU share
	// below 0.9) is measured again, up to 4 times, and flagged if it
	// stays disturbed.
	Rounds int
	// Ops is the number of measured operations per point in virtual time
	// [30000]: a count rather than a time, because threads without
	// prefetching finish operations in bursts of a whole round.
	Ops    int64
	Warmup time.Duration // before each run [min(Duration/5, 100ms); virtual 2ms]
	Tasks  int           // user-level threads on the core [128]
	// Prefetches is P, the line-fill buffers of the emulated core [12].
	Prefetches int
	// Microbenchmark: pointers per operation [10], compute before each
	// access [0] and around the read [1µs each] beyond the code's own.
	M             int
	MemCompute    time.Duration
	IOPre, IOPost time.Duration
	// IOMode is IOEmulated, IODirect or IOCached [emulated].
	IOMode string
	// DeviceLatency is the emulated device's read latency [the measured
	// O_DIRECT 4 KiB read latency of Dir's device, else 80µs].
	DeviceLatency time.Duration
	Dir           string // data files [a temporary directory]
	FileBytes     int64  // microbenchmark file [256 MiB]
	ChainItems    int    // pointer-chain lines [1Mi = 64 MiB]
	// Engine workload: records [200000], value size [200], share of reads
	// [0.95], zipfian constant [0.99].
	Keys       int
	ValueBytes int
	ReadShare  float64
	Zipf       float64
	// Durable runs the engine durable (every update commit fsyncs) instead
	// of ephemeral [false]: with fsync the threads spend most of their
	// time waiting for commits and the run measures the disk's sync
	// latency rather than the lookups the model is about.
	Durable bool
	OutDir  string // where farmem.png goes [.]
	// Progress receives progress lines; nil prints them to out with "# ".
	Progress func(msg string)
}

func (o *Options) defaults() {
	if len(o.Latencies) == 0 {
		o.Latencies = DefaultLatencies
	}
	sort.Slice(o.Latencies, func(i, j int) bool { return o.Latencies[i] < o.Latencies[j] })
	if len(o.Workloads) == 0 {
		o.Workloads = []string{"chase", "ycsb"}
	}
	if len(o.Prefetch) == 0 {
		o.Prefetch = []bool{true, false}
	}
	if len(o.IO) == 0 {
		o.IO = []bool{true, false}
	}
	if o.Duration <= 0 {
		o.Duration = 2 * time.Second
	}
	if o.Ops <= 0 {
		o.Ops = 30000
	}
	if o.Rounds <= 0 {
		o.Rounds = 10
	}
	if o.Virtual {
		o.Rounds = 1
	}
	if o.Warmup <= 0 {
		o.Warmup = min(o.Duration/5, 100*time.Millisecond)
		if o.Virtual {
			o.Warmup = 2 * time.Millisecond
		}
	}
	if o.Tasks <= 0 {
		o.Tasks = 128
	}
	if o.Prefetches <= 0 {
		o.Prefetches = farmem.DefaultPrefetches
	}
	if o.M <= 0 {
		o.M = 10
	}
	if o.IOPre == 0 {
		o.IOPre = time.Microsecond
	}
	if o.IOPost == 0 {
		o.IOPost = time.Microsecond
	}
	if o.IOMode == "" {
		o.IOMode = IOEmulated
	}
	if o.FileBytes <= 0 {
		o.FileBytes = 256 << 20
	}
	if o.ChainItems <= 0 {
		o.ChainItems = 1 << 20
	}
	if o.Keys <= 0 {
		o.Keys = 200_000
	}
	if o.ValueBytes <= 0 {
		o.ValueBytes = 200
	}
	if o.ReadShare <= 0 {
		o.ReadShare = 0.95
	}
	if o.Zipf <= 0 {
		o.Zipf = 0.99
	}
	if o.OutDir == "" {
		o.OutDir = "."
	}
}

// VirtualCosts are the simulated costs of a virtual-time microbenchmark.
type VirtualCosts struct {
	Switch, Mem, IOPre, IOPost time.Duration
}

// Point is one measurement of a series.
type Point struct {
	Latency    time.Duration
	Result     ult.Result
	Throughput float64 // ops/s, the fastest round's
	// Normalized is the throughput relative to the series' first point:
	// the median over the sweep's rounds of this point's throughput over
	// the first point's in the same round (see finish).
	Normalized float64
	// Runs holds each round's result over the sweep, in order.
	Runs []ult.Result
	// Model is the modelled normalized throughput per model.Variant.
	Model [4]float64
	// Disturbed is set when no run of the point had the core's thread on
	// a CPU for 90% of the time: the figure is not trustworthy.
	Disturbed bool
}

// Error returns measured/modelled - 1 for variant v.
func (p Point) Error(v model.Variant) float64 { return p.Normalized/p.Model[v] - 1 }

// Series is one workload configuration swept over the latencies.
type Series struct {
	Workload string
	Prefetch bool
	IO       bool
	Virtual  bool
	// BusyWait: real time with stalls busy-waited (Options.BusyWait).
	BusyWait bool
	Params   model.Params // measured at the first latency
	Points   []Point
	Note     string
}

// Name is the series' label.
func (s *Series) Name() string {
	pf, io := "off", "off"
	if s.Prefetch {
		pf = "on"
	}
	if s.IO {
		io = "on"
	}
	return fmt.Sprintf("%s prefetch=%s io=%s", s.Workload, pf, io)
}

// At returns the point at latency l.
func (s *Series) At(l time.Duration) (Point, bool) {
	for _, p := range s.Points {
		if p.Latency == l {
			return p, true
		}
	}
	return Point{}, false
}

// Report is everything a run measured.
type Report struct {
	Options       Options
	Switch        ult.SwitchCosts
	DeviceLatency time.Duration
	DeviceNote    string
	IOBackend     string
	// WaitPenalty is the machine's slowdown of work right after a
	// busy-wait, at the sweep's latencies (see farmem.MeasureWaitPenalty).
	WaitPenalty []farmem.WaitPenalty
	Series      []*Series
	PNG         string
}

// Run runs the benchmark, prints tables to out and writes farmem.png to
// opts.OutDir.
func Run(ctx context.Context, opts Options, out io.Writer) error {
	_, err := RunReport(ctx, opts, out)
	return err
}

// RunReport is Run returning the measurements.
func RunReport(ctx context.Context, opts Options, out io.Writer) (*Report, error) {
	opts.defaults()
	rep := &Report{Options: opts}
	// The engine workload allocates; fewer collections, and one before
	// each point (in sweep), keep the collector out of the measurements.
	defer debug.SetGCPercent(debug.SetGCPercent(1000))
	progress := opts.Progress
	if progress == nil {
		progress = func(msg string) { fmt.Fprintf(out, "# %s\n", msg) }
	}
	dir := opts.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "distash-farmem-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		dir = d
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}

	progress("measuring the switch cost of user-level threads")
	sw, err := ult.MeasureSwitch(100_000)
	if err != nil {
		return nil, err
	}
	rep.Switch = sw
	fmt.Fprintf(out, "user-level thread switch: %v in the scheduler (T_sw: resume, yield, accounting), %v bare iter.Pull coroutine, %v a state machine's step call\n",
		sw.Scheduler, sw.Coroutine, sw.StateMachine)

	progress("measuring how much slower work runs right after a busy-wait")
	rep.WaitPenalty = farmem.MeasureWaitPenalty(opts.Latencies, 200*time.Millisecond)
	fmt.Fprintf(out, "work right after a busy-wait (a real-time stall) takes")
	for i, p := range rep.WaitPenalty {
		sep := ","
		if i == 0 {
			sep = ""
		}
		fmt.Fprintf(out, "%s %.2fx after %s", sep, p.Ratio, fmtLat(p.Wait))
	}
	fmt.Fprintf(out, " of the time it takes back to back (1.00 on a machine whose core keeps its caches while it spins; the model assumes 1)\n")

	if opts.IOMode == IOEmulated {
		if opts.DeviceLatency > 0 {
			rep.DeviceLatency, rep.DeviceNote = opts.DeviceLatency, "given"
		} else {
			progress("measuring the device's 4 KiB O_DIRECT read latency")
			if l, err := probeDevice(dir); err == nil {
				rep.DeviceLatency, rep.DeviceNote = l, "measured O_DIRECT 4 KiB read latency of the data directory's device, queue depth 1"
			} else {
				rep.DeviceLatency, rep.DeviceNote = 80*time.Microsecond, fmt.Sprintf("default (no O_DIRECT: %v)", err)
			}
		}
		fmt.Fprintf(out, "IO: reads through the page cache, completing no earlier than %v after submission (%s)\n", rep.DeviceLatency, rep.DeviceNote)
	} else {
		fmt.Fprintf(out, "IO: %s reads, no emulated latency\n", opts.IOMode)
	}

	for _, w := range opts.Workloads {
		var series []*Series
		var err error
		switch w {
		case "chase":
			series, err = runChase(ctx, opts, rep, dir, out, progress)
		case "ycsb":
			series, err = runYCSB(ctx, opts, rep, dir, out, progress)
		default:
			err = fmt.Errorf("farmem: unknown workload %q (chase, ycsb)", w)
		}
		if err != nil {
			return rep, err
		}
		rep.Series = append(rep.Series, series...)
	}
	printSummary(out, rep)
	if len(rep.Series) > 0 {
		path := filepath.Join(opts.OutDir, "farmem.png")
		if err := os.MkdirAll(opts.OutDir, 0o755); err != nil {
			return rep, fmt.Errorf("farmem: %w", err)
		}
		if err := plotReport(rep, path); err != nil {
			return rep, fmt.Errorf("farmem: plot: %w", err)
		}
		rep.PNG = path
		fmt.Fprintf(out, "wrote %s\n", path)
	}
	return rep, nil
}

// configs returns the (prefetch, io) pairs to run.
func configs(o Options) [][2]bool {
	var out [][2]bool
	for _, io := range o.IO {
		for _, pf := range o.Prefetch {
			out = append(out, [2]bool{pf, io})
		}
	}
	return out
}

func (o Options) schedConfig(lat time.Duration, virtual bool, dev time.Duration, seed int64) ult.Config {
	return ult.Config{
		Tasks: o.Tasks,
		Mem:   farmem.Config{Latency: lat, Prefetches: o.Prefetches, Virtual: virtual, SkipStalls: !o.BusyWait && !virtual},
		IO:    ult.IOConfig{Latency: dev, Jitter: 0.5, NoRead: virtual},
		Seed:  seed,
	}
}

func (o Options) runOptions(virtual bool) ult.RunOptions {
	if virtual {
		return ult.RunOptions{MaxOps: o.Ops, Warmup: o.Warmup}
	}
	d := o.Duration / time.Duration(o.Rounds)
	ro := ult.RunOptions{Duration: d, Warmup: o.Warmup}
	if d >= 200*time.Millisecond {
		ro.Slice = 50 * time.Millisecond
		ro.MinCPUShare = 0.9
		ro.MaxWall = 5 * d
	}
	return ro
}

// sweep measures s at every latency, in o.Rounds rounds over the sweep,
// keeping each point's fastest round.
func sweep(o Options, s *Series, progress func(string), run func(l time.Duration) (ult.Result, error)) error {
	s.Points = make([]Point, len(o.Latencies))
	runs := make([][]ult.Result, len(o.Latencies))
	for round := 1; round <= o.Rounds; round++ {
		for i, l := range o.Latencies {
			msg := fmt.Sprintf("%s: L_mem %s", s.Name(), fmtLat(l))
			if o.Rounds > 1 {
				msg += fmt.Sprintf(" (round %d of %d)", round, o.Rounds)
			}
			progress(msg)
			runtime.GC()
			r, err := run(l)
			if err != nil {
				return err
			}
			runs[i] = append(runs[i], r)
			keep(&s.Points[i], l, r)
		}
	}
	for i := range s.Points {
		s.Points[i].Runs = runs[i]
	}
	for i, l := range o.Latencies {
		for retry := 0; retry < 4 && !o.Virtual && s.Points[i].Result.CPUShare() < minCPUShare; retry++ {
			progress(fmt.Sprintf("%s: L_mem %s again (the core's thread was preempted)", s.Name(), fmtLat(l)))
			runtime.GC()
			r, err := run(l)
			if err != nil {
				return err
			}
			keep(&s.Points[i], l, r)
		}
		s.Points[i].Disturbed = s.Points[i].Result.CPUShare() < minCPUShare
	}
	return nil
}

// minCPUShare is the share of a run's time the core's thread must have been
// on a CPU for the run to count as undisturbed.
const minCPUShare = 0.9

// keep replaces *p by r if r is better: undisturbed beats disturbed, then
// faster beats slower.
func keep(p *Point, l time.Duration, r ult.Result) {
	x := r.Throughput()
	okNew, okOld := r.CPUShare() >= minCPUShare, p.Result.CPUShare() >= minCPUShare
	if p.Result.Ops == 0 || (okNew && !okOld) || (okNew == okOld && x > p.Throughput) {
		p.Latency, p.Result, p.Throughput = l, r, x
	}
}

// finish computes a series' parameters and model predictions.
func finish(s *Series, p int, tsw float64) {
	if len(s.Points) == 0 {
		return
	}
	first := s.Points[0]
	s.Params = model.FromResult(typical(first), p, tsw)
	l0 := float64(first.Latency)
	for i := range s.Points {
		pt := &s.Points[i]
		pt.Normalized = normalize(*pt, first)
		for v := model.Probabilistic; v <= model.Worst; v++ {
			pt.Model[v] = s.Params.Normalized(v, float64(pt.Latency), l0)
		}
	}
}

// clean reports whether r ran with the core's thread on a CPU.
func clean(r ult.Result) bool { return r.Ops > 0 && r.CPUShare() >= minCPUShare }

// normalize returns p's throughput relative to base's. On a shared
// machine the speed of the core drifts over seconds, and a whole round over
// the sweep tends to be fast or slow together (measured: the same point's
// rounds 83k-125k ops/s, with the thread on a CPU all the time), so the
// ratio of the fastest rounds of two points depends on which points had a
// lucky round. The median over rounds of the ratio within each round leaves
// the drift and single outliers out. With fewer than three rounds clean
// for both points it falls back to the ratio of the fastest rounds.
func normalize(p, base Point) float64 {
	var ratios []float64
	for i := range min(len(p.Runs), len(base.Runs)) {
		if clean(p.Runs[i]) && clean(base.Runs[i]) {
			ratios = append(ratios, p.Runs[i].Throughput()/base.Runs[i].Throughput())
		}
	}
	if len(ratios) < 3 {
		return p.Throughput / base.Throughput
	}
	return timeline.Median(ratios)
}

// typical returns the clean round of p with the median throughput (the
// lower of the middle two), or p's fastest round if fewer than three were
// clean. The model's parameters come from the baseline's typical round, so
// that they describe the same conditions as the normalisation (the fastest
// round's shorter C would make every stall-bound point read high).
func typical(p Point) ult.Result {
	var rs []ult.Result
	for _, r := range p.Runs {
		if clean(r) {
			rs = append(rs, r)
		}
	}
	if len(rs) < 3 {
		return p.Result
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].Throughput() < rs[j].Throughput() })
	return rs[(len(rs)-1)/2]
}

func printSeries(out io.Writer, s *Series) {
	p := s.Params
	mode := ""
	switch {
	case s.Virtual:
		mode = " (virtual time)"
	case s.BusyWait:
		mode = " (real time, stalls busy-waited)"
	default:
		mode = " (real time, stalls skipped)"
	}
	fmt.Fprintf(out, "\n%s%s\n", s.Name(), mode)
	if s.Note != "" {
		fmt.Fprintf(out, "  %s\n", s.Note)
	}
	pre, post := p.Other("io-pre"), p.Other("io-post")
	fmt.Fprintf(out, "  measured at %v (its median round): M=%.2f suboperations with a prefetch (F=%.2f lines), %.2f demand misses, T_sw=%.0fns T_mem=%.0fns",
		s.Points[0].Latency, p.M, p.F, p.Misses, p.Tsw, p.A-p.Tsw)
	fmt.Fprintf(out, " io-pre %.2fx%.0fns io-post %.2fx%.0fns", pre.N, pre.D, post.N, post.D)
	if w := p.Other("wait"); w.N > 0 {
		fmt.Fprintf(out, " wait %.2fx%.0fns", w.N, w.D)
	}
	fmt.Fprintf(out, "; C=%.2fµs, P=%d\n", p.CPU()/1000, p.P)
	fmt.Fprintf(out, "  %-7s %10s %6s | %6s %7s | %6s %7s | %6s %6s | %5s %5s %6s %5s\n",
		"L_mem", "ops/s", "norm", "model", "err", "closed", "err", "best", "worst", "cpu", "idle", "C µs", "F")
	for _, pt := range s.Points {
		r := pt.Result
		idle := 0.0
		if r.ElapsedNs > 0 {
			idle = float64(r.IdleNs) / float64(r.ElapsedNs)
		}
		flag := ""
		if pt.Disturbed {
			flag = " disturbed"
		}
		// C: the core's time per operation without stalls and idle
		// time, at this latency (the model assumes the one at the first).
		cpu, f := 0.0, 0.0
		if r.Ops > 0 {
			cpu = float64(r.ElapsedNs-r.IdleNs-r.Mem.Stalls()) / float64(r.Ops) / 1000
			f = float64(r.Mem.Prefetches+r.Mem.Misses) / float64(r.Ops)
		}
		fmt.Fprintf(out, "  %-7s %10.0f %6.3f | %6.3f %+6.1f%% | %6.3f %+6.1f%% | %6.3f %6.3f | %5.2f %5.2f %6.2f %5.2f%s\n",
			fmtLat(pt.Latency), pt.Throughput, pt.Normalized,
			pt.Model[model.Interleaved], 100*pt.Error(model.Interleaved),
			pt.Model[model.Probabilistic], 100*pt.Error(model.Probabilistic),
			pt.Model[model.Best], pt.Model[model.Worst], r.CPUShare(), idle, cpu, f, flag)
	}
}

func fmtLat(l time.Duration) string { return fmt.Sprintf("%gµs", float64(l)/1000) }

func printSummary(out io.Writer, rep *Report) {
	if len(rep.Series) == 0 {
		return
	}
	fmt.Fprintf(out, "\nsummary (model = the interleaving model; closed = its closed form)\n")
	for _, s := range rep.Series {
		worst, worstClosed := 0.0, 0.0
		var at, atClosed time.Duration
		disturbed := 0
		for _, p := range s.Points {
			if p.Disturbed {
				disturbed++
				continue
			}
			if e := math.Abs(p.Error(model.Interleaved)); e > worst {
				worst, at = e, p.Latency
			}
			if e := math.Abs(p.Error(model.Probabilistic)); e > worstClosed {
				worstClosed, atClosed = e, p.Latency
			}
		}
		line := fmt.Sprintf("  %-30s max |measured/model-1| %5.1f%% (at %s), closed form %5.1f%% (at %s)",
			s.Name(), 100*worst, fmtLat(at), 100*worstClosed, fmtLat(atClosed))
		if p, ok := s.At(5 * time.Microsecond); ok && s.Prefetch && s.IO {
			verdict := "holds"
			if p.Normalized < 0.85 {
				verdict = "does not hold"
			}
			line += fmt.Sprintf("; at 5µs %.3f of the %s figure (>= 0.85 %s)", p.Normalized, fmtLat(s.Points[0].Latency), verdict)
		}
		if disturbed > 0 {
			line += fmt.Sprintf(" [%d disturbed points left out]", disturbed)
		}
		fmt.Fprintln(out, line)
	}
}

// probeDevice measures the median latency of 4 KiB O_DIRECT reads in dir.
func probeDevice(dir string) (time.Duration, error) {
	path := filepath.Join(dir, "probe.dat")
	const size = 64 << 20
	if st, err := os.Stat(path); err != nil || st.Size() < size {
		f, err := os.Create(path)
		if err != nil {
			return 0, err
		}
		buf := make([]byte, 1<<20)
		rand.New(rand.NewSource(1)).Read(buf)
		for off := int64(0); off < size; off += int64(len(buf)) {
			if _, err := f.WriteAt(buf, off); err != nil {
				f.Close()
				return 0, err
			}
		}
		f.Sync()
		f.Close()
	}
	defer os.Remove(path)
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_DIRECT, 0)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	buf := chase.AlignedBuffer(4096)
	rng := rand.New(rand.NewSource(2))
	var lat []time.Duration
	for i := 0; i < 200; i++ {
		off := int64(rng.Intn(size/4096)) * 4096
		start := time.Now()
		if _, err := f.ReadAt(buf, off); err != nil {
			return 0, err
		}
		lat = append(lat, time.Since(start))
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return lat[len(lat)/2].Round(time.Microsecond), nil
}

// ---- the microbenchmark ----

func runChase(ctx context.Context, o Options, rep *Report, dir string, out io.Writer, progress func(string)) ([]*Series, error) {
	progress(fmt.Sprintf("chase: building a %d-line pointer chain and a %d MiB data file", o.ChainItems, o.FileBytes>>20))
	chain := chase.NewChain(o.ChainItems, 1)
	f, blocks, err := dataFile(dir, o.FileBytes, o.IOMode == IODirect)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	dev := time.Duration(0)
	if o.IOMode == IOEmulated {
		dev = rep.DeviceLatency
	}
	work := func(pf, io bool) *chase.Workload {
		w := &chase.Workload{Chain: chain, M: o.M, Fluctuate: true, Prefetch: pf, Compute: o.MemCompute}
		if io {
			w.File, w.Blocks, w.BlockSize = f, blocks, 4096
			w.IOPre, w.IOPost = o.IOPre, o.IOPost
		}
		return w
	}
	var swCost time.Duration
	if o.Virtual {
		vc := o.VirtualCosts
		how := "given"
		if vc == nil {
			// Measure the real costs of the code (the least disturbed of
			// three short runs), then simulate them.
			progress("chase: measuring compute costs in real time for the virtual-time runs")
			var best ult.Result
			for i := 0; i < 3; i++ {
				s, err := ult.New(o.schedConfig(o.Latencies[0], false, dev, 1))
				if err != nil {
					return nil, err
				}
				r, err := s.Run(ctx, ult.RunOptions{Duration: 200 * time.Millisecond, Warmup: 50 * time.Millisecond}, work(true, true).Body)
				s.Close()
				if err != nil {
					return nil, err
				}
				if r.Throughput() > best.Throughput() {
					best = r
				}
			}
			p := model.FromResult(best, o.Prefetches, float64(rep.Switch.Scheduler))
			vc = &VirtualCosts{
				Switch: rep.Switch.Scheduler,
				Mem:    time.Duration(max(p.A-p.Tsw, 0)),
				IOPre:  time.Duration(max(p.Other("io-pre").D-p.Tsw, 0)),
				IOPost: time.Duration(max(p.Other("io-post").D-p.Tsw, 0)),
			}
			how = "measured in real time"
			if dev == 0 {
				dev = time.Duration(best.IOWaitNs / max(best.IOs, 1))
			}
		}
		swCost = vc.Switch
		fmt.Fprintf(out, "chase: virtual time with costs %s: T_sw %v, T_mem %v, T_io_pre %v, T_io_post %v, device %v\n",
			how, vc.Switch, vc.Mem, vc.IOPre, vc.IOPost, dev)
		o.MemCompute, o.IOPre, o.IOPost = vc.Mem, vc.IOPre, vc.IOPost
	}
	var series []*Series
	for _, c := range configs(o) {
		s := &Series{Workload: "chase", Prefetch: c[0], IO: c[1], Virtual: o.Virtual, BusyWait: o.BusyWait && !o.Virtual}
		err := sweep(o, s, progress, func(l time.Duration) (ult.Result, error) {
			cfg := o.schedConfig(l, o.Virtual, dev, 1)
			cfg.SwitchCost = swCost
			sched, err := ult.New(cfg)
			if err != nil {
				return ult.Result{}, err
			}
			defer sched.Close()
			rep.IOBackend = sched.IOMode().String()
			return sched.Run(ctx, o.runOptions(o.Virtual), work(c[0], c[1]).Body)
		})
		if err != nil {
			return nil, err
		}
		finish(s, o.Prefetches, float64(rep.Switch.Scheduler))
		if o.Virtual {
			s.Params.Tsw = float64(swCost)
		}
		printSeries(out, s)
		series = append(series, s)
	}
	return series, nil
}

// dataFile returns a file of size bytes in dir (created once, random
// content) opened for reading, and its number of 4 KiB blocks.
func dataFile(dir string, size int64, direct bool) (*os.File, int64, error) {
	path := filepath.Join(dir, "chase.dat")
	if st, err := os.Stat(path); err != nil || st.Size() < size {
		f, err := os.Create(path)
		if err != nil {
			return nil, 0, err
		}
		buf := make([]byte, 1<<20)
		rng := rand.New(rand.NewSource(3))
		for off := int64(0); off < size; off += int64(len(buf)) {
			rng.Read(buf)
			if _, err := f.WriteAt(buf, off); err != nil {
				f.Close()
				return nil, 0, err
			}
		}
		// Write the file back now: the kernel would otherwise do it
		// during the first measurements, on the other CPU and the
		// memory bus, and slow them down (measured: the first round of
		// every point 10-25% slower than the rest).
		err = f.Sync()
		f.Close()
		if err != nil {
			return nil, 0, err
		}
	}
	flag := os.O_RDONLY
	if direct {
		flag |= syscall.O_DIRECT
	}
	f, err := os.OpenFile(path, flag, 0)
	if err != nil {
		return nil, 0, err
	}
	if !direct { // bring it into the page cache
		buf := make([]byte, 1<<20)
		for off := int64(0); off < size; off += int64(len(buf)) {
			f.ReadAt(buf, off)
		}
	}
	return f, size / 4096, nil
}

// ---- the engine under YCSB ----

// ycsbCommitBatch is how many updates the YCSB writer commits at once; well
// below the threads per core, which each wait for their update's commit.
const ycsbCommitBatch = 16

type update struct {
	key, value []byte
	done       atomic.Bool
}

// noPrefetch is a user-level thread whose prefetches do nothing, so the
// lookups' accesses stall for the whole latency.
type noPrefetch struct{ *ult.Task }

func (noPrefetch) Prefetch(p unsafe.Pointer, n uintptr) {}

func ycsbKey(i uint64) []byte { return appendKey(nil, i) }

// appendKey appends "user" and i in 12 digits to dst (without fmt, which
// would allocate on the core's hot path).
func appendKey(dst []byte, i uint64) []byte {
	dst = append(dst, "user"...)
	var d [12]byte
	for j := 11; j >= 0; j-- {
		d[j] = byte('0' + i%10)
		i /= 10
	}
	return append(dst, d[:]...)
}

func ycsbValue(i uint64, size int, rng *rand.Rand) []byte {
	v := make([]byte, max(size, 8))
	binary.BigEndian.PutUint64(v, i)
	for j := 8; j < len(v); j++ {
		v[j] = byte('a' + rng.Intn(26))
	}
	return v
}

func runYCSB(ctx context.Context, o Options, rep *Report, dir string, out io.Writer, progress func(string)) ([]*Series, error) {
	dev := time.Duration(0)
	if o.IOMode == IOEmulated {
		dev = rep.DeviceLatency
	}
	dataset := int64(o.Keys) * int64(o.ValueBytes+16+32)
	var series []*Series
	byIO := map[bool][][2]bool{}
	var ios []bool
	for _, c := range configs(o) {
		if _, ok := byIO[c[1]]; !ok {
			ios = append(ios, c[1])
		}
		byIO[c[1]] = append(byIO[c[1]], c)
	}
	z := workload.NewZipf(o.Keys, o.Zipf)
	runs := int64(0)
	for _, io := range ios {
		cfg := flash.Config{CacheFar: true, DirectIO: o.IOMode == IODirect, WriteBufferBytes: 1 << 20, CacheBytes: max(dataset/20, 1<<20)}
		note := fmt.Sprintf("%d keys of %d bytes, %.0f%% reads, zipfian %.2f; read cache %d MiB (far), index in far memory",
			o.Keys, o.ValueBytes, 100*o.ReadShare, o.Zipf, cfg.CacheBytes>>20)
		readShare := o.ReadShare
		if !io {
			// Updates would move keys out of the cache (a new location is
			// read from the file once): without IO the workload reads only.
			readShare = 1
			cfg.CacheBytes = 2 * dataset
			note = fmt.Sprintf("%d keys of %d bytes, reads only, zipfian %.2f; every value in the (far) read cache: no reads reach the file",
				o.Keys, o.ValueBytes, o.Zipf)
		}
		edir := filepath.Join(dir, fmt.Sprintf("ycsb-io%v", io))
		os.RemoveAll(edir)
		progress(fmt.Sprintf("ycsb: loading %d keys into a flash engine (io=%v)", o.Keys, io))
		if o.Durable {
			note += "; durable (updates fsync)"
		} else {
			note += "; ephemeral engine (updates are not synced)"
		}
		e, err := flash.OpenConfig(engine.Options{Dir: edir, Ephemeral: !o.Durable}, cfg)
		if err != nil {
			return nil, err
		}
		version, err := loadYCSB(e, o)
		if err != nil {
			e.Close()
			return nil, err
		}
		// Write the loaded log back before measuring (see dataFile).
		syscall.Sync()
		if !io { // warm the cache
			for i := 0; i < o.Keys; i++ {
				e.Get(ycsbKey(uint64(i)))
			}
		}
		for _, c := range byIO[io] {
			s := &Series{Workload: "ycsb", Prefetch: c[0], IO: io, Note: note, BusyWait: o.BusyWait}
			if o.Virtual {
				s.Note += " (real time: the engine does not run in virtual time)"
			}
			oo := o
			oo.ReadShare = readShare
			err := sweep(o, s, progress, func(l time.Duration) (ult.Result, error) {
				// Each run draws keys from new seeds: the engine's caches
				// outlive a run, and a run replaying an earlier run's
				// keys would find them cached. Short runs (high L_mem,
				// few operations) then hit far more often than long ones
				// (measured: disk reads per operation 0.27 at 0.1µs,
				// 0.05 at 20µs without prefetching), which is no
				// property of the engine.
				runs++
				return runYCSBPoint(ctx, oo, e, z, &version, l, dev, c[0], runs)
			})
			if err != nil {
				e.Close()
				return nil, err
			}
			finish(s, o.Prefetches, float64(rep.Switch.Scheduler))
			printSeries(out, s)
			m := e.Metrics()
			fmt.Fprintf(out, "  engine: %d segments, %d MiB log, %d reads from the file, %d cache hits, %d write-buffer hits, %d group commits for %d batches, %d lookups restarted, %d lock waits\n",
				m.Segments, m.LogBytes>>20, m.DiskReads, m.CacheHits, m.BufferHits, m.Commits, m.Batches, m.Restarts, m.LockWaits)
			series = append(series, s)
		}
		if err := e.Close(); err != nil {
			return nil, err
		}
		os.RemoveAll(edir)
	}
	return series, nil
}

func loadYCSB(e *flash.Engine, o Options) (int64, error) {
	rng := rand.New(rand.NewSource(4))
	version := int64(0)
	for start := 0; start < o.Keys; start += 2000 {
		var ws []engine.Write
		for i := start; i < min(start+2000, o.Keys); i++ {
			ws = append(ws, engine.Write{Key: ycsbKey(uint64(i)), Value: ycsbValue(uint64(i), o.ValueBytes, rng)})
		}
		version++
		if err := e.Apply(&engine.Batch{Version: kv.Version(version), Writes: ws}); err != nil {
			return version, err
		}
	}
	return version, nil
}

func runYCSBPoint(ctx context.Context, o Options, e *flash.Engine, z *workload.Zipf, version *int64, lat, dev time.Duration, prefetch bool, seed int64) (ult.Result, error) {
	sched, err := ult.New(o.schedConfig(lat, false, dev, seed))
	if err != nil {
		return ult.Result{}, err
	}
	defer sched.Close()
	updates := make(chan *update, 4*o.Tasks)
	writerDone := make(chan error, 1)
	go func() {
		var werr error
		for u := range updates {
			batch := []*update{u}
			// Gather a fixed number of updates per commit, not the updates
			// of a fixed time: batching by time made commits per operation
			// grow as throughput fell (16x from 0.1 to 20 µs without
			// prefetching), a cost per operation the model's parameters,
			// measured at 0.1 µs, do not carry. The timeout is only a
			// safety net; a round's last updates go when it closes updates.
			timeout := time.NewTimer(time.Second)
		gather:
			for len(batch) < ycsbCommitBatch {
				select {
				case u2, ok := <-updates:
					if !ok {
						break gather
					}
					batch = append(batch, u2)
				case <-timeout.C:
					break gather
				}
			}
			timeout.Stop()
			ws := make([]engine.Write, len(batch))
			for i, u := range batch {
				ws[i] = engine.Write{Key: u.key, Value: u.value}
			}
			*version++
			if err := e.Apply(&engine.Batch{Version: kv.Version(*version), Writes: ws}); err != nil && werr == nil {
				werr = err
			}
			for _, u := range batch {
				u.done.Store(true)
			}
		}
		writerDone <- werr
	}()
	var bad atomic.Value
	n := uint64(o.Keys)
	r, err := sched.Run(ctx, o.runOptions(false), func(t *ult.Task) {
		rng := t.Rand()
		var c farmem.Ctx = t
		if !prefetch {
			c = noPrefetch{t}
		}
		kbuf := make([]byte, 0, 16)
		for t.Running() {
			i := scramble(uint64(z.Next(rng)), n)
			key := appendKey(kbuf[:0], i)
			if rng.Float64() < o.ReadShare {
				v, ok, err := e.GetCtx(c, key)
				if err != nil || !ok || len(v) < 8 || binary.BigEndian.Uint64(v) != i {
					bad.CompareAndSwap(nil, fmt.Sprintf("Get(%s) = %d bytes, %v, %v", key, len(v), ok, err))
				}
			} else {
				u := &update{key: ycsbKey(i), value: ycsbValue(i, o.ValueBytes, rng)}
				for {
					select {
					case updates <- u:
					default:
						t.Yield()
						continue
					}
					break
				}
				t.Await(&u.done)
			}
			t.EndOp()
		}
	})
	close(updates)
	if werr := <-writerDone; werr != nil && err == nil {
		err = werr
	}
	if b := bad.Load(); b != nil && err == nil {
		err = errors.New("ycsb: wrong answer: " + b.(string))
	}
	return r, err
}

// scramble spreads popular ranks over the key space (YCSB's scrambled
// zipfian): FNV-1a of the rank's eight bytes, modulo n.
func scramble(rank, n uint64) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < 8; i++ {
		h ^= rank & 0xff
		h *= 1099511628211
		rank >>= 8
	}
	return h % n
}
