// Package budget bounds the memory of work in flight. A caller acquires a
// request's bytes before it holds them and releases them once it is done;
// Acquire waits while the budget is spent, in arrival order, so that a
// large request is not starved by a stream of small ones.
package budget

import (
	"context"
	"sync"
)

// Budget is a byte budget shared by concurrent callers. Create it with New.
type Budget struct {
	limit int64

	mu      sync.Mutex
	used    int64     // Protected by mu.
	waiters []*waiter // in arrival order. Protected by mu.
}

type waiter struct {
	n     int64
	ready chan struct{} // closed once the bytes are granted
}

// New returns a budget of limit bytes (at least 1).
func New(limit int64) *Budget { return &Budget{limit: max(limit, 1)} }

// Limit returns the budget's size.
func (b *Budget) Limit() int64 { return b.limit }

// clamp bounds a request by the whole budget: a request larger than the
// budget runs alone rather than never.
func (b *Budget) clamp(n int64) int64 { return min(max(n, 0), b.limit) }

// Acquire waits until n bytes are free and takes them, or returns ctx's
// error having taken nothing. Give the bytes back with Release(n).
func (b *Budget) Acquire(ctx context.Context, n int64) error {
	n = b.clamp(n)
	b.mu.Lock()
	if len(b.waiters) == 0 && b.used+n <= b.limit {
		b.used += n
		b.mu.Unlock()
		return nil
	}
	w := &waiter{n: n, ready: make(chan struct{})}
	b.waiters = append(b.waiters, w)
	b.mu.Unlock()
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-w.ready: // granted meanwhile: give it back
		b.used -= n
	default:
		for i, x := range b.waiters {
			if x == w {
				b.waiters = append(b.waiters[:i], b.waiters[i+1:]...)
				break
			}
		}
	}
	b.grantLocked() // whoever waited behind w may fit now
	return ctx.Err()
}

// Release gives back n bytes taken with Acquire(n).
func (b *Budget) Release(n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= b.clamp(n)
	b.grantLocked()
}

// grantLocked grants waiters, in order, while the first one fits.
func (b *Budget) grantLocked() {
	for len(b.waiters) > 0 && b.used+b.waiters[0].n <= b.limit {
		w := b.waiters[0]
		b.waiters[0] = nil
		b.waiters = b.waiters[1:]
		b.used += w.n
		close(w.ready)
	}
	if len(b.waiters) == 0 {
		b.waiters = nil // drop the consumed backing array
	}
}

// Used returns the bytes currently taken.
func (b *Budget) Used() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}
