package dd

import (
	"bytes"
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/shardmap"
)

// Limits are the distributor's thresholds (Options, with their defaults).
type Limits struct {
	ShardBytes     int64   // a shard past it splits
	WriteSplitRate float64 // a shard written faster (and of ShardBytes/8) splits
	MaxMoves       int     // copying moves in flight per pool
	Imbalance      float64 // a stash's allowed fraction above or below the mean bytes
}

// Snapshot is everything PlanPool decides from: one pool of the cluster
// at one moment, as the driver observed it. PlanPool only reads it.
type Snapshot struct {
	Now         time.Time
	FailureWait time.Duration
	Pool        PoolSettings
	Limits      Limits
	// Shards are the pool's shards in key order, with what a live replica
	// (and, for a moving shard, each destination) reported this round.
	Shards []ShardState
	// Stashes: every stash the cluster lists, and every tag a shard names
	// that the cluster does not list (as down).
	Stashes map[kv.Tag]StashState
	// MapVersion is the version of the shard map's last change (or later):
	// a destination's answer counts only from a stash that has applied it.
	MapVersion kv.Version
	// Moves are the moves the distributor started (or resumed) and has not
	// finished, by shard begin; a moving shard without one was begun by an
	// earlier distributor.
	Moves map[string]Move
}

// StashState is a stash as the round sees it.
type StashState struct {
	StashInfo
	// DownSince: when the distributor first saw it not alive (zero while
	// alive).
	DownSince time.Time
	// RetiredHere: this distributor retired it (Env.Retire), whether or
	// not the cluster lists it as retired yet.
	RetiredHere bool
	// Unreachable: this round's metrics request to it failed (a stash
	// killed a moment ago, before the controller declares it dead): it
	// gets no new shards.
	Unreachable bool
}

// failed: retired, or down for the failure wait; its shards are
// re-replicated.
func (s StashState) failed(now time.Time, wait time.Duration) bool {
	return s.Retired || s.RetiredHere || (!s.Alive && now.Sub(s.DownSince) >= wait)
}

// ShardState is a shard and what its stashes reported of it this round.
type ShardState struct {
	shardmap.Shard
	// Metrics from one live replica of its team (zero when none answered).
	Metrics Metrics
	// Dests: for a moving shard, the answer of each destination in Dest
	// order, up to the first that is not live (nil: no answer).
	Dests []*Metrics
}

// Move is a move in flight.
type Move struct {
	Relocation
	Started time.Time
}

// ActionKind is what an Action asks of the driver.
type ActionKind int

// The kinds of action: first what becomes of moves in flight, then what
// becomes of relocations (those from ActSplit on start one).
const (
	ActFinish     ActionKind = iota // every destination serves: To becomes the team
	ActCancel                       // the move cannot finish: drop its destinations
	ActContinue                     // still copying, or waiting for the copy to be durable
	ActWait                         // a relocation that does not fit now (Why)
	ActSplit                        // split the shard at Split
	ActMerge                        // merge [Begin, Split) and [Split, End)
	ActSetTeam                      // change the team with no copy (replicas only leave)
	ActMove                         // start a move: To's new members fetch the shard
	ActStartEmpty                   // an ephemeral shard with no replica left starts empty on To
	ActHold                         // a durable shard with no replica left waits for one to return
)

var actionNames = [...]string{"finish", "cancel", "continue", "wait", "split", "merge", "set-team", "move", "start-empty", "hold"}

func (k ActionKind) String() string { return actionNames[k] }

// Action is one step of a plan.
type Action struct {
	Kind ActionKind
	// Move is the relocation (with Started for a move in flight or started).
	Move Move
	// Shard is the moving shard as the map has it (in-flight kinds only).
	Shard shardmap.Shard
	Why   string // why it is cancelled, waits or holds
	// Set and Clear are the shard map change to commit (none when empty).
	Set   []shardmap.Shard
	Clear [][]byte
	// InFlight: a started relocation counts as a move in flight in the
	// pool's status (and takes one of MaxMoves).
	InFlight bool
	// Continue: whether a destination still copies (then it takes one of
	// MaxMoves), and the bytes left to copy.
	Copying   bool
	BytesLeft int64

	failed bool // Admit: the start failed
}

