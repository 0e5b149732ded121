package coord

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
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/distash/distash/internal/fsys"
)

// A coordinator's raft server id dies with its raft state. Raft counts a
// vote or an acknowledgement by the member it asked, so a coordinator that
// lost its directory must never answer for the member it was: it would
// vote again in a term it voted in, and for a candidate missing entries it
// had acknowledged. So a new raft state gets a new id, "<address>/<random>"
// (raftIDFile, next to the raft store), and a coordinator with no raft
// state starts its raft only once it knows it is expected:
//
//   - some coordinator's configuration names its id (the group was formed
//     with it, or the controller added it): it starts and the leader
//     catches it up;
//   - the group exists without its id (it lost its state, or joins an
//     existing cluster): it asks the controller to make it a member
//     (Options.Join, served by AddMember), which removes the member that
//     had its address and adds the new id, both through raft; it starts
//     once a configuration names it;
//   - every other coordinator answers that it has no raft state either: a
//     new cluster. The coordinator with the lowest address bootstraps the
//     group with every coordinator's id, once, so there is one initial
//     configuration; the others start when it names them.
//
// Until then it runs no raft, so nothing answers raft calls at its address
// for a member that lost its state. A cluster forms only once every
// coordinator has answered; one that is down at creation holds it back
// (docs/cluster.md).
//
// A directory written before ids had incarnations (raft state, no id file)
// keeps the address as its id.
const raftIDFile = "raft-id"

// PeerInfo is what a coordinator tells of itself when probed (a local
// view, never forwarded).
type PeerInfo struct {
	RaftID   string
	HasState bool     // it runs raft with a configuration
	Members  []Member // its raft configuration
}

// Member is a server of the coordinators' raft configuration.
type Member struct {
	ID, Addr string
	Voter    bool
}

// localID returns this coordinator's raft server id: the one its raft
// state was created with, or a new one when it has none.
func (n *Node) localID(has bool) (string, error) {
	o := n.opts
	if o.Probe == nil {
		return o.Addr, nil // tests: the group is formed from the list, ids are addresses
	}
	path := filepath.Join(o.Dir, raftIDFile)
	fsy := fsys.Or(o.FS)
	if has {
		b, _, err := fsys.ReadChecked(fsy, path)
		switch {
		case err == nil && len(b) > 0:
			return string(b), nil
		case err == nil || errors.Is(err, fs.ErrNotExist):
			return o.Addr, nil // raft state from before incarnations
		default:
			return "", fmt.Errorf("coord: the raft id of the state in %s: %w", o.Dir, err)
		}
	}
	var r [6]byte
	if _, err := rand.Read(r[:]); err != nil {
		return "", err
	}
	id := o.Addr + "/" + hex.EncodeToString(r[:])
	if err := fsys.WriteChecked(fsy, path, []byte(id)); err != nil {
		return "", fmt.Errorf("coord: %w", err)
	}
	return id, nil
}

// RaftID returns this coordinator's raft server id.
func (n *Node) RaftID() string { return n.id }

// Members returns the raft configuration as this coordinator knows it
// (nil before its raft runs).
func (n *Node) Members() []Member {
	r := n.rf()
	if r == nil {
		return nil
	}
	f := r.GetConfiguration()
	if f.Error() != nil {
		return nil
	}
	var out []Member
	for _, s := range f.Configuration().Servers {
		out = append(out, Member{ID: string(s.ID), Addr: string(s.Address), Voter: s.Suffrage == raft.Voter})
	}
	return out
}

// Info is what this coordinator tells a probe.
func (n *Node) Info() PeerInfo {
	m := n.Members()
	return PeerInfo{RaftID: n.id, HasState: len(m) > 0, Members: m}
}

// LastContact returns when this coordinator last heard from a raft leader
// (now if it leads; zero if never).
func (n *Node) LastContact() time.Time {
	r := n.rf()
	switch {
	case r == nil:
		return time.Time{}
	case r.State() == raft.Leader:
		return n.opts.Clock.Now()
	}
	return r.LastContact()
}

