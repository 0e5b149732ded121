package server

import (
	"testing"
	"time"
)

// TestRecentHistQuantiles: the recent window's percentiles are within a
// bucket (19%) of the truth and forget what is older than the window.
func TestRecentHistQuantiles(t *testing.T) {
	var h recentHist
	now := time.Unix(1_000_000, 0)
	if q := h.quantiles(now, 0.5); q[0] != 0 {
		t.Fatalf("empty window: p50 %v, want 0", q[0])
	}
	// 99 fast requests (1ms) and one slow (100ms) in the last seconds.
	for i := 0; i < 99; i++ {
		h.observeAt(now.Add(-time.Duration(i%5)*time.Second), time.Millisecond)
	}
	h.observeAt(now, 100*time.Millisecond)
	q := h.quantiles(now, 0.5, 0.99, 1)
	within := func(got, want float64) bool { return got > want/1.19 && got < want*1.19 }
	if !within(q[0], 1) || !within(q[1], 1) || !within(q[2], 100) {
		t.Fatalf("p50 %v p99 %v max %v ms; want about 1, 1, 100", q[0], q[1], q[2])
	}
	// Past the window, the old seconds no longer count; a slot reused by
	// a new second starts empty.
	later := now.Add(recentSeconds * time.Second)
	h.observeAt(later, 10*time.Millisecond)
	q = h.quantiles(later, 0.5, 1)
	if !within(q[0], 10) || !within(q[1], 10) {
		t.Fatalf("after the window: p50 %v max %v ms; want about 10", q[0], q[1])
	}
}
