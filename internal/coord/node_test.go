package coord

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/distash/distash/config"
	"github.com/distash/distash/internal/clock"
	"github.com/distash/distash/internal/raftnet"
	"github.com/distash/distash/internal/testutil/wait"
	"github.com/distash/distash/internal/tlsconf"
	"github.com/distash/distash/internal/tlsconf/tlstest"
)

// cluster is n coordinators on loopback, each in its own directory and on
// its own mux (which outlives a coordinator's stop and restart, as a node
// process's --listen outlives nothing else it runs).
type cluster struct {
	t     *testing.T
	addrs []string
	dirs  []string
	nodes []*Node
	muxes []*raftnet.Mux
}

func newCluster(t *testing.T, n int, tlsFor func(int) (*tls.Config, *tls.Config)) *cluster {
	c := &cluster{t: t, nodes: make([]*Node, n)}
	for i := 0; i < n; i++ {
		var srv, cli *tls.Config
		if tlsFor != nil {
			srv, cli = tlsFor(i)
		}
		m := listen(t, srv, cli)
		c.muxes = append(c.muxes, m)
		c.addrs = append(c.addrs, m.Addr().String())
		c.dirs = append(c.dirs, filepath.Join(t.TempDir(), fmt.Sprint("c", i)))
	}
	for i := range c.nodes {
		c.start(i)
	}
	t.Cleanup(func() {
		for i, nd := range c.nodes {
			if nd != nil {
				c.stop(i)
			}
		}
	})
	return c
}

// listen returns a mux on a loopback port, closed when the test ends.
func listen(t *testing.T, srv, cli *tls.Config) *raftnet.Mux {
	t.Helper()
	m, err := raftnet.Listen("127.0.0.1:0", srv, cli)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func testOptions(m *raftnet.Mux, dir string, coords []string) Options {
	addr := m.Addr().String()
	return Options{
		Addr: addr, Coordinators: coords, Dir: dir, StreamLayer: m.StreamLayer(raftnet.KindCoord, addr),
		HeartbeatTimeout: 150 * time.Millisecond, ElectionTimeout: 150 * time.Millisecond,
		RPCTimeout: time.Second,
	}
}

func (c *cluster) start(i int) {
	c.t.Helper()
	o := testOptions(c.muxes[i], c.dirs[i], c.addrs)
	o.NodeID = fmt.Sprint("t", i)
	n, err := Start(o)
	if err != nil {
		c.t.Fatal(err)
	}
	c.nodes[i] = n
}

func (c *cluster) stop(i int) {
	c.t.Helper()
	if err := c.nodes[i].Stop(); err != nil {
		c.t.Errorf("stop %d: %v", i, err)
	}
	c.nodes[i] = nil
}

// controller waits for a running node to be the controller of a committed
// generation and returns its index.
func (c *cluster) controller(timeout time.Duration) int {
	c.t.Helper()
	var at int
	waitFor(c.t, timeout, "a controller", func() bool {
		for i, n := range c.nodes {
			if n != nil && n.Controller() != 0 {
				at = i
				return true
			}
		}
		return false
	})
	return at
}

// converged waits until every running node holds the same state as node i.
func (c *cluster) converged(i int) {
	c.t.Helper()
	waitFor(c.t, 5*time.Second, "replication to every node", func() bool {
		want := c.nodes[i].State()
		for _, n := range c.nodes {
			if n != nil && !reflect.DeepEqual(n.State(), want) {
				return false
			}
		}
		return true
	})
}

// follower2 returns a running node other than i.
func follower2(c *cluster, i int) *Node {
	for j, n := range c.nodes {
		if j != i && n != nil {
			return n
		}
	}
	return nil
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	wait.Within(t, timeout, what, cond)
}

func apply(t *testing.T, n *Node, c Command) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := n.Apply(ctx, c)
	if err != nil {
		t.Fatalf("%s: %v", c.Op, err)
	}
	return r
}

