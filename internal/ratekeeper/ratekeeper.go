// Package ratekeeper throttles new transactions when stashes fall behind or
// durable stashes near their capacity, as FoundationDB's Ratekeeper does:
//
//   - if a stash applies the log too slowly (apply lag) or cannot make
//     versions durable fast enough (its MVCC window outgrows its memory
//     budget), the cluster's transaction rate is cut until the stash catches
//     up, instead of letting memory grow without bound and reads fail with
//     future_version. A stash fetching a shard (the destination of a move)
//     counts like any other;
//   - if a stash of a durable pool with a capacity is more than 90% full,
//     the rate falls with its fullness, from the rate the cluster ran at when
//     it crossed 90% down to CapacityMinRate at 98%, so the pool fills ever
//     more slowly instead of refusing writes with pool_full all at once,
//     while reads and deletes (which free space) still get through.
//
// The most constraining of these limits wins, and Reason says which it is.
//
// A pool's shards are replicated R times, and reads go to the replicas
// that keep up, so one slow replica must not throttle the cluster: as
// FoundationDB does, the lag and window limits ignore the worst R-1
// stashes of each pool (the most behind first; a stash whose disk is full
// counts as the most behind), and never one whose removal would leave a
// shard without a replica that still counts (a stash in the sample and
// not ignored). A stash that does not report (down, failed, damaged)
// is not in the sample at all. The capacity limit counts every stash that
// reports healthy.
//
// The core (Controller) is a pure function of observations and time, so it
// is tested without goroutines; Ratekeeper wraps it with a sampling loop and
// a token bucket that the GRV proxy and the commit proxy wait on.
package ratekeeper

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/distash/distash/internal/clock"
	"github.com/distash/distash/internal/kv"
)

// StashSample is one stash's state at a sample.
type StashSample struct {
	Tag              kv.Tag     // the stash's tag
	Pool             string     // its pool; "" when not known
	Applied          kv.Version // newest version applied to its window
	WindowBytes      int64      // bytes held in its MVCC window
	WindowLimitBytes int64      // the window's memory budget
	UsedBytes        int64      // live bytes, checked against CapacityBytes
	CapacityBytes    int64      // the stash's capacity; 0: unlimited or an ephemeral pool
	Fetching         bool       // it is fetching a shard (the destination of a move)
	// Unhealthy, if not "", says why the stash cannot keep up for now
	// (its disk is full): it is the most behind of its pool, and its
	// fullness is not a capacity signal.
	Unhealthy string
}

// Sample is the cluster's state at one instant.
type Sample struct {
	Committed kv.Version // the latest committed version
	Commits   int64      // transactions committed so far (a counter)
	Stashes   []StashSample
	// Replication is each pool's replication in force (a pool missing:
	// 1, no stash of it is ignored).
	Replication map[string]int
	// Teams are the shard map's teams (the stashes serving each shard);
	// nil when not known (the R-1 bound alone then holds).
	Teams [][]kv.Tag
	// LogWithheld, if not "", says why the log holds more than its hold
	// bound for a stash it may not drop (a durable stash with no other
	// live replica): writes then run at LogWithheldRate until it pops.
	LogWithheld string
}

// Limits of the controller.
const (
	// MaxApplyLag is the apply lag (in versions, ~µs) above which the rate is cut.
	MaxApplyLag = kv.Version(kv.VersionsPerSecond) // 1 s
	// WindowPressure is the fraction of a window's budget above which the rate is cut.
	WindowPressure = 0.75
	// MinRate is the lowest rate the lag and window signals set (transactions/s).
	MinRate = 50

	// CapacityThrottleStart is the fraction of a durable stash's capacity
	// from which the rate falls with its fullness.
	CapacityThrottleStart = 0.90
	// CapacityThrottleFull is the fraction at which the rate reaches
	// CapacityMinRate.
	CapacityThrottleFull = 0.98
	// CapacityMinRate is the rate at and above CapacityThrottleFull
	// (transactions/s): low enough that the pool barely fills, high enough
	// that reads and the deletes that free space still proceed.
	CapacityMinRate = 5
	// LogWithheldRate is the rate while the log keeps, past its hold
	// bound, the entries of a stash no other copy holds (Sample.LogWithheld):
	// the log barely grows, and reads and the stash's return proceed.
	LogWithheldRate = 5
	// CapacityBaseMin is the least rate the capacity limit falls from: a
	// cluster that was idle when a stash crossed CapacityThrottleStart is
	// not pinned to its idle rate.
	CapacityBaseMin = 1000
	// peakHalfLife is how fast the remembered peak commit rate decays.
	peakHalfLife = 10 * time.Second
)

