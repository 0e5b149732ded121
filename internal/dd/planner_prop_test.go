package dd

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/shardmap"
)

// TestPlannerSafety plans random pools (stashes alive, down, retired,
// given up, excluded, unreachable; random teams; moves in flight) and
// checks what no plan may do, whatever the scripts cover:
//
//   - a durable shard starts empty only on the operator's word: every
//     stash that held it retired, one of them given up (exclude --failed);
//   - a shard gains only stashes that can take it: live, not retired,
//     excluded or unreachable;
//   - a team changes without a copy only by members leaving, and never to
//     no member;
//   - only a durable shard is held;
//   - a move finishes only onto destinations that are live and serve the
//     shard as of the map's last change;
//   - a split cuts a shard strictly inside into two with its team; a merge
//     joins two neighbours with one team, neither moving;
//   - the relocations a plan starts touch disjoint key ranges.
func TestPlannerSafety(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	now := time.Unix(100000, 0)
	started := map[ActionKind]int{}
	for i := range 20000 {
		s := randomSnapshot(rng, now)
		plan := PlanPool(s)
		var ranges [][2]string
		for _, a := range plan.Actions {
			started[a.Kind]++
			err := checkAction(s, a)
			if a.starts() && a.Kind != ActWait {
				for _, r := range ranges {
					if string(a.Move.Begin) < r[1] && r[0] < string(a.Move.End) && err == nil {
						err = fmt.Errorf("overlaps [%q, %q), started by the same plan", r[0], r[1])
					}
				}
				ranges = append(ranges, [2]string{string(a.Move.Begin), string(a.Move.End)})
			}
			if err != nil {
				t.Fatalf("snapshot %d (pool %+v, stashes %v, shards %v): %s %v: %v", i, s.Pool, s.Stashes, s.Shards, a.Kind, a.Move.Relocation, err)
			}
		}
	}
	// The generator must reach the cases the checks are about.
	for _, k := range []ActionKind{ActStartEmpty, ActHold, ActMove, ActSetTeam, ActFinish, ActCancel, ActSplit, ActMerge} {
		if started[k] == 0 {
			t.Errorf("no plan had a %s action: %v", k, started)
		}
	}
	t.Logf("actions: %v", started)
}

func checkAction(s *Snapshot, a Action) error {
	from := a.Move.From
	retired := func(t kv.Tag) bool { st, ok := s.Stashes[t]; return ok && (st.Retired || st.RetiredHere) }
	switch a.Kind {
	case ActStartEmpty:
		if !s.Pool.Ephemeral {
			if !slices.ContainsFunc(from, func(t kv.Tag) bool { return s.Stashes[t].GivenUp }) || slices.ContainsFunc(from, func(t kv.Tag) bool { return !retired(t) }) {
				return fmt.Errorf("a durable shard starts empty though its team %v is not all retired with one given up", from)
			}
		}
	case ActSplit:
		k := string(a.Move.Split)
		if len(a.Set) != 2 || k <= string(a.Move.Begin) || k >= string(a.Move.End) ||
			string(a.Set[0].Begin) != string(a.Move.Begin) || string(a.Set[0].End) != k || string(a.Set[1].Begin) != k || string(a.Set[1].End) != string(a.Move.End) ||
			!slices.Equal(a.Set[0].Team, from) || !slices.Equal(a.Set[1].Team, from) {
			return fmt.Errorf("a split that is not a cut of the shard strictly inside, keeping its team: %v", a.Set)
		}
		if sh := s.shardAt(a.Move.Begin); sh.Moving() || string(sh.End) != string(a.Move.End) || !slices.Equal(sh.Team, from) {
			return fmt.Errorf("a split of a shard that is not in the map as such, or moves: %v", sh)
		}
	case ActMerge:
		left, right := s.shardAt(a.Move.Begin), s.shardAt(a.Move.Split)
		if left.Moving() || right.Moving() || string(left.End) != string(a.Move.Split) || string(right.End) != string(a.Move.End) ||
			!slices.Equal(left.Team, right.Team) || len(a.Set) != 1 || !slices.Equal(a.Set[0].Team, left.Team) {
			return fmt.Errorf("a merge of %v and %v into %v", left.Shard, right.Shard, a.Set)
		}
	case ActHold:
		if s.Pool.Ephemeral {
			return fmt.Errorf("an ephemeral shard is held")
		}
	case ActSetTeam:
		for _, sh := range a.Set {
			if len(sh.Team) == 0 {
				return fmt.Errorf("set-team to no member")
			}
			if extra := slices.DeleteFunc(slices.Clone(sh.Team), func(t kv.Tag) bool { return slices.Contains(from, t) }); len(extra) > 0 {
				return fmt.Errorf("set-team adds %v with no copy", extra)
			}
		}
	}
	if a.Kind == ActFinish {
		for _, t := range a.Set[0].Team {
			if slices.Contains(a.Shard.Team, t) {
				continue
			}
			i := slices.Index(a.Shard.Dest, t)
			st := s.Stashes[t]
			if i < 0 || i >= len(s.shardAt(a.Shard.Begin).Dests) || !st.Alive || st.Retired || st.RetiredHere {
				return fmt.Errorf("a move finishes onto stash %d, not a live destination (%+v)", t, st)
			}
			if m := s.shardAt(a.Shard.Begin).Dests[i]; m == nil || m.State != "serving" || m.Applied < s.MapVersion {
				return fmt.Errorf("a move finishes onto stash %d, which does not serve the shard as of the map (%+v)", t, m)
			}
		}
		return nil
	}
	for _, sh := range a.Set {
		for _, t := range slices.Concat(sh.Team, sh.Dest) {
			if slices.Contains(from, t) || slices.Contains(a.Shard.Dest, t) {
				continue // already there, or already a destination
			}
			st, ok := s.Stashes[t]
			if !ok || !st.Alive || st.Retired || st.RetiredHere || st.Excluded || st.Unreachable || st.Pool != s.Pool.Name {
				return fmt.Errorf("shard [%q, %q) gains stash %d, which cannot take it (%+v)", sh.Begin, sh.End, t, st)
			}
		}
	}
	return nil
}

