package loadsample

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// A steady write rate is estimated within 15% once the sample has run for
// a few half-lives, a range not written reads ~0, and the split key
// halves the rate of a range written at two different speeds.
func TestWriteRateEstimates(t *testing.T) {
	r := NewWriteRate(256, 10*time.Second)
	r.rng = rand.New(rand.NewPCG(1, 2)) // the same samples every run
	now := time.Unix(0, 0)
	// 60 s: 200 writes/s of 100 bytes to a/000..a/099 (20 KB/s), and
	// 50 writes/s of 100 bytes to b/000..b/009 (5 KB/s).
	for step := 0; step < 60*50; step++ {
		now = now.Add(20 * time.Millisecond)
		for i := 0; i < 4; i++ {
			r.Add(now, []byte(fmt.Sprintf("a/%03d", (step*4+i)%100)), 100)
		}
		r.Add(now, []byte(fmt.Sprintf("b/%03d", step%10)), 100)
	}
	for _, c := range []struct {
		begin, end string
		want       float64
	}{{"a/", "a0", 20000}, {"b/", "b0", 5000}, {"c/", "c0", 0}} {
		got := r.Rate(now, []byte(c.begin), []byte(c.end))
		if math.Abs(got-c.want) > 0.15*c.want+1 {
			t.Errorf("rate of [%s, %s) = %.0f B/s, want about %.0f", c.begin, c.end, got, c.want)
		}
	}
	k := r.SplitKey(now, []byte("a/"), []byte("a0"))
	if k == nil || string(k) < "a/030" || string(k) > "a/070" {
		t.Errorf("split key of a range written evenly: %q, want near a/050", k)
	}
	// An idle minute later the rates are gone.
	now = now.Add(2 * time.Minute)
	if got := r.Rate(now, []byte("a/"), []byte("a0")); got > 20000/100 {
		t.Errorf("rate after two idle minutes: %.0f B/s", got)
	}
}

// TestWriteRateDecayOfFullNodes: decaying samples of every size up to a
// few hundred keys decays every key. Decay once
// rewrote the sample's tree while walking it: a rewrite splits full nodes
// even for a key already there (31 keys in order fill the root), and the
// walk then skipped the keys moved away, or ran past the end of a node (a
// panic in the stash's apply).
func TestWriteRateDecayOfFullNodes(t *testing.T) {
	for keys := 1; keys <= 300; keys++ {
		r := NewWriteRate(1, time.Second)
		now := time.Unix(0, 0)
		for i := 0; i < keys; i++ {
			r.Add(now, []byte(fmt.Sprintf("k/%06d", i)), 100)
		}
		now = now.Add(time.Second)
		r.Add(now, []byte("k/new"), 100) // decays first
		if n := r.keys.Len(); n != keys+1 {
			t.Fatalf("%d keys: %d in the sample after a decay, want %d", keys, n, keys+1)
		}
		// Every old key's weight halved in the half-life; k/new's is whole.
		want := (float64(keys)*50 + 100) * math.Ln2 / r.halfLife.Seconds()
		if rate := r.Rate(now, []byte("k/"), []byte("k0")); math.Abs(rate-want) > want*1e-9 {
			t.Fatalf("%d keys: rate %v after a decay, want %v", keys, rate, want)
		}
	}
}
