package dd

import (
	"context"
	"slices"
	"time"

	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/shardmap"
)

// Tick runs one round: observe the stashes, then for every pool gather a
// snapshot (the shard map, the stashes' metrics, the moves in flight),
// plan (PlanPool) and carry out the plan; last, retire the failed stashes
// no shard names any more.
func (d *Distributor) Tick(ctx context.Context) error {
	m, at := d.opts.Env.Shards()
	now, wait := d.opts.Clock.Now(), d.opts.FailureWait()
	stashes := d.observe(m, now, wait)
	loads := map[kv.Tag]StashSummary{}
	var firstErr error
	for _, pool := range d.opts.Pools() {
		s := d.snapshot(ctx, m, pool, stashes, now, wait)
		s.MapVersion = at
		plan := PlanPool(s)
		done, err := d.carryOut(ctx, s, plan)
		if err != nil && firstErr == nil {
			firstErr = err
		}
		st := plan.status(done)
		for t, l := range plan.Loads {
			sum := loads[t]
			sum.Shards += l.Shards
			sum.Fetching += l.Fetching
			sum.Bytes += l.Bytes
			loads[t] = sum
		}
		d.mu.Lock()
		st.MovesDone = d.done[pool.Name]
		d.status[pool.Name] = &st
		d.mu.Unlock()
	}
	d.mu.Lock()
	d.stashLoad = loads
	d.mu.Unlock()
	d.retire(ctx, m)
	return firstErr
}

// observe returns the stashes of the round: those the cluster lists, and
// every tag the shard map names that it does not (a stash replaced by a
// new one, a slot whose node was removed), as down, so that after the
// failure wait its shards are re-replicated. It notes since when each is
// down, and which failed (for retire).
func (d *Distributor) observe(m *shardmap.Map, now time.Time, wait time.Duration) map[kv.Tag]StashState {
	listed := d.opts.Env.Stashes()
	seen := map[kv.Tag]bool{}
	for _, s := range listed {
		seen[s.Tag] = true
	}
	for _, sh := range m.Shards() {
		if sh.Pool == "system" {
			continue
		}
		for _, t := range sh.Tags() {
			if !seen[t] {
				seen[t] = true
				listed = append(listed, StashInfo{Tag: t, Pool: sh.Pool})
			}
		}
	}
	out := make(map[kv.Tag]StashState, len(listed))
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, s := range listed {
		if s.Alive {
			delete(d.downSince, s.Tag)
		} else if _, ok := d.downSince[s.Tag]; !ok {
			d.downSince[s.Tag] = now
		}
		st := StashState{StashInfo: s, DownSince: d.downSince[s.Tag], RetiredHere: d.retired[s.Tag]}
		out[s.Tag] = st
		if st.failed(now, wait) {
			d.failedAt[s.Tag] = s.Pool
		} else {
			delete(d.failedAt, s.Tag)
		}
	}
	return out
}

// snapshot gathers what PlanPool needs of a pool: its shards, with the
// metrics of one live replica of each (a stash that does not answer is
// marked Unreachable in stashes, for the rest of the round) and of the
// destinations of the moving ones, and the moves in flight.
func (d *Distributor) snapshot(ctx context.Context, m *shardmap.Map, pool PoolSettings, stashes map[kv.Tag]StashState, now time.Time, wait time.Duration) *Snapshot {
	s := &Snapshot{Now: now, FailureWait: wait, Pool: pool, Limits: d.opts.limits(), Stashes: stashes, Moves: map[string]Move{}}
	for _, sh := range m.Shards() {
		if sh.Pool == pool.Name {
			s.Shards = append(s.Shards, ShardState{Shard: sh})
		}
	}
	d.measure(ctx, s)
	for i := range s.Shards {
		d.askDests(ctx, s, &s.Shards[i])
	}
	d.mu.Lock()
	for k, mv := range d.moves {
		s.Moves[k] = *mv
	}
	d.mu.Unlock()
	return s
}

