package budget

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/distash/distash/internal/testutil/wait"
)

// acquired reports whether an Acquire of n completes at once: with a
// context already done, Acquire takes the bytes only if they are free and
// no one waits before it.
func acquired(b *Budget, n int64) bool {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return b.Acquire(ctx, n) == nil
}

// waitQueued waits until n Acquires wait on b.
func waitQueued(t *testing.T, b *Budget, n int) {
	t.Helper()
	wait.For(t, fmt.Sprintf("%d acquires waiting", n), func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return len(b.waiters) == n
	})
}

func TestWaitsWhileSpent(t *testing.T) {
	b := New(100)
	if !acquired(b, 60) || !acquired(b, 40) {
		t.Fatal("acquires within the budget waited")
	}
	if acquired(b, 1) {
		t.Fatal("an acquire past the budget did not wait")
	}
	if b.Used() != 100 {
		t.Fatalf("Used = %d after a cancelled acquire; want 100", b.Used())
	}
	got := make(chan error, 1)
	go func() { got <- b.Acquire(context.Background(), 50) }()
	waitQueued(t, b, 1)
	select {
	case <-got:
		t.Fatal("acquired before anything was released")
	default:
	}
	b.Release(60)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if b.Used() != 90 {
		t.Fatalf("Used = %d; want 90", b.Used())
	}
}

func TestLargerThanBudgetRunsAlone(t *testing.T) {
	b := New(100)
	if !acquired(b, 10) {
		t.Fatal("small acquire waited")
	}
	if acquired(b, 1000) {
		t.Fatal("an oversize request ran beside another")
	}
	b.Release(10)
	if !acquired(b, 1000) {
		t.Fatal("an oversize request never runs")
	}
	if acquired(b, 1) {
		t.Fatal("a request ran beside an oversize one")
	}
	b.Release(1000)
	if b.Used() != 0 {
		t.Fatalf("Used = %d; want 0", b.Used())
	}
}

// TestArrivalOrder: a small request arriving after a large waiting one
// waits behind it, so the large one is not starved.
func TestArrivalOrder(t *testing.T) {
	b := New(100)
	b.Acquire(context.Background(), 90)
	large := make(chan error, 1)
	go func() { large <- b.Acquire(context.Background(), 50) }()
	waitQueued(t, b, 1)
	if acquired(b, 5) {
		t.Fatal("a small request overtook a waiting large one")
	}
	b.Release(90)
	if err := <-large; err != nil {
		t.Fatal(err)
	}
	// A cancelled waiter at the head lets those behind it through.
	b2 := New(10)
	b2.Acquire(context.Background(), 5)
	ctx, cancel := context.WithCancel(context.Background())
	head := make(chan error, 1)
	go func() { head <- b2.Acquire(ctx, 10) }()
	waitQueued(t, b2, 1)
	behind := make(chan error, 1)
	go func() { behind <- b2.Acquire(context.Background(), 5) }()
	waitQueued(t, b2, 2)
	cancel()
	if err := <-head; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled acquire returned %v", err)
	}
	if err := <-behind; err != nil {
		t.Fatal(err)
	}
}

func TestConcurrentNeverExceeds(t *testing.T) {
	b := New(1000)
	var mu sync.Mutex
	var held, peak int64
	var wg sync.WaitGroup
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				n := int64(1 + (g*7+i*13)%400)
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(i%3)*time.Millisecond)
				err := b.Acquire(ctx, n)
				cancel()
				if err != nil {
					continue
				}
				mu.Lock()
				held += n
				peak = max(peak, held)
				mu.Unlock()
				mu.Lock()
				held -= n
				mu.Unlock()
				b.Release(n)
			}
		}()
	}
	wg.Wait()
	if peak > 1000 || b.Used() != 0 {
		t.Fatalf("peak %d (limit 1000), %d still used", peak, b.Used())
	}
}
