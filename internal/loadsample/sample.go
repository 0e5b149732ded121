package loadsample

import (
	"bytes"
	"hash/fnv"
	"math"

	"github.com/google/btree"
)

// DefaultSampleUnit is the size a sampled pair stands for on average: a
// pair of s bytes is sampled with probability min(1, s/unit) and then
// weighs s divided by that probability, so every pair counts its size in
// expectation and the sample holds about total/unit keys.
const DefaultSampleUnit = 4096

// ByteSample estimates the bytes of key ranges of one stash. Whether a key
// is in it depends only on the key and its size (a hash, not chance), so
// stashes holding the same data keep the same sample and a rewrite of the
// same size changes nothing. Not safe for concurrent use.
type ByteSample struct {
	unit  int64
	keys  *btree.BTreeG[sampled]
	total int64 // sum of weights
}

type sampled struct {
	key    []byte
	weight int64
}

func lessSampled(a, b sampled) bool { return bytes.Compare(a.key, b.key) < 0 }

// NewByteSample returns an empty sample; unit <= 0 means DefaultSampleUnit.
func NewByteSample(unit int64) *ByteSample {
	if unit <= 0 {
		unit = DefaultSampleUnit
	}
	return &ByteSample{unit: unit, keys: btree.NewG(16, lessSampled)}
}

// weight returns the weight of a pair of size bytes under key if it is
// sampled, else 0.
func (s *ByteSample) weight(key []byte, size int64) int64 {
	if size <= 0 {
		return 0
	}
	if size >= s.unit {
		return size
	}
	p := float64(size) / float64(s.unit)
	h := fnv.New64a()
	h.Write(key)
	if float64(mix(h.Sum64()))/float64(math.MaxUint64) >= p {
		return 0
	}
	return s.unit // size / p
}

// mix spreads FNV's output over all 64 bits (murmur3's finalizer): keys
// that differ only in their last bytes differ mostly in FNV's low bits,
// and the sampling threshold compares the whole value.
func mix(h uint64) uint64 {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

// Set records that key now holds a pair of size bytes (key and value).
func (s *ByteSample) Set(key []byte, size int64) {
	s.Clear(key)
	if w := s.weight(key, size); w > 0 {
		s.keys.ReplaceOrInsert(sampled{key: bytes.Clone(key), weight: w})
		s.total += w
	}
}

// Clear records that key holds nothing.
func (s *ByteSample) Clear(key []byte) {
	if old, ok := s.keys.Delete(sampled{key: key}); ok {
		s.total -= old.weight
	}
}

// ClearRange records that [begin, end) holds nothing.
func (s *ByteSample) ClearRange(begin, end []byte) {
	var gone []sampled
	s.ascend(begin, end, func(e sampled) bool {
		gone = append(gone, e)
		return true
	})
	for _, e := range gone {
		s.keys.Delete(e)
		s.total -= e.weight
	}
}

// ascend calls fn on the sampled keys in [begin, end) in order; end nil is
// no bound.
func (s *ByteSample) ascend(begin, end []byte, fn func(sampled) bool) {
	s.keys.AscendGreaterOrEqual(sampled{key: begin}, func(e sampled) bool {
		if end != nil && bytes.Compare(e.key, end) >= 0 {
			return false
		}
		return fn(e)
	})
}

// Total estimates the bytes of the whole stash.
func (s *ByteSample) Total() int64 { return s.total }

// Estimate estimates the bytes of the pairs in [begin, end).
func (s *ByteSample) Estimate(begin, end []byte) int64 {
	var n int64
	s.ascend(begin, end, func(e sampled) bool {
		n += e.weight
		return true
	})
	return n
}

// SplitKey returns a key that splits [begin, end) into two ranges of
// bytes as equal as the sample allows: of the sampled keys but the first,
// the one with the bytes before it closest to half the range's. It is nil
// when the sample cannot split the range (fewer than two sampled keys in
// it); the key is never begin itself.
func (s *ByteSample) SplitKey(begin, end []byte) []byte {
	total := s.Estimate(begin, end)
	var best []byte
	bestDiff := int64(-1)
	var before int64
	first := true
	s.ascend(begin, end, func(e sampled) bool {
		if !first && !bytes.Equal(e.key, begin) {
			diff := 2*before - total
			if diff < 0 {
				diff = -diff
			}
			if bestDiff < 0 || diff < bestDiff {
				best, bestDiff = e.key, diff
			}
		}
		first = false
		before += e.weight
		return true
	})
	return bytes.Clone(best)
}
