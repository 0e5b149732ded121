package ratekeeper

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/distash/distash/internal/kv"
)

// stashAt returns a stash of pool secsBehind seconds behind committed.
func stashAt(tag kv.Tag, pool string, committed kv.Version, secsBehind float64) StashSample {
	return StashSample{Tag: tag, Pool: pool, Applied: committed - kv.Version(secsBehind*kv.VersionsPerSecond), WindowLimitBytes: 100}
}

// TestWorstReplicasAreIgnored: the lag and window limits ignore the worst
// R-1 stashes of each pool, never more, never one whose shard would be
// left with no replica that counts, and a full-disk stash is the worst of
// its pool; with R=1 nothing is ignored.
func TestWorstReplicasAreIgnored(t *testing.T) {
	const cv = kv.Version(100_000_000)
	teams3 := [][]kv.Tag{{1, 2, 3}}
	cases := []struct {
		name      string
		s         Sample
		throttled bool
		ignored   []kv.Tag
	}{
		{"one of three replicas far behind", Sample{Replication: map[string]int{"d": 3}, Teams: teams3,
			Stashes: []StashSample{stashAt(1, "d", cv, 30), stashAt(2, "d", cv, 0), stashAt(3, "d", cv, 0)}}, false, []kv.Tag{1}},
		{"two of three behind", Sample{Replication: map[string]int{"d": 3}, Teams: teams3,
			Stashes: []StashSample{stashAt(1, "d", cv, 30), stashAt(2, "d", cv, 5), stashAt(3, "d", cv, 0)}}, false, []kv.Tag{1, 2}},
		{"all three behind: the best of them throttles", Sample{Replication: map[string]int{"d": 3}, Teams: teams3,
			Stashes: []StashSample{stashAt(1, "d", cv, 30), stashAt(2, "d", cv, 5), stashAt(3, "d", cv, 2)}}, true, []kv.Tag{1, 2}},
		{"replication 1: nothing ignored", Sample{Replication: map[string]int{"d": 1}, Teams: [][]kv.Tag{{1}, {2}},
			Stashes: []StashSample{stashAt(1, "d", cv, 30), stashAt(2, "d", cv, 0)}}, true, nil},
		{"pool unknown: nothing ignored", Sample{
			Stashes: []StashSample{stashAt(1, "d", cv, 30), stashAt(2, "d", cv, 0)}}, true, nil},
		{"its team's other replica is down (not in the sample)", Sample{Replication: map[string]int{"d": 2}, Teams: [][]kv.Tag{{1, 2}, {2, 3}},
			Stashes: []StashSample{stashAt(1, "d", cv, 30), stashAt(3, "d", cv, 0)}}, true, nil},
		{"its teams keep a replica", Sample{Replication: map[string]int{"d": 2}, Teams: [][]kv.Tag{{1, 2}, {1, 3}},
			Stashes: []StashSample{stashAt(1, "d", cv, 30), stashAt(2, "d", cv, 0), stashAt(3, "d", cv, 0)}}, false, []kv.Tag{1}},
		{"a full disk is the worst of its pool", Sample{Replication: map[string]int{"d": 2}, Teams: [][]kv.Tag{{1, 2}, {2, 3}, {1, 3}},
			Stashes: []StashSample{func() StashSample { s := stashAt(1, "d", cv, 0); s.Unhealthy = "disk_full"; return s }(), stashAt(2, "d", cv, 8), stashAt(3, "d", cv, 0)}},
			true, []kv.Tag{1}},
		{"pools are counted apart", Sample{Replication: map[string]int{"d": 2, "c": 2}, Teams: [][]kv.Tag{{1, 2}, {3, 4}},
			Stashes: []StashSample{stashAt(1, "d", cv, 30), stashAt(2, "d", cv, 0), stashAt(3, "c", cv, 9), stashAt(4, "c", cv, 0)}}, false, []kv.Tag{1, 3}},
		{"window pressure counts like lag", Sample{Replication: map[string]int{"d": 2}, Teams: [][]kv.Tag{{1, 2}},
			Stashes: []StashSample{{Tag: 1, Pool: "d", Applied: cv, WindowBytes: 99, WindowLimitBytes: 100}, stashAt(2, "d", cv, 0)}}, false, []kv.Tag{1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := NewController()
			now := time.Unix(0, 0)
			tc.s.Committed = cv
			var r float64
			for i := 0; i < 5; i++ {
				now = now.Add(100 * time.Millisecond)
				tc.s.Commits += 500
				r = c.Observe(now, tc.s)
			}
			if throttled := !math.IsInf(r, 1); throttled != tc.throttled {
				t.Errorf("rate %v (%q), want throttled=%v", r, c.Reason, tc.throttled)
			}
			got := slices.Clone(c.Ignored)
			slices.Sort(got)
			if !slices.Equal(got, tc.ignored) {
				t.Errorf("ignored %v, want %v", got, tc.ignored)
			}
		})
	}
}

// TestUnhealthyStashIsNoCapacitySignal: a full-disk stash's fullness does
// not throttle (it takes no writes); a healthy stash past 90% still does.
func TestUnhealthyStashIsNoCapacitySignal(t *testing.T) {
	full := StashSample{Tag: 1, Pool: "d", Applied: 1, UsedBytes: 99, CapacityBytes: 100, Unhealthy: "disk_full"}
	s := Sample{Committed: 1, Replication: map[string]int{"d": 2}, Stashes: []StashSample{full, {Tag: 2, Pool: "d", Applied: 1, UsedBytes: 50, CapacityBytes: 100}}}
	c := NewController()
	if r := c.Observe(time.Unix(1, 0), s); !math.IsInf(r, 1) {
		t.Fatalf("a full-disk stash at 99%% of its capacity throttled: %v (%q)", r, c.Reason)
	}
	s.Stashes[1].UsedBytes = 95
	if r := c.Observe(time.Unix(2, 0), s); math.IsInf(r, 1) || ReasonKind(c.Reason) != KindCapacity {
		t.Fatalf("a healthy stash at 95%%: rate %v (%q), want a capacity limit", r, c.Reason)
	}
}
