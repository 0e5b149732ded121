package coord

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Recruit chooses the roles of a new generation from s's registered nodes:
// the log replicas on `replicas` live transaction nodes in distinct zones
// (dc and zone) where there are enough, and the stateless roles
// (sequencer, one GRV proxy, one commit proxy, resolver) on one node:
// self if it is a live transaction node, so the controller talks to them
// locally, else the first live one. Nodes that held a log replica in the
// previous generation are preferred, since they hold its data. Controller
// is left to the caller. Warnings say where the placement falls short of
// the policy (too few nodes or zones); an error means no live transaction
// node at all.
func Recruit(s *State, alive func(id string) bool, replicas int, self string) (Roles, []string, error) {
	var cands []NodeInfo
	for _, n := range s.Nodes {
		if n.Class == ClassTransaction && alive(n.ID) {
			cands = append(cands, n)
		}
	}
	if len(cands) == 0 {
		return Roles{}, nil, fmt.Errorf("coord: no live transaction node to recruit (%d registered nodes)", len(s.Nodes))
	}
	// Previous log replicas first, then by id: deterministic and stable.
	prev := func(id string) bool { return slices.Contains(s.Roles.LogReplicas, id) }
	sort.Slice(cands, func(i, j int) bool {
		if pi, pj := prev(cands[i].ID), prev(cands[j].ID); pi != pj {
			return pi
		}
		return cands[i].ID < cands[j].ID
	})

	var warns []string
	want := replicas
	if want > len(cands) {
		warns = append(warns, fmt.Sprintf("only %d live transaction nodes for %d log replicas: running %d", len(cands), replicas, len(cands)))
		want = len(cands)
	}
	zone := func(n NodeInfo) string { return n.DC + "/" + n.Zone }
	var logs, ids []string
	used := map[string]int{}      // zone -> replicas placed
	machines := map[string]bool{} // machines holding a replica
	taken := map[string]bool{}
	// Round 1: one per zone. Round 2: fill, preferring a machine not yet
	// used, then anything.
	pick := func(ok func(NodeInfo) bool) {
		for _, n := range cands {
			if len(logs) == want {
				return
			}
			if !taken[n.ID] && ok(n) {
				logs = append(logs, n.ID)
				ids = append(ids, n.LogRaftID())
				taken[n.ID] = true
				used[zone(n)]++
				if n.Machine != "" {
					machines[n.Machine] = true
				}
			}
		}
	}
	pick(func(n NodeInfo) bool { return used[zone(n)] == 0 })
	pick(func(n NodeInfo) bool { return n.Machine == "" || !machines[n.Machine] })
	pick(func(NodeInfo) bool { return true })
	if len(used) < len(logs) {
		var shared []string
		for z, k := range used {
			if k > 1 {
				shared = append(shared, fmt.Sprintf("%s holds %d", z, k))
			}
		}
		sort.Strings(shared)
		warns = append(warns, fmt.Sprintf("only %d distinct zones among live transaction nodes for %d log replicas: %s",
			len(used), len(logs), strings.Join(shared, ", ")))
	}

	stateless := cands[0].ID
	for _, n := range cands {
		if n.ID == self {
			stateless = self
		}
	}
	return Roles{
		Sequencer:     stateless,
		GRVProxies:    []string{stateless},
		CommitProxies: []string{stateless},
		Resolver:      stateless,
		LogReplicas:   logs,
		LogIDs:        ids,
	}, warns, nil
}
