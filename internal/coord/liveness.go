package coord

import (
	"sync"
	"time"

	"github.com/distash/distash/internal/clock"
)

// liveness remembers when each node was last heard from. It lives in the
// controller's memory, not in raft: heartbeats are frequent and a new
// controller simply waits for them.
type liveness struct {
	clock   clock.Clock
	timeout time.Duration

	mu   sync.Mutex
	seen map[string]time.Time
}

func newLiveness(c clock.Clock, timeout time.Duration) *liveness {
	return &liveness{clock: c, timeout: timeout, seen: make(map[string]time.Time)}
}

func (l *liveness) heartbeat(id string) {
	now := l.clock.Now()
	l.mu.Lock()
	l.seen[id] = now
	l.mu.Unlock()
}

func (l *liveness) lastSeen(id string) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t, ok := l.seen[id]
	return t, ok
}

func (l *liveness) alive(id string) bool {
	t, ok := l.lastSeen(id)
	return ok && l.clock.Since(t) < l.timeout
}
