package farmem

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/distash/distash/internal/farmem/model"
	"github.com/distash/distash/internal/farmem/ult"
)

// TestVirtualSweep runs the microbenchmark's sweep in virtual time and
// checks the acceptance figures: with prefetching and IO, 5 µs keeps at
// least 0.85 of the 0.1 µs throughput, without prefetching it falls as
// the model says, and the interleaving model is within 5% everywhere.
func TestVirtualSweep(t *testing.T) {
	dir := t.TempDir()
	var out bytes.Buffer
	rep, err := RunReport(context.Background(), Options{
		Workloads: []string{"chase"},
		Virtual:   true,
		Ops:       12000,
		// Costs measured on this machine when it was quiet (docs/flash.md),
		// so that the test does not depend on the load at the time.
		VirtualCosts:  &VirtualCosts{Switch: 160 * time.Nanosecond, Mem: 220 * time.Nanosecond, IOPre: 2700 * time.Nanosecond, IOPost: 1150 * time.Nanosecond},
		DeviceLatency: 80 * time.Microsecond,
		FileBytes:     8 << 20,
		ChainItems:    1 << 16,
		Dir:           dir,
		OutDir:        dir,
		Progress:      func(string) {},
	}, &out)
	t.Log(out.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Series) != 4 {
		t.Fatalf("%d series", len(rep.Series))
	}
	for _, s := range rep.Series {
		for _, p := range s.Points {
			if e := p.Error(model.Interleaved); e > 0.05 || e < -0.05 {
				t.Errorf("%s at %v: measured %.3f, model %.3f", s.Name(), p.Latency, p.Normalized, p.Model[model.Interleaved])
			}
		}
		p5, _ := s.At(5 * time.Microsecond)
		switch {
		case s.Prefetch && s.IO && p5.Normalized < 0.85:
			t.Errorf("%s: %.3f at 5µs", s.Name(), p5.Normalized)
		case !s.Prefetch && p5.Normalized > 0.5:
			t.Errorf("%s: %.3f at 5µs without prefetching", s.Name(), p5.Normalized)
		}
	}
	if st, err := os.Stat(filepath.Join(dir, "farmem.png")); err != nil || st.Size() == 0 {
		t.Fatalf("no PNG: %v", err)
	}
	if !strings.Contains(out.String(), "summary") {
		t.Fatal("no summary printed")
	}
}

// TestEngineSweepRuns runs a tiny real-time sweep of the engine workload:
// it checks the plumbing (answers are verified inside), not the figures.
func TestEngineSweepRuns(t *testing.T) {
	dir := t.TempDir()
	var out bytes.Buffer
	rep, err := RunReport(context.Background(), Options{
		Workloads:     []string{"ycsb"},
		Latencies:     []time.Duration{100 * time.Nanosecond, 5 * time.Microsecond},
		Prefetch:      []bool{true},
		IO:            []bool{true},
		Duration:      60 * time.Millisecond,
		Tasks:         32,
		Keys:          5000,
		DeviceLatency: 20 * time.Microsecond,
		Dir:           dir,
		OutDir:        dir,
	}, &out)
	t.Log(out.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Series) != 1 || rep.Series[0].Points[1].Result.Ops == 0 {
		t.Fatalf("report %+v", rep.Series)
	}
}

// TestFull runs the default sweep when FARMEM_BENCH names an output
// directory (minutes; real time).
func TestFull(t *testing.T) {
	outDir := os.Getenv("FARMEM_BENCH")
	if outDir == "" {
		t.Skip("set FARMEM_BENCH=<dir> to run the full benchmark")
	}
	opts := Options{OutDir: outDir, Dir: os.Getenv("FARMEM_DIR")}
	if os.Getenv("FARMEM_VIRTUAL") != "" {
		opts.Virtual = true
	}
	if w := os.Getenv("FARMEM_WORKLOADS"); w != "" {
		opts.Workloads = strings.Split(w, ",")
	}
	if d, err := time.ParseDuration(os.Getenv("FARMEM_DURATION")); err == nil {
		opts.Duration = d
	}
	if err := Run(context.Background(), opts, os.Stdout); err != nil {
		t.Fatal(err)
	}
}

func TestNormalizePairsRounds(t *testing.T) {
	run := func(ops int64, share float64) ult.Result {
		return ult.Result{Ops: ops, ElapsedNs: 1e9, CPUNs: int64(share * 1e9)}
	}
	base := Point{Throughput: 120, Runs: []ult.Result{run(100, 1), run(120, 1), run(80, 1), run(130, 0.5), run(90, 1)}}
	// Every clean round of p is half its round's baseline, although p's
	// fastest round (70) is well over half the baseline's fastest (120).
	p := Point{Throughput: 70, Runs: []ult.Result{run(50, 1), run(60, 1), run(40, 1), run(70, 1), run(45, 1)}}
	if got := normalize(p, base); got != 0.5 {
		t.Fatalf("normalize = %v, want 0.5 (round 4 is disturbed for the baseline and must not count)", got)
	}
	few := Point{Throughput: 60, Runs: []ult.Result{run(60, 1)}}
	if got := normalize(few, base); got != 0.5 {
		t.Fatalf("with one round normalize = %v, want the ratio of the fastest, 0.5", got)
	}
	if got := typical(base).Ops; got != 90 {
		t.Fatalf("typical round has %d ops, want the median clean round's 90", got)
	}
}
