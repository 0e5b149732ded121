package coord

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

// TestTagRulesHold applies random sequences of the commands that change
// stash identities — registrations (empty or not, retried, of nodes
// moving between addresses), exclusions, exclude --failed (with random
// liveness), includes, retirements, node removals — and checks after each
// what the data distributor and the log rely on:
//
//   - no two slots hold one tag, and every slot tag was given (< NextTag);
//   - a registration never hands out a retired tag, nor a tag that served
//     before to a stash that comes back empty as a new process;
//   - a retired tag stays retired; a given-up tag is retired; a failed
//     address is excluded;
//   - a refused command changes nothing;
//   - the state survives its encoding, and applying the same commands to
//     a decoded copy gives the same state (replicas agree).
func TestTagRulesHold(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	base := newTagState(t)
	nodes := []string{"a", "b", "c", "d", "e"}
	addrs := []string{"h1:1", "h2:1", "h3:1", "h4:1"}
	counts := map[string]int{}
	for run := range 200 {
		s := base.Clone()
		var applied []Command
		incarnation := map[string]int{}
		for step := range 60 {
			c := randomTagCommand(rng, s, nodes, addrs, incarnation)
			before := s.Clone()
			retired := slices.Clone(s.Retired)
			res, err := s.Apply(c)
			where := fmt.Sprintf("run %d step %d %s %+v", run, step, c.Op, c)
			if err != nil {
				if !reflect.DeepEqual(before, s) {
					t.Fatalf("%s: refused (%v) but changed the state", where, err)
				}
				continue
			}
			applied = append(applied, c)
			if c.Op == OpRegisterNode && c.Node.Class == ClassStash {
				if slices.Contains(retired, res.Tag) {
					t.Fatalf("%s: registration handed out retired tag %d", where, res.Tag)
				}
				prev, known := before.Nodes[c.Node.ID]
				if c.Empty && (!known || prev.Incarnation != c.Node.Incarnation) && before.TagUsed(res.Tag) {
					t.Fatalf("%s: a new process with an empty stash got tag %d, which served before", where, res.Tag)
				}
				counts["registrations"]++
			}
			if len(s.GivenUp) > len(before.GivenUp) {
				counts["give-ups"]++
			}
			checkTagInvariants(t, where, s, retired)
		}
		// Replicas agree: the encoding round-trips, and a replica that
		// applies the same commands reaches the same state.
		if d := roundTrip(t, s); !reflect.DeepEqual(d, s) {
			t.Fatalf("run %d: the state does not survive its encoding", run)
		}
		replica := base.Clone()
		for _, c := range applied {
			if _, err := replica.Apply(c); err != nil {
				t.Fatalf("run %d: a replica refused %s that applied: %v", run, c.Op, err)
			}
		}
		if !reflect.DeepEqual(replica, s) {
			t.Fatalf("run %d: a replica applying the same commands differs", run)
		}
	}
	if counts["registrations"] < 1000 || counts["give-ups"] < 100 {
		t.Errorf("the generator reached too few cases: %v", counts)
	}
	t.Logf("%v", counts)
}

func checkTagInvariants(t *testing.T, where string, s *State, retiredBefore []uint32) {
	t.Helper()
	seen := map[uint32]string{}
	for pool, tags := range s.SlotTags {
		for i, tag := range tags {
			if tag == 0 || tag >= s.NextTag {
				t.Fatalf("%s: slot %s/%d has tag %d, next tag %d", where, pool, i, tag, s.NextTag)
			}
			if other, dup := seen[tag]; dup {
				t.Fatalf("%s: tag %d held by slots %s and %s/%d", where, tag, other, pool, i)
			}
			seen[tag] = fmt.Sprintf("%s/%d", pool, i)
		}
	}
	for _, tag := range retiredBefore {
		if !s.TagRetired(tag) {
			t.Fatalf("%s: tag %d was retired and is not any more", where, tag)
		}
	}
	for _, tag := range s.GivenUp {
		if !s.TagRetired(tag) {
			t.Fatalf("%s: tag %d is given up but not retired", where, tag)
		}
	}
	for _, a := range s.Failed {
		if !s.IsExcluded(a) {
			t.Fatalf("%s: %s is failed but not excluded", where, a)
		}
	}
}

// randomTagCommand is one command on stash identities, valid or not.
func randomTagCommand(rng *rand.Rand, s *State, nodes, addrs []string, incarnation map[string]int) Command {
	some := func() []string {
		var out []string
		for _, a := range addrs {
			if rng.IntN(3) == 0 {
				out = append(out, a)
			}
		}
		return append(out, addrs[rng.IntN(len(addrs))])
	}
	switch rng.IntN(10) {
	case 0, 1, 2, 3:
		id := nodes[rng.IntN(len(nodes))]
		pool := []string{"cache", "data"}[rng.IntN(2)]
		if old, ok := s.Nodes[id]; ok && rng.IntN(4) > 0 {
			pool = old.Pool // mostly the pool it has
		}
		if rng.IntN(2) == 0 {
			incarnation[id]++ // a new process; else a retry of the last
		}
		n := NodeInfo{ID: id, Addr: addrs[rng.IntN(len(addrs))], Class: ClassStash, Pool: pool,
			Incarnation: fmt.Sprintf("%d.x", incarnation[id])}
		return RegisterStash(n, rng.IntN(2) == 0)
	case 4:
		return Exclude(some())
	case 5, 6:
		at := some()
		down, _ := s.DownSlotTags(at, func(string) bool { return rng.IntN(2) == 0 })
		return ExcludeFailed(at, down)
	case 7:
		if rng.IntN(3) == 0 {
			return Include([]string{"all"})
		}
		return Include(some())
	case 8:
		return Retire(uint32(rng.IntN(int(s.NextTag) + 2)))
	default:
		return Command{Op: OpRemoveNode, ID: nodes[rng.IntN(len(nodes))]}
	}
}
