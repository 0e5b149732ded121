package dd

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
