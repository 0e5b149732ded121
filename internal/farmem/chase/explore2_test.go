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

func TestExplore2(t *testing.T) {
	if os.Getenv("EXPLORE2") == "" {
		t.Skip()
	}
	f, _ := os.Create(t.TempDir() + "/x")
	chain := NewChain(1<<16, 1)
	for _, l := range []time.Duration{500, 900, 1000, 1100, 2000} {
		s, _ := ult.New(ult.Config{Tasks: 128, Seed: 1, Mem: farmem.Config{Latency: l, Virtual: true},
			IO: ult.IOConfig{Latency: 80 * time.Microsecond, Jitter: 0.5, NoRead: true}, SwitchCost: 208})
		w := &Workload{Chain: chain, M: 10, Fluctuate: true, Prefetch: false, Compute: 452, File: f, Blocks: 1000, BlockSize: 4096, IOPre: 1800, IOPost: 1300}
		r, _ := s.Run(context.Background(), ult.RunOptions{Duration: 15 * time.Millisecond, Warmup: 3 * time.Millisecond}, w.Body)
		fmt.Printf("L=%v ops=%d opns=%.0f idle=%d mem=%+v kinds=%+v\n", l, r.Ops, r.OpNs(), r.IdleNs, r.Mem, r.Kinds)
	}
}
