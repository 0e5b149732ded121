package ratekeeper

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/distash/distash/internal/kv"
)

const (
	mib = 1 << 20
	// now is the committed version of every sample the driver takes.
	committedNow = kv.Version(50_000_000)
)

// driver feeds a controller samples every 100 ms, with commits at
// min(demand, the controller's rate), as a cluster under its limit would.
type driver struct {
	c       *Controller
	now     time.Time
	commits float64
	demand  float64 // transactions/s the clients would commit
}

func newDriver(demand float64) *driver {
	return &driver{c: NewController(), now: time.Unix(1000, 0), demand: demand}
}

func (d *driver) step(stashes ...StashSample) float64 {
	d.now = d.now.Add(100 * time.Millisecond)
	d.commits += math.Min(d.demand, d.c.Rate()) / 10
	return d.c.Observe(d.now, Sample{Committed: committedNow, Commits: int64(d.commits), Stashes: stashes})
}

// full is a caught-up stash of the durable pool "data" at fraction of its
// 1000 MiB capacity.
func full(tag kv.Tag, fraction float64) StashSample {
	return StashSample{Tag: tag, Pool: "data", Applied: committedNow, UsedBytes: int64(fraction * 1000 * mib), CapacityBytes: 1000 * mib, WindowLimitBytes: 100}
}

// behind is a stash secs seconds behind the log.
func behind(tag kv.Tag, secs float64) StashSample {
	return StashSample{Tag: tag, Applied: committedNow - kv.Version(secs*kv.VersionsPerSecond), WindowLimitBytes: 100}
}

func TestCapacityThrottle(t *testing.T) {
	d := newDriver(5000)
	// Below 90%, fullness does not matter, nor does an ephemeral or
	// unlimited pool's usage (no capacity in the sample).
	for i := 0; i < 20; i++ {
		eph := StashSample{Tag: 2, Pool: "cache", UsedBytes: 1 << 40, Applied: committedNow}
		if r := d.step(full(5, 0.80), eph); !math.IsInf(r, 1) || d.c.Reason != "" {
			t.Fatalf("80%% full: rate %v (%q)", r, d.c.Reason)
		}
	}
	// From 90% to 98% the rate falls steadily from the rate the cluster ran
	// at (5000/s) to CapacityMinRate.
	prev := math.Inf(1)
	for pct := 90.0; pct <= 98.0; pct += 0.5 {
		r := d.step(full(5, pct/100))
		if r >= prev || r < CapacityMinRate || r > 5000*1.001 {
			t.Fatalf("%.1f%% full: rate %v after %v", pct, r, prev)
		}
		prev = r
	}
	// 94%: reduced, and it stays where fullness puts it while the cluster
	// runs at that rate (the limit does not chase its own effect).
	var at94 float64
	for i := 0; i < 50; i++ {
		r := d.step(full(5, 0.94))
		if i == 0 {
			at94 = r
		}
		if math.Abs(r-at94) > 1e-9*at94 {
			t.Fatalf("94%% full: rate moved from %v to %v at sample %d", at94, r, i)
		}
	}
	if want := CapacityLimit(5000, 0.94); at94 >= 1000 || at94 <= 10*CapacityMinRate || math.Abs(at94-want) > 0.01*want {
		t.Fatalf("94%% full: rate %v, want about %v", at94, want)
	}
	if want := `pool "data" stash 5 is 94% full (940 MiB of 1000 MiB)`; d.c.Reason != want {
		t.Fatalf("reason %q, want %q", d.c.Reason, want)
	}
	// 98% and beyond: the floor, so reads and deletes still get through.
	for _, f := range []float64{0.98, 0.99, 0.999, 1, 1.02} {
		if r := d.step(full(5, f)); math.Abs(r-CapacityMinRate) > 1e-9 {
			t.Fatalf("%.1f%% full: rate %v, want %v", 100*f, r, float64(CapacityMinRate))
		}
	}
	if want := `pool "data" stash 5 is 102% full (1020 MiB of 1000 MiB)`; d.c.Reason != want {
		t.Fatalf("reason %q, want %q", d.c.Reason, want)
	}
	// Space freed: below 90% the limit is gone at once.
	if r := d.step(full(5, 0.85)); !math.IsInf(r, 1) || d.c.Reason != "" {
		t.Fatalf("85%% full again: rate %v (%q)", r, d.c.Reason)
	}
}

