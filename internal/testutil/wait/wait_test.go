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
