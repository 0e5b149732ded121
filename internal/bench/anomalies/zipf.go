package anomalies

import (
	"math/rand/v2"

	"github.com/distash/distash/internal/workload"
)

// newKeyPicker returns a generator of key indexes in [0, n), index 0 the
// most popular, Zipf-distributed with constant theta: YCSB's generator
// (workload.Zipf) for theta < 1, math/rand's for theta > 1.
func newKeyPicker(n int, theta float64, rng *rand.Rand) func() int {
	if n <= 1 {
		return func() int { return 0 }
	}
	if theta > 1 {
		z := rand.NewZipf(rng, theta, 1, uint64(n-1))
		return func() int { return int(z.Uint64()) }
	}
	z := workload.NewZipf(n, theta)
	return func() int { return z.Next(rng) }
}
