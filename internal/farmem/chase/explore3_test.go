package chase

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/distash/distash/internal/farmem"
	"github.com/distash/distash/internal/farmem/ult"
)

func TestExplore3(t *testing.T) {
	if os.Getenv("EXPLORE3") == "" {
		t.Skip()
	}
	f, _ := os.Open("/work/farmem-data/chase.dat")
	chain := NewChain(1<<20, 1)
	for rep := 0; rep < 4; rep++ {
		for _, l := range []time.Duration{100, 5000} {
			s, _ := ult.New(ult.Config{Tasks: 128, Seed: 1, Mem: farmem.Config{Latency: l},
				IO: ult.IOConfig{Latency: 68 * time.Microsecond, Jitter: 0.5}})
			w := &Workload{Chain: chain, M: 10, Fluctuate: true, Prefetch: true, File: f, Blocks: 65536, BlockSize: 4096, IOPre: 1000, IOPost: 1000}
			r, _ := s.Run(context.Background(), ult.RunOptions{Duration: 300 * time.Millisecond, Warmup: 50 * time.Millisecond}, w.Body)
			s.Close()
			k := r.Kinds
			fmt.Printf("L=%v X=%.0f cpu=%.2f opns=%.0f mem=%.0f(%.0f) pre=%.0f post=%.0f stall/op=%.0f lfb/op=%.0f late=%d misses=%d\n", l, r.Throughput(), r.CPUShare(), r.OpNs(),
				k[0].MeanNs(), float64(k[0].Ns)/float64(k[0].Count), k[1].MeanNs(), k[2].MeanNs(),
				float64(r.Mem.StallNs)/float64(r.Ops), float64(r.Mem.LFBStallNs)/float64(r.Ops), r.Mem.Late, r.Mem.Misses)
		}
	}
}
