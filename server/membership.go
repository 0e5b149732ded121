package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/distash/distash/config"
	"github.com/distash/distash/internal/coord"
	"github.com/distash/distash/internal/coordrpc"
	"github.com/distash/distash/internal/fsys"
	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/txlog"
	"github.com/distash/distash/internal/wire"
)

// probeCoordinator asks the coordinator at addr what it tells of itself
// (coord.Options.Probe).
func (n *node) probeCoordinator(ctx context.Context, addr string) (coord.PeerInfo, error) {
	v, err := n.cc.Probe(ctx, addr)
	if err != nil {
		return coord.PeerInfo{}, err
	}
	if !v.Local {
		// A coordinator of an older binary forwarded the question to its
		// controller: it runs in a group, with state.
		return coord.PeerInfo{HasState: true}, nil
	}
	p := coord.PeerInfo{RaftID: v.RaftId, HasState: v.RaftState}
	for _, m := range v.Coordinators {
		if m.RaftId != "" {
			p.Members = append(p.Members, coord.Member{ID: m.RaftId, Addr: m.Address, Voter: m.Voter})
		}
	}
	return p, nil
}

// logRaftIDFile holds, next to the log replica (Dir/log), the raft server
// id its raft state was created with.
const logRaftIDFile = "raft-id"

// logReplicaID returns the raft server id of this transaction node's log
// replica: the one its raft state was created with, or a new one,
// "<node id>/<random>", when the replica has no raft state (a new node, or
// its log directory was lost). Raft counts a vote or an acknowledgement by
// the member it asked, so a replica that lost its state must never answer
// for the member it was: with a new id it is a new member, which the log's
// leader adds once the old one has left (keepLogMembers). A replica whose
// state predates these ids keeps the node id.
func logReplicaID(fsy fsys.FS, dir, nodeID string) (string, error) {
	logDir := filepath.Join(dir, "log")
	path := filepath.Join(logDir, logRaftIDFile)
	// txlog keeps a network replica's raft store in Dir/replica/raft.
	names, err := fsy.List(filepath.Join(logDir, "replica", "raft"))
	if err == nil && len(names) > 0 {
		b, _, err := fsys.ReadChecked(fsy, path)
		switch {
		case err == nil && len(b) > 0:
			return string(b), nil
		case err == nil || errors.Is(err, fs.ErrNotExist):
			return nodeID, nil
		default:
			return "", fmt.Errorf("server: the log replica's raft id: %w", err)
		}
	}
	var r [6]byte
	if _, err := rand.Read(r[:]); err != nil {
		return "", err
	}
	id := nodeID + "/" + hex.EncodeToString(r[:])
	if err := fsy.MkdirAll(logDir, 0o755); err != nil {
		return "", err
	}
	// A leftover txlog.meta describes the replica whose state is gone.
	if err := fsy.Remove(filepath.Join(logDir, "txlog.meta")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	if err := fsys.WriteChecked(fsy, path, []byte(id)); err != nil {
		return "", fmt.Errorf("server: %w", err)
	}
	return id, nil
}

// logPlacement waits until the controller placed this node's log replica
// under its current raft id, and returns the log's peers and whether the
// replica joins (it did not form the log: no bootstrap). A spare
// transaction node waits here until the log's leader adds it in place of
// a lost replica; a node whose replica lost its state waits until the
// leader replaced its old member by its new id.
func (tn *transactionNode) logPlacement(ctx context.Context) (peers []txlog.Peer, join bool, err error) {
	s, n := tn.s, tn.n
	said := ""
	for {
		vctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		v, err := n.cc.View(vctx)
		cancel()
		wait, why := 300*time.Millisecond, "waiting for the log replicas to be placed"
		if err == nil && len(v.LogReplicas) > 0 {
			ids := v.LogIds
			if len(ids) != len(v.LogReplicas) {
				ids = v.LogReplicas // an older controller: the node ids
			}
			i := slices.Index(v.LogReplicas, n.id)
			if i >= 0 && ids[i] == tn.logID {
				addrOf := map[string]string{}
				for _, cn := range v.Nodes {
					addrOf[cn.Id] = cn.Address
				}
				for j, id := range v.LogReplicas {
					peers = append(peers, txlog.Peer{ID: ids[j], Addr: addrOf[id]})
				}
				join = len(v.LogBootstrapIds) > 0 && !slices.Contains(v.LogBootstrapIds, tn.logID)
				return peers, join, nil
			}
			wait = time.Second
			if i < 0 {
				why = "spare transaction node: the log replicas are elsewhere (the log's leader adds this one in place of a lost replica)"
			} else {
				why = "this node's log replica has no raft state under the id the log knows: waiting for the log's leader to replace the old member by the new id"
			}
		}
		if why != said {
			said = why
			s.logger.Info(why, "log_id", tn.logID, "want", s.cfg.Log.Replicas, "err", err)
		}
		select {
		case <-ctx.Done():
			return nil, false, ctx.Err()
		case <-time.After(wait):
		}
	}
}

// keepLogMembers keeps the log's raft membership whole, on the node
// holding the stateless roles (its replica leads the log), one change at
// a time:
//
//   - a member is lost when no registered node has its raft id any more
//     (its node came back with a new log id: its log directory was lost,
//     or the node was removed), when its node is dead and another node now
//     registers at its address (its directory was lost and it came back as
//     a new node), or when its node is dead and an operator excluded its
//     address (gone for good). A lost member is removed first: nothing
//     may answer for it again;
//   - while the log has fewer members than [log] replicas, a live
//     transaction node that is not a member is added (its new log id, at
//     its address), in a zone the members do not use if there is one;
//   - the controller is told the membership (SetLogReplicas), which is
//     what nodes read to open their replica.
//
// A member is removed only once it has looked lost for lostFor, in
// every view since: a new controller, say, counts every node dead until
// it hears from it.
func (tn *transactionNode) keepLogMembers(ctx context.Context) {
	s := tn.s
	t := time.NewTicker(time.Second)
	defer t.Stop()
	since := map[string]time.Time{} // members that look lost, since when
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := tn.mendLogMembers(ctx, since); err != nil && ctx.Err() == nil {
			s.roleLogger(logRoleLog).Warn("keeping the log's membership whole", "err", err)
		}
	}
}