func TestClusterFailoverAndRecovery(t *testing.T) {
	c := newCluster(t, 3, nil)
	start := time.Now()
	li := c.controller(5 * time.Second)
	t.Logf("first controller %s after %v", c.addrs[li], time.Since(start).Round(time.Millisecond))
	leader := c.nodes[li]
	sub, cancel := c.nodes[(li+1)%3].Subscribe()
	defer cancel()

	apply(t, leader, SetConfig(testConfig(t, nil)))
	for i := range 3 {
		apply(t, leader, RegisterNode(NodeInfo{ID: fmt.Sprint("t", i), Addr: c.addrs[i], Class: ClassTransaction, DC: "dc1", Zone: fmt.Sprint("z", i)}))
	}
	r := apply(t, leader, RegisterNode(NodeInfo{ID: "s0", Addr: "127.0.0.1:9", Class: ClassStash, Pool: "data", Zone: "z0"}))
	if r.Slot != 0 {
		t.Fatalf("stash slot %d", r.Slot)
	}
	c.converged(li)

	// A follower refuses, naming the leader.
	follower := c.nodes[(li+1)%3]
	var nle *NotLeaderError
	if _, err := follower.Apply(context.Background(), RemoveNode("s0")); !errors.As(err, &nle) || nle.Leader != c.addrs[li] {
		t.Fatalf("follower Apply: %v, want NotLeaderError naming %s", err, c.addrs[li])
	}
	// A node with another cluster layout is refused, naming the field.
	_, err := leader.Apply(context.Background(), SetConfig(testConfig(t, func(cf *config.Config) { cf.Pools[0].Stashes = 3 })))
	var fe *config.FieldError
	if !errors.As(err, &fe) || !strings.Contains(err.Error(), "stashes") {
		t.Fatalf("different config: %v, want a FieldError naming stashes", err)
	}

	// Liveness is the controller's memory, not raft's.
	leader.Heartbeat("s0")
	if !leader.Alive("s0") || follower.Alive("s0") {
		t.Fatal("heartbeat not tracked on the controller only")
	}

	// Kill the controller: another takes over with the next generation.
	before := leader.State()
	c.stop(li)
	start = time.Now()
	ni := c.controller(5 * time.Second)
	failover := time.Since(start)
	t.Logf("failover to %s in %v", c.addrs[ni], failover.Round(time.Millisecond))
	after := c.nodes[ni].State()
	if after.Generation != before.Generation+1 {
		t.Fatalf("generation %d after failover, want %d", after.Generation, before.Generation+1)
	}
	// Only the controller changed: the roles are sticky.
	wantRoles := before.Roles.clone()
	wantRoles.Controller = c.addrs[ni]
	if !reflect.DeepEqual(after.Roles, wantRoles) {
		t.Fatalf("roles after failover %+v, want %+v", after.Roles, wantRoles)
	}
	if !reflect.DeepEqual(after.Nodes, before.Nodes) || after.Config != before.Config || !reflect.DeepEqual(after.Tags, before.Tags) {
		t.Fatal("state changed across failover")
	}
	// Once the live transaction nodes heartbeat the new controller, a
	// forced recruitment takes them: two left for three log replicas, and
	// it says so. RecruitLog waits for three.
	for i := range 3 {
		if i != li {
			c.nodes[ni].Heartbeat(fmt.Sprint("t", i))
		}
	}
	if ok, err := c.nodes[ni].RecruitLog(context.Background()); ok || err != nil {
		t.Fatalf("RecruitLog with 2 of 3 nodes: %v %v", ok, err)
	}
	g, warns, err := c.nodes[ni].Recover(context.Background())
	if err != nil || g != after.Generation+1 || len(warns) != 1 || !strings.Contains(warns[0], "only 2 live transaction nodes") {
		t.Fatalf("recover: generation %d (want %d), warnings %q, %v", g, after.Generation+1, warns, err)
	}
	if lr := c.nodes[ni].State().Roles.LogReplicas; len(lr) != 2 || slices.Contains(lr, fmt.Sprint("t", li)) {
		t.Fatalf("log replicas %v after recruiting the two live nodes", lr)
	}
	if _, _, err := follower2(c, ni).Recover(context.Background()); !errors.As(err, &nle) {
		t.Fatalf("Recover on a follower: %v", err)
	}
	waitFor(t, 20*time.Second, "a controller notification", func() bool {
		select {
		case l := <-sub:
			return l.Controller == (ni == (li+1)%3) && l.Leader == c.addrs[ni]
		default:
			return false
		}
	})

	// The stopped node comes back on its directory and catches up.
	c.start(li)
	c.converged(ni)

	// All stop, all restart: the state is on disk. Snapshots first, and a
	// command after them, so a restart reads a snapshot and a log tail.
	for i := range 3 {
		if err := c.nodes[i].raft.Snapshot().Error(); err != nil {
			t.Fatalf("snapshot %d: %v", i, err)
		}
	}
	apply(t, c.nodes[ni], RegisterNode(NodeInfo{ID: "s1", Addr: "127.0.0.1:10", Class: ClassStash, Pool: "cache"}))
	c.converged(ni)
	want := c.nodes[ni].State()
	for i := range 3 {
		c.stop(i)
	}
	for i := range 3 {
		c.start(i)
	}
	ri := c.controller(5 * time.Second)
	got := c.nodes[ri].State()
	if got.Generation != want.Generation+1 || !reflect.DeepEqual(got.Nodes, want.Nodes) || got.Config != want.Config {
		t.Fatalf("after a full restart: generation %d (want %d), %d nodes", got.Generation, want.Generation+1, len(got.Nodes))
	}
	c.converged(ri)
}

