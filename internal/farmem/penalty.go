package farmem

import (
	"math/rand"
	"runtime"
	"sort"
	"time"
)

// penaltySink receives the probe's reads so the compiler keeps them.
var penaltySink uint64

// WaitPenalty is how much slower fixed work runs right after the core has
// busy-waited (as a real-time Clock does for a stall) than back to back.
type WaitPenalty struct {
	Wait  time.Duration
	Ratio float64 // work time after the wait / work time with no wait
}

// MeasureWaitPenalty measures, for each wait, the time of a fixed piece of
// work (random reads over a 1 MiB table, which fits the core's L2) run
// right after busy-waiting that long, against the same work run back to
// back. Emulated stalls are busy-waits; a real stalled load keeps the
// core's caches, but on a virtual machine whose physical core is shared
// the caches may cool while the vCPU spins, and then the code after each
// stall runs slower. The model assumes the CPU time per operation is the
// same at every latency; this probe measures how far the machine departs
// from that. It takes about 1.5 * len(waits) * budget.
func MeasureWaitPenalty(waits []time.Duration, budget time.Duration) []WaitPenalty {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	table := make([]uint64, 1<<17)
	for i := range table {
		table[i] = uint64(i) * 0x9e3779b97f4a7c15
	}
	clk := NewClock(false)
	work := func(rng *rand.Rand) int64 {
		start := clk.Now()
		for i := 0; i < 256; i++ {
			penaltySink += table[rng.Intn(len(table))]
		}
		return clk.Now() - start
	}
	measure := func(wait time.Duration, d time.Duration) float64 {
		rng := rand.New(rand.NewSource(1))
		var ns, n int64
		end := clk.Now() + int64(d)
		for clk.Now() < end {
			ns += work(rng)
			n++
			if wait > 0 {
				clk.Spend(wait)
			}
		}
		return float64(ns) / float64(n)
	}
	// On a shared machine the speed of the core drifts over tens of
	// milliseconds; comparing each wait against a back-to-back run right
	// before it, in many short rounds, and keeping the median ratio,
	// leaves that drift out.
	const rounds = 21
	chunk := budget / rounds
	ratios := make([][]float64, len(waits))
	for r := 0; r < rounds; r++ {
		for i, w := range waits {
			base := measure(0, chunk/2)
			ratios[i] = append(ratios[i], measure(w, chunk)/base)
		}
	}
	out := make([]WaitPenalty, len(waits))
	for i, w := range waits {
		sort.Float64s(ratios[i])
		out[i] = WaitPenalty{Wait: w, Ratio: ratios[i][rounds/2]}
	}
	return out
}