// Controller decides the transaction rate from samples.
type Controller struct {
	rate    float64 // transactions/s, the lower of lagRate and the capacity limit; +Inf when unthrottled
	lagRate float64 // the limit of the lag and window signals; +Inf when they set none
	last    Sample
	lastAt  time.Time
	healthy time.Duration // how long no stash has lagged or had window pressure
	peak    float64       // recent peak commit rate (transactions/s), decaying
	capBase float64       // the rate the capacity limit falls from; 0 when no stash is past CapacityThrottleStart
	Reason  string        // why the rate is limited, "" when it is not
	// lagReason is the last lag or window reason, for status while the
	// limit recovers after it.
	lagReason string
	// Ignored are the stashes the last sample's lag and window limits
	// ignored (the worst R-1 of their pools).
	Ignored []kv.Tag
}

// NewController returns an unthrottled controller.
func NewController() *Controller { return &Controller{rate: math.Inf(1), lagRate: math.Inf(1)} }

// Rate is the current limit in transactions per second (+Inf: none).
func (c *Controller) Rate() float64 { return c.rate }

// Observe takes a sample at time now and returns the new rate.
func (c *Controller) Observe(now time.Time, s Sample) float64 {
	var observed float64
	if !c.lastAt.IsZero() {
		if dt := now.Sub(c.lastAt).Seconds(); dt > 0 {
			observed = float64(s.Commits-c.last.Commits) / dt
		}
	}
	elapsed := now.Sub(c.lastAt)
	if c.lastAt.IsZero() {
		c.peak = observed
	} else {
		c.peak = math.Max(observed, c.peak*math.Pow(0.5, elapsed.Seconds()/peakHalfLife.Seconds()))
	}
	c.last, c.lastAt = s, now

	lagReason := c.observeLag(s, observed, elapsed)
	capLimit, capReason := c.observeCapacity(s)

	c.rate = math.Min(c.lagRate, capLimit)
	if capLimit < c.lagRate {
		c.Reason = capReason
	} else {
		c.Reason = lagReason
	}
	if s.LogWithheld != "" && LogWithheldRate < c.rate {
		c.rate, c.Reason = LogWithheldRate, s.LogWithheld
	}
	return c.rate
}

// observeLag runs the feedback loop of the lag and window signals: while a
// stash is under pressure, lagRate is cut to 70% of the rate observed (down
// to MinRate); once none is, it grows by a quarter a sample and is lifted
// after 2 s. It returns the most pressed stash's reason, "" when none is.
func (c *Controller) observeLag(s Sample, observed float64, elapsed time.Duration) string {
	sev := make([]float64, len(s.Stashes))
	why := make([]string, len(s.Stashes))
	for i, st := range s.Stashes {
		if st.Unhealthy != "" {
			sev[i], why[i] = math.Inf(1), fmt.Sprintf("stash %d cannot keep up: %s", st.Tag, st.Unhealthy)
			continue
		}
		if lag := s.Committed - st.Applied; lag > MaxApplyLag {
			sev[i] = float64(lag) / float64(MaxApplyLag)
			secs := float64(lag) / kv.VersionsPerSecond
			if st.Fetching {
				why[i] = fmt.Sprintf("stash %d is behind while fetching a shard (%.1f s behind the log)", st.Tag, secs)
			} else {
				why[i] = fmt.Sprintf("stash %d is applying the log too slowly (%.1f s behind)", st.Tag, secs)
			}
		}
		if st.WindowLimitBytes > 0 && float64(st.WindowBytes) > WindowPressure*float64(st.WindowLimitBytes) {
			if w := float64(st.WindowBytes) / (WindowPressure * float64(st.WindowLimitBytes)); w > sev[i] {
				sev[i] = w
				pct := int(100 * float64(st.WindowBytes) / float64(st.WindowLimitBytes))
				if st.Fetching {
					why[i] = fmt.Sprintf("stash %d is behind while fetching a shard (its MVCC window is at %d%% of its memory budget)", st.Tag, pct)
				} else {
					why[i] = fmt.Sprintf("stash %d's MVCC window is at %d%% of its memory budget (its engine is not keeping up)", st.Tag, pct)
				}
			}
		}
	}
	ignored := ignoreWorst(s, sev)
	c.Ignored = c.Ignored[:0]
	reason, worst := "", 0.0
	for i, st := range s.Stashes {
		if ignored[st.Tag] {
			c.Ignored = append(c.Ignored, st.Tag)
			continue
		}
		if sev[i] > worst {
			worst, reason = sev[i], why[i]
		}
	}
	if reason != "" {
		c.healthy = 0
		c.lagReason = reason
		base := observed
		if math.IsInf(c.lagRate, 1) || base < c.lagRate {
			if base <= 0 {
				base = c.lagRate
			}
		} else {
			base = c.lagRate
		}
		if math.IsInf(base, 1) || base <= 0 {
			base = 1000
		}
		c.lagRate = math.Max(MinRate, base*0.7)
		return reason
	}
	if math.IsInf(c.lagRate, 1) {
		return ""
	}
	c.healthy += elapsed
	if c.healthy > 2*time.Second {
		c.lagRate = math.Inf(1)
		return ""
	}
	c.lagRate *= 1.25
	return "recovering after: " + c.lagReason
}

