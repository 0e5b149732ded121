package server

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distash/distash/config"
	"github.com/distash/distash/internal/engine"
	"github.com/distash/distash/internal/fsys"
	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/shardmap"
	"github.com/distash/distash/internal/stash"
)

// Stash health, as status reports it.
const (
	HealthHealthy    = "healthy"
	HealthRestarting = "restarting"
	HealthFailed     = "failed"
	// HealthDiskFull: the stash's disk is full. While it runs it serves
	// the reads of the versions it applied and applies nothing more,
	// retrying its write every few seconds; if it had to stop, it is
	// reopened once there is room. Either way it comes back by itself
	// when space is freed.
	HealthDiskFull = "disk_full"
	// HealthDamaged: the stash found damage in its files (a checksum, a
	// missing file, its directory removed) and cannot vouch for its data:
	// it serves nothing. In a multi-process cluster with replicas it is
	// replaced by a new, empty stash that the data distributor fills from
	// the healthy replicas; a stash holding the only replica (replication
	// 1) keeps its files and refuses its shards' reads with stash_damaged.
	HealthDamaged = "damaged"
)

// diskFullReopen is how often a stash stopped on a full disk is reopened.
var diskFullReopen = 2 * time.Second

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
	// refusal, if set, is what reads of the slot's stash get: a damaged
	// stash holding the only replica of its shards. Protected by mu.
	refusal error
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
	h := slotHealth{Health: sl.health, LastErr: sl.lastErr, Restarts: sl.restarts, Since: sl.since}
	sl.mu.Unlock()
	if h.Health == HealthHealthy {
		if since, cause, full := sl.get().DiskFull(); full {
			h.Health, h.Since = HealthDiskFull, since
			if cause != nil {
				h.LastErr = cause.Error()
			}
		}
	}
	return h
}

// refused returns the error reads of the slot get instead of asking its
// stash, nil if they ask it.
func (sl *stashSlot) refused() error {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	return sl.refusal
}