func (a *Action) starts() bool { return a.Kind >= ActSplit }

// PoolPlan is PlanPool's answer.
type PoolPlan struct {
	// Actions are what the round does if every commit succeeds: Moves,
	// then Admit's actions.
	Actions []Action
	// Moves says what becomes of each move in flight, in key order.
	Moves []Action
	// Queue holds the relocations to start, highest priority first (Admit
	// decides which start now).
	Queue []Relocation
	// Status holds the figures that do not depend on how the actions fare;
	// status completes it.
	Status PoolStatus
	// Loads is each stash's share of the pool's shards.
	Loads map[kv.Tag]StashSummary

	p *planner
}

// planner is the state of one PlanPool.
type planner struct {
	s       *Snapshot
	r       int // the replication
	members []StashState
	metrics map[string]Metrics // by shard begin
	load    map[kv.Tag]int64   // bytes per member (its teams' shards)
	out     *PoolPlan
	q       Queue
	// inFlight counts the moves that take one of MaxMoves; flying are the
	// moves in flight, which nothing overlapping starts beside.
	inFlight int
	flying   []Relocation
	// heldNamed: the warning names a durable shard held with no replica.
	heldNamed bool
}

// PlanPool decides a round of data distribution for one pool: what
// becomes of its moves in flight, and which relocations start (repairs of
// failed, missing or excluded replicas, splits by size and by write rate,
// merges of small neighbours, one rebalancing move) or wait. It is a pure
// function of the snapshot: the driver gathers it and carries out the
// actions.
func PlanPool(s *Snapshot) *PoolPlan {
	p := &planner{s: s, r: max(s.Pool.Replication, 1), metrics: map[string]Metrics{}, load: map[kv.Tag]int64{}}
	p.out = &PoolPlan{p: p, Status: PoolStatus{Pool: s.Pool.Name, Shards: len(s.Shards), Replication: p.r, FailureWait: s.FailureWait}}
	for _, sh := range s.Shards {
		p.metrics[string(sh.Begin)] = sh.Metrics
	}
	p.findMembers()
	p.measureLoad()
	p.movesInFlight()
	p.repairs()
	p.splitsAndMerges()
	p.writeSplits()
	p.rebalance()
	p.out.Queue = p.q.Items()
	p.out.Actions = append(slices.Clone(p.out.Moves), p.out.Admit(func(*Action) bool { return true })...)
	return p.out
}

func (p *planner) failed(t kv.Tag) bool {
	st, ok := p.s.Stashes[t]
	return ok && st.failed(p.s.Now, p.s.FailureWait)
}

// live: alive and not retired, by the cluster or by this distributor (a
// stash that returned after its shards were re-replicated and its tag
// retired here, before the cluster's view says so: its tag will never
// serve again, so it may neither take a shard nor be copied from).
func (s *Snapshot) live(t kv.Tag) bool {
	st, ok := s.Stashes[t]
	return ok && st.Alive && !st.Retired && !st.RetiredHere
}

// usable: may receive shards.
func (s *Snapshot) usable(t kv.Tag) bool {
	return s.live(t) && !s.Stashes[t].Excluded && !s.Stashes[t].Unreachable
}

// findMembers finds the stashes that may receive the pool's shards, and
// warns where they fall short of the placement asked for.
func (p *planner) findMembers() {
	pool := p.s.Pool
	zones, dcs := map[string]bool{}, map[string]bool{}
	for _, s := range p.s.Stashes {
		if s.Pool == pool.Name && p.s.usable(s.Tag) {
			p.members = append(p.members, s)
			zones[s.DC+"/"+s.Zone], dcs[s.DC] = true, true
		}
	}
	slices.SortFunc(p.members, func(a, b StashState) int { return int(a.Tag) - int(b.Tag) })
	st := &p.out.Status
	switch {
	case len(p.members) < p.r:
		st.Warning = fmt.Sprintf("%d usable stashes for replication %d", len(p.members), p.r)
	case len(zones) < p.r && !(len(zones) == 1 && zones["/"]):
		// (Stashes that give no locality at all, as in an embedded
		// cluster, get no warning: they are one failure domain by choice.)
		st.Warning = fmt.Sprintf("the pool's stashes span %d zones for replication %d: some shards have two replicas in one zone", len(zones), p.r)
	case pool.AcrossDCs && len(dcs) < 2:
		st.Warning = "across_dcs: the pool's stashes are all in one data center"
	}
}