func TestClusterTLSRefusesForeignCA(t *testing.T) {
	pki := tlstest.New(t)
	tlsFor := func(files tlsconf.Files, client tlsconf.Files) (*tls.Config, *tls.Config) {
		srv, err := tlsconf.Server(files, nil)
		if err != nil {
			t.Fatal(err)
		}
		cli, err := tlsconf.Client(client)
		if err != nil {
			t.Fatal(err)
		}
		return srv, cli
	}
	good := func(int) (*tls.Config, *tls.Config) {
		// A node serves and dials raft with its one certificate, which
		// allows both (the mux refuses raft to a client's certificate).
		node := tlsconf.Files{Cert: pki.NodeCert, Key: pki.NodeKey, CA: pki.CA}
		return tlsFor(node, node)
	}
	c := newCluster(t, 3, good)
	li := c.controller(5 * time.Second)
	apply(t, c.nodes[li], SetConfig(testConfig(t, nil)))
	c.converged(li)
	gen := c.nodes[li].State().Generation
	term := c.nodes[li].raft.Stats()["term"]

	srvOther, cliOther := tlsFor(tlsconf.Files{Cert: pki.OtherServerCert, Key: pki.OtherServerKey, CA: pki.OtherCA},
		tlsconf.Files{Cert: pki.OtherClientCert, Key: pki.OtherClientKey, CA: pki.OtherCA})
	// A rogue coordinator whose certificates another CA signed claims a
	// place in the group and campaigns for leadership.
	rm := listen(t, srvOther, cliOther)
	o := testOptions(rm, t.TempDir(), append(append([]string{}, c.addrs...), rm.Addr().String()))
	rogue, err := Start(o)
	if err != nil {
		t.Fatal(err)
	}
	defer rogue.Stop()
	refused := func() int64 {
		var n int64
		for _, m := range c.muxes {
			n += m.RejectedConns()
		}
		return n
	}
	waitFor(t, 20*time.Second, "a refused handshake", func() bool { return refused() >= 3 })
	// Several election timeouts of the rogue: each campaign dials every
	// member, and each refuses the handshake.
	first := refused()
	waitFor(t, 30*time.Second, "the rogue's campaigns refused", func() bool { return refused() >= first+9 })
	t.Logf("rogue at term %s; %d handshakes refused", rogue.rf().Stats()["term"], refused())

	// Its votes never arrived: same leader, same term, same generation,
	// and the rogue learnt nothing. On a starved machine the members may
	// hold an election of their own (a missed heartbeat): then the term
	// moved by their campaigns only, and stays below the rogue's, which
	// has been campaigning for over a second — had one of its votes
	// arrived, a member would have jumped to its term.
	// A controller: within a few seconds, since the members may be in the
	// middle of an election of their own when the check comes.
	waitFor(t, 20*time.Second, "a controller", func() bool { return c.nodes[li].Controller() != 0 })
	if now := c.nodes[li].raft.Stats()["term"]; now != term {
		memberTerm, _ := strconv.ParseUint(now, 10, 64)
		rogueTerm, _ := strconv.ParseUint(rogue.raft.Stats()["term"], 10, 64)
		t.Logf("the members held an election (term %s, was %s); the rogue is at term %d", now, term, rogueTerm)
		if memberTerm >= rogueTerm {
			t.Fatalf("the group was disturbed: term %d (was %s), the rogue's %d", memberTerm, term, rogueTerm)
		}
	} else if g := c.nodes[li].State().Generation; g != gen {
		t.Fatalf("generation %d, was %d", g, gen)
	}
	if rogue.Leader() != "" || rogue.State().Config != "" {
		t.Fatalf("the rogue sees leader %q and config %q", rogue.Leader(), rogue.State().Config)
	}
	apply(t, c.nodes[li], RegisterNode(NodeInfo{ID: "t0", Addr: c.addrs[0], Class: ClassTransaction}))
	c.converged(li)

	// Plaintext is refused too.
	rejected := c.muxes[li].RejectedConns()
	conn, err := net.Dial("tcp", c.addrs[li])
	if err != nil {
		t.Fatal(err)
	}
	conn.Write([]byte("not a TLS client hello, just bytes"))
	waitFor(t, 20*time.Second, "a refused plaintext connection", func() bool { return c.muxes[li].RejectedConns() > rejected })
	conn.Close()
}