// randomSnapshot is one pool of 2 to 6 stashes and 1 to 6 shards.
func randomSnapshot(rng *rand.Rand, now time.Time) *Snapshot {
	s := &Snapshot{Now: now, FailureWait: time.Minute, Stashes: map[kv.Tag]StashState{}, Moves: map[string]Move{}, MapVersion: 1}
	s.Pool = PoolSettings{Name: "p", Prefix: []byte("p/"), Replication: 1 + rng.IntN(3), Ephemeral: rng.IntN(3) == 0}
	s.Limits = Limits{ShardBytes: int64(200 + rng.IntN(2000))}.withDefaults()
	n := 2 + rng.IntN(5)
	for tag := kv.Tag(1); tag <= kv.Tag(n); tag++ {
		st := StashState{StashInfo: StashInfo{Tag: tag, Pool: "p", DC: "dc1", Zone: fmt.Sprintf("z%d", rng.IntN(4)), Alive: true}}
		switch rng.IntN(6) {
		case 0:
			st.Alive, st.DownSince = false, now.Add(-time.Duration(rng.IntN(120))*time.Second)
		case 1:
			st.Alive, st.DownSince, st.Retired = false, now.Add(-time.Minute), true
			st.GivenUp = rng.IntN(2) == 0
		case 2:
			st.RetiredHere = true
		}
		st.Excluded = rng.IntN(8) == 0
		st.Unreachable = st.Alive && rng.IntN(10) == 0
		s.Stashes[tag] = st
	}
	bounds := []string{"p/"}
	for k := 1; k < 1+rng.IntN(6); k++ {
		bounds = append(bounds, fmt.Sprintf("p/%d", k))
	}
	bounds = append(bounds, "p0")
	for k := 0; k+1 < len(bounds); k++ {
		var team []kv.Tag
		for _, j := range rng.Perm(n)[:1+rng.IntN(min(n, s.Pool.Replication+1))] {
			team = append(team, kv.Tag(j+1))
		}
		slices.Sort(team)
		sh := ShardState{Shard: shardmap.Shard{Begin: []byte(bounds[k]), End: []byte(bounds[k+1]), Pool: "p", Team: team}}
		sh.Metrics.Bytes = int64(rng.IntN(1000))
		if rng.IntN(3) == 0 {
			sh.Metrics.SplitKey = []byte(bounds[k] + "m") // inside: bounds are p/, p/1, ..., p0
		}
		if dest := kv.Tag(1 + rng.IntN(n)); rng.IntN(3) == 0 && !slices.Contains(team, dest) {
			// A move in flight to dest, which answers in some state.
			sh.Dest = []kv.Tag{dest}
			m := &Metrics{State: []string{"serving", "fetching", "copied", "none"}[rng.IntN(4)], Applied: kv.Version(rng.IntN(3))}
			if rng.IntN(5) > 0 {
				sh.Dests = []*Metrics{m}
			}
			if rng.IntN(2) == 0 {
				to := append(slices.Clone(team[min(1, len(team)-1):]), dest)
				s.Moves[bounds[k]] = Move{Relocation: Relocation{Begin: sh.Begin, End: sh.End, Pool: "p", From: team, To: to, Reason: "rebalance", Bytes: sh.Metrics.Bytes}, Started: now.Add(-time.Second)}
			}
		}
		s.Shards = append(s.Shards, sh)
	}
	return s
}

// shardAt returns the snapshot's shard that begins at begin.
func (s *Snapshot) shardAt(begin []byte) ShardState {
	for _, sh := range s.Shards {
		if string(sh.Begin) == string(begin) {
			return sh
		}
	}
	return ShardState{}
}