// measure asks one live replica of each shard for its metrics, one
// request per stash.
func (d *Distributor) measure(ctx context.Context, s *Snapshot) {
	byTag := map[kv.Tag][]int{}
	for i, sh := range s.Shards {
		for _, t := range sh.Team {
			if s.live(t) {
				byTag[t] = append(byTag[t], i)
				break
			}
		}
	}
	for tag, idx := range byTag {
		ranges := make([]kv.KeyRange, len(idx))
		for j, i := range idx {
			ranges[j] = kv.KeyRange{Begin: s.Shards[i].Begin, End: s.Shards[i].End}
		}
		ms, err := d.opts.Env.Metrics(ctx, tag, ranges, true)
		if err != nil || len(ms) != len(ranges) {
			st := s.Stashes[tag]
			st.Unreachable = true
			s.Stashes[tag] = st
			continue
		}
		for j, i := range idx {
			s.Shards[i].Metrics = ms[j]
		}
	}
}

// askDests asks each destination of a moving shard how far it got, up to
// the first that is not live (the move is cancelled then).
func (d *Distributor) askDests(ctx context.Context, s *Snapshot, sh *ShardState) {
	for _, t := range sh.Dest {
		if !s.live(t) {
			return
		}
		var got *Metrics
		ms, err := d.opts.Env.Metrics(ctx, t, []kv.KeyRange{{Begin: sh.Begin, End: sh.End}}, false)
		if err == nil && len(ms) == 1 {
			got = &ms[0]
		}
		sh.Dests = append(sh.Dests, got)
	}
}

// carryOut carries out a plan: the moves in flight, then the relocations
// Admit starts. It returns the actions and the first error.
func (d *Distributor) carryOut(ctx context.Context, s *Snapshot, plan *PoolPlan) ([]Action, error) {
	var first error
	carry := func(a *Action) bool {
		err := d.do(ctx, s, a)
		if err != nil && first == nil {
			first = err
		}
		return err == nil
	}
	actions := slices.Clone(plan.Moves)
	for i := range actions {
		carry(&actions[i])
	}
	return append(actions, plan.Admit(carry)...), first
}

// do carries out one action: commits its shard map change and keeps the
// moves in flight and the count of moves done.
func (d *Distributor) do(ctx context.Context, s *Snapshot, a *Action) error {
	log, pool, key := d.opts.Logger, s.Pool.Name, string(a.Move.Begin)
	switch a.Kind {
	case ActFinish, ActCancel, ActContinue:
		d.mu.Lock()
		if d.moves[key] == nil { // resumed: begun by an earlier distributor
			mv := a.Move
			d.moves[key] = &mv
		}
		d.mu.Unlock()
	case ActStartEmpty:
		log.Warn("data distribution: a shard starts empty on a new team: "+a.Why,
			"pool", pool, "begin", a.Move.Begin, "end", a.Move.End, "was_on", a.Move.From, "team", a.Move.To)
	}
	if len(a.Set) > 0 || len(a.Clear) > 0 {
		if err := d.opts.Env.CommitShards(ctx, a.Set, a.Clear); err != nil {
			return err
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	switch a.Kind {
	case ActCancel:
		log.Info("data distribution: move cancelled (a destination is gone)", "pool", pool, "begin", a.Shard.Begin, "dest", a.Shard.Dest, "why", a.Why)
		delete(d.moves, key)
	case ActFinish:
		log.Info("data distribution: move done", "pool", pool, "begin", a.Shard.Begin, "end", a.Shard.End,
			"from", a.Shard.Team, "to", a.Move.To, "reason", a.Move.Reason, "took", s.Now.Sub(a.Move.Started).Round(time.Millisecond))
		delete(d.moves, key)
		d.done[pool]++
	case ActMove:
		log.Info("data distribution: move started", "pool", pool, "begin", a.Move.Begin, "end", a.Move.End,
			"from", a.Move.From, "to", a.Move.To, "reason", a.Move.Reason, "bytes", a.Move.Bytes)
		mv := a.Move
		d.moves[key] = &mv
	}
	return nil
}

// retire retires failed stashes that no shard names any more.
func (d *Distributor) retire(ctx context.Context, m *shardmap.Map) {
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
