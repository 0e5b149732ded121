// Package wait polls a condition in tests: a test that waits for something
// to happen asks for it, rather than sleeping a fixed time and hoping.
package wait

import (
	"testing"
	"time"
)

// Timeout is how long For waits.
const Timeout = 10 * time.Second

// For polls cond until it holds, and fails t (what names the condition)
// if it does not within Timeout.
func For(t testing.TB, what string, cond func() bool) {
	t.Helper()
	Within(t, Timeout, what, cond)
}

// Within is For with a timeout of d.
func Within(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Until(d, cond) {
		t.Fatalf("%s: not within %v", what, d)
	}
}

// Every polls cond every interval (a condition that does work each poll,
// e.g. writes while it waits, at a steady rate) until it holds, and fails
// t if it does not within d.
func Every(t testing.TB, interval, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(interval)
	}
}

// Until polls cond until it holds or d has passed; it reports whether cond
// held. Polls start 1 ms apart and back off to 10 ms, so a condition that
// holds soon is seen soon and a slow one costs little CPU.
func Until(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	pause := time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(pause)
		pause = min(2*pause, 10*time.Millisecond)
	}
	return true
}

// Rate measures how fast count grows, per second, over a window that ends
// once it has grown by n or after d, whichever comes first: a throughput
// that holds up is measured over the time n events take, one that
// collapsed over d, and neither needs a fixed sleep of d.
func Rate(count func() int64, n int64, d time.Duration) float64 {
	c0, began := count(), time.Now()
	Until(d, func() bool { return count()-c0 >= n })
	return float64(count()-c0) / time.Since(began).Seconds()
}