// measureLoad sums the bytes per member (for balance), per stash (for
// status), and the pool's bytes and teams.
func (p *planner) measureLoad() {
	for _, s := range p.members {
		p.load[s.Tag] = 0
	}
	loads := map[kv.Tag]StashSummary{}
	teams := map[string]bool{}
	for _, sh := range p.s.Shards {
		b := sh.Metrics.Bytes
		p.out.Status.Bytes += b
		teams[fmt.Sprint(sh.Team)] = true
		for _, t := range sh.Tags() {
			p.load[t] += b
			ls := loads[t]
			ls.Shards++
			if slices.Contains(sh.Dest, t) {
				ls.Fetching++
			}
			ls.Bytes += b
			loads[t] = ls
		}
	}
	p.out.Status.Teams = len(teams)
	p.out.Loads = loads
}

// movesInFlight decides what becomes of every moving shard's move.
func (p *planner) movesInFlight() {
	for _, sh := range p.s.Shards {
		if !sh.Moving() {
			continue
		}
		mv, ok := p.s.Moves[string(sh.Begin)]
		if !ok {
			mv = p.resumed(sh)
		}
		p.out.Moves = append(p.out.Moves, p.progress(sh, mv))
	}
}

// resumed is the move of a shard an earlier distributor began to move:
// it finishes towards its destinations plus the healthy team members.
func (p *planner) resumed(sh ShardState) Move {
	to := slices.Clone(sh.Dest)
	for _, t := range sh.Team {
		if len(to) < p.r && p.s.usable(t) && !slices.Contains(to, t) {
			to = append(to, t)
		}
	}
	return Move{Relocation: Relocation{Begin: sh.Begin, End: sh.End, Pool: p.s.Pool.Name, From: sh.Team, To: to, Reason: "resumed"}, Started: p.s.Now}
}