// settle decides, for a coordinator without raft state, when its raft
// starts and whether it bootstraps the group (see raftIDFile).
func (n *Node) settle() {
	defer n.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { // Stop does not wait for a probe or a join in flight
		select {
		case <-n.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	var joined, waitLogged time.Time
	for {
		peers, missing := n.probe(ctx)
		var named, exists bool
		for _, p := range peers {
			exists = exists || p.HasState
			for _, m := range p.Members {
				named = named || m.ID == n.id
			}
		}
		switch {
		case named:
			n.opts.Logger.Info("coord: a configuration names this coordinator: starting its raft", "id", n.id)
			if n.startRaft(nil) == nil {
				return
			}
		case exists:
			if n.opts.Join != nil && time.Since(joined) > time.Second {
				joined = time.Now()
				n.opts.Logger.Warn("coord: this coordinator has no raft state but the coordinators' group exists: asking the controller to make it a member under a new id (its old member, if any, is removed)", "id", n.id)
				jctx, jcancel := context.WithTimeout(ctx, 2*n.opts.RPCTimeout)
				if err := n.opts.Join(jctx, n.opts.Addr, n.id); err != nil && ctx.Err() == nil {
					n.opts.Logger.Warn("coord: joining the coordinators failed; retrying", "error", err)
				}
				jcancel()
			}
		case len(missing) == 0 && n.bootstrapper():
			cfg := raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: raft.ServerID(n.id), Address: raft.ServerAddress(n.opts.Addr)}}}
			for a, p := range peers {
				cfg.Servers = append(cfg.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(p.RaftID), Address: raft.ServerAddress(a)})
			}
			n.opts.Logger.Info("coord: no coordinator has raft state: forming the coordinators' group", "servers", cfg.Servers)
			if n.startRaft(&cfg) == nil {
				return
			}
		default:
			if time.Since(waitLogged) > 10*time.Second {
				waitLogged = time.Now()
				n.opts.Logger.Info("coord: waiting for every coordinator to answer before forming the coordinators' group", "not_answering", missing)
			}
		}
		select {
		case <-n.done:
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// bootstrapper reports whether this coordinator forms a new group: the
// one with the lowest address.
func (n *Node) bootstrapper() bool {
	return slices.Min(n.opts.Coordinators) == n.opts.Addr
}

// probe asks every other coordinator for its PeerInfo; missing are the
// ones that did not answer (or answered without an id).
func (n *Node) probe(ctx context.Context) (map[string]PeerInfo, []string) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	peers := map[string]PeerInfo{}
	var missing []string
	for _, a := range n.opts.Coordinators {
		if a == n.opts.Addr {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(ctx, n.opts.RPCTimeout)
			p, err := n.opts.Probe(ctx, a)
			cancel()
			mu.Lock()
			defer mu.Unlock()
			if err != nil || p.RaftID == "" && !p.HasState {
				missing = append(missing, a)
				return
			}
			peers[a] = p
		}()
	}
	wg.Wait()
	slices.Sort(missing)
	return peers, missing
}

// AddMember makes the coordinator at addr, which has no raft state, a
// member under its new raft id, on the controller (a *NotLeaderError
// elsewhere): the member that had addr leaves the configuration first (its
// state is gone: its vote must never count again), then id joins as a
// voter. The coordinator at addr must answer a probe as id with no raft
// state. Nothing happens if id is a member already.
func (n *Node) AddMember(ctx context.Context, addr, id string) error {
	if _, err := n.controlling(ctx); err != nil {
		return err
	}
	switch {
	case !slices.Contains(n.opts.Coordinators, addr):
		return fmt.Errorf("coord: %s is not one of the coordinators %v", addr, n.opts.Coordinators)
	case addr == n.opts.Addr:
		return fmt.Errorf("coord: %s is the controller's own address", addr)
	case !strings.HasPrefix(id, addr+"/"):
		return fmt.Errorf("coord: raft id %q is not a new id of %s", id, addr)
	}
	n.memberMu.Lock()
	defer n.memberMu.Unlock()
	for _, m := range n.Members() {
		if m.ID == id {
			return nil
		}
	}
	if n.opts.Probe != nil {
		p, err := n.opts.Probe(ctx, addr)
		if err != nil {
			return fmt.Errorf("coord: ask %s who it is: %w", addr, err)
		}
		if p.RaftID != id || p.HasState {
			return fmt.Errorf("coord: the coordinator at %s answers as %q (raft state: %v), not as %q without raft state", addr, p.RaftID, p.HasState, id)
		}
	}
	r := n.rf()
	timeout := n.opts.RPCTimeout
	for _, m := range n.Members() {
		if m.Addr != addr {
			continue
		}
		if err := r.RemoveServer(raft.ServerID(m.ID), 0, timeout).Error(); err != nil {
			return fmt.Errorf("coord: remove the member %s that had %s: %w", m.ID, addr, err)
		}
		n.opts.Logger.Warn("coord: a coordinator lost its raft state: removed its old member", "address", addr, "old_id", m.ID, "new_id", id)
	}
	if err := r.AddVoter(raft.ServerID(id), raft.ServerAddress(addr), 0, timeout).Error(); err != nil {
		return fmt.Errorf("coord: add %s at %s: %w", id, addr, err)
	}
	n.opts.Logger.Info("coord: added a coordinator member", "address", addr, "id", id)
	return nil
}