// ignoreWorst returns the stashes the lag and window limits ignore: per
// pool, up to R-1 of those under pressure (sev > 0), the worst first, each
// only if every team it belongs to keeps a member that still counts (in
// the sample, not ignored), so that every shard has a replica that keeps
// up or throttles.
func ignoreWorst(s Sample, sev []float64) map[kv.Tag]bool {
	var order []int
	for i := range s.Stashes {
		if sev[i] > 0 {
			order = append(order, i)
		}
	}
	if len(order) == 0 {
		return nil
	}
	sort.SliceStable(order, func(a, b int) bool { return sev[order[a]] > sev[order[b]] })
	counts := make(map[kv.Tag]bool, len(s.Stashes))
	for _, st := range s.Stashes {
		counts[st.Tag] = true
	}
	ignored := map[kv.Tag]bool{}
	perPool := map[string]int{}
	for _, i := range order {
		st := s.Stashes[i]
		if perPool[st.Pool] >= s.Replication[st.Pool]-1 {
			continue
		}
		ok := true
		for _, team := range s.Teams {
			if !slices.Contains(team, st.Tag) {
				continue
			}
			other := false
			for _, t := range team {
				if t != st.Tag && counts[t] && !ignored[t] {
					other = true
					break
				}
			}
			if !other {
				ok = false
				break
			}
		}
		if ok {
			ignored[st.Tag] = true
			perPool[st.Pool]++
		}
	}
	return ignored
}

// observeCapacity returns the capacity limit (+Inf: none) and its reason:
// that of the fullest stash with a capacity, if it is past
// CapacityThrottleStart.
func (c *Controller) observeCapacity(s Sample) (float64, string) {
	var fullest *StashSample
	frac := 0.0
	for i := range s.Stashes {
		st := &s.Stashes[i]
		if st.CapacityBytes <= 0 || st.Unhealthy != "" {
			continue
		}
		if f := float64(st.UsedBytes) / float64(st.CapacityBytes); f > frac {
			fullest, frac = st, f
		}
	}
	if fullest == nil || frac < CapacityThrottleStart {
		c.capBase = 0
		return math.Inf(1), ""
	}
	if c.capBase == 0 {
		// The rate the cluster ran at when the stash crossed the threshold:
		// the recent peak, not the last sample's (a lag limit may hold it
		// down for now).
		c.capBase = math.Max(c.peak, CapacityBaseMin)
	}
	limit := CapacityLimit(c.capBase, frac)
	where := fmt.Sprintf("stash %d", fullest.Tag)
	if fullest.Pool != "" {
		where = fmt.Sprintf("pool %q %s", fullest.Pool, where)
	}
	return limit, fmt.Sprintf("%s is %d%% full (%s)", where, int(math.Floor(100*frac+1e-9)),
		formatOf(fullest.UsedBytes, fullest.CapacityBytes))
}

// CapacityLimit is the rate allowed when the fullest durable stash has used
// fraction of its capacity, falling from base: base up to
// CapacityThrottleStart, CapacityMinRate from CapacityThrottleFull, and
// between them linearly in log space (each point of fullness divides the
// rate by the same factor).
func CapacityLimit(base, fraction float64) float64 {
	if fraction < CapacityThrottleStart {
		return math.Inf(1)
	}
	base = math.Max(base, CapacityMinRate)
	x := math.Min(1, (fraction-CapacityThrottleStart)/(CapacityThrottleFull-CapacityThrottleStart))
	return base * math.Pow(CapacityMinRate/base, x)
}

// formatOf formats "used of capacity" in the largest binary unit that
// capacity has at least one of: "930 MiB of 1000 MiB".
func formatOf(used, capacity int64) string {
	units := []struct {
		name string
		size int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}}
	for _, u := range units {
		if capacity >= u.size {
			return fmt.Sprintf("%s of %s", formatIn(used, u.size, u.name), formatIn(capacity, u.size, u.name))
		}
	}
	return fmt.Sprintf("%d B of %d B", used, capacity)
}

