package wait

import (
	"sync/atomic"
	"testing"
	"time"
)

func TestUntil(t *testing.T) {
	var n atomic.Int32
	if !Until(time.Second, func() bool { return n.Add(1) >= 3 }) {
		t.Fatal("a condition that holds on its third poll was not seen")
	}
	if n.Load() != 3 {
		t.Fatalf("polled %d times, want 3", n.Load())
	}
	began := time.Now()
	if Until(20*time.Millisecond, func() bool { return false }) {
		t.Fatal("a condition that never holds was reported as holding")
	}
	if waited := time.Since(began); waited < 20*time.Millisecond {
		t.Fatalf("gave up after %v, before the timeout", waited)
	}
}

func TestRate(t *testing.T) {
	// A count that grows by one a millisecond: the window ends after 50,
	// long before d, at about 1,000 a second.
	began := time.Now()
	fast := func() int64 { return int64(time.Since(began) / time.Millisecond) }
	start := time.Now()
	r := Rate(fast, 50, 10*time.Second)
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("a count that reached n took the whole window (%v)", took)
	}
	if r < 300 || r > 1100 {
		t.Fatalf("rate %.0f/s of a count of 1,000/s", r)
	}
	// A count that stopped: the window is d, and the rate 0.
	start = time.Now()
	if r := Rate(func() int64 { return 7 }, 1, 30*time.Millisecond); r != 0 {
		t.Fatalf("rate %.0f/s of a count that does not move", r)
	}
	if took := time.Since(start); took < 30*time.Millisecond {
		t.Fatalf("a count that did not reach n ended the window after %v, before d", took)
	}
}
