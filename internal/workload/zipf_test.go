package workload

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestZipf(t *testing.T) {
	const n, draws = 100, 200000
	for _, theta := range []float64{0.5, 0.99} {
		z := NewZipf(n, theta)
		r := rand.New(rand.NewPCG(1, 2))
		counts := make([]int, n)
		for range draws {
			k := z.Next(r)
			if k < 0 || k >= n {
				t.Fatalf("theta %g: rank %d out of [0, %d)", theta, k, n)
			}
			counts[k]++
		}
		// Ranks 0 and 1 are drawn with their exact probabilities,
		// 1/zeta(n) and 2^-theta/zeta(n).
		zetan := 0.0
		for i := 1; i <= n; i++ {
			zetan += math.Pow(float64(i), -theta)
		}
		for k, want := range []float64{1 / zetan, math.Pow(2, -theta) / zetan} {
			if got := float64(counts[k]) / draws; math.Abs(got-want) > 0.05*want {
				t.Errorf("theta %g: rank %d drawn %.4f of the time, want %.4f", theta, k, got, want)
			}
		}
		if !(counts[1] > counts[10] && counts[10] > counts[90]) {
			t.Errorf("theta %g: counts[1]=%d counts[10]=%d counts[90]=%d, want decreasing", theta, counts[1], counts[10], counts[90])
		}
	}
}

// TestZipfReproducible: a seeded source gives the same ranks on every run
// (the benchmarks' and the demo's workloads depend on it): the ranks are
// those that the copies this one replaced (in cmd/distash, internal/bench/
// farmem and internal/bench/anomalies) drew.
func TestZipfReproducible(t *testing.T) {
	draw := func() []int {
		z, r := NewZipf(1000, 0.99), rand.New(rand.NewPCG(7, 7))
		out := make([]int, 12)
		for i := range out {
			out[i] = z.Next(r)
		}
		return out
	}
	a, b := draw(), draw()
	if !slices.Equal(a, b) {
		t.Fatalf("same seed, different ranks: %v and %v", a, b)
	}
	want := []int{1, 351, 19, 673, 739, 1, 17, 1, 779, 1, 0, 399}
	if !slices.Equal(a, want) {
		t.Fatalf("ranks %v, want %v", a, want)
	}
}

func TestZipfSmall(t *testing.T) {
	for _, n := range []int{0, 1} {
		z := NewZipf(n, 0.99)
		for _, u := range []float64{0, 0.5, 0.999999} {
			if k := z.Rank(u); k != 0 {
				t.Errorf("n %d: Rank(%g) = %d, want 0", n, u, k)
			}
		}
	}
	z := NewZipf(2, 0.99)
	if z.Rank(0) != 0 || z.Rank(0.999999) != 1 {
		t.Errorf("n 2: Rank(0) = %d, Rank(0.999999) = %d, want 0 and 1", z.Rank(0), z.Rank(0.999999))
	}
}
