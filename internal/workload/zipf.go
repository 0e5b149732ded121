// Package workload draws the keys of the benchmarks' and the demo's
// workloads, so that they all draw them the same reproducible way.
package workload

import "math"

// Zipf draws ranks in [0, n), rank 0 the most popular, with YCSB's
// zipfian distribution of constant theta (Gray et al., "Quickly generating
// billion-record synthetic databases", SIGMOD 1994). A Zipf keeps no state
// past its constants: Rank maps a uniform number to a rank, so a seeded
// source gives the same ranks on every run, and one Zipf may serve many
// goroutines, each with its own source.
type Zipf struct {
	n            int
	alpha, eta   float64
	zetan, zeta2 float64 // zeta(n) and zeta(2), zeta(k) = sum of 1/i^theta for i in 1..k
}

// NewZipf returns the generator of ranks in [0, n) with constant theta,
// which YCSB takes in (0, 1) (0.99 by default); theta must not be 1. It
// costs O(n) (zeta(n) is summed once), so make one per workload, not one
// per client.
func NewZipf(n int, theta float64) *Zipf {
	zetan := 0.0
	for i := 1; i <= n; i++ {
		zetan += 1 / math.Pow(float64(i), theta)
	}
	zeta2 := 1 + 1/math.Pow(2, theta)
	return &Zipf{
		n:     n,
		alpha: 1 / (1 - theta),
		eta:   (1 - math.Pow(2/float64(n), 1-theta)) / (1 - zeta2/zetan),
		zetan: zetan,
		zeta2: zeta2,
	}
}

// Rank returns the rank that u, uniform in [0, 1), draws. n <= 1 gives 0.
func (z *Zipf) Rank(u float64) int {
	uz := u * z.zetan
	switch {
	case uz < 1:
		return 0
	case uz < z.zeta2:
		return 1
	}
	// Ranks 0 and 1 above are exact; the rest is Gray's approximation of
	// the inverse of the distribution, which can round up to n.
	return min(int(float64(z.n)*math.Pow(z.eta*u-z.eta+1, z.alpha)), z.n-1)
}

// Source is a source of uniform numbers in [0, 1): a *rand.Rand of
// math/rand or math/rand/v2.
type Source interface{ Float64() float64 }

// Next draws a rank with one number of r.
func (z *Zipf) Next(r Source) int { return z.Rank(r.Float64()) }
