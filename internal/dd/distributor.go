package dd

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/shardmap"
)

// StashInfo is what the distributor knows of a stash of the cluster.
type StashInfo struct {
	Tag      kv.Tag
	Pool     string
	DC, Zone string
	Address  string
	// Alive: the cluster controller (or, embedded, the process) hears
	// from it now.
	Alive bool
	// Excluded by an operator: its shards move off it.
	Excluded bool
	// Retired: replaced after a failure; it never serves again.
	Retired bool
}

// Metrics is a stash's answer about one range (see stash.RangeMetrics).
type Metrics struct {
	Bytes        int64
	SplitKey     []byte
	State        string // serving | fetching | copied | partial | none
	FetchedBytes int64
	// WriteRate is bytes written per second lately; WriteSplitKey halves it.
	WriteRate     float64
	WriteSplitKey []byte
}

// Env is how the distributor sees and changes the cluster.
type Env interface {
	// Shards returns the shard map now (the distributor does not change it).
	Shards() *shardmap.Map
	// Stashes returns every stash of the cluster.
	Stashes() []StashInfo
	// Metrics asks stash tag about ranges.
	Metrics(ctx context.Context, tag kv.Tag, ranges []kv.KeyRange, splitKeys bool) ([]Metrics, error)
	// CommitShards commits a change of the shard map: the shards to set
	// and the shard keys (begins) to clear, in one transaction.
	CommitShards(ctx context.Context, set []shardmap.Shard, clear [][]byte) error
	// Retire tells the log and the controller that tag will never serve
	// again (no shard names it): the log stops keeping its entries.
	Retire(ctx context.Context, tag kv.Tag) error
}

// PoolSettings is what the distributor needs of a pool's configuration.
type PoolSettings struct {
	Name        string
	Prefix      []byte
	Replication int
	Ephemeral   bool
	AcrossDCs   bool
}

// Options configure a Distributor.
type Options struct {
	Env Env
	// Pools returns the pools with the replication in force now.
	Pools func() []PoolSettings
	// FailureWait returns how long a stash may be unreachable before its
	// shards are re-replicated.
	FailureWait func() time.Duration
	// ShardBytes is the size past which a shard splits.
	ShardBytes int64
	// WriteSplitRate is the write rate (bytes/s) past which a shard of at
	// least ShardBytes/8 splits; default ShardBytes per minute, at least
	// 256 KiB/s.
	WriteSplitRate float64
	// Interval between rounds; default 250ms.
	Interval time.Duration
	// MaxMoves is the number of moves in flight per pool; default 8.
	MaxMoves int
	// Imbalance is the fraction above the pool's mean bytes a stash may
	// hold before a shard moves off it; default 0.1.
	Imbalance float64
	Logger    *slog.Logger
	Now       func() time.Time
}

// Distributor is the data distributor of a cluster: for every pool it
// keeps each shard on R live stashes in distinct zones, splits shards that
// grow past ShardBytes and merges small neighbours, re-replicates the
// shards of stashes that stayed unreachable for the failure wait, drains
// excluded stashes and balances bytes over the pool's stashes. It changes
// the shard map only by transactions (Env.CommitShards); a move adds the
// destinations to the shard (Dest: they fetch it while receiving its new
// writes), then, once every destination serves it, makes the new team
// the shard's team.
type Distributor struct {
	opts Options

	mu        sync.Mutex
	moves     map[string]*move        // by shard begin. Protected by mu.
	downSince map[kv.Tag]time.Time    // Protected by mu.
	retired   map[kv.Tag]bool         // retired by this distributor. Protected by mu.
	failedAt  map[kv.Tag]string       // tags seen failed, with their pool. Protected by mu.
	status    map[string]*PoolStatus  // Protected by mu.
	stashLoad map[kv.Tag]StashSummary // Protected by mu.
	done      map[string]int64        // moves finished, per pool. Protected by mu.
}

// move is a move in flight.
type move struct {
	Relocation
	started time.Time
}

// PoolStatus is the distributor's view of a pool, for status.
type PoolStatus struct {
	Pool            string
	Shards, Teams   int
	Replication     int
	UnderReplicated int
	Moving          int
	MovingBytesLeft int64
	Queue           []Relocation // in flight first (InFlight), then queued
	InFlight        int
	Queued          int
	Warning         string
	Bytes           int64
	MovesDone       int64
	FailureWait     time.Duration
}