// lostFor is how long a log member must look lost before it is removed.
const lostFor = 3 * time.Second

func (tn *transactionNode) mendLogMembers(ctx context.Context, since map[string]time.Time) error {
	s, n, l := tn.s, tn.n, tn.s.log
	v := s.lastView()
	n.views.mu.Lock()
	age := time.Since(n.views.at)
	n.views.mu.Unlock()
	if v == nil || age > 3*time.Second || l == nil || !l.IsLeader() || len(v.LogIds) != len(v.LogReplicas) {
		// No live view (no controller), or one from a controller that
		// does not know the replicas' raft ids: no change.
		clear(since)
		return nil
	}
	members, err := l.Members()
	if err != nil {
		return err
	}
	nodes := map[string]*wire.ClusterNode{}
	byLogID := map[string]*wire.ClusterNode{}
	for _, cn := range v.Nodes {
		nodes[cn.Id] = cn
		if cn.Class == ClassTransaction {
			id := cn.LogId
			if id == "" {
				id = cn.Id
			}
			byLogID[id] = cn
		}
	}
	ownerOf := func(m txlog.Member) *wire.ClusterNode { return byLogID[m.ID] }
	lost := func(m txlog.Member) string {
		if m.ID == tn.logID {
			return ""
		}
		o := ownerOf(m)
		if o == nil {
			return "no node registers its raft id any more (its log directory was lost, or its node was removed)"
		}
		if o.Alive {
			return ""
		}
		for _, cn := range v.Nodes {
			if cn.Id != o.Id && cn.Address == o.Address && cn.Alive {
				return "its node is dead and node " + cn.Id + " now registers at its address " + o.Address
			}
		}
		if slices.Contains(v.Excluded, o.Address) {
			return "its node is dead and its address " + o.Address + " is excluded"
		}
		return ""
	}
	tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	now := time.Now()
	for id := range since {
		if !slices.ContainsFunc(members, func(m txlog.Member) bool { return m.ID == id }) {
			delete(since, id)
		}
	}
	for _, m := range members {
		why := lost(m)
		if why == "" {
			delete(since, m.ID)
			continue
		}
		if _, ok := since[m.ID]; !ok {
			since[m.ID] = now
		}
		if now.Sub(since[m.ID]) >= lostFor {
			s.roleLogger(logRoleLog).Warn("the log lost a replica: removing it from the log's raft configuration", "replica", m.ID, "addr", m.Addr, "why", why)
			return l.RemoveServer(tctx, m.ID)
		}
	}
	if len(members) < s.cfg.Log.Replicas {
		zones := map[string]bool{}
		member := map[string]bool{}
		for _, m := range members {
			member[m.ID] = true
			if o := ownerOf(m); o != nil {
				zones[o.Dc+"/"+o.Zone] = true
			}
		}
		var best *wire.ClusterNode
		for _, cn := range v.Nodes { // sorted by id
			id := cn.LogId
			if cn.Class != ClassTransaction || !cn.Alive || cn.LogId == "" || member[id] || slices.Contains(v.Excluded, cn.Address) {
				continue
			}
			if best == nil || zones[best.Dc+"/"+best.Zone] && !zones[cn.Dc+"/"+cn.Zone] {
				best = cn
			}
		}
		if best != nil {
			s.roleLogger(logRoleLog).Warn("the log runs with fewer replicas than configured: adding one", "members", len(members), "want", s.cfg.Log.Replicas, "node", best.Id, "replica", best.LogId, "addr", best.Address)
			if err := l.AddVoter(tctx, best.LogId, best.Address); err != nil {
				return err
			}
			if members, err = l.Members(); err != nil {
				return err
			}
		}
	}
	// The controller's placement follows the raft configuration.
	var replicas, ids []string
	for _, m := range members {
		o := ownerOf(m)
		if o == nil {
			return nil // a member no node registers: it is removed first
		}
		replicas, ids = append(replicas, o.Id), append(ids, m.ID)
	}
	have := v.LogIds
	if len(have) != len(v.LogReplicas) {
		have = v.LogReplicas
	}
	if slices.Equal(slices.Sorted(slices.Values(ids)), slices.Sorted(slices.Values(have))) &&
		slices.Equal(slices.Sorted(slices.Values(replicas)), slices.Sorted(slices.Values(v.LogReplicas))) {
		return nil
	}
	if err := n.cc.SetLogReplicas(tctx, replicas, ids); err != nil {
		return fmt.Errorf("record the log's membership with the controller: %w", err)
	}
	n.views.mu.Lock()
	n.views.view = nil // the next look sees the new placement
	n.views.mu.Unlock()
	s.roleLogger(logRoleLog).Info("recorded the log's membership with the controller", "replicas", replicas, "ids", ids)
	return nil
}

