package server

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/stash"
)

// Stash health, as status reports it.
const (
	HealthHealthy    = "healthy"
	HealthRestarting = "restarting"
	HealthFailed     = "failed"
)

// Restart policy of a failed stash: the delays before each consecutive
// restart. A stash that fails again after the last one is left failed
// (its reads keep failing fast, so clients use the other replicas) until
// the process restarts. A stash that ran for stableAfter counts as
// recovered: its next failure starts the sequence again.
var (
	restartDelays = []time.Duration{100 * time.Millisecond, 500 * time.Millisecond, 2 * time.Second, 5 * time.Second, 15 * time.Second}
	stableAfter   = time.Minute
)

// stashSlot is one stash of the cluster: the stash serving now, replaced by
// a freshly opened one when it fails, and its health.
type stashSlot struct {
	tag   kv.Tag
	open  func() (*stash.Stash, error) // reopens the engine and a new stash
	reads latency                      // its reads' latency (metrics.go)
	cur   atomic.Pointer[stash.Stash]

	mu       sync.Mutex
	owned    []kv.KeyRange // Protected by mu; applied to every new stash.
	health   string        // Protected by mu.
	lastErr  string        // Protected by mu.
	restarts int64         // Protected by mu.
	since    time.Time     // Protected by mu.
}

func newSlot(tag kv.Tag, st *stash.Stash, open func() (*stash.Stash, error)) *stashSlot {
	sl := &stashSlot{tag: tag, open: open, health: HealthHealthy, since: time.Now()}
	sl.cur.Store(st)
	return sl
}

// get returns the stash serving now.
func (sl *stashSlot) get() *stash.Stash { return sl.cur.Load() }

// setOwned sets the key ranges the slot's stashes serve.
func (sl *stashSlot) setOwned(ranges []kv.KeyRange) {
	sl.mu.Lock()
	sl.owned = ranges
	sl.mu.Unlock()
	sl.get().SetOwned(ranges)
}

func (sl *stashSlot) setHealth(h string, err error) {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	if h != sl.health {
		sl.health, sl.since = h, time.Now()
	}
	if err != nil {
		sl.lastErr = err.Error()
	}
}

// slotHealth is a slot's health for status.
type slotHealth struct {
	Health   string
	LastErr  string
	Restarts int64
	Since    time.Time
}

func (sl *stashSlot) healthNow() slotHealth {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	return slotHealth{Health: sl.health, LastErr: sl.lastErr, Restarts: sl.restarts, Since: sl.since}
}

// supervise runs the slot's stash until ctx ends. When it fails, the stash
// is closed (after its readers) and reopened from its files, which for a
// durable stash means from its engine's version, catching up from the log
// (the log keeps every version the engine has not made durable); a dram
// stash comes back empty at the log's end, as after a process restart.
func (s *Server) supervise(ctx context.Context, sl *stashSlot) {
	log := s.roleLogger(logRoleStash)
	failures := 0
	for {
		st := sl.get()
		started := time.Now()
		err := st.Run(ctx)
		if ctx.Err() != nil {
			return
		}
		if time.Since(started) >= stableAfter {
			failures = 0
		}
		sl.setHealth(HealthRestarting, err)
		log.Error("stash failed: its reads fail fast while it restarts", "tag", sl.tag, "pool", st.Pool(), "err", err)
		if cerr := st.Close(); cerr != nil {
			log.Warn("close failed stash", "tag", sl.tag, "err", cerr)
		}
		var next *stash.Stash
		for next == nil {
			if failures >= len(restartDelays) {
				sl.setHealth(HealthFailed, nil)
				log.Error("stash failed too often: left failed until the process restarts; the other replicas of its shards serve", "tag", sl.tag, "failures", failures)
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(restartDelays[failures]):
			}
			failures++
			st, err := sl.open()
			if err != nil {
				sl.setHealth(HealthRestarting, err)
				log.Error("reopening stash failed", "tag", sl.tag, "err", err)
				continue
			}
			next = st
		}
		sl.mu.Lock()
		owned := sl.owned
		if r := s.tx.Load(); r != nil {
			// A stash that restarts empty serves what its tag holds now
			// (shards move); one with data keeps its own ownership.
			owned = r.commit.Shards().RangesOf(sl.tag)
		}
		next.SetOwned(owned)
		sl.restarts++
		sl.mu.Unlock()
		sl.cur.Store(next)
		sl.setHealth(HealthHealthy, nil)
		log.Warn("stash restarted", "tag", sl.tag, "version", next.AppliedVersion())
	}
}