// StashSummary is a stash's share of its pool.
type StashSummary struct {
	Shards   int
	Fetching int
	Bytes    int64
}

// New returns a distributor; Run it.
func New(opts Options) *Distributor {
	if opts.Interval <= 0 {
		opts.Interval = 250 * time.Millisecond
	}
	if opts.MaxMoves <= 0 {
		opts.MaxMoves = 8
	}
	if opts.Imbalance <= 0 {
		opts.Imbalance = 0.1
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.ShardBytes <= 0 {
		opts.ShardBytes = 250 << 20
	}
	if opts.WriteSplitRate <= 0 {
		// A shard's worth a minute, but at least 256 KiB/s: a few writes a
		// second to a small shard do not make it split.
		opts.WriteSplitRate = max(float64(opts.ShardBytes)/60, 256<<10)
	}
	return &Distributor{opts: opts, moves: map[string]*move{}, downSince: map[kv.Tag]time.Time{},
		done: map[string]int64{}, retired: map[kv.Tag]bool{}, failedAt: map[kv.Tag]string{}, status: map[string]*PoolStatus{}, stashLoad: map[kv.Tag]StashSummary{}}
}

// Run runs rounds until ctx ends: every Interval, or five times as often
// while moves are in flight, so that a move is finished soon after its
// copy is done rather than a whole interval later.
func (d *Distributor) Run(ctx context.Context) {
	wait := d.opts.Interval
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		if err := d.Tick(ctx); err != nil && ctx.Err() == nil {
			d.opts.Logger.Warn("data distributor round failed", "err", err)
		}
		wait = d.opts.Interval
		if d.moving() {
			wait = max(d.opts.Interval/5, time.Millisecond)
		}
	}
}

// moving reports whether a move is in flight.
func (d *Distributor) moving() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.moves) > 0
}

// Status returns the status of every pool, and every stash's share.
func (d *Distributor) Status() (map[string]PoolStatus, map[kv.Tag]StashSummary) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[string]PoolStatus, len(d.status))
	for k, v := range d.status {
		out[k] = *v
	}
	loads := make(map[kv.Tag]StashSummary, len(d.stashLoad))
	for k, v := range d.stashLoad {
		loads[k] = v
	}
	return out, loads
}

// round is the state of one round.
type round struct {
	d       *Distributor
	now     time.Time
	wait    time.Duration
	stashes map[kv.Tag]StashInfo
	failed  map[kv.Tag]bool // unreachable for the failure wait, or retired
	bytes   map[string]Metrics
	// unreachable: this round's metrics request to it failed (a stash
	// killed a moment ago, before the controller declares it dead): it
	// gets no new shards.
	unreachable map[kv.Tag]bool
}

func (r *round) live(t kv.Tag) bool {
	s, ok := r.stashes[t]
	return ok && s.Alive && !s.Retired
}

// usable: may receive shards.
func (r *round) usable(t kv.Tag) bool {
	s, ok := r.stashes[t]
	return ok && s.Alive && !s.Retired && !s.Excluded && !r.unreachable[t]
}

