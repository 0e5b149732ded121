package chase

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/distash/distash/internal/farmem"
	"github.com/distash/distash/internal/farmem/model"
	"github.com/distash/distash/internal/farmem/ult"
)

func TestExplore(t *testing.T) {
	if os.Getenv("EXPLORE") == "" {
		t.Skip()
	}
	virtual := os.Getenv("EXPLORE") == "virtual"
	sw, _ := ult.MeasureSwitch(200000)
	fmt.Printf("switch: %+v\n", sw)
	chain := NewChain(1<<20, 1)
	f, err := os.Open("/work/probe.dat")
	if err != nil {
		t.Fatal(err)
	}
	lats := []float64{100, 500, 1000, 2000, 3000, 5000, 10000, 20000}
	for _, pf := range []bool{true, false} {
		var p0 model.Params
		var x0 float64
		for i, l := range lats {
			cfg := ult.Config{Tasks: 128, Mem: farmem.Config{Latency: time.Duration(l), Virtual: virtual},
				IO: ult.IOConfig{Latency: 80 * time.Microsecond, Jitter: 0.5}, SwitchCost: 115, Seed: 1}
			s, err := ult.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			w := &Workload{Chain: chain, M: 10, Fluctuate: true, Prefetch: pf, File: f, Blocks: 1 << 18, BlockSize: 4096,
				IOPre: time.Microsecond, IOPost: time.Microsecond}
			if virtual {
				w.Compute = 100
			}
			r, err := s.Run(context.Background(), ult.RunOptions{Duration: 300 * time.Millisecond, Warmup: 30 * time.Millisecond}, w.Body)
			s.Close()
			if err != nil {
				t.Fatal(err)
			}
			if i == 0 {
				p0 = model.FromResult(r, 12, float64(sw.Scheduler))
				x0 = r.Throughput()
				fmt.Println(p0, s.IOMode())
			}
			fmt.Printf("pf=%v L=%6.0f ops=%7d X=%8.0f norm=%.3f prob=%.3f sim=%.3f worst=%.3f idle=%.3f late=%d lfbstall=%.0f stall=%.0f\n",
				pf, l, r.Ops, r.Throughput(), r.Throughput()/x0, p0.Normalized(model.Probabilistic, l, lats[0]),
				p0.Normalized(model.Interleaved, l, lats[0]), p0.Normalized(model.Worst, l, lats[0]),
				float64(r.IdleNs)/float64(r.ElapsedNs), r.Mem.Late, float64(r.Mem.LFBStallNs)/float64(r.Ops), float64(r.Mem.StallNs)/float64(r.Ops))
		}
	}
}