// registration is what this node tells the controller as it registers:
// its place, class and pool, the configuration it was started with, this
// start's incarnation, and whether its stash starts empty (a stash node)
// or its log replica's raft id (a transaction node).
func (n *node) registration() (coordrpc.NodeRegistration, error) {
	s, o := n.s, n.opts
	cfgText, err := s.cfg.Marshal()
	if err != nil {
		return coordrpc.NodeRegistration{}, err
	}
	reg := coordrpc.NodeRegistration{ID: n.id, Addr: o.Listen, Class: o.Class, Pool: o.Pool,
		DC: o.DC, Zone: o.Zone, Machine: o.Machine, Config: string(cfgText), Incarnation: newIncarnation(o.FS, o.Dir, s.logger)}
	if o.Class == ClassStash {
		reg.Empty = n.stash.startsEmpty()
		return reg, nil
	}
	if n.txn.logID, err = logReplicaID(o.FS, o.Dir, n.id); err != nil {
		return coordrpc.NodeRegistration{}, err
	}
	reg.LogID = n.txn.logID
	return reg, nil
}

// register registers the node with the cluster controller, waiting for
// it, takes the generation it gives and returns the slot and tag it gives
// (a stash node's).
func (n *node) register(ctx context.Context, reg coordrpc.NodeRegistration) (slot int, tag kv.Tag, err error) {
	s := n.s
	coords := strings.Join(n.opts.Coordinators, ",")
	for {
		rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
		sl, t, gen, err := n.cc.Register(rctx, reg)
		rcancel()
		if err == nil {
			slot, tag = sl, kv.Tag(t)
			n.generation.Store(gen)
			break
		}
		var fe *config.FieldError
		var ke *kv.Error
		if errors.As(err, &fe) || errors.As(err, &ke) && !ke.Code.Retryable() {
			return 0, 0, fmt.Errorf("server: the cluster refused this node: %w", err)
		}
		if ctx.Err() != nil {
			return 0, 0, fmt.Errorf("server: register with the coordinators %s: %w", coords, err)
		}
		s.logger.Info("waiting for the cluster controller", "coordinators", coords, "last_error", err)
	}
	s.logger.Info("node registered", "addr", n.opts.Listen, "slot", slot)
	return slot, tag, nil
}