// Tick runs one round: observe, finish or cancel moves, plan, start moves.
func (d *Distributor) Tick(ctx context.Context) error {
	env := d.opts.Env
	m := env.Shards()
	r := &round{d: d, now: d.opts.Now(), wait: d.opts.FailureWait(), stashes: map[kv.Tag]StashInfo{}, failed: map[kv.Tag]bool{}, bytes: map[string]Metrics{}, unreachable: map[kv.Tag]bool{}}
	stashes := env.Stashes()
	// A tag the shard map names but the cluster does not list (a stash
	// that was replaced by a new one, a slot whose node was removed) is
	// down: after the failure wait its shards are re-replicated.
	listed := map[kv.Tag]bool{}
	for _, s := range stashes {
		listed[s.Tag] = true
	}
	for _, sh := range m.Shards() {
		if sh.Pool == "system" {
			continue
		}
		for _, t := range sh.Tags() {
			if !listed[t] {
				listed[t] = true
				stashes = append(stashes, StashInfo{Tag: t, Pool: sh.Pool})
			}
		}
	}
	d.mu.Lock()
	for _, s := range stashes {
		r.stashes[s.Tag] = s
		if s.Alive {
			delete(d.downSince, s.Tag)
		} else if _, ok := d.downSince[s.Tag]; !ok {
			d.downSince[s.Tag] = r.now
		}
		if s.Retired || d.retired[s.Tag] {
			r.failed[s.Tag] = true
		} else if since, ok := d.downSince[s.Tag]; ok && r.now.Sub(since) >= r.wait {
			r.failed[s.Tag] = true
		}
		if r.failed[s.Tag] {
			d.failedAt[s.Tag] = s.Pool
		} else {
			delete(d.failedAt, s.Tag)
		}
	}
	d.mu.Unlock()

	loads := map[kv.Tag]StashSummary{}
	var firstErr error
	for _, pool := range d.opts.Pools() {
		var shards []shardmap.Shard
		for _, sh := range m.Shards() {
			if sh.Pool == pool.Name {
				shards = append(shards, sh)
			}
		}
		st, err := d.pool(ctx, r, pool, shards, loads)
		if err != nil && firstErr == nil {
			firstErr = err
		}
		d.mu.Lock()
		d.status[pool.Name] = st
		d.mu.Unlock()
	}
	d.mu.Lock()
	d.stashLoad = loads
	d.mu.Unlock()
	d.retire(ctx, r, m)
	return firstErr
}

// measure fills r.bytes for shards, asking one live replica of each.
func (r *round) measure(ctx context.Context, shards []shardmap.Shard) {
	byTag := map[kv.Tag][]int{}
	for i, sh := range shards {
		var from kv.Tag
		found := false
		for _, t := range sh.Team {
			if r.live(t) {
				from, found = t, true
				break
			}
		}
		if found {
			byTag[from] = append(byTag[from], i)
		}
	}
	for tag, idx := range byTag {
		ranges := make([]kv.KeyRange, len(idx))
		for j, i := range idx {
			ranges[j] = kv.KeyRange{Begin: shards[i].Begin, End: shards[i].End}
		}
		ms, err := r.d.opts.Env.Metrics(ctx, tag, ranges, true)
		if err != nil || len(ms) != len(ranges) {
			r.unreachable[tag] = true
			continue
		}
		for j, i := range idx {
			r.bytes[string(shards[i].Begin)] = ms[j]
		}
	}
}

