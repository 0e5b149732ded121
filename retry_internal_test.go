package distash

import (
	"fmt"
	"testing"
	"time"
)

// TestConflictsBackOffLess checks Transact's waits between retries: after
// conflicts they stay within MaxConflictBackoff however many there were,
// after other retryable errors they grow to MaxBackoff, and a conflict
// after an outage's long waits waits only as long as a conflict may.
func TestConflictsBackOffLess(t *testing.T) {
	walk := func(errs ...error) (waits []time.Duration) {
		backoff := firstBackoff
		for _, err := range errs {
			var w time.Duration
			w, backoff = retryWait(backoff, err)
			waits = append(waits, w)
		}
		return waits
	}
	repeat := func(err error, n int) []error {
		errs := make([]error, n)
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	for range 100 { // the waits are random
		conflicts := walk(repeat(ErrNotCommitted, 20)...)
		for i, w := range conflicts {
			if w > MaxConflictBackoff {
				t.Fatalf("wait %d after conflicts: %v, over MaxConflictBackoff (%v)", i, w, MaxConflictBackoff)
			}
		}
		if last := conflicts[len(conflicts)-1]; last < MaxConflictBackoff/2 {
			t.Fatalf("the 20th conflict waits %v: the backoff did not grow to MaxConflictBackoff", last)
		}
		outage := walk(repeat(ErrConnectionFailed, 20)...)
		if last := outage[len(outage)-1]; last < MaxBackoff/2 || last > MaxBackoff {
			t.Fatalf("the 20th connection failure waits %v, want within [%v, %v]", last, MaxBackoff/2, MaxBackoff)
		}
		mixed := walk(append(repeat(ErrConnectionFailed, 20), fmt.Errorf("commit: %w", ErrNotCommitted))...)
		if last := mixed[len(mixed)-1]; last > MaxConflictBackoff {
			t.Fatalf("a wrapped conflict after an outage waits %v, over MaxConflictBackoff", last)
		}
	}
}
