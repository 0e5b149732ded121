package coord

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// probed is a cluster of coordinators that probe each other and join
// through the controller, as a node's do over coordrpc, in memory.
type probed struct {
	*cluster
	mu  sync.Mutex
	reg map[string]*Node // by address, while running
}

func newProbed(t *testing.T, n int) *probed {
	p := &probed{cluster: &cluster{t: t, nodes: make([]*Node, n)}, reg: map[string]*Node{}}
	for i := 0; i < n; i++ {
		m := listen(t, nil, nil)
		p.muxes = append(p.muxes, m)
		p.addrs = append(p.addrs, m.Addr().String())
		p.dirs = append(p.dirs, filepath.Join(t.TempDir(), fmt.Sprint("c", i)))
	}
	for i := range p.nodes {
		p.start(i)
	}
	t.Cleanup(func() {
		for i, nd := range p.nodes {
			if nd != nil {
				p.stop(i)
			}
		}
	})
	return p
}

func (p *probed) node(addr string) *Node {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.reg[addr]
}

func (p *probed) start(i int) {
	p.t.Helper()
	o := testOptions(p.muxes[i], p.dirs[i], p.addrs)
	o.NodeID = fmt.Sprint("t", i)
	o.Probe = func(ctx context.Context, addr string) (PeerInfo, error) {
		if n := p.node(addr); n != nil {
			return n.Info(), nil
		}
		return PeerInfo{}, errors.New("not running")
	}
	o.Join = func(ctx context.Context, addr, id string) error {
		for _, a := range p.addrs {
			if n := p.node(a); n != nil && n.Controller() != 0 {
				return n.AddMember(ctx, addr, id)
			}
		}
		return errors.New("no controller")
	}
	n, err := Start(o)
	if err != nil {
		p.t.Fatal(err)
	}
	p.nodes[i] = n
	p.mu.Lock()
	p.reg[p.addrs[i]] = n
	p.mu.Unlock()
}

func (p *probed) stop(i int) {
	p.mu.Lock()
	delete(p.reg, p.addrs[i])
	p.mu.Unlock()
	p.cluster.stop(i)
}

// TestCoordinatorThatLostItsStateRejoinsAsNewMember: coordinators form
// their group with ids that carry an incarnation; one whose directory is
// wiped comes back under a new id, its old member leaves the
// configuration, and the group keeps committing.
func TestCoordinatorThatLostItsStateRejoinsAsNewMember(t *testing.T) {
	p := newProbed(t, 3)
	ctl := p.controller(10 * time.Second)
	members := p.nodes[ctl].Members()
	if len(members) != 3 {
		t.Fatalf("members %+v, want 3", members)
	}
	for i, a := range p.addrs {
		if id := p.nodes[i].RaftID(); !strings.HasPrefix(id, a+"/") || !slices.ContainsFunc(members, func(m Member) bool { return m.ID == id && m.Addr == a }) {
			t.Fatalf("coordinator %d: raft id %q not a member %+v", i, id, members)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := p.nodes[ctl].Apply(ctx, SetConfig(testConfig(t, nil))); err != nil {
		t.Fatal(err)
	}

	k := (ctl + 1) % 3
	old := p.nodes[k].RaftID()
	p.stop(k)
	if err := os.RemoveAll(p.dirs[k]); err != nil {
		t.Fatal(err)
	}
	p.start(k)
	fresh := p.nodes[k].RaftID()
	if fresh == old {
		t.Fatalf("the wiped coordinator took its old raft id %q again", old)
	}
	waitFor(t, 15*time.Second, "the new member in place of the old", func() bool {
		ctl = p.controller(10 * time.Second)
		m := p.nodes[ctl].Members()
		return len(m) == 3 && slices.ContainsFunc(m, func(m Member) bool { return m.ID == fresh }) &&
			!slices.ContainsFunc(m, func(m Member) bool { return m.ID == old })
	})
	// The group commits, and the new member has the state.
	if _, err := p.nodes[ctl].Apply(ctx, Exclude([]string{"10.0.0.9:1"})); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the new member catching up", func() bool {
		st := p.nodes[k].State()
		return st.Config != "" && st.IsExcluded("10.0.0.9:1")
	})
	// A restart with its state keeps its id.
	p.stop(k)
	p.start(k)
	if id := p.nodes[k].RaftID(); id != fresh {
		t.Fatalf("restarted with its state, raft id %q, want %q", id, fresh)
	}
}
