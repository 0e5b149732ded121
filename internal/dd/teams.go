package dd

import (
	"fmt"
	"slices"

	"github.com/distash/distash/internal/kv"
)

// Member is a healthy stash of a pool that may join teams.
type Member struct {
	Tag      kv.Tag
	DC, Zone string
}

// BuildTeams returns teams of r members of a pool: one led by each member
// (so every member serves in about the same number of teams), its other
// members the next ones in tag order whose zone (and, with spreadDCs,
// data center first) the team does not have yet, falling back to any
// member when the pool has too few zones. Teams come sorted and without
// duplicates. Warnings say where the placement falls short: fewer members
// than r, or fewer distinct zones (data centers) than r.
func BuildTeams(members []Member, r int, spreadDCs bool) (teams [][]kv.Tag, warnings []string) {
	if r <= 0 || len(members) == 0 {
		return nil, nil
	}
	ms := slices.Clone(members)
	slices.SortFunc(ms, func(a, b Member) int { return int(a.Tag) - int(b.Tag) })
	zone := func(m Member) string { return m.DC + "/" + m.Zone }
	zones, dcs := map[string]bool{}, map[string]bool{}
	for _, m := range ms {
		zones[zone(m)], dcs[m.DC] = true, true
	}
	if len(ms) < r {
		warnings = append(warnings, fmt.Sprintf("%d stashes for replication %d: teams have %d", len(ms), r, len(ms)))
		r = len(ms)
	}
	if len(zones) < r {
		warnings = append(warnings, fmt.Sprintf("the stashes span %d zones for replication %d: some teams have two replicas in one zone", len(zones), r))
	}
	if spreadDCs && len(dcs) < r && len(dcs) < 2 {
		warnings = append(warnings, fmt.Sprintf("the stashes are in %d data center: no team spans data centers", len(dcs)))
	}
	seen := map[string]bool{}
	for lead := range ms {
		team := []Member{ms[lead]}
		has := func(m Member) bool { return slices.ContainsFunc(team, func(t Member) bool { return t.Tag == m.Tag }) }
		pick := func(ok func(Member) bool) {
			for k := 1; k < len(ms) && len(team) < r; k++ {
				m := ms[(lead+k)%len(ms)]
				if !has(m) && ok(m) {
					team = append(team, m)
				}
			}
		}
		newZone := func(m Member) bool {
			return !slices.ContainsFunc(team, func(t Member) bool { return zone(t) == zone(m) })
		}
		if spreadDCs {
			pick(func(m Member) bool {
				return newZone(m) && !slices.ContainsFunc(team, func(t Member) bool { return t.DC == m.DC })
			})
		}
		pick(newZone)
		pick(func(Member) bool { return true })
		tags := make([]kv.Tag, len(team))
		for i, m := range team {
			tags[i] = m.Tag
		}
		slices.Sort(tags)
		if key := fmt.Sprint(tags); !seen[key] {
			seen[key] = true
			teams = append(teams, tags)
		}
	}
	slices.SortFunc(teams, slices.Compare[[]kv.Tag])
	return teams, warnings
}