func TestCapacityFullestStashNamed(t *testing.T) {
	d := newDriver(5000)
	for i := 0; i < 5; i++ {
		d.step(StashSample{Tag: 3, Applied: committedNow, UsedBytes: 40 << 10, CapacityBytes: 64 << 10})
	}
	r := d.step(
		StashSample{Tag: 3, Applied: committedNow, UsedBytes: 59 << 10, CapacityBytes: 64 << 10},              // 92%
		StashSample{Tag: 4, Applied: committedNow, UsedBytes: 61<<10 + 512, CapacityBytes: 64 << 10},          // 96%
		StashSample{Tag: 6, Applied: committedNow, Pool: "data", UsedBytes: 1 << 40, CapacityBytes: 0},        // unlimited
		StashSample{Tag: 7, Applied: committedNow - 500_000, Pool: "data", UsedBytes: 90, CapacityBytes: 100}, // 90%, 0.5 s behind
	)
	if want := "stash 4 is 96% full (61.5 KiB of 64 KiB)"; d.c.Reason != want {
		t.Fatalf("reason %q, want %q", d.c.Reason, want)
	}
	if want := CapacityLimit(5000, 61.5/64); math.Abs(r-want) > 0.01*want {
		t.Fatalf("rate %v, want %v", r, want)
	}
}

func TestCapacityFromIdle(t *testing.T) {
	// A cluster that was idle when its stash crossed 90% is limited from
	// CapacityBaseMin, not from its idle rate.
	d := newDriver(0)
	for i := 0; i < 5; i++ {
		d.step(full(5, 0.5))
	}
	if r := d.step(full(5, 0.90)); math.Abs(r-CapacityBaseMin) > 1e-6 {
		t.Fatalf("90%% full after idling: rate %v, want %v", r, float64(CapacityBaseMin))
	}
	d.demand = 20_000
	if r := d.step(full(5, 0.90)); math.Abs(r-CapacityBaseMin) > 1e-6 {
		t.Fatalf("90%% full, clients back: rate %v, want %v", r, float64(CapacityBaseMin))
	}
	// The recent peak counts, though a lag limit holds the rate down now.
	d = newDriver(20_000)
	for i := 0; i < 10; i++ {
		d.step(full(5, 0.5))
	}
	for i := 0; i < 10; i++ {
		d.step(full(5, 0.5), behind(7, 3))
	}
	if r := d.c.Rate(); r > 1000 {
		t.Fatalf("lagging stash: rate %v", r)
	}
	d.step(full(5, 0.90), behind(7, 3))
	if d.c.capBase < 10_000 {
		t.Fatalf("capacity limit falls from %v, want the recent peak (20000/s, decaying)", d.c.capBase)
	}
}

func TestMostConstrainingReasonWins(t *testing.T) {
	d := newDriver(5000)
	for i := 0; i < 10; i++ {
		d.step(full(5, 0.5), behind(7, 0))
	}
	// 97% full (limit near the floor) and a stash 3 s behind (limit at
	// least MinRate): the capacity limit is lower and its reason shows.
	r := d.step(full(5, 0.97), behind(7, 3))
	if want := CapacityLimit(5000, 0.97); math.Abs(r-want) > 0.01*want || r >= MinRate {
		t.Fatalf("97%% full and lagging: rate %v, want %v", r, want)
	}
	if !strings.HasPrefix(d.c.Reason, `pool "data" stash 5 is 97% full`) {
		t.Fatalf("reason %q", d.c.Reason)
	}

	// 91% full (limit about 2100/s) and stashes falling ever further
	// behind: the lag limit falls below the capacity one and its reason
	// shows, naming the stash furthest behind.
	d = newDriver(5000)
	for i := 0; i < 10; i++ {
		d.step(full(5, 0.5), behind(7, 0), behind(8, 0))
	}
	capLimit := CapacityLimit(5000, 0.91)
	for i := 0; i < 30; i++ {
		lag := 3 + 0.1*float64(i)
		r := d.step(full(5, 0.91), behind(7, lag), behind(8, lag-1))
		switch {
		case r > capLimit*(1+1e-6):
			t.Fatalf("rate %v above the capacity limit %v", r, capLimit)
		case r < capLimit*(1-1e-6):
			if !strings.HasPrefix(d.c.Reason, "stash 7 is applying the log too slowly (") {
				t.Fatalf("lag limit %v below capacity limit %v, reason %q", r, capLimit, d.c.Reason)
			}
		default:
			if i > 0 || !strings.HasPrefix(d.c.Reason, `pool "data" stash 5 is 91% full`) {
				t.Fatalf("sample %d: capacity limit %v binding, reason %q", i, r, d.c.Reason)
			}
		}
	}
	if d.c.Rate() != MinRate || d.c.Reason != "stash 7 is applying the log too slowly (5.9 s behind)" {
		t.Fatalf("sustained lag: rate %v (%q)", d.c.Rate(), d.c.Reason)
	}
	// The stashes catch up: the lag limit recovers and is lifted, and the
	// capacity limit is left, with its reason.
	for i := 0; i < 40; i++ {
		d.step(full(5, 0.91), behind(7, 0), behind(8, 0))
	}
	if r := d.c.Rate(); math.Abs(r-capLimit) > 1e-9*capLimit || !strings.HasPrefix(d.c.Reason, `pool "data" stash 5 is 91% full`) {
		t.Fatalf("after catching up: rate %v (%q), want %v", r, d.c.Reason, capLimit)
	}
}