// pool runs a round for one pool.
func (d *Distributor) pool(ctx context.Context, r *round, pool PoolSettings, shards []shardmap.Shard, loads map[kv.Tag]StashSummary) (*PoolStatus, error) {
	env := d.opts.Env
	R := max(pool.Replication, 1)
	st := &PoolStatus{Pool: pool.Name, Shards: len(shards), Replication: R, FailureWait: r.wait}
	r.measure(ctx, shards)

	var members []StashInfo
	zones, dcs := map[string]bool{}, map[string]bool{}
	for _, s := range r.stashes {
		if s.Pool == pool.Name && r.usable(s.Tag) {
			members = append(members, s)
			zones[s.DC+"/"+s.Zone], dcs[s.DC] = true, true
		}
	}
	slices.SortFunc(members, func(a, b StashInfo) int { return int(a.Tag) - int(b.Tag) })
	switch {
	case len(members) < R:
		st.Warning = fmt.Sprintf("%d usable stashes for replication %d", len(members), R)
	case len(zones) < R && !(len(zones) == 1 && zones["/"]):
		// (Stashes that give no locality at all, as in an embedded
		// cluster, get no warning: they are one failure domain by choice.)
		st.Warning = fmt.Sprintf("the pool's stashes span %d zones for replication %d: some shards have two replicas in one zone", len(zones), R)
	case pool.AcrossDCs && len(dcs) < 2:
		st.Warning = "across_dcs: the pool's stashes are all in one data center"
	}

	// Bytes per stash (its teams' shards), for balance.
	load := map[kv.Tag]int64{}
	for _, s := range members {
		load[s.Tag] = 0
	}
	teams := map[string]bool{}
	for _, sh := range shards {
		b := r.bytes[string(sh.Begin)].Bytes
		st.Bytes += b
		teams[fmt.Sprint(sh.Team)] = true
		for _, t := range sh.Tags() {
			load[t] += b
			ls := loads[t]
			ls.Shards++
			if slices.Contains(sh.Dest, t) {
				ls.Fetching++
			}
			ls.Bytes += b
			loads[t] = ls
		}
	}
	st.Teams = len(teams)

	// Moves in flight: finish or cancel.
	var errs []error
	inFlight := 0
	var flying []Relocation
	for _, sh := range shards {
		if !sh.Moving() {
			continue
		}
		d.mu.Lock()
		mv := d.moves[string(sh.Begin)]
		d.mu.Unlock()
		if mv == nil {
			// A move begun by an earlier distributor: finish it towards
			// its destinations plus the healthy team members.
			to := slices.Clone(sh.Dest)
			for _, t := range sh.Team {
				if len(to) < R && r.usable(t) && !slices.Contains(to, t) {
					to = append(to, t)
				}
			}
			mv = &move{Relocation: Relocation{Begin: sh.Begin, End: sh.End, Pool: pool.Name, From: sh.Team, To: to, Reason: "resumed"}, started: r.now}
			d.mu.Lock()
			d.moves[string(sh.Begin)] = mv
			d.mu.Unlock()
		}
		done, cancel, copying := true, false, false
		var copied int64
		// A move whose sources all failed (past the failure wait) cannot
		// finish: cancel it (the shard is then re-replicated from what is
		// left, or waits for a replica to return).
		if !slices.ContainsFunc(sh.Team, func(t kv.Tag) bool { return !r.failed[t] }) {
			cancel = true
		}
		for _, t := range sh.Dest {
			if !r.live(t) {
				cancel = true
				break
			}
			ms, err := env.Metrics(ctx, t, []kv.KeyRange{{Begin: sh.Begin, End: sh.End}}, false)
			if err != nil || len(ms) != 1 {
				done = false
				continue
			}
			switch ms[0].State {
			case "serving":
			case "copied":
				// Waiting for the copy to be durable (about the MVCC
				// window): not finished, but it no longer takes one of
				// the MaxMoves slots, which bound the copying.
				done = false
				copied += mv.Bytes / int64(max(1, len(sh.Dest)))
			case "fetching", "partial":
				done, copying = false, true
				copied += ms[0].FetchedBytes
			default:
				cancel = true
			}
		}
		switch {
		case cancel:
			if err := env.CommitShards(ctx, []shardmap.Shard{{Begin: sh.Begin, End: sh.End, Pool: sh.Pool, Team: sh.Team}}, nil); err != nil {
				errs = append(errs, err)
				continue
			}
			d.opts.Logger.Info("data distribution: move cancelled (a destination is gone)", "pool", pool.Name, "begin", sh.Begin, "dest", sh.Dest)
			d.mu.Lock()
			delete(d.moves, string(sh.Begin))
			d.mu.Unlock()
		case done:
			if err := env.CommitShards(ctx, []shardmap.Shard{{Begin: sh.Begin, End: sh.End, Pool: sh.Pool, Team: sortedTags(mv.To)}}, nil); err != nil {
				errs = append(errs, err)
				continue
			}
			d.opts.Logger.Info("data distribution: move done", "pool", pool.Name, "begin", sh.Begin, "end", sh.End,
				"from", sh.Team, "to", mv.To, "reason", mv.Reason, "took", r.now.Sub(mv.started).Round(time.Millisecond))
			d.mu.Lock()
			delete(d.moves, string(sh.Begin))
			d.done[pool.Name]++
			d.mu.Unlock()
		default:
			if copying {
				inFlight++
			}
			st.Moving++
			left := max(mv.Bytes-copied, 0)
			st.MovingBytesLeft += left
			rel := mv.Relocation
			flying = append(flying, rel)
		}
	}

	// Plan.
	var q Queue
	pick := func(keep []kv.Tag, avoid []kv.Tag, n int) []kv.Tag {
		var out []kv.Tag
		for len(out) < n {
			best, bestScore := kv.Tag(0), []int64(nil)
			for _, s := range members {
				if slices.Contains(keep, s.Tag) || slices.Contains(avoid, s.Tag) || slices.Contains(out, s.Tag) {
					continue
				}
				sameZone, sameDC := int64(0), int64(0)
				for _, t := range append(slices.Clone(keep), out...) {
					o := r.stashes[t]
					if o.DC == s.DC && o.Zone == s.Zone {
						sameZone++
					}
					if o.DC == s.DC {
						sameDC++
					}
				}
				if !pool.AcrossDCs {
					sameDC = 0
				}
				score := []int64{sameDC, sameZone, load[s.Tag], int64(s.Tag)}
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
	for _, sh := range shards {
		if sh.Moving() {
			continue
		}
		b := r.bytes[string(sh.Begin)].Bytes
		var keep, failed, excluded []kv.Tag
		liveN := 0
		for _, t := range sh.Team {
			switch {
			case r.failed[t] || r.stashes[t].Retired:
				failed = append(failed, t)
			case r.stashes[t].Excluded:
				excluded = append(excluded, t)
			default:
				keep = append(keep, t)
			}
			if r.live(t) {
				liveN++
			}
		}
		if liveN < R {
			st.UnderReplicated++
		}
		rel := Relocation{Begin: sh.Begin, End: sh.End, Pool: pool.Name, From: sh.Team, Bytes: b}
		switch {
		case len(failed) > 0 || len(keep)+len(excluded) < R:
			rel.Priority, rel.Reason = UnhealthyPriority(liveN, R), "unhealthy"
			kept := append(slices.Clone(keep), excluded...)
			if len(kept) > R {
				kept = kept[:R]
			}
			rel.To = append(kept, pick(kept, failed, R-len(kept))...)
		case len(keep)+len(excluded) > R:
			rel.Priority, rel.Reason = PriorityExcluded, "replication"
			kept := append(slices.Clone(keep), excluded...)
			rel.To = kept[:R]
		case len(excluded) > 0:
			rel.Priority, rel.Reason = PriorityExcluded, "excluded"
			rel.To = append(slices.Clone(keep), pick(keep, excluded, len(excluded))...)
		default:
			continue
		}
		if slices.Equal(sortedTags(rel.To), sortedTags(sh.Team)) || len(rel.To) == 0 {
			continue
		}
		q.Push(rel)
	}
	// Splits and merges.
	var tracked []Shard
	for _, sh := range shards {
		if !sh.Moving() {
			tracked = append(tracked, Shard{Begin: sh.Begin, End: sh.End, Pool: sh.Pool, Team: sh.Team, Bytes: r.bytes[string(sh.Begin)].Bytes})
		} else {
			tracked = append(tracked, Shard{Begin: sh.Begin, End: sh.End, Pool: "(moving)", Team: sh.Team, Bytes: d.opts.ShardBytes})
		}
	}
	for _, c := range PlanShards(tracked, pool.Prefix, d.opts.ShardBytes, func(begin, end []byte) []byte {
		return r.bytes[string(begin)].SplitKey
	}) {
		if c.Shard.Pool != pool.Name {
			continue
		}
		if c.Split {
			q.Push(Relocation{Begin: c.Shard.Begin, End: c.Shard.End, Pool: pool.Name, Priority: PrioritySplit, Reason: "split",
				From: c.Shard.Team, Split: c.At, Bytes: c.Shard.Bytes})
			continue
		}
		// Merge the shard with its right neighbour, unless either is
		// written fast (it was split for that).
		i := sort.Search(len(tracked), func(i int) bool { return bytes.Compare(tracked[i].Begin, c.At) >= 0 })
		hot := r.bytes[string(c.Shard.Begin)].WriteRate > d.opts.WriteSplitRate/4 ||
			(i < len(tracked) && r.bytes[string(tracked[i].Begin)].WriteRate > d.opts.WriteSplitRate/4)
		if !hot && i < len(tracked) && bytes.Equal(tracked[i].Begin, c.At) {
			q.Push(Relocation{Begin: c.Shard.Begin, End: tracked[i].End, Pool: pool.Name, Priority: PriorityRebalance / 2, Reason: "merge",
				From: c.Shard.Team, To: c.Shard.Team, Split: c.At, Bytes: c.Shard.Bytes + tracked[i].Bytes})
		}
	}
	// Shards written fast split too (at the key halving their write
	// rate), once they hold an eighth of the size limit: their load then
	// spreads as the halves move.
	for _, sh := range shards {
		mt := r.bytes[string(sh.Begin)]
		k := mt.WriteSplitKey
		if sh.Moving() || mt.WriteRate <= d.opts.WriteSplitRate || mt.Bytes < d.opts.ShardBytes/8 ||
			k == nil || bytes.Compare(k, sh.Begin) <= 0 || bytes.Compare(k, sh.End) >= 0 {
			continue
		}
		q.Push(Relocation{Begin: sh.Begin, End: sh.End, Pool: pool.Name, Priority: PrioritySplit, Reason: "split",
			From: sh.Team, Split: k, Bytes: mt.Bytes})
	}
	// Balance: a shard from the stash holding the most bytes to the one
	// holding the fewest, when either is off the pool's mean by more than
	// Imbalance; the shard is at most half the gap between them, so the
	// move narrows it (no shard moves back and forth).
	if len(members) > R {
		var total int64
		for _, s := range members {
			total += load[s.Tag]
		}
		mean := float64(total) / float64(len(members))
		hi, lo := members[0].Tag, members[0].Tag
		for _, s := range members {
			if load[s.Tag] > load[hi] {
				hi = s.Tag
			}
			if load[s.Tag] < load[lo] {
				lo = s.Tag
			}
		}
		gap := load[hi] - load[lo]
		if (float64(load[hi]) > mean*(1+d.opts.Imbalance) || float64(load[lo]) < mean*(1-d.opts.Imbalance)) && gap > 0 {
			var best *shardmap.Shard
			var bestBytes int64
			for i := range shards {
				sh := &shards[i]
				b := r.bytes[string(sh.Begin)].Bytes
				if sh.Moving() || b <= 0 || 2*b > gap || !slices.Contains(sh.Team, hi) || slices.Contains(sh.Team, lo) {
					continue
				}
				// Never at the cost of the team's spread over zones (and
				// data centers when the pool asks for it).
				after := append(slices.DeleteFunc(slices.Clone(sh.Team), func(t kv.Tag) bool { return t == hi }), lo)
				if r.spread(after, pool.AcrossDCs) < r.spread(sh.Team, pool.AcrossDCs) {
					continue
				}
				if b > bestBytes {
					best, bestBytes = sh, b
				}
			}
			if best != nil {
				to := slices.DeleteFunc(slices.Clone(best.Team), func(t kv.Tag) bool { return t == hi })
				to = append(to, lo)
				q.Push(Relocation{Begin: best.Begin, End: best.End, Pool: pool.Name, Priority: PriorityRebalance, Reason: "rebalance",
					From: best.Team, To: to, Bytes: bestBytes})
			}
		}
	}

	// Start what fits.
	items := q.Items()
	var waiting []Relocation
	for _, rel := range items {
		if inFlight >= d.opts.MaxMoves || slices.ContainsFunc(flying, func(o Relocation) bool { return o.overlaps(&rel) }) {
			waiting = append(waiting, rel)
			continue
		}
		if err := d.start(ctx, r, pool, rel); err != nil {
			errs = append(errs, err)
			waiting = append(waiting, rel)
			continue
		}
		if rel.Reason != "split" && rel.Reason != "merge" && rel.Reason != "replication" && !rel.direct(r) {
			inFlight++
			st.Moving++
			st.MovingBytesLeft += rel.Bytes
			flying = append(flying, rel)
		}
	}
	st.InFlight = len(flying)
	st.Queued = len(waiting)
	st.Queue = append(flying, waiting...)
	if len(st.Queue) > 20 {
		st.Queue = st.Queue[:20]
	}
	d.mu.Lock()
	st.MovesDone = d.done[pool.Name]
	d.mu.Unlock()
	if len(errs) > 0 {
		return st, errs[0]
	}
	return st, nil
}

// spread scores how a team spreads over failure domains: distinct data
// centers first (when acrossDCs), then distinct zones.
func (r *round) spread(team []kv.Tag, acrossDCs bool) int {
	dcs, zones := map[string]bool{}, map[string]bool{}
	for _, t := range team {
		s := r.stashes[t]
		dcs[s.DC], zones[s.DC+"/"+s.Zone] = true, true
	}
	if !acrossDCs {
		return len(zones)
	}
	return len(dcs)*1000 + len(zones)
}

// direct reports whether rel changes the team without a copy: no live
// replica of the shard is left to copy from.
func (rel *Relocation) direct(r *round) bool {
	for _, t := range rel.From {
		if r.live(t) && !r.failed[t] {
			return false
		}
	}
	return true
}

// start begins rel.
func (d *Distributor) start(ctx context.Context, r *round, pool PoolSettings, rel Relocation) error {
	env := d.opts.Env
	switch {
	case rel.Reason == "split":
		return env.CommitShards(ctx, []shardmap.Shard{
			{Begin: rel.Begin, End: rel.Split, Pool: pool.Name, Team: rel.From},
			{Begin: rel.Split, End: rel.End, Pool: pool.Name, Team: rel.From},
		}, nil)
	case rel.Reason == "merge":
		return env.CommitShards(ctx, []shardmap.Shard{{Begin: rel.Begin, End: rel.End, Pool: pool.Name, Team: rel.From}}, [][]byte{rel.Split})
	case rel.Reason == "replication":
		return env.CommitShards(ctx, []shardmap.Shard{{Begin: rel.Begin, End: rel.End, Pool: pool.Name, Team: sortedTags(rel.To)}}, nil)
	case rel.direct(r):
		if !pool.Ephemeral {
			return nil // a durable shard with no replica left waits for one to return
		}
		d.opts.Logger.Warn("data distribution: no replica of a cache shard is left; it starts empty on a new team",
			"pool", pool.Name, "begin", rel.Begin, "end", rel.End, "team", rel.To)
		return env.CommitShards(ctx, []shardmap.Shard{{Begin: rel.Begin, End: rel.End, Pool: pool.Name, Team: sortedTags(rel.To)}}, nil)
	}
	var dest []kv.Tag
	for _, t := range rel.To {
		if !slices.Contains(rel.From, t) {
			dest = append(dest, t)
		}
	}
	if len(dest) == 0 {
		// Only members leave (failed or excluded ones beyond R): no copy.
		return env.CommitShards(ctx, []shardmap.Shard{{Begin: rel.Begin, End: rel.End, Pool: pool.Name, Team: sortedTags(rel.To)}}, nil)
	}
	if err := env.CommitShards(ctx, []shardmap.Shard{{Begin: rel.Begin, End: rel.End, Pool: pool.Name, Team: rel.From, Dest: dest}}, nil); err != nil {
		return err
	}
	d.opts.Logger.Info("data distribution: move started", "pool", pool.Name, "begin", rel.Begin, "end", rel.End,
		"from", rel.From, "to", rel.To, "reason", rel.Reason, "bytes", rel.Bytes)
	d.mu.Lock()
	d.moves[string(rel.Begin)] = &move{Relocation: rel, started: r.now}
	d.mu.Unlock()
	return nil
}

// retire retires failed stashes that no shard names any more.
func (d *Distributor) retire(ctx context.Context, r *round, m *shardmap.Map) {
	named := map[kv.Tag]bool{}
	for _, sh := range m.Shards() {
		for _, t := range sh.Tags() {
			named[t] = true
		}
	}
	d.mu.Lock()
	failed := make(map[kv.Tag]string, len(d.failedAt))
	for t, p := range d.failedAt {
		if !d.retired[t] {
			failed[t] = p
		}
	}
	d.mu.Unlock()
	for t, pool := range failed {
		if named[t] {
			continue
		}
		if err := d.opts.Env.Retire(ctx, t); err != nil {
			d.opts.Logger.Warn("data distribution: retire a replaced stash", "tag", t, "err", err)
			continue
		}
		d.opts.Logger.Info("data distribution: stash replaced; the log no longer keeps its entries", "tag", t, "pool", pool)
		d.mu.Lock()
		d.retired[t] = true
		d.mu.Unlock()
	}
}

func sortedTags(t []kv.Tag) []kv.Tag {
	out := slices.Clone(t)
	slices.Sort(out)
	return out
}