// progress decides whether a move in flight finishes (every destination
// serves), is cancelled (a destination is gone, or every source failed so
// it cannot finish: the shard is then re-replicated from what is left, or
// waits for a replica to return), or goes on.
func (p *planner) progress(sh ShardState, mv Move) Action {
	a := Action{Move: mv, Shard: sh.Shard}
	done, copied := true, int64(0)
	if !slices.ContainsFunc(sh.Team, func(t kv.Tag) bool { return !p.failed(t) }) {
		a.Why = "every source failed"
	}
	for i, t := range sh.Dest {
		if !p.s.live(t) {
			a.Why = cmpOr(a.Why, fmt.Sprintf("destination %d is down", t))
			break
		}
		var m *Metrics
		if i < len(sh.Dests) {
			m = sh.Dests[i]
		}
		switch {
		case m == nil || m.Applied < p.s.MapVersion:
			// No answer, or one from before the stash applied the map's
			// last change: its ownership may be older than this move (a
			// restarted stash that served the range before it left).
			done = false
		case m.State == "serving":
		case m.State == "copied":
			// Waiting for the copy to be durable (about the MVCC window):
			// not finished, but it no longer takes one of the MaxMoves,
			// which bound the copying.
			done = false
			copied += mv.Bytes / int64(max(1, len(sh.Dest)))
		case m.State == "fetching" || m.State == "partial":
			done, a.Copying = false, true
			copied += m.FetchedBytes
		default:
			a.Why = cmpOr(a.Why, fmt.Sprintf("destination %d reports %q", t, m.State))
		}
	}
	switch {
	case a.Why != "":
		a.Kind, a.Copying = ActCancel, false
		a.Set = []shardmap.Shard{{Begin: sh.Begin, End: sh.End, Pool: sh.Pool, Team: sh.Team}}
	case done:
		a.Kind = ActFinish
		a.Set = []shardmap.Shard{{Begin: sh.Begin, End: sh.End, Pool: sh.Pool, Team: sortedTags(mv.To)}}
	default:
		a.Kind, a.BytesLeft = ActContinue, max(mv.Bytes-copied, 0)
		if a.Copying {
			p.inFlight++
		}
		p.flying = append(p.flying, mv.Relocation)
	}
	return a
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// repairs counts the shards with fewer than R live replicas and queues
// the relocations of shards with failed, missing, surplus or excluded
// replicas.
func (p *planner) repairs() {
	for _, sh := range p.s.Shards {
		// A moving shard counts too: its destinations are no replicas
		// until the move finishes (a shard being re-replicated after a
		// stash was lost still has one live replica until then).
		if p.liveReplicas(sh.Team) < p.r {
			p.out.Status.UnderReplicated++
		}
		if sh.Moving() {
			continue
		}
		if rel, ok := p.repair(sh); ok {
			p.q.Push(rel)
		}
	}
}

// repair returns the relocation a shard that is not moving needs, if any.
func (p *planner) repair(sh ShardState) (Relocation, bool) {
	R := p.r
	var keep, failed, excluded []kv.Tag
	for _, t := range sh.Team {
		switch {
		case p.failed(t) || p.s.Stashes[t].Retired:
			failed = append(failed, t)
		case p.s.Stashes[t].Excluded:
			excluded = append(excluded, t)
		default:
			keep = append(keep, t)
		}
	}
	liveN := p.liveReplicas(sh.Team)
	rel := Relocation{Begin: sh.Begin, End: sh.End, Pool: p.s.Pool.Name, From: sh.Team, Bytes: sh.Metrics.Bytes}
	switch {
	case len(failed) > 0 || len(keep)+len(excluded) < R:
		rel.Priority, rel.Reason = UnhealthyPriority(liveN, R), "unhealthy"
		kept := append(slices.Clone(keep), excluded...)
		if len(kept) > R {
			kept = kept[:R]
		}
		rel.To = append(kept, p.pick(kept, failed, R-len(kept))...)
	case len(keep)+len(excluded) > R:
		rel.Priority, rel.Reason = PriorityExcluded, "replication"
		kept := append(slices.Clone(keep), excluded...)
		rel.To = kept[:R]
	case len(excluded) > 0:
		rel.Priority, rel.Reason = PriorityExcluded, "excluded"
		rel.To = append(slices.Clone(keep), p.pick(keep, excluded, len(excluded))...)
	default:
		return rel, false
	}
	if slices.Equal(sortedTags(rel.To), sortedTags(sh.Team)) || len(rel.To) == 0 {
		return rel, false
	}
	return rel, true
}

// liveReplicas counts the live stashes of a team.
func (p *planner) liveReplicas(team []kv.Tag) int {
	n := 0
	for _, t := range team {
		if p.s.live(t) {
			n++
		}
	}
	return n
}

// pick chooses n members to join keep (none of avoid): those sharing the
// fewest data centers (when the pool spreads over them), then zones, with
// keep, then holding the fewest bytes, then the lowest tag.
func (p *planner) pick(keep, avoid []kv.Tag, n int) []kv.Tag {
	var out []kv.Tag
	for len(out) < n {
		best, bestScore := kv.Tag(0), []int64(nil)
		for _, s := range p.members {
			if slices.Contains(keep, s.Tag) || slices.Contains(avoid, s.Tag) || slices.Contains(out, s.Tag) {
				continue
			}
			sameZone, sameDC := int64(0), int64(0)
			for _, t := range append(slices.Clone(keep), out...) {
				o := p.s.Stashes[t]
				if o.DC == s.DC && o.Zone == s.Zone {
					sameZone++
				}
				if o.DC == s.DC {
					sameDC++
				}
			}
			if !p.s.Pool.AcrossDCs {
				sameDC = 0
			}
			score := []int64{sameDC, sameZone, p.load[s.Tag], int64(s.Tag)}
			if bestScore == nil || slices.Compare(score, bestScore) < 0 {
				best, bestScore = s.Tag, score
			}
		}
		if bestScore == nil {
			break
		}
		out = append(out, best)
	}
	return out
}

// splitsAndMerges queues the splits of shards over the size limit and the
// merges of small neighbours (PlanShards), unless either neighbour is
// written fast (it was split for that).
func (p *planner) splitsAndMerges() {
	lim, name := p.s.Limits, p.s.Pool.Name
	var tracked []Shard
	for _, sh := range p.s.Shards {
		if !sh.Moving() {
			tracked = append(tracked, Shard{Begin: sh.Begin, End: sh.End, Pool: sh.Pool, Team: sh.Team, Bytes: sh.Metrics.Bytes})
		} else {
			tracked = append(tracked, Shard{Begin: sh.Begin, End: sh.End, Pool: "(moving)", Team: sh.Team, Bytes: lim.ShardBytes})
		}
	}
	splitKey := func(begin, end []byte) []byte { return p.metrics[string(begin)].SplitKey }
	hot := func(begin []byte) bool { return p.metrics[string(begin)].WriteRate > lim.WriteSplitRate/4 }
	for _, c := range PlanShards(tracked, p.s.Pool.Prefix, lim.ShardBytes, splitKey) {
		if c.Shard.Pool != name {
			continue
		}
		if c.Split {
			p.q.Push(Relocation{Begin: c.Shard.Begin, End: c.Shard.End, Pool: name, Priority: PrioritySplit, Reason: "split",
				From: c.Shard.Team, Split: c.At, Bytes: c.Shard.Bytes})
			continue
		}
		i := sort.Search(len(tracked), func(i int) bool { return bytes.Compare(tracked[i].Begin, c.At) >= 0 })
		if hot(c.Shard.Begin) || (i < len(tracked) && hot(tracked[i].Begin)) {
			continue
		}
		if i < len(tracked) && bytes.Equal(tracked[i].Begin, c.At) {
			p.q.Push(Relocation{Begin: c.Shard.Begin, End: tracked[i].End, Pool: name, Priority: PriorityRebalance / 2, Reason: "merge",
				From: c.Shard.Team, To: c.Shard.Team, Split: c.At, Bytes: c.Shard.Bytes + tracked[i].Bytes})
		}
	}
}

// writeSplits queues the splits of shards written fast (at the key
// halving their write rate), once they hold an eighth of the size limit:
// their load then spreads as the halves move.
func (p *planner) writeSplits() {
	lim := p.s.Limits
	for _, sh := range p.s.Shards {
		mt := sh.Metrics
		k := mt.WriteSplitKey
		if sh.Moving() || mt.WriteRate <= lim.WriteSplitRate || mt.Bytes < lim.ShardBytes/8 ||
			k == nil || bytes.Compare(k, sh.Begin) <= 0 || bytes.Compare(k, sh.End) >= 0 {
			continue
		}
		p.q.Push(Relocation{Begin: sh.Begin, End: sh.End, Pool: p.s.Pool.Name, Priority: PrioritySplit, Reason: "split",
			From: sh.Team, Split: k, Bytes: mt.Bytes})
	}
}

// rebalance queues one move of a shard from the member holding the most
// bytes to the one holding the fewest, when either is off the pool's mean
// by more than Imbalance; the shard is at most half the gap between them,
// so the move narrows it (no shard moves back and forth).
func (p *planner) rebalance() {
	if len(p.members) <= p.r {
		return
	}
	var total int64
	for _, s := range p.members {
		total += p.load[s.Tag]
	}
	mean := float64(total) / float64(len(p.members))
	hi, lo := p.members[0].Tag, p.members[0].Tag
	for _, s := range p.members {
		if p.load[s.Tag] > p.load[hi] {
			hi = s.Tag
		}
		if p.load[s.Tag] < p.load[lo] {
			lo = s.Tag
		}
	}
	gap, imb := p.load[hi]-p.load[lo], p.s.Limits.Imbalance
	if gap <= 0 || (float64(p.load[hi]) <= mean*(1+imb) && float64(p.load[lo]) >= mean*(1-imb)) {
		return
	}
	if best := p.rebalanceShard(hi, lo, gap); best != nil {
		to := slices.DeleteFunc(slices.Clone(best.Team), func(t kv.Tag) bool { return t == hi })
		to = append(to, lo)
		p.q.Push(Relocation{Begin: best.Begin, End: best.End, Pool: p.s.Pool.Name, Priority: PriorityRebalance, Reason: "rebalance",
			From: best.Team, To: to, Bytes: best.Metrics.Bytes})
	}
}

// rebalanceShard returns the largest shard on hi and not on lo, of at
// most half the gap, whose move from hi to lo keeps its team's spread
// over zones (and data centers when the pool asks for it); nil if none.
func (p *planner) rebalanceShard(hi, lo kv.Tag, gap int64) *ShardState {
	var best *ShardState
	var bestBytes int64
	for i := range p.s.Shards {
		sh := &p.s.Shards[i]
		b := sh.Metrics.Bytes
		if sh.Moving() || b <= 0 || 2*b > gap || !slices.Contains(sh.Team, hi) || slices.Contains(sh.Team, lo) {
			continue
		}
		after := append(slices.DeleteFunc(slices.Clone(sh.Team), func(t kv.Tag) bool { return t == hi }), lo)
		if p.spread(after) < p.spread(sh.Team) {
			continue
		}
		if b > bestBytes {
			best, bestBytes = sh, b
		}
	}
	return best
}

// spread scores how a team spreads over failure domains: distinct data
// centers first (when the pool spreads over them), then distinct zones.
func (p *planner) spread(team []kv.Tag) int {
	dcs, zones := map[string]bool{}, map[string]bool{}
	for _, t := range team {
		s := p.s.Stashes[t]
		dcs[s.DC], zones[s.DC+"/"+s.Zone] = true, true
	}
	if !p.s.Pool.AcrossDCs {
		return len(zones)
	}
	return len(dcs)*1000 + len(zones)
}

// Admit starts the queued relocations that fit, highest priority first:
// at most MaxMoves copying at once, none beside a move in flight over its
// keys; the others wait for a later round. It calls start with each
// action that starts one, to carry it out: a start that fails (false)
// leaves its place to the next. Admit only reads the plan, so PlanPool
// can list Actions (every start succeeds) and the driver carry them out.
func (pp *PoolPlan) Admit(start func(*Action) bool) []Action {
	p := pp.p
	inFlight, flying := p.inFlight, slices.Clone(p.flying)
	var out []Action
	for _, rel := range pp.Queue {
		why := ""
		switch {
		case inFlight >= p.s.Limits.MaxMoves:
			why = fmt.Sprintf("%d moves in flight", inFlight)
		case slices.ContainsFunc(flying, func(o Relocation) bool { return o.overlaps(&rel) }):
			why = "overlaps a move in flight"
		}
		if why != "" {
			out = append(out, Action{Kind: ActWait, Move: Move{Relocation: rel}, Why: why})
			continue
		}
		a := p.start(rel)
		a.failed = !start(&a)
		if !a.failed && a.InFlight {
			inFlight++
			flying = append(flying, rel)
		}
		out = append(out, a)
	}
	return out
}

// direct reports whether rel changes the team without a copy: no live
// replica of the shard is left to copy from.
func (p *planner) direct(rel *Relocation) bool {
	return !slices.ContainsFunc(rel.From, func(t kv.Tag) bool { return p.s.live(t) && !p.failed(t) })
}

// warnHeld makes the pool's warning say that a durable shard has no
// replica left, which matters more than any placement warning: its data
// cannot be read until a replica returns, and never if every one was
// retired (only a restore brings it back).
func (p *planner) warnHeld(rel Relocation) {
	if p.heldNamed {
		return // the first held shard is named
	}
	p.heldNamed = true
	st := &p.out.Status
	at := "ADDR` (the address they were at)"
	if a := p.addresses(rel.From); a != "" {
		at = a + "`"
	}
	if p.allRetired(rel) {
		st.Warning = fmt.Sprintf("a durable shard has no replica left: [%q, %q) was on stashes %v, all retired; its data is lost unless restored from a backup, or given up by `distash cli exclude --failed %s, which starts it empty",
			rel.Begin, rel.End, rel.From, at)
		return
	}
	st.Warning = fmt.Sprintf("a durable shard has no replica left: [%q, %q) waits for one of stashes %v to return, or for `distash cli exclude --failed %s to give up its data and start it empty", rel.Begin, rel.End, rel.From, at)
}

// allRetired reports whether every stash of rel.From is retired: none
// will ever serve the shard's data again.
func (p *planner) allRetired(rel Relocation) bool {
	return !slices.ContainsFunc(rel.From, func(t kv.Tag) bool {
		s, ok := p.s.Stashes[t]
		return ok && !s.Retired && !s.RetiredHere
	})
}

// givenUp reports whether a durable shard with no replica left may start
// empty: every stash that held it is retired and an operator gave up the
// data of one of them (exclude --failed).
func (p *planner) givenUp(rel Relocation) bool {
	return p.allRetired(rel) && slices.ContainsFunc(rel.From, func(t kv.Tag) bool { return p.s.Stashes[t].GivenUp })
}

// addresses names where the stashes tags were, for an operator: "" if
// none is known.
func (p *planner) addresses(tags []kv.Tag) string {
	var out []string
	for _, t := range tags {
		s := p.s.Stashes[t]
		if a := cmp.Or(s.Address, s.RetiredAt); a != "" && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return strings.Join(out, " ")
}

// start returns the action that begins rel.
func (p *planner) start(rel Relocation) Action {
	a := Action{Move: Move{Relocation: rel, Started: p.s.Now}}
	name := p.s.Pool.Name
	team := func(t []kv.Tag) []shardmap.Shard {
		return []shardmap.Shard{{Begin: rel.Begin, End: rel.End, Pool: name, Team: t}}
	}
	switch {
	case rel.Reason == "split":
		a.Kind = ActSplit
		a.Set = []shardmap.Shard{{Begin: rel.Begin, End: rel.Split, Pool: name, Team: rel.From}, {Begin: rel.Split, End: rel.End, Pool: name, Team: rel.From}}
	case rel.Reason == "merge":
		a.Kind, a.Set, a.Clear = ActMerge, team(rel.From), [][]byte{rel.Split}
	case rel.Reason == "replication":
		a.Kind, a.Set = ActSetTeam, team(sortedTags(rel.To))
	case p.direct(&rel) && !p.s.Pool.Ephemeral && !p.givenUp(rel):
		a.Kind, a.Why = ActHold, "no replica left: a durable shard waits for one to return"
		p.warnHeld(rel)
	case p.direct(&rel) && !p.s.Pool.Ephemeral:
		a.Kind, a.Set, a.Why = ActStartEmpty, team(sortedTags(rel.To)), "no replica left, and an operator gave up its data (exclude --failed)"
	case p.direct(&rel):
		a.Kind, a.Set, a.Why = ActStartEmpty, team(sortedTags(rel.To)), "no replica of a cache shard is left"
	default:
		a.InFlight = true
		var dest []kv.Tag
		for _, t := range rel.To {
			if !slices.Contains(rel.From, t) {
				dest = append(dest, t)
			}
		}
		if len(dest) == 0 {
			// Only members leave (failed or excluded ones beyond R): no copy.
			a.Kind, a.Set = ActSetTeam, team(sortedTags(rel.To))
			break
		}
		a.Kind = ActMove
		a.Set = []shardmap.Shard{{Begin: rel.Begin, End: rel.End, Pool: name, Team: rel.From, Dest: dest}}
	}
	return a
}

// status completes the pool's status from the actions the driver carried
// out (Moves, then Admit's): a relocation that failed to start counts as
// waiting.
func (pp *PoolPlan) status(actions []Action) PoolStatus {
	st := pp.Status
	var flying, waiting []Relocation
	for _, a := range actions {
		switch {
		case a.Kind == ActContinue:
			st.Moving++
			st.MovingBytesLeft += a.BytesLeft
			flying = append(flying, a.Move.Relocation)
		case a.Kind == ActWait || a.failed:
			waiting = append(waiting, a.Move.Relocation)
		case a.starts() && a.InFlight:
			st.Moving++
			st.MovingBytesLeft += a.Move.Bytes
			flying = append(flying, a.Move.Relocation)
		}
	}
	st.InFlight = len(flying)
	st.Queued = len(waiting)
	st.Queue = append(flying, waiting...)
	if len(st.Queue) > 20 {
		st.Queue = st.Queue[:20]
	}
	return st
}

func sortedTags(t []kv.Tag) []kv.Tag {
	out := slices.Clone(t)
	slices.Sort(out)
	return out
}
