package loadsample

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestByteSampleEstimates: over many pairs of mixed sizes, the sample's
// estimates of ranges stay near the true bytes, and its split key divides
// a range about in half by bytes.
func TestByteSampleEstimates(t *testing.T) {
	s := NewByteSample(1024)
	rng := rand.New(rand.NewPCG(1, 2))
	truth := map[string]int64{}
	var total int64
	for i := 0; i < 20000; i++ {
		k := fmt.Sprintf("d/user:%06d", i)
		size := int64(len(k) + 50 + rng.IntN(400))
		if i%100 == 0 {
			size = 8000 // a few large values
		}
		s.Set([]byte(k), size)
		truth[k] = size
		total += size
	}
	within := func(what string, got, want int64, tol float64) {
		t.Helper()
		if d := float64(got-want) / float64(want); d > tol || d < -tol {
			t.Errorf("%s: estimate %d, true %d (%.1f%% off)", what, got, want, 100*d)
		}
	}
	within("total", s.Total(), total, 0.05)
	var firstHalf int64
	for k, v := range truth {
		if k < "d/user:010000" {
			firstHalf += v
		}
	}
	within("first half", s.Estimate([]byte("d/user:"), []byte("d/user:010000")), firstHalf, 0.07)

	at := s.SplitKey([]byte("d/"), []byte("d0"))
	var left int64
	for k, v := range truth {
		if k < string(at) {
			left += v
		}
	}
	within(fmt.Sprintf("bytes left of the split key %q", at), left, total/2, 0.05)

	// Overwrites of the same size change nothing; clears remove.
	before := s.Total()
	s.Set([]byte("d/user:000001"), truth["d/user:000001"])
	if s.Total() != before {
		t.Errorf("rewriting a pair of the same size changed the total: %d -> %d", before, s.Total())
	}
	s.ClearRange([]byte("d/user:010000"), nil)
	within("after clearing the second half", s.Total(), firstHalf, 0.07)
	for i := 0; i < 10000; i++ {
		s.Clear([]byte(fmt.Sprintf("d/user:%06d", i)))
	}
	if s.Total() != 0 || s.keys.Len() != 0 {
		t.Errorf("after clearing everything: total %d, %d keys", s.Total(), s.keys.Len())
	}
}

func TestSplitKeyNeedsTwoSampledKeys(t *testing.T) {
	s := NewByteSample(100)
	if k := s.SplitKey(nil, nil); k != nil {
		t.Errorf("empty sample split at %q", k)
	}
	s.Set([]byte("a"), 1000)
	if k := s.SplitKey(nil, nil); k != nil {
		t.Errorf("one key split at %q", k)
	}
	s.Set([]byte("b"), 1000)
	s.Set([]byte("c"), 5000)
	if k := s.SplitKey([]byte("a"), nil); !bytes.Equal(k, []byte("c")) {
		t.Errorf("split of a(1000) b(1000) c(5000) at %q, want c (2000 | 5000 beats 1000 | 6000)", k)
	}
}