func formatIn(n, unit int64, name string) string {
	if n%unit == 0 {
		return fmt.Sprintf("%d %s", n/unit, name)
	}
	v := float64(n) / float64(unit)
	if v >= 100 {
		return fmt.Sprintf("%.0f %s", v, name)
	}
	return fmt.Sprintf("%.1f %s", v, name)
}

// Ratekeeper samples the cluster and limits transactions to the
// controller's rate. Safe for concurrent use.
type Ratekeeper struct {
	sample func() Sample
	every  time.Duration
	clock  clock.Clock

	mu     sync.Mutex
	ctl    *Controller // Protected by mu.
	tokens float64     // Protected by mu.
	refill time.Time   // Protected by mu.
}

// New returns a ratekeeper that calls sample every interval of the real
// clock.
func New(sample func() Sample, interval time.Duration) *Ratekeeper {
	return &Ratekeeper{sample: sample, every: interval, clock: clock.Real{}, ctl: NewController(), refill: clock.Real{}.Now()}
}

// WithClock makes r sample and pace transactions on c (nil: the real
// clock); call it before Run and Wait.
func (r *Ratekeeper) WithClock(c clock.Clock) *Ratekeeper {
	r.clock = clock.Or(c)
	r.refill = r.clock.Now()
	return r
}

// Run samples until ctx is done.
func (r *Ratekeeper) Run(ctx context.Context) {
	t := r.clock.NewTicker(r.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C():
			s := r.sample()
			r.mu.Lock()
			r.ctl.Observe(now, s)
			r.mu.Unlock()
		}
	}
}

// Kinds of limit (ReasonKind), a small fixed set for metrics labels.
const (
	KindNone       = "none"        // not limited
	KindStashLag   = "stash_lag"   // a stash applies the log too slowly
	KindFetchLag   = "fetch_lag"   // a stash fetching a shard is behind
	KindWindow     = "mvcc_window" // a stash's MVCC window is near its memory budget
	KindCapacity   = "capacity"    // a durable stash is nearly full
	KindRecovering = "recovering"  // the limit is lifting after a lag or window limit
	KindLogHeld    = "log_held"    // the log keeps the entries of a stash no other copy holds
)

// ReasonKind classifies a reason Status returns into one of the Kind
// constants: reasons carry figures (seconds, percentages) that change
// every sample, unfit for a metric label. It reads the reason's wording,
// which this file writes.
func ReasonKind(reason string) string {
	switch {
	case reason == "":
		return KindNone
	case strings.HasPrefix(reason, "recovering after: "):
		return KindRecovering
	case strings.Contains(reason, "fetching a shard"):
		return KindFetchLag
	case strings.Contains(reason, "MVCC window"):
		return KindWindow
	case strings.Contains(reason, "applying the log too slowly") || strings.Contains(reason, "cannot keep up: "):
		return KindStashLag
	case strings.Contains(reason, "% full ("):
		return KindCapacity
	case strings.Contains(reason, "the log holds"):
		return KindLogHeld
	}
	return "other"
}

// LogWithheldReason is Sample.LogWithheld's wording: the log holds held
// bytes, past its hold bound, for stash tag of pool, which it may not drop.
func LogWithheldReason(tag kv.Tag, pool string, held int64) string {
	return fmt.Sprintf("the log holds %.1f MiB for stash %d (pool %q), which has stopped taking them (down, or behind) and whose shards have no other live replica: the log keeps those writes, of which it holds the only copy, so writes wait until the stash catches up", float64(held)/(1<<20), tag, pool)
}

// Status returns the current rate and why it is limited.
func (r *Ratekeeper) Status() (rate float64, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ctl.Rate(), r.ctl.Reason
}

// Ignored returns the stashes the last sample's lag and window limits
// ignored (the worst R-1 of their pools).
func (r *Ratekeeper) Ignored() []kv.Tag {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ctl.Ignored)
}

// Wait blocks until the rate allows one more transaction.
func (r *Ratekeeper) Wait(ctx context.Context) error {
	for {
		r.mu.Lock()
		rate := r.ctl.Rate()
		if math.IsInf(rate, 1) {
			r.mu.Unlock()
			return nil
		}
		now := r.clock.Now()
		r.tokens = math.Min(r.tokens+now.Sub(r.refill).Seconds()*rate, math.Max(1, rate/10))
		r.refill = now
		if r.tokens >= 1 {
			r.tokens--
			r.mu.Unlock()
			return nil
		}
		wait := time.Duration((1 - r.tokens) / rate * float64(time.Second))
		r.mu.Unlock()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-r.clock.After(wait):
		}
	}
}
