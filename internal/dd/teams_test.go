package dd

import (
	"slices"
	"strings"
	"testing"

	"github.com/distash/distash/internal/kv"
)

func TestBuildTeams(t *testing.T) {
	zoneOf := map[kv.Tag]Member{}
	check := func(members []Member, r int, spread bool, wantWarn string) [][]kv.Tag {
		t.Helper()
		for _, m := range members {
			zoneOf[m.Tag] = m
		}
		teams, warns := BuildTeams(members, r, spread)
		if wantWarn == "" && len(warns) > 0 || wantWarn != "" && !slices.ContainsFunc(warns, func(w string) bool { return strings.Contains(w, wantWarn) }) {
			t.Errorf("warnings %q, want one containing %q", warns, wantWarn)
		}
		count := map[kv.Tag]int{}
		for _, tm := range teams {
			want := min(r, len(members))
			if len(tm) != want {
				t.Errorf("team %v of %d, want %d", tm, len(tm), want)
			}
			for _, tag := range tm {
				count[tag]++
			}
		}
		for _, m := range members {
			if count[m.Tag] == 0 {
				t.Errorf("stash %d is in no team: %v", m.Tag, teams)
			}
		}
		return teams
	}
	four := []Member{{1, "dc1", "a"}, {2, "dc1", "b"}, {3, "dc1", "c"}, {4, "dc1", "d"}}
	for _, tm := range check(four, 2, false, "") {
		if zoneOf[tm[0]].Zone == zoneOf[tm[1]].Zone {
			t.Errorf("team %v in one zone", tm)
		}
	}
	// Two zones for three replicas: placed anyway, and said.
	check([]Member{{1, "dc1", "a"}, {2, "dc1", "a"}, {3, "dc1", "b"}}, 3, false, "span 2 zones")
	// Fewer stashes than replicas.
	check([]Member{{1, "dc1", "a"}}, 2, false, "1 stashes for replication 2")
	// Across data centers: every team of two has one in each.
	dcs := []Member{{1, "dc1", "a"}, {2, "dc1", "b"}, {3, "dc1", "c"}, {4, "dc2", "a"}, {5, "dc2", "b"}, {6, "dc2", "c"}}
	for _, tm := range check(dcs, 2, true, "") {
		if zoneOf[tm[0]].DC == zoneOf[tm[1]].DC {
			t.Errorf("team %v in one data center", tm)
		}
	}
}
