package loadsample

import (
	"bytes"
	"math"
	"math/rand/v2"
	"time"

	"github.com/google/btree"
)

// DefaultRateHalfLife is how fast WriteRate forgets: a write counts half
// as much after it.
const DefaultRateHalfLife = 10 * time.Second

// WriteRate estimates the bytes written per second to key ranges of one
// stash, for splitting shards that are written fast (not only large ones).
// A write of s bytes is sampled at random with probability min(1, s/unit)
// and then weighs unit (or s), so every write counts its size in
// expectation — a hot key rewritten often is seen, which a hash of the key
// (ByteSample's rule) could miss. Weights decay exponentially with
// DefaultRateHalfLife; with writes at a steady r bytes/s a range's decayed
// weight settles at r·H/ln 2. Not safe for concurrent use.
type WriteRate struct {
	unit     int64
	halfLife time.Duration
	keys     *btree.BTreeG[rated]
	decayed  time.Time // weights are as of this time
	rng      *rand.Rand
}

type rated struct {
	key    []byte
	weight float64
}

func lessRated(a, b rated) bool { return bytes.Compare(a.key, b.key) < 0 }

// NewWriteRate returns an empty estimate; unit <= 0 means
// DefaultSampleUnit, halfLife <= 0 DefaultRateHalfLife.
func NewWriteRate(unit int64, halfLife time.Duration) *WriteRate {
	if unit <= 0 {
		unit = DefaultSampleUnit
	}
	if halfLife <= 0 {
		halfLife = DefaultRateHalfLife
	}
	return &WriteRate{unit: unit, halfLife: halfLife, keys: btree.NewG(16, lessRated), rng: rand.New(rand.NewPCG(rand.Uint64(), 1))}
}

// decay brings the weights to now, at most every quarter half-life (the
// error is small and each decay walks the whole sample).
func (r *WriteRate) decay(now time.Time) {
	if r.decayed.IsZero() {
		r.decayed = now
		return
	}
	dt := now.Sub(r.decayed)
	if dt < r.halfLife/4 {
		return
	}
	f := math.Exp2(-dt.Seconds() / r.halfLife.Seconds())
	// The tree is written after the walk, not during it: writing, even
	// replacing a key already there, splits full nodes on the way down,
	// which under the walk skips keys or runs past a node's end.
	all := make([]rated, 0, r.keys.Len())
	r.keys.Ascend(func(e rated) bool {
		all = append(all, e)
		return true
	})
	for _, e := range all {
		e.weight *= f
		if e.weight < float64(r.unit)/64 {
			r.keys.Delete(e)
		} else {
			r.keys.ReplaceOrInsert(e)
		}
	}
	r.decayed = now
}

// Add records a write of size bytes to key at now.
func (r *WriteRate) Add(now time.Time, key []byte, size int64) {
	if size <= 0 {
		return
	}
	r.decay(now)
	w := float64(size)
	if size < r.unit {
		if r.rng.Float64() >= float64(size)/float64(r.unit) {
			return
		}
		w = float64(r.unit)
	}
	if e, ok := r.keys.Get(rated{key: key}); ok {
		e.weight += w
		r.keys.ReplaceOrInsert(e)
		return
	}
	r.keys.ReplaceOrInsert(rated{key: bytes.Clone(key), weight: w})
}

func (r *WriteRate) ascend(begin, end []byte, fn func(rated) bool) {
	r.keys.AscendGreaterOrEqual(rated{key: begin}, func(e rated) bool {
		if end != nil && bytes.Compare(e.key, end) >= 0 {
			return false
		}
		return fn(e)
	})
}

// Rate estimates the bytes per second written to [begin, end) lately.
func (r *WriteRate) Rate(now time.Time, begin, end []byte) float64 {
	r.decay(now)
	var sum float64
	r.ascend(begin, end, func(e rated) bool {
		sum += e.weight
		return true
	})
	return sum * math.Ln2 / r.halfLife.Seconds()
}

// SplitKey returns a key that splits [begin, end) into two ranges written
// about equally fast, nil when the sample cannot (fewer than two sampled
// keys); never begin itself.
func (r *WriteRate) SplitKey(now time.Time, begin, end []byte) []byte {
	r.decay(now)
	var total float64
	n := 0
	r.ascend(begin, end, func(e rated) bool {
		total += e.weight
		n++
		return true
	})
	if n < 2 {
		return nil
	}
	var best []byte
	bestDiff := math.Inf(1)
	var before float64
	first := true
	r.ascend(begin, end, func(e rated) bool {
		if !first && !bytes.Equal(e.key, begin) {
			if d := math.Abs(2*before - total); d < bestDiff {
				best, bestDiff = e.key, d
			}
		}
		first = false
		before += e.weight
		return true
	})
	return bytes.Clone(best)
}
