package devfs

import (
	"math"
	"time"
)

// perDecade is the histogram's resolution: bucket bounds grow by
// 10^(1/10) ≈ 1.26, so a quantile read from the buckets is within ~13%
// of the true one.
const perDecade = 10

// nBounds is the number of finite bucket bounds: 1 µs .. 10 s.
const nBounds = 7*perDecade + 1

// bounds are the histogram's upper bounds, log-spaced from 1 µs to 10 s.
var bounds = func() []time.Duration {
	var b []time.Duration
	for i := 0; i < nBounds; i++ {
		b = append(b, time.Duration(math.Round(1000*math.Pow(10, float64(i)/perDecade))))
	}
	return b
}()

// Histogram counts durations in fixed log-spaced buckets (1 µs .. 10 s,
// ten per decade, plus one above 10 s). It is a value: Stats returns
// copies.
type Histogram struct {
	// Count is the number of durations recorded; Sum their total.
	Count uint64
	Sum   time.Duration
	// counts[i] counts durations in (bounds[i-1], bounds[i]];
	// counts[len(bounds)] those above the last bound. sums[i] is their
	// total, which places a quantile within its bucket.
	counts [nBounds + 1]uint64
	sums   [nBounds + 1]time.Duration
}

// Bucket is one cumulative bucket: Count durations were <= UpperBound.
type Bucket struct {
	UpperBound time.Duration
	Count      uint64
}

func (h *Histogram) observe(d time.Duration) {
	h.Count++
	h.Sum += d
	i := bucketOf(d)
	h.counts[i]++
	h.sums[i] += d
}

func bucketOf(d time.Duration) int {
	if d <= bounds[0] {
		return 0
	}
	// Estimate from the logarithm, then correct for rounding.
	i := int(math.Ceil(math.Log10(float64(d)/1000) * perDecade))
	i = min(max(i, 1), len(bounds))
	for i > 0 && d <= bounds[i-1] {
		i--
	}
	for i < len(bounds) && d > bounds[i] {
		i++
	}
	return i
}

// Buckets returns the cumulative buckets of the finite bounds, in
// increasing order, as Prometheus histograms want them; the +Inf bucket
// is Count.
func (h Histogram) Buckets() []Bucket {
	out := make([]Bucket, len(bounds))
	var c uint64
	for i, b := range bounds {
		c += h.counts[i]
		out[i] = Bucket{UpperBound: b, Count: c}
	}
	return out
}

// Quantile returns the q-quantile (0 <= q <= 1) of the recorded
// durations, 0 when empty. It is the mean of the durations in the bucket
// the quantile falls in: exact when they are close together, as a
// device's latencies are, and within the bucket (a factor 1.26) always.
func (h Histogram) Quantile(q float64) time.Duration {
	if h.Count == 0 {
		return 0
	}
	rank := uint64(math.Ceil(min(max(q, 0), 1) * float64(h.Count)))
	rank = max(rank, 1)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if c > 0 && seen >= rank {
			return h.sums[i] / time.Duration(c)
		}
	}
	return h.Sum / time.Duration(h.Count)
}

// Mean returns the mean of the recorded durations, 0 when empty.
func (h Histogram) Mean() time.Duration {
	if h.Count == 0 {
		return 0
	}
	return h.Sum / time.Duration(h.Count)
}
