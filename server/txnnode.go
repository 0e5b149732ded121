package server

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/distash/distash/internal/engine"
	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/shardmap"
	"github.com/distash/distash/internal/txlog"
	"github.com/distash/distash/internal/wire"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// transactionNode is the part a transaction node plays in a multi-process
// cluster: a log replica where the controller placed one, the system stash
// over it, and, while its replica leads the log, the stateless roles of a
// generation it claims (the same roles an embedded cluster runs for its
// one generation: roles.go), with the loops that keep the log's tag set
// and raft membership in step with the cluster (membership.go).
type transactionNode struct {
	s     *Server
	n     *node
	logID string // its log replica's raft id (logReplicaID)
}

// run waits until the controller placed the log replicas; on one of them
// it opens the local replica and the system stash, then follows the log's
// leadership: the leader's node claims a new generation and runs the
// stateless roles.
func (tn *transactionNode) run(ctx context.Context) {
	s, n := tn.s, tn.n
	peers, join, err := tn.logPlacement(ctx)
	if err != nil {
		return
	}
	trans := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: s.gw.mux.StreamLayer(streamLog, n.opts.Listen), MaxPool: 4, Timeout: 5 * time.Second,
		Logger: hclog.NewNullLogger(),
	})
	// No fixed tag set: stash tags are given out as stashes join, so the
	// node holding the roles sets it (keepLogTags); until then the set
	// replicated in the log (or, on a new cluster, none: nothing is
	// dropped) holds.
	lo := s.logOptions()
	lo.Network = &txlog.NetworkOptions{LocalID: tn.logID, Peers: peers, Transport: trans, Join: join}
	l, err := txlog.Open(lo)
	if err != nil {
		trans.Close()
		s.fail(fmt.Errorf("server: open the log replica: %w", err))
		return
	}
	s.log = l
	s.replica.set(l)
	for {
		_, err := s.startSystemStash(ctx)
		if err == nil {
			break
		}
		s.logger.Error("open the system stash; retrying", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
	s.logger.Info("log replica running", "peers", peers, "joined", join)
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		held := s.tx.Load()
		switch {
		case !l.IsLeader() && held != nil:
			s.roleLogger(logRoleSequencer).Warn("lost the log's leadership: dropping the stateless roles", "roles_generation", held.generation)
			s.stopRoles()
		case l.IsLeader() && (held == nil || n.generation.Load() > held.generation):
			// Newly leader, or a later generation was started elsewhere
			// (a deposed node's late claim): claim one that names us.
			if held != nil {
				s.stopRoles()
			}
			if err := tn.recoverAsLeader(ctx); err != nil && ctx.Err() == nil {
				s.roleLogger(logRoleSequencer).Warn("recovery failed; retrying", "err", err)
			}
		}
	}
}

