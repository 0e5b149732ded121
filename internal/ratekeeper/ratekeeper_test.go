package ratekeeper

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/distash/distash/internal/clock"
)

func TestControllerThrottlesAndRecovers(t *testing.T) {
	c := NewController()
	now := time.Unix(0, 0)
	healthy := Sample{Committed: 10_000_000, Stashes: []StashSample{{Applied: 10_000_000, WindowBytes: 10, WindowLimitBytes: 100}}}
	if r := c.Observe(now, healthy); !math.IsInf(r, 1) {
		t.Fatalf("healthy cluster throttled to %v", r)
	}
	// A stash falls 3 s behind while 5000 txn/s commit: the rate drops below that.
	now = now.Add(time.Second)
	behind := Sample{Committed: 13_000_000, Commits: 5000, Stashes: []StashSample{{Applied: 10_000_000, WindowLimitBytes: 100}}}
	r := c.Observe(now, behind)
	if r >= 5000 || r < MinRate || c.Reason == "" {
		t.Fatalf("lagging stash: rate %v (%q)", r, c.Reason)
	}
	// Still behind: the rate keeps falling, never below MinRate.
	for i := 0; i < 50; i++ {
		now = now.Add(100 * time.Millisecond)
		r = c.Observe(now, behind)
	}
	if r != MinRate {
		t.Fatalf("rate after sustained lag = %v, want %v", r, float64(MinRate))
	}
	// Window pressure alone also throttles.
	c2 := NewController()
	full := Sample{Committed: 1, Stashes: []StashSample{{Applied: 1, WindowBytes: 90, WindowLimitBytes: 100}}}
	if r := c2.Observe(now, full); math.IsInf(r, 1) {
		t.Fatal("window pressure did not throttle")
	}
	// Caught up: the rate grows, then the limit is lifted.
	caught := Sample{Committed: 20_000_000, Commits: 6000, Stashes: []StashSample{{Applied: 20_000_000, WindowLimitBytes: 100}}}
	for i := 0; i < 40 && !math.IsInf(r, 1); i++ {
		now = now.Add(100 * time.Millisecond)
		prev := r
		r = c.Observe(now, caught)
		if r < prev {
			t.Fatalf("rate fell while healthy: %v -> %v", prev, r)
		}
	}
	if !math.IsInf(r, 1) {
		t.Fatalf("limit not lifted after recovery: %v", r)
	}
}

// TestWaitHonoursRate: 40 transactions at 200/s take 200 ms of the
// ratekeeper's clock (a manual one, advanced 1 ms at a time whenever a
// transaction waits; the bucket starts empty).
func TestWaitHonoursRate(t *testing.T) {
	start := time.Unix(0, 0)
	clk := clock.NewManual(start)
	r := New(func() Sample { return Sample{} }, time.Hour).WithClock(clk)
	r.ctl.rate = 200 // transactions/s
	ctx := context.Background()
	waiting, done := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		defer done()
		for i := 0; i < 40; i++ {
			if err := r.Wait(ctx); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	for clk.BlockUntil(waiting, 1) == nil {
		clk.Advance(time.Millisecond)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	t.Logf("40 waits at 200/s: %v of the clock", clk.Since(start))
	if d := clk.Since(start); d < 195*time.Millisecond || d > 205*time.Millisecond {
		t.Fatalf("40 waits at 200/s took %v, want 200 ms", d)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	r.ctl.rate = 0.001
	r.tokens = 0
	if err := r.Wait(cctx); err == nil {
		t.Fatal("Wait ignored a cancelled context")
	}
}

// TestLogWithheldThrottles: while the log keeps a stash's entries past its
// hold bound, the rate is LogWithheldRate whatever else the sample says;
// once the log no longer withholds, nothing limits it.
func TestLogWithheldThrottles(t *testing.T) {
	c := NewController()
	now := time.Unix(0, 0)
	ok := []StashSample{{Tag: 3, Applied: 1, WindowLimitBytes: 100}}
	c.Observe(now, Sample{Committed: 1, Stashes: ok})
	why := LogWithheldReason(7, "data", 1<<30)
	if r := c.Observe(now.Add(time.Second), Sample{Committed: 1, Commits: 900, Stashes: ok, LogWithheld: why}); r != LogWithheldRate || c.Reason != why {
		t.Fatalf("withheld: rate %v, reason %q", r, c.Reason)
	}
	if r := c.Observe(now.Add(2*time.Second), Sample{Committed: 1, Commits: 905, Stashes: ok}); !math.IsInf(r, 1) || c.Reason != "" {
		t.Fatalf("after: rate %v, reason %q", r, c.Reason)
	}
}

// TestReasonKind checks that every reason the controller writes has its
// kind (metrics label it), so rewording a reason cannot silently turn it
// into "other".
func TestReasonKind(t *testing.T) {
	now := time.Unix(0, 0)
	observe := func(s Sample) *Controller {
		c := NewController()
		c.Observe(now, Sample{Committed: s.Committed, Stashes: []StashSample{{Applied: s.Committed, WindowLimitBytes: 100}}})
		c.Observe(now.Add(time.Second), s)
		return c
	}
	lag := Sample{Committed: 13_000_000, Commits: 5000, Stashes: []StashSample{{Applied: 10_000_000, WindowLimitBytes: 100}}}
	fetchLag := Sample{Committed: 13_000_000, Commits: 5000, Stashes: []StashSample{{Applied: 10_000_000, WindowLimitBytes: 100, Fetching: true}}}
	window := Sample{Committed: 1, Stashes: []StashSample{{Applied: 1, WindowBytes: 95, WindowLimitBytes: 100}}}
	full := Sample{Committed: 1, Stashes: []StashSample{{Applied: 1, UsedBytes: 99, CapacityBytes: 100, Pool: "data"}}}
	recovering := observe(lag)
	recovering.Observe(now.Add(1100*time.Millisecond), Sample{Committed: 20_000_000, Commits: 6000, Stashes: []StashSample{{Applied: 20_000_000, WindowLimitBytes: 100}}})
	for _, tc := range []struct {
		c    *Controller
		want string
	}{
		{NewController(), KindNone},
		{observe(lag), KindStashLag},
		{observe(fetchLag), KindFetchLag},
		{observe(window), KindWindow},
		{observe(full), KindCapacity},
		{recovering, KindRecovering},
		{observe(Sample{Committed: 1, LogWithheld: LogWithheldReason(7, "data", 1<<30)}), KindLogHeld},
	} {
		if got := ReasonKind(tc.c.Reason); got != tc.want {
			t.Errorf("ReasonKind(%q) = %q, want %q", tc.c.Reason, got, tc.want)
		}
	}
}