func TestFetchingStashCounts(t *testing.T) {
	// A stash fetching a shard throttles like any other when it falls
	// behind, and says so.
	fetching := func(secs float64, windowBytes int64) StashSample {
		st := behind(9, secs)
		st.Fetching, st.WindowBytes = true, windowBytes
		return st
	}
	d := newDriver(5000)
	for i := 0; i < 10; i++ {
		d.step(fetching(0, 0))
	}
	if !math.IsInf(d.c.Rate(), 1) {
		t.Fatalf("caught-up fetching stash throttled: %v (%q)", d.c.Rate(), d.c.Reason)
	}
	r := d.step(fetching(3, 0))
	if math.IsInf(r, 1) || r >= 5000 {
		t.Fatalf("lagging fetching stash: rate %v", r)
	}
	if want := "stash 9 is behind while fetching a shard (3.0 s behind the log)"; d.c.Reason != want {
		t.Fatalf("reason %q, want %q", d.c.Reason, want)
	}
	// Window pressure while fetching, beside a less pressed stash, and the
	// other way round.
	pressed := behind(2, 0)
	pressed.WindowBytes = 80
	d.step(fetching(0, 95), pressed)
	if want := "stash 9 is behind while fetching a shard (its MVCC window is at 95% of its memory budget)"; d.c.Reason != want {
		t.Fatalf("reason %q, want %q", d.c.Reason, want)
	}
	pressed.WindowBytes = 95
	d.step(fetching(0, 80), pressed)
	if want := "stash 2's MVCC window is at 95% of its memory budget (its engine is not keeping up)"; d.c.Reason != want {
		t.Fatalf("reason %q, want %q", d.c.Reason, want)
	}
}

func TestCapacityLimitCurve(t *testing.T) {
	if r := CapacityLimit(5000, 0.8999); !math.IsInf(r, 1) {
		t.Fatalf("below the start: %v", r)
	}
	if r := CapacityLimit(5000, 0.90); math.Abs(r-5000) > 1e-6 {
		t.Fatalf("at the start: %v", r)
	}
	// Linear in log space: halfway, the geometric mean.
	if r, want := CapacityLimit(5000, 0.94), math.Sqrt(5000*CapacityMinRate); math.Abs(r-want) > 1e-6*want {
		t.Fatalf("halfway: %v, want %v", r, want)
	}
	for _, f := range []float64{0.98, 0.99, 1.5} {
		if r := CapacityLimit(5000, f); math.Abs(r-CapacityMinRate) > 1e-9 {
			t.Fatalf("%v full: %v", f, r)
		}
	}
	if r := CapacityLimit(1, 0.95); r != CapacityMinRate {
		t.Fatalf("base under the floor: %v", r)
	}
}

func TestFormatOf(t *testing.T) {
	for _, c := range []struct {
		used, capacity int64
		want           string
	}{
		{930 * mib, 1000 * mib, "930 MiB of 1000 MiB"},
		{1932735283, 2 << 30, "1.8 GiB of 2 GiB"},
		{950, 1000, "950 B of 1000 B"},
		{62 << 10, 64 << 10, "62 KiB of 64 KiB"},
		{9*(1<<40) + 1<<39, 10 << 40, "9.5 TiB of 10 TiB"},
	} {
		if got := formatOf(c.used, c.capacity); got != c.want {
			t.Errorf("formatOf(%d, %d) = %q, want %q", c.used, c.capacity, got, c.want)
		}
	}
}