// recoverAsLeader starts a new generation on this node, whose log replica
// leads: the controller records it (its number is the epoch the log
// fences older proxies with), the log begins it and reports the highest
// durable version, and the stateless roles start above that.
func (tn *transactionNode) recoverAsLeader(ctx context.Context) error {
	s, n := tn.s, tn.n
	began := time.Now()
	sys, _ := s.stash(shardmap.SystemTag)
	if err := sys.Failed(); err != nil {
		// This node cannot serve the shard map: let another replica lead
		// the log (and take the roles) while the stash is rebuilt.
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		terr := s.log.TransferLeadership(tctx)
		cancel()
		return fmt.Errorf("the system stash has failed (%v): handed the log's leadership on (%v)", err, terr)
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	gen, err := n.cc.Claim(cctx, n.id)
	cancel()
	if err != nil {
		return fmt.Errorf("claim a generation: %w", err)
	}
	n.generation.Store(max(n.generation.Load(), gen))
	bctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	recovered, err := s.log.BeginGeneration(bctx, gen)
	cancel()
	if err != nil {
		return fmt.Errorf("begin generation %d in the log: %w", gen, err)
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = s.startRoles(rctx, gen, recovered, sys, began)
	cancel()
	if err != nil {
		return fmt.Errorf("start the roles of generation %d: %w", gen, err)
	}
	r := s.tx.Load()
	s.roleLogger(logRoleSequencer).Info("recovered: serving as sequencer, proxies and resolver",
		"recovered_version", recovered, "recovery", r.recoveryTime)
	dctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := n.cc.RecoveryDone(dctx, n.id, gen, r.recoveryTime.Microseconds()); err != nil {
		s.logger.Warn("report the recovery to the controller", "err", err)
	}
	return nil
}

// rebuildSystemStash refills a transaction node's system engine from the
// system stash of the node holding the stateless roles, at a read version
// of that node: the local log no longer holds the system messages after
// eng's version (the log dropped them up to gone while this node was
// away), so the stash could not catch up from it. The copy replaces the
// engine's system keys in one batch at that version, and the stash then
// follows the local log from there.
func (tn *transactionNode) rebuildSystemStash(ctx context.Context, eng engine.Engine, gone kv.Version) error {
	s, n := tn.s, tn.n
	was := eng.Version()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	v, err := n.cc.View(ctx)
	if err != nil {
		return fmt.Errorf("server: rebuild the system stash: ask the coordinators: %w", err)
	}
	from := v.StatelessAddress
	if from == "" || from == n.opts.Listen {
		return fmt.Errorf("server: the system stash is at version %d but the log dropped system messages up to %d, and no other node holds the roles to copy it from", eng.Version(), gone)
	}
	conn, err := n.connTo(from)
	if err != nil {
		return err
	}
	api := wire.NewDiStashClient(conn)
	grv, err := api.GetReadVersion(ctx, &wire.GetReadVersionRequest{})
	if err == nil {
		err = grv.Error.Err()
	}
	if err != nil {
		return fmt.Errorf("server: rebuild the system stash from %s: read version: %w", from, err)
	}
	rv := kv.Version(grv.Version)
	if rv < gone {
		return fmt.Errorf("server: rebuild the system stash from %s: its read version %d is below what the log dropped (%d)", from, rv, gone)
	}
	b := &engine.Batch{Version: rv, Writes: []engine.Write{{Key: shardmap.SystemRange.Begin, End: shardmap.SystemRange.End}}}
	begin := shardmap.SystemRange.Begin
	for {
		rr, err := api.ReadRange(ctx, &wire.ReadRangeRequest{Stash: uint32(shardmap.SystemTag), Version: int64(rv),
			Begin: begin, End: shardmap.SystemRange.End, ReadSystemKeys: true})
		if err == nil {
			err = rr.Error.Err()
		}
		if err != nil {
			return fmt.Errorf("server: rebuild the system stash from %s: read: %w", from, err)
		}
		for _, p := range rr.Kvs {
			b.Writes = append(b.Writes, engine.Write{Key: p.Key, Value: p.Value})
		}
		if !rr.More || len(rr.Kvs) == 0 {
			break
		}
		begin = append(append([]byte(nil), rr.Kvs[len(rr.Kvs)-1].Key...), 0)
	}
	if err := eng.Apply(b); err != nil {
		return fmt.Errorf("server: rebuild the system stash: %w", err)
	}
	s.logger.Warn("system stash rebuilt from another node: the log had dropped system messages it had not made durable",
		"from", from, "version", rv, "keys", len(b.Writes)-1, "was_at", was, "gone", gone)
	return nil
}

// keepLogTags keeps the log's tag set (the tags that must pop an entry
// before it is dropped) equal to the stashes that may still need entries:
// the system stash, every stash the controller lists that is not retired
// (a stash that is down may return within failure_wait and catch up), and
// every such stash the shard map names. Tags are given out as stashes join
// and replaced ones are retired, so the set follows the cluster: a new
// stash's entries are kept until it pops them, and a retired one no longer
// holds the log back. Cluster mode only (an embedded cluster's tags are
// fixed).
func (tn *transactionNode) keepLogTags(ctx context.Context, r *txRoles) {
	s := tn.s
	t := time.NewTicker(s.ddInterval())
	defer t.Stop()
	var last []kv.Tag
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		v := s.lastView()
		if v == nil || len(v.Stashes) == 0 {
			continue
		}
		retired := map[kv.Tag]bool{}
		set := map[kv.Tag]bool{shardmap.SystemTag: true}
		for _, sl := range v.Stashes {
			if sl.Retired {
				retired[kv.Tag(sl.Tag)] = true
			} else if sl.Node != "" {
				set[kv.Tag(sl.Tag)] = true
			}
		}
		s.retiredTags.Store(&retired)
		for _, sh := range r.commit.Shards().Shards() {
			for _, t := range sh.Tags() {
				if !retired[t] {
					set[t] = true
				}
			}
		}
		tags := make([]kv.Tag, 0, len(set))
		for t := range set {
			tags = append(tags, t)
		}
		slices.Sort(tags)
		if slices.Equal(tags, last) {
			continue
		}
		if l := s.logReplica(); l != nil {
			l.SetTags(tags)
			s.logger.Info("log tag set", "tags", tags)
			last = tags
		}
	}
}

// systemStashBehind rebuilds the system stash from the node holding the
// roles (rebuildSystemStash): only a transaction node has one.
func (n *node) systemStashBehind(ctx context.Context, eng engine.Engine, gone kv.Version) error {
	return n.txn.rebuildSystemStash(ctx, eng, gone)
}

// systemDiskFull stops the node: its log replica shares the disk, so a
// transaction node whose disk is full stops, with a message saying so,
// and the other log replicas carry on.
func (n *node) systemDiskFull(err error) { n.s.fail(err) }

// rolesStarting readies the roles of a generation this node claimed: a
// deposed leader must not hand out read versions older than the new
// generation's commits, and the log's tag set and membership follow the
// cluster while the node holds them.
func (n *node) rolesStarting(r *txRoles, run func(func(context.Context))) {
	tn := n.txn
	r.grv.WithConfirm(tn.s.log.VerifyLeader)
	run(func(ctx context.Context) { tn.keepLogTags(ctx, r) })
	run(tn.keepLogMembers)
}
