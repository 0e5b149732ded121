// Package timeline is what the media benchmarks (bench ingest, bench graph)
// share for the paper's figures over time (Figures 9, 10 and 11): a
// sampler of the cluster's status once per interval — each stash's
// emulated device utilisation (from the difference of its cumulative busy
// seconds), queue length, MVCC window and durability lag, and the
// ratekeeper's limit — and writers of such series as CSV files and
// line-chart PNGs.
package timeline

import (
	"context"
	"encoding/csv"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/wire"
)

// StashPoint is one stash at one sample.
type StashPoint struct {
	Stash string // pool-index, as status names it
	Pool  string
	// BusyPct is the share of the interval its emulated device had at
	// least one I/O in service (iostat's %util), NaN without a device or
	// on the first sample.
	BusyPct     float64
	QueueLength int64 // I/Os waiting or in service at the sample (device)
	// ReadMiBs and WriteMiBs are the device's transfer rates over the
	// interval (NaN: no device or the first sample).
	ReadMiBs, WriteMiBs float64
	// ReadP99Ms is the p99 of the device's reads since it started.
	ReadP99Ms   float64
	WindowBytes int64
	// DurableLagS is how far its durable version is behind the committed
	// version, in seconds (what FoundationDB's ratekeeper calls the
	// durability lag).
	DurableLagS float64
	// busySeconds is the device's cumulative busy time (NaN: no device),
	// readBytes and writtenBytes its cumulative transfers.
	busySeconds, readBytes, writtenBytes float64
}

// Sample is the cluster at one instant, T seconds after the sampler
// started.
type Sample struct {
	T               float64
	RateLimit       float64 // transactions/s the ratekeeper allows; 0 = unlimited
	RateLimitReason string
	Stashes         []StashPoint
}

// StatusFunc returns the cluster's status (clusterstatus.Gather, or an
// embedded server's own).
type StatusFunc func(ctx context.Context) (*wire.StatusResponse, error)

// Sampler samples a cluster's status every interval until Stop.
type Sampler struct {
	status   StatusFunc
	interval time.Duration
	start    time.Time
	cancel   context.CancelFunc
	done     chan struct{}

	mu      sync.Mutex
	samples []Sample
	errs    int
	lastErr error
}

// Start samples status now and every interval after, until Stop.
func Start(ctx context.Context, status StatusFunc, interval time.Duration) *Sampler {
	ctx, cancel := context.WithCancel(ctx)
	s := &Sampler{status: status, interval: interval, start: time.Now(), cancel: cancel, done: make(chan struct{})}
	go s.run(ctx)
	return s
}

