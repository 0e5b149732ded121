package budget

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// acquired reports whether an Acquire of n completes within a short wait.
func acquired(b *Budget, n int64) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	return b.Acquire(ctx, n) == nil
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
	time.Sleep(10 * time.Millisecond)
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
	time.Sleep(10 * time.Millisecond)
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
	time.Sleep(10 * time.Millisecond)
	behind := make(chan error, 1)
	go func() { behind <- b2.Acquire(context.Background(), 5) }()
	time.Sleep(10 * time.Millisecond)
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
