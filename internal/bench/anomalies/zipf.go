package anomalies

import (
	"math"
	"math/rand/v2"
)

// newKeyPicker returns a generator of key indexes in [0, n), index 0 the
// most popular, Zipf-distributed with constant theta: YCSB's generator
// (Gray et al., "Quickly generating billion-record synthetic databases")
// for theta < 1, math/rand's for theta > 1.
func newKeyPicker(n int, theta float64, rng *rand.Rand) func() int {
	if n <= 1 {
		return func() int { return 0 }
	}
	if theta > 1 {
		z := rand.NewZipf(rng, theta, 1, uint64(n-1))
		return func() int { return int(z.Uint64()) }
	}
	zetan := 0.0
	for i := 1; i <= n; i++ {
		zetan += 1 / math.Pow(float64(i), theta)
	}
	zeta2 := 1 + 1/math.Pow(2, theta)
	alpha := 1 / (1 - theta)
	eta := (1 - math.Pow(2/float64(n), 1-theta)) / (1 - zeta2/zetan)
	second := 1 + math.Pow(0.5, theta)
	return func() int {
		u := rng.Float64()
		uz := u * zetan
		switch {
		case uz < 1:
			return 0
		case uz < second:
			return 1
		}
		return min(int(float64(n)*math.Pow(eta*u-eta+1, alpha)), n-1)
	}
}