func TestLivenessClock(t *testing.T) {
	clk := clock.NewManual(time.Unix(1000, 0))
	l := newLiveness(clk, 5*time.Second)
	if l.alive("a") {
		t.Fatal("never seen, yet alive")
	}
	l.heartbeat("a")
	clk.Advance(4 * time.Second)
	if !l.alive("a") {
		t.Fatal("dead 4s after a heartbeat, timeout 5s")
	}
	clk.Advance(time.Second)
	if l.alive("a") {
		t.Fatal("alive 5s after a heartbeat, timeout 5s")
	}
	if at, ok := l.lastSeen("a"); !ok || at != time.Unix(1000, 0) {
		t.Fatalf("last seen %v %v", at, ok)
	}
}

func TestStartRefusesBadOptions(t *testing.T) {
	m := listen(t, nil, nil)
	o := testOptions(m, t.TempDir(), []string{"127.0.0.1:2"})
	if _, err := Start(o); err == nil || !strings.Contains(err.Error(), "not in the coordinators") {
		t.Fatalf("address outside the coordinators: %v", err)
	}
	// Start closed the layer it was given: the kind is free again.
	o = testOptions(m, t.TempDir(), []string{"127.0.0.1:2"})
	o.Addr = "127.0.0.1:2"
	if _, err := Start(o); err == nil || !strings.Contains(err.Error(), "advertises") {
		t.Fatalf("a layer advertising another address: %v", err)
	}
	o.StreamLayer = nil
	if _, err := Start(o); err == nil || !strings.Contains(err.Error(), "stream layer") {
		t.Fatalf("no stream layer: %v", err)
	}
}
