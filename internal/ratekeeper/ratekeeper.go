// Package ratekeeper throttles new transactions when stashes fall behind, as
// FoundationDB's Ratekeeper does: if a stash applies the log too slowly
// (apply lag) or cannot make versions durable fast enough (its MVCC window
// outgrows its memory budget), the cluster's transaction rate is cut until
// the stash catches up, instead of letting memory grow without bound and
// reads fail with future_version.
//
// The core (Controller) is a pure function of observations and time, so it
// is tested without goroutines; Ratekeeper wraps it with a sampling loop and
// a token bucket that the GRV proxy and the commit proxy wait on.
package ratekeeper

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/distash/distash/internal/kv"
)

// StashSample is one stash's state at a sample.
type StashSample struct {
	Applied          kv.Version // newest version applied to its window
	WindowBytes      int64      // bytes held in its MVCC window
	WindowLimitBytes int64      // the window's memory budget
}

// Sample is the cluster's state at one instant.
type Sample struct {
	Committed kv.Version // the latest committed version
	Commits   int64      // transactions committed so far (a counter)
	Stashes   []StashSample
}

// Limits of the controller.
const (
	// MaxApplyLag is the apply lag (in versions, ~µs) above which the rate is cut.
	MaxApplyLag = kv.Version(kv.VersionsPerSecond) // 1 s
	// WindowPressure is the fraction of a window's budget above which the rate is cut.
	WindowPressure = 0.75
	// MinRate is the lowest rate the controller sets (transactions/s).
	MinRate = 50
)

// Controller decides the transaction rate from samples.
type Controller struct {
	rate    float64 // transactions/s; +Inf when unthrottled
	last    Sample
	lastAt  time.Time
	healthy time.Duration // how long no stash has been under pressure
	Reason  string        // why the rate is limited, "" when it is not
}

// NewController returns an unthrottled controller.
func NewController() *Controller { return &Controller{rate: math.Inf(1)} }

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
	c.last, c.lastAt = s, now

	reason := ""
	for _, st := range s.Stashes {
		if lag := s.Committed - st.Applied; lag > MaxApplyLag {
			reason = "a stash is applying the log too slowly"
			break
		}
		if st.WindowLimitBytes > 0 && float64(st.WindowBytes) > WindowPressure*float64(st.WindowLimitBytes) {
			reason = "a stash's MVCC window is near its memory budget (its engine is not keeping up)"
			break
		}
	}
	c.Reason = reason
	if reason != "" {
		c.healthy = 0
		base := observed
		if math.IsInf(c.rate, 1) || base < c.rate {
			if base <= 0 {
				base = c.rate
			}
		} else {
			base = c.rate
		}
		if math.IsInf(base, 1) || base <= 0 {
			base = 1000
		}
		c.rate = math.Max(MinRate, base*0.7)
		return c.rate
	}
	if math.IsInf(c.rate, 1) {
		return c.rate
	}
	c.healthy += elapsed
	if c.healthy > 2*time.Second {
		c.rate = math.Inf(1)
	} else {
		c.rate *= 1.25
	}
	return c.rate
}

// Ratekeeper samples the cluster and limits transactions to the
// controller's rate. Safe for concurrent use.
type Ratekeeper struct {
	sample func() Sample
	every  time.Duration

	mu     sync.Mutex
	ctl    *Controller // Protected by mu.
	tokens float64     // Protected by mu.
	refill time.Time   // Protected by mu.
}

// New returns a ratekeeper that calls sample every interval.
func New(sample func() Sample, interval time.Duration) *Ratekeeper {
	return &Ratekeeper{sample: sample, every: interval, ctl: NewController(), refill: time.Now()}
}

// Run samples until ctx is done.
func (r *Ratekeeper) Run(ctx context.Context) {
	t := time.NewTicker(r.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			s := r.sample()
			r.mu.Lock()
			r.ctl.Observe(now, s)
			r.mu.Unlock()
		}
	}
}

// Status returns the current rate and why it is limited.
func (r *Ratekeeper) Status() (rate float64, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ctl.Rate(), r.ctl.Reason
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
		now := time.Now()
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
		case <-time.After(wait):
		}
	}
}