func (s *Sampler) run(ctx context.Context) {
	defer close(s.done)
	t := time.NewTicker(s.interval)
	defer t.Stop()
	var prev map[string]StashPoint
	var prevT float64
	for {
		qctx, cancel := context.WithTimeout(ctx, max(s.interval, 3*time.Second))
		st, err := s.status(qctx)
		cancel()
		now := time.Since(s.start).Seconds()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			s.mu.Lock()
			s.errs++
			s.lastErr = err
			s.mu.Unlock()
		} else {
			smp := sampleOf(st, now, prev, prevT)
			prev, prevT = map[string]StashPoint{}, now
			for _, p := range smp.Stashes {
				prev[p.Stash] = p
			}
			s.mu.Lock()
			s.samples = append(s.samples, smp)
			s.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// sampleOf turns a status into a sample; prev (taken at prevT) gives the
// busy seconds to difference.
func sampleOf(st *wire.StatusResponse, now float64, prev map[string]StashPoint, prevT float64) Sample {
	smp := Sample{T: now, RateLimit: st.RateLimit, RateLimitReason: st.RateLimitReason}
	for _, ss := range st.Stashes {
		p := StashPoint{
			Stash: fmt.Sprintf("%s-%d", ss.Pool, ss.Index), Pool: ss.Pool, BusyPct: math.NaN(), ReadP99Ms: math.NaN(),
			ReadMiBs: math.NaN(), WriteMiBs: math.NaN(),
			WindowBytes: ss.WindowBytes, busySeconds: math.NaN(),
			DurableLagS: math.Max(0, float64(st.CommittedVersion-ss.DurableVersion)/kv.VersionsPerSecond),
		}
		fillDevice(&p, ss)
		if q, ok := prev[p.Stash]; ok && !math.IsNaN(p.busySeconds) && !math.IsNaN(q.busySeconds) && now > prevT {
			dt := now - prevT
			p.BusyPct = math.Min(100, math.Max(0, 100*(p.busySeconds-q.busySeconds)/dt))
			p.ReadMiBs = (p.readBytes - q.readBytes) / dt / (1 << 20)
			p.WriteMiBs = (p.writtenBytes - q.writtenBytes) / dt / (1 << 20)
		}
		smp.Stashes = append(smp.Stashes, p)
	}
	sort.Slice(smp.Stashes, func(i, j int) bool { return smp.Stashes[i].Stash < smp.Stashes[j].Stash })
	return smp
}

// Started is when the sampler started (its samples' T counts from it).
func (s *Sampler) Started() time.Time { return s.start }

// Stop ends sampling and returns the samples (the first of each stash has
// no utilisation: nothing to difference it with).
func (s *Sampler) Stop() []Sample {
	s.cancel()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.samples
}

// Errors is how many status requests failed, and the last error.
func (s *Sampler) Errors() (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.errs, s.lastErr
}

// Line is one series of a chart.
type Line struct {
	Name   string
	XY     plotter.XYs // NaN values of Y break the line
	Dashed bool
}

var palette = []color.RGBA{{0x1f, 0x77, 0xb4, 255}, {0xff, 0x7f, 0x0e, 255}, {0x2c, 0xa0, 0x2c, 255}, {0xd6, 0x27, 0x28, 255},
	{0x94, 0x67, 0xbd, 255}, {0x8c, 0x56, 0x4b, 255}, {0xe3, 0x77, 0xc2, 255}, {0x7f, 0x7f, 0x7f, 255}, {0xbc, 0xbd, 0x22, 255}}

// Chart describes a line chart over time.
type Chart struct {
	Title, XLabel, YLabel string
	// YMax fixes the top of the Y axis (0: 1.5× the highest value, the
	// top third left for the legend).
	YMax float64
	// Colors maps a line's colour index (default: its position), so that
	// a pool keeps its colour across lines (p50 solid, p99 dashed).
	Colors []int
}

// Plot writes lines as a PNG at path.
func Plot(path string, c Chart, lines []Line) error {
	p := plot.New()
	p.Title.Text = c.Title
	p.X.Label.Text = c.XLabel
	p.Y.Label.Text = c.YLabel
	p.Legend.Top = true
	p.Legend.Left = true
	maxY := 0.0
	for _, l := range lines {
		for _, pt := range l.XY {
			if !math.IsNaN(pt.Y) {
				maxY = max(maxY, pt.Y)
			}
		}
	}
	if maxY == 0 {
		maxY = 1
	}
	p.Y.Min, p.Y.Max = 0, maxY*1.5
	if c.YMax > 0 {
		p.Y.Max = c.YMax
	}
	for i, l := range lines {
		col := palette[i%len(palette)]
		if i < len(c.Colors) {
			col = palette[c.Colors[i]%len(palette)]
		}
		var seg plotter.XYs
		first := true
		flush := func() error {
			if len(seg) == 0 {
				return nil
			}
			ln, err := plotter.NewLine(seg)
			if err != nil {
				return err
			}
			ln.Color = col
			ln.Width = vg.Points(1.5)
			if l.Dashed {
				ln.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			}
			p.Add(ln)
			if first {
				p.Legend.Add(l.Name, ln)
				first = false
			}
			seg = nil
			return nil
		}
		for _, pt := range l.XY {
			if math.IsNaN(pt.Y) {
				if err := flush(); err != nil {
					return err
				}
				continue
			}
			seg = append(seg, pt)
		}
		if err := flush(); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return p.Save(10*vg.Inch, 5*vg.Inch, path)
}

// WriteCSV writes a header and rows to path.
func WriteCSV(path string, header []string, rows [][]string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	_ = w.Write(header)
	_ = w.WriteAll(rows)
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// F formats a number for a CSV cell ("" for NaN: no value).
func F(v float64, decimals int) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return ""
	}
	return strconv.FormatFloat(v, 'f', decimals, 64)
}

// UtilisationRows are the CSV rows of Figure 11 (UtilisationHeader) of
// the samples' stashes that keep, each prefixed by labels; stashes
// without a device utilisation are left out.
func UtilisationRows(samples []Sample, keep func(StashPoint) bool, labels ...string) [][]string {
	var rows [][]string
	for _, s := range samples {
		for _, p := range s.Stashes {
			if math.IsNaN(p.BusyPct) || (keep != nil && !keep(p)) {
				continue
			}
			row := append([]string{F(s.T, 1)}, labels...)
			row = append(row, p.Stash, F(p.BusyPct, 1), strconv.FormatInt(p.QueueLength, 10), F(p.ReadMiBs, 2), F(p.WriteMiBs, 2),
				F(p.ReadP99Ms, 3), F(p.DurableLagS, 2), F(float64(p.WindowBytes)/(1<<20), 1))
			rows = append(rows, row)
		}
	}
	return rows
}

// UtilisationHeader is the header of UtilisationRows with labelNames.
func UtilisationHeader(labelNames ...string) []string {
	h := append([]string{"time_s"}, labelNames...)
	return append(h, "stash", "busy_pct", "queue_length", "read_mib_s", "write_mib_s", "read_p99_ms_since_start", "durable_lag_s", "window_mib")
}

// UtilisationLines is one line per stash (that keep) of its device's
// busy percentage over time, named prefix+stash.
func UtilisationLines(samples []Sample, keep func(StashPoint) bool, prefix string) []Line {
	byStash := map[string]plotter.XYs{}
	var order []string
	for _, s := range samples {
		for _, p := range s.Stashes {
			if math.IsNaN(p.BusyPct) || (keep != nil && !keep(p)) {
				continue
			}
			if _, ok := byStash[p.Stash]; !ok {
				order = append(order, p.Stash)
			}
			byStash[p.Stash] = append(byStash[p.Stash], plotter.XY{X: s.T, Y: p.BusyPct})
		}
	}
	var lines []Line
	for _, st := range order {
		lines = append(lines, Line{Name: prefix + st, XY: byStash[st]})
	}
	return lines
}

// MeanBusy is the mean device utilisation (%) over the samples of the
// stashes that keep, NaN without any.
func MeanBusy(samples []Sample, keep func(StashPoint) bool) float64 {
	sum, n := 0.0, 0
	for _, s := range samples {
		for _, p := range s.Stashes {
			if !math.IsNaN(p.BusyPct) && (keep == nil || keep(p)) {
				sum += p.BusyPct
				n++
			}
		}
	}
	if n == 0 {
		return math.NaN()
	}
	return sum / float64(n)
}

// ReadCSV reads a CSV file written by WriteCSV and checks its shape: the
// header is want, every row has its columns, and the columns named in
// numeric hold numbers (or nothing). It returns the rows.
func ReadCSV(path string, want []string, numeric ...string) ([][]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(recs) == 0 {
		return nil, fmt.Errorf("%s: empty, not even a header", path)
	}
	if fmt.Sprint(recs[0]) != fmt.Sprint(want) {
		return nil, fmt.Errorf("%s: header %q, want %q", path, recs[0], want)
	}
	col := map[string]int{}
	for i, h := range want {
		col[h] = i
	}
	for i, r := range recs[1:] {
		for _, name := range numeric {
			j, ok := col[name]
			if !ok {
				return nil, fmt.Errorf("%s: no column %q", path, name)
			}
			if r[j] == "" {
				continue
			}
			if _, err := strconv.ParseFloat(r[j], 64); err != nil {
				return nil, fmt.Errorf("%s: row %d: %s = %q is not a number", path, i+1, name, r[j])
			}
		}
	}
	return recs[1:], nil
}

// Median is the median of v (the mean of the middle two for an even
// count; NaN for none). v is not changed.
func Median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