// running reports whether the slot's stash applies the log now (healthy,
// or waiting for room on a full disk): a stash that does not is left out
// of the ratekeeper's figures, as a stash whose node is down.
func (h slotHealth) running() bool { return h.Health == HealthHealthy || h.Health == HealthDiskFull }

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
		diskFull := false
		switch {
		case errors.Is(err, fsys.ErrDamaged):
			if cerr := st.Close(); cerr != nil {
				log.Warn("close damaged stash", "tag", sl.tag, "err", cerr)
			}
			s.stashDamaged(ctx, sl, err)
			return
		case fsys.IsNoSpace(err):
			// Its engine could not go on after the disk filled: reopened
			// once there is room, however long that takes.
			diskFull = true
			sl.setHealth(HealthDiskFull, err)
			log.Error("stash stopped on a full disk: it is reopened once there is room; the other replicas of its shards serve", "tag", sl.tag, "pool", st.Pool(), "err", err)
		default:
			sl.setHealth(HealthRestarting, err)
			log.Error("stash failed: its reads fail fast while it restarts", "tag", sl.tag, "pool", st.Pool(), "err", err)
		}
		pool, _ := s.cfg.PoolByName(st.Pool())
		var madeDurable kv.Version
		if keepsFiles(pool) {
			madeDurable = st.Stats().Durable
		}
		if cerr := st.Close(); cerr != nil {
			log.Warn("close failed stash", "tag", sl.tag, "err", cerr)
		}
		next := s.reopen(ctx, sl, &failures, diskFull)
		if next == nil {
			return
		}
		if madeDurable > 0 && emptyEngine(next.Engine()) {
			// (madeDurable is set only for a pool that keepsFiles.)
			// Its files went away while it ran and its engine failed on
			// them before the stash's own check did. Replaying its tag
			// from the log (which may still hold it all in a young
			// cluster) would not bring back the ranges it fetched from
			// other replicas: it is rebuilt from them instead.
			dir := next.Dir()
			next.Close()
			s.stashDamaged(ctx, sl, fsys.Damaged(dir, "the stash had made version %d durable, and its engine came back empty: its files went away while it ran", madeDurable))
			return
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

// reopen reopens a failed stash from its files after the restart policy's
// delay, or every diskFullReopen while its disk is full (not counted as
// failures). It returns nil when ctx ends, when the stash failed too
// often (left failed) or when its files are damaged (stashDamaged).
func (s *Server) reopen(ctx context.Context, sl *stashSlot, failures *int, diskFull bool) *stash.Stash {
	log := s.roleLogger(logRoleStash)
	for {
		delay := diskFullReopen
		if !diskFull {
			if *failures >= len(restartDelays) {
				sl.setHealth(HealthFailed, nil)
				log.Error("stash failed too often: left failed until the process restarts; the other replicas of its shards serve", "tag", sl.tag, "failures", *failures)
				return nil
			}
			delay = restartDelays[*failures]
			*failures++
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(delay):
		}
		st, err := sl.open()
		switch {
		case err == nil:
			return st
		case errors.Is(err, fsys.ErrDamaged), errors.Is(err, errTagTrimmed):
			// Damaged files, or (errTagTrimmed) a durable stash node's
			// stash reopened empty while the log no longer holds its
			// tag's history: its files went away while it ran, and its
			// engine failed on them before the stash noticed. Either way
			// it cannot vouch for its data: rebuilt, never reopened again
			// and again.
			s.stashDamaged(ctx, sl, err)
			return nil
		case fsys.IsNoSpace(err):
			if !diskFull {
				log.Error("reopening stash failed: the disk is full; retrying until there is room", "tag", sl.tag, "err", err)
			}
			diskFull = true
			sl.setHealth(HealthDiskFull, err)
		default:
			diskFull = false
			sl.setHealth(HealthRestarting, err)
			log.Error("reopening stash failed", "tag", sl.tag, "err", err)
		}
	}
}

// stashDamaged handles a stash that found damage in its files (err wraps
// a *fsys.DamageError): it is reported damaged, with the file, and never
// reopened from those files. On a stash node whose pool keeps more than
// one replica, the node drops the data and rejoins as a new stash, which
// the data distributor fills from the healthy replicas; a stash holding
// the only replica of its shards refuses their reads with stash_damaged
// and keeps its files for an operator. In an embedded cluster the other
// replicas serve, and the data distributor counts the stash as down. (The
// process's clusterLink decides which.)
func (s *Server) stashDamaged(ctx context.Context, sl *stashSlot, err error) {
	log := s.roleLogger(logRoleStash)
	pool := sl.get().Pool()
	var de *fsys.DamageError
	errors.As(err, &de)
	file, reason := "", err.Error()
	if de != nil {
		file, reason = de.Path, de.Reason
	}
	sl.setHealth(HealthDamaged, err)
	if sl.tag == shardmap.SystemTag {
		log.Error("the system stash is damaged: it does not serve", "file", file, "reason", reason)
		return
	}
	s.link.stashDamaged(ctx, sl, pool, file, reason, err)
}

// refuseDamaged makes the reads of a damaged stash that holds the only
// replica of its shards (replication r ≤ 1) fail with stash_damaged, which
// is not retryable: no other replica can answer, and waiting does not
// mend the files.
func (s *Server) refuseDamaged(sl *stashSlot, pool string, r int, err error) {
	refusal := kv.Errorf(kv.CodeStashDamaged, "stash %d of pool %q holds the only replica of its shards (replication %d) and cannot vouch for them: %v; it refuses their reads until its files are restored", sl.tag, pool, r, err)
	sl.mu.Lock()
	sl.refusal = refusal
	sl.lastErr = refusal.Error()
	sl.mu.Unlock()
	s.roleLogger(logRoleStash).Error("stash is damaged and holds the only replica of its shards: it refuses their reads (stash_damaged) and keeps its files; restore them and restart",
		"tag", sl.tag, "pool", pool, "err", err)
}

// poolReplication is the replication in force of pool: the controller's
// (a multi-process cluster) or the configuration's.
func (s *Server) poolReplication(pool string) int {
	r := 1
	if p, ok := s.cfg.PoolByName(pool); ok {
		r = p.Replication
	}
	if v := s.viewWithin(time.Second); v != nil {
		for _, pr := range v.Replication {
			if pr.Pool == pool && pr.Replication > 0 {
				r = int(pr.Replication)
			}
		}
	}
	return r
}

// keepsFiles reports whether pool's stashes keep their data in files
// across restarts: durable, and not on DRAM.
func keepsFiles(pool *config.Pool) bool {
	return pool != nil && !pool.Volatile() && !pool.Ephemeral()
}

// emptyEngine reports whether eng holds nothing, at version 0.
func emptyEngine(eng engine.Engine) bool {
	return eng != nil && eng.Version() == 0 && eng.Stats().Keys == 0
}
