package coordrpc

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/distash/distash/config"
	"github.com/distash/distash/internal/clock"
	"github.com/distash/distash/internal/coord"
	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/protover"
	"github.com/distash/distash/internal/raftnet"
	"github.com/distash/distash/internal/testutil/silent"
	"github.com/distash/distash/internal/testutil/wait"
	"github.com/distash/distash/internal/tlsconf"
	"github.com/distash/distash/internal/tlsconf/tlstest"
	"github.com/distash/distash/internal/wire"
)

const livenessTimeout = 5 * time.Second

// cluster is three coordinators on loopback, each serving raft and the
// Coordinator service on one port through a raftnet.Mux.
type cluster struct {
	t         *testing.T
	grpc      []string // the coordinators' addresses: raft's and gRPC's
	muxes     []*raftnet.Mux
	nodes     []*coord.Node
	servers   []*grpc.Server
	services  []*Server
	clock     *clock.Manual // the coordinators' clock: tests move it instead of sleeping through liveness timeouts
	clientTLS *tls.Config
}

func newCluster(t *testing.T, pki *tlstest.PKI, opts ...grpc.ServerOption) *cluster {
	const n = 3
	c := &cluster{t: t, clock: clock.NewManual(time.Unix(1_000_000, 0)),
		nodes: make([]*coord.Node, n), servers: make([]*grpc.Server, n), services: make([]*Server, n)}
	var serverTLS *tls.Config
	if pki != nil {
		var err error
		// Coordinators serve and dial (raft too) with a node's
		// certificate, which allows both; the mux refuses raft to a
		// client's.
		node := tlsconf.Files{Cert: pki.NodeCert, Key: pki.NodeKey, CA: pki.CA}
		if serverTLS, err = tlsconf.Server(node, nil); err != nil {
			t.Fatal(err)
		}
		if c.clientTLS, err = tlsconf.Client(node); err != nil {
			t.Fatal(err)
		}
	}
	for range n {
		m, err := raftnet.Listen("127.0.0.1:0", serverTLS, c.clientTLS)
		if err != nil {
			t.Fatal(err)
		}
		c.muxes = append(c.muxes, m)
		c.grpc = append(c.grpc, m.Addr().String())
	}
	for i := range n {
		nd, err := coord.Start(coord.Options{
			Addr: c.grpc[i], Coordinators: c.grpc, Dir: filepath.Join(t.TempDir(), fmt.Sprint("c", i)),
			StreamLayer: c.muxes[i].StreamLayer(raftnet.KindCoord, c.grpc[i]), NodeID: fmt.Sprint("t", i),
			HeartbeatTimeout: 150 * time.Millisecond, ElectionTimeout: 150 * time.Millisecond,
			RPCTimeout: time.Second, LivenessTimeout: livenessTimeout, Clock: c.clock,
		})
		if err != nil {
			t.Fatal(err)
		}
		c.nodes[i] = nd
		s := grpc.NewServer(opts...) // insecure: the mux terminates TLS
		c.services[i] = Register(s, nd, ServerOptions{ClientTLS: c.clientTLS})
		go s.Serve(c.muxes[i].GRPCListener())
		c.servers[i] = s
	}
	t.Cleanup(func() {
		for i := range c.nodes {
			if c.nodes[i] != nil {
				c.stop(i)
			}
		}
	})
	return c
}

// stop kills coordinator i: its service and its raft node.
func (c *cluster) stop(i int) {
	c.servers[i].Stop()
	c.services[i].Close()
	if err := c.nodes[i].Stop(); err != nil {
		c.t.Errorf("stop %d: %v", i, err)
	}
	c.muxes[i].Close()
	c.nodes[i] = nil
}

// controller waits for a committed controller and returns its index.
func (c *cluster) controller() int {
	c.t.Helper()
	li := -1
	wait.Within(c.t, 5*time.Second, "a controller", func() bool {
		for i, n := range c.nodes {
			if n != nil && n.Controller() != 0 {
				li = i
				return true
			}
		}
		return false
	})
	return li
}

func (c *cluster) client(addrs ...string) *Client {
	c.t.Helper()
	cl, err := NewClient(strings.Join(addrs, ","), ClientOptions{TLS: c.clientTLS, AttemptTimeout: time.Second, Backoff: 20 * time.Millisecond})
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { cl.Close() })
	return cl
}

func testConfig(t *testing.T, edit func(*config.Config)) string {
	t.Helper()
	cf := config.Default()
	cf.Log.Replicas = 3
	if edit != nil {
		edit(cf)
	}
	b, err := cf.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func node(v *wire.ViewResponse, id string) *wire.ClusterNode {
	for _, n := range v.Nodes {
		if n.Id == id {
			return n
		}
	}
	return nil
}

// TestRegisterRetryAfterALostAnswer: the answer to a stash node's first
// registration comes after the client gave up on the attempt (the
// controller applied it: raft committed slowly, as on a loaded machine
// at a cluster's start), so the client sends it again. The node keeps
// the tag the first registration gave its slot, and no tag is retired:
// the initial shard map names that tag, and a retired one would make the
// data distributor start the cache's shards empty elsewhere.
func TestRegisterRetryAfterALostAnswer(t *testing.T) {
	var calls atomic.Int32
	slowFirst := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		resp, err := h(ctx, req)
		if r, ok := req.(*wire.RegisterRequest); ok && r.Hops == 0 && calls.Add(1) == 1 {
			time.Sleep(400 * time.Millisecond) // past the client's attempt timeout
		}
		return resp, err
	}
	c := newCluster(t, nil, grpc.ChainUnaryInterceptor(slowFirst))
	ctx := ctxT(t)
	li := c.controller()
	cl, err := NewClient(strings.Join(c.grpc, ","), ClientOptions{AttemptTimeout: 200 * time.Millisecond, Backoff: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	reg := NodeRegistration{ID: "cache1", Addr: "127.0.0.1:7000", Class: coord.ClassStash, Pool: "cache", Config: testConfig(t, nil),
		Empty: true, Incarnation: "process-1"}
	slot, tag, _, err := cl.Register(ctx, reg)
	if err != nil {
		t.Fatal(err)
	}
	if n := calls.Load(); n < 2 {
		t.Fatalf("%d registration calls: the lost answer was not retried", n)
	}
	st := c.nodes[li].State()
	want := st.SlotTags["cache"][0]
	if slot != 0 || tag != want || tag != 1 || len(st.Retired) != 0 {
		t.Fatalf("after a retried registration: slot %d tag %d (slot's tag %d), retired %v; want slot 0, tag 1, none retired", slot, tag, want, st.Retired)
	}
}

func TestRegisterHeartbeatViewAndFailover(t *testing.T) {
	c := newCluster(t, nil)
	ctx := ctxT(t)
	li := c.controller()
	fi := (li + 1) % 3
	cfg := testConfig(t, nil)

	// A stash node registers through a follower, which forwards to the
	// controller; the first node's configuration becomes the cluster's.
	viaFollower := c.client(c.grpc[fi])
	s0 := NodeRegistration{ID: "s0", Addr: "127.0.0.1:7000", Class: coord.ClassStash, Pool: "data", DC: "dc1", Zone: "za", Config: cfg}
	slot, _, gen, err := viaFollower.Register(ctx, s0)
	if err != nil || slot != 0 || gen == 0 {
		t.Fatalf("register s0: slot %d, generation %d, %v", slot, gen, err)
	}
	if st := c.nodes[li].State(); st.Config != cfg || st.Slot("data", "s0") != 0 {
		t.Fatalf("controller state: slot %d, config stored %v", st.Slot("data", "s0"), st.Config == cfg)
	}
	// Re-registering (say on a new address after a restart) keeps the slot.
	s0.Addr = "127.0.0.1:7001"
	if slot, _, _, err := viaFollower.Register(ctx, s0); err != nil || slot != 0 {
		t.Fatalf("re-register s0: slot %d, %v", slot, err)
	}
	if slot, _, _, err := viaFollower.Register(ctx, NodeRegistration{ID: "s1", Addr: "127.0.0.1:7002", Class: coord.ClassStash, Pool: "data", Config: cfg}); err != nil || slot != 1 {
		t.Fatalf("register s1: slot %d, %v", slot, err)
	}

	// A different cluster layout is refused, naming the field.
	_, _, _, err = viaFollower.Register(ctx, NodeRegistration{ID: "s2", Addr: "127.0.0.1:7003", Class: coord.ClassStash, Pool: "data",
		Config: testConfig(t, func(cf *config.Config) { cf.Pools[1].Stashes = 3 })})
	var fe *config.FieldError
	if !errors.As(err, &fe) || !strings.Contains(fe.Field, "stashes") || kv.CodeOf(err) != kv.CodeInvalidMutation {
		t.Fatalf("different config: %v, want a FieldError naming stashes", err)
	}
	if _, ok := c.nodes[li].State().Nodes["s2"]; ok {
		t.Fatal("the refused node was registered")
	}
	// The third transaction node to register forms the log (3 replicas).
	for i := range 3 {
		slot, _, g, err := viaFollower.Register(ctx, NodeRegistration{ID: fmt.Sprint("t", i), Addr: c.grpc[i], Class: coord.ClassTransaction,
			DC: "dc1", Zone: fmt.Sprint("z", i), Config: cfg})
		if err != nil || slot != -1 {
			t.Fatalf("register t%d: slot %d, %v", i, slot, err)
		}
		if want := gen + uint64(i/2); g != want {
			t.Fatalf("register t%d: generation %d, want %d", i, g, want)
		}
	}
	gen++
	if lr := c.nodes[li].State().Roles.LogReplicas; !slices.Equal(slices.Sorted(slices.Values(lr)), []string{"t0", "t1", "t2"}) {
		t.Fatalf("log replicas %v", lr)
	}

	// Every coordinator shows the controller's view.
	for i := range 3 {
		v, err := c.client(c.grpc[i]).View(ctx)
		if err != nil {
			t.Fatalf("view from %d: %v", i, err)
		}
		if v.Generation != gen || v.Controller != c.grpc[li] || len(v.Nodes) != 5 {
			t.Fatalf("view from %d: generation %d (want %d), controller %s (want %s), %d nodes", i, v.Generation, gen, v.Controller, c.grpc[li], len(v.Nodes))
		}
		if n := node(v, "s0"); n == nil || n.Address != "127.0.0.1:7001" || !n.Alive || n.Pool != "data" || n.Zone != "za" {
			t.Fatalf("view from %d: s0 is %v", i, n)
		}
		if len(v.Slots) != 2 || v.Slots[1].Pool != "data" || !slices.Equal(v.Slots[1].Nodes, []string{"s0", "s1"}) {
			t.Fatalf("view from %d: slots %v", i, v.Slots)
		}
		if v.Config != cfg || v.Sequencer != "" || v.StatelessAddress != "" || len(v.LogReplicas) != 3 || v.LastRecoveryUnixMs != 0 {
			t.Fatalf("view from %d: config given %v, sequencer %q, log replicas %v, last recovery %d", i, v.Config == cfg, v.Sequencer, v.LogReplicas, v.LastRecoveryUnixMs)
		}
		checkStashes(t, v, cfg, map[string]string{"data/0": "s0@127.0.0.1:7001", "data/1": "s1@127.0.0.1:7002"})
	}

	// Liveness follows heartbeats.
	c.clock.Advance(livenessTimeout + time.Second)
	if _, err := viaFollower.Heartbeat(ctx, "s0"); err != nil {
		t.Fatal(err)
	}
	v, err := viaFollower.View(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !node(v, "s0").Alive || node(v, "s1").Alive || node(v, "s0").LastSeenUnixMs != c.clock.Now().UnixMilli() {
		t.Fatalf("after a heartbeat of s0 only: s0 %v, s1 %v", node(v, "s0"), node(v, "s1"))
	}
	if _, err := viaFollower.Heartbeat(ctx, "nobody"); kv.CodeOf(err) != kv.CodeInvalidMutation {
		t.Fatalf("heartbeat of an unregistered node: %v", err)
	}

	// The heartbeat loop keeps a node alive across the liveness timeout,
	// and reports the generation.
	loopCtx, stopLoop := context.WithCancel(ctx)
	reports := make(chan error, 100)
	loopDone := make(chan struct{})
	go func() {
		defer close(loopDone)
		viaFollower.HeartbeatLoop(loopCtx, "s1", 10*time.Millisecond, func(g uint64, err error) {
			if err == nil && g != gen {
				err = fmt.Errorf("generation %d, want %d", g, gen)
			}
			select {
			case reports <- err:
			default:
			}
		})
	}()
	wait := func() {
		t.Helper()
		select {
		case err := <-reports:
			if err != nil {
				t.Fatalf("heartbeat loop: %v", err)
			}
		case <-ctx.Done():
			t.Fatal("no heartbeat report")
		}
	}
	wait()
	c.clock.Advance(livenessTimeout + time.Second)
	for len(reports) > 0 { // reports of heartbeats before the clock moved
		wait()
	}
	// The first may have been in flight when the clock moved; the second
	// was sent after.
	wait()
	wait()
	stopLoop()
	<-loopDone
	if v, err := viaFollower.View(ctx); err != nil || !node(v, "s1").Alive || node(v, "s0").Alive {
		t.Fatalf("after the heartbeat loop of s1: %v, s0 %v, s1 %v", err, node(v, "s0"), node(v, "s1"))
	}

	// A log replica claims the stateless roles; the view shows where.
	for i := range 3 {
		viaFollower.Heartbeat(ctx, fmt.Sprint("t", i))
	}
	claimAt := c.clock.Now().UnixMilli()
	g, err := viaFollower.Claim(ctx, "t1")
	if err != nil || g != gen+1 {
		t.Fatalf("claim: generation %d (want %d), %v", g, gen+1, err)
	}
	gen = g
	if err := viaFollower.RecoveryDone(ctx, "t1", gen, 1234); err != nil {
		t.Fatal(err)
	}
	if err := viaFollower.RecoveryDone(ctx, "t0", gen, 99); err != nil { // not the claimer: ignored
		t.Fatal(err)
	}
	v, err = viaFollower.View(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v.Generation != gen || v.Sequencer != "t1" || v.StatelessAddress != c.grpc[1] || len(v.LogReplicas) != 3 ||
		!slices.Equal(v.CommitProxies, []string{"t1"}) || v.Resolver != "t1" {
		t.Fatalf("roles: generation %d (want %d), sequencer %q at %q, log replicas %v", v.Generation, gen, v.Sequencer, v.StatelessAddress, v.LogReplicas)
	}
	if v.LastRecoveryUnixMs != claimAt || v.LastRecoveryMicros != 1234 {
		t.Fatalf("last recovery at %d (want %d), took %dµs (want 1234)", v.LastRecoveryUnixMs, claimAt, v.LastRecoveryMicros)
	}

	// The controller dies. A client given every coordinator, the dead one
	// first, still registers and views, in a later generation.
	c.stop(li)
	all := c.client(c.grpc[li], c.grpc[(li+1)%3], c.grpc[(li+2)%3])
	if slot, _, g, err := all.Register(ctx, NodeRegistration{ID: "s3", Addr: "127.0.0.1:7004", Class: coord.ClassStash, Pool: "cache", Config: cfg}); err != nil || slot != 0 || g <= gen {
		t.Fatalf("register after failover: slot %d, generation %d (was %d), %v", slot, g, gen, err)
	}
	if slot, _, _, err := all.Register(ctx, s0); err != nil || slot != 0 {
		t.Fatalf("re-register s0 after failover: slot %d, %v", slot, err)
	}
	v, err = all.View(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v.Generation <= gen || v.Controller == c.grpc[li] || !slices.Contains(c.grpc, v.Controller) || len(v.Nodes) != 6 {
		t.Fatalf("view after failover: generation %d (was %d), controller %s (old %s), %d nodes", v.Generation, gen, v.Controller, c.grpc[li], len(v.Nodes))
	}
	// The new controller has heard from the nodes that registered with it,
	// not yet from the others.
	if !node(v, "s0").Alive || node(v, "s1").Alive {
		t.Fatalf("liveness after failover: s0 %v, s1 %v", node(v, "s0"), node(v, "s1"))
	}
	// The roles stayed where they were.
	if v.Sequencer != "t1" || v.StatelessAddress != c.grpc[1] || len(v.LogReplicas) != 3 || v.LastRecoveryMicros != 1234 {
		t.Fatalf("roles after failover: sequencer %q at %q, log replicas %v, recovery %dµs", v.Sequencer, v.StatelessAddress, v.LogReplicas, v.LastRecoveryMicros)
	}
}

// checkStashes checks v.Stashes: every slot of every pool in the
// configuration's order, with its tag; want maps "pool/slot" to
// "node@address" for the held ones.
func checkStashes(t *testing.T, v *wire.ViewResponse, cfgText string, want map[string]string) {
	t.Helper()
	cfg, err := config.Parse([]byte(cfgText))
	if err != nil {
		t.Fatal(err)
	}
	tags := coord.StashTags(cfg)
	i := 0
	for _, p := range cfg.Pools {
		for slot, tag := range tags[p.Name] {
			if i >= len(v.Stashes) {
				t.Fatalf("%d stash locations, want more", len(v.Stashes))
			}
			l := v.Stashes[i]
			i++
			if l.Pool != p.Name || int(l.Slot) != slot || l.Tag != uint32(tag) {
				t.Fatalf("stash %d: %s/%d tag %d, want %s/%d tag %d", i-1, l.Pool, l.Slot, l.Tag, p.Name, slot, tag)
			}
			got := ""
			if l.Node != "" {
				got = l.Node + "@" + l.Address
			}
			if w := want[fmt.Sprintf("%s/%d", p.Name, slot)]; got != w || l.Alive != (w != "") {
				t.Fatalf("stash %s/%d: %q alive %v, want %q", p.Name, slot, got, l.Alive, w)
			}
		}
	}
	if i != len(v.Stashes) {
		t.Fatalf("%d stash locations, want %d", len(v.Stashes), i)
	}
}

// TestRecruitLogAndClaim: the log forms once log.replicas transaction
// nodes are alive, on distinct zones; only a log replica may claim, and
// each claim is a new generation.
func TestRecruitLogAndClaim(t *testing.T) {
	c := newCluster(t, nil)
	ctx := ctxT(t)
	li := c.controller()
	cl := c.client(c.grpc[(li+1)%3])
	cfg := testConfig(t, nil) // 3 log replicas
	reg := func(id, zone string) uint64 {
		t.Helper()
		_, _, g, err := cl.Register(ctx, NodeRegistration{ID: id, Addr: "127.0.0.1:1", Class: coord.ClassTransaction, DC: "dc1", Zone: zone, Config: cfg})
		if err != nil {
			t.Fatalf("register %s: %v", id, err)
		}
		return g
	}
	replicas := func() []string {
		t.Helper()
		v, err := cl.View(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return v.LogReplicas
	}
	reg("a", "z1")
	gen := reg("b", "z1")
	if lr := replicas(); len(lr) != 0 {
		t.Fatalf("log replicas %v with 2 transaction nodes", lr)
	}
	// A stash node does not count.
	if _, _, _, err := cl.Register(ctx, NodeRegistration{ID: "s0", Addr: "127.0.0.1:2", Class: coord.ClassStash, Pool: "data", Config: cfg}); err != nil {
		t.Fatal(err)
	}
	// a and b die; c comes, and a comes back: 2 alive.
	c.clock.Advance(livenessTimeout + time.Second)
	reg("c", "z2")
	if _, err := cl.Heartbeat(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if lr := replicas(); len(lr) != 0 {
		t.Fatalf("log replicas %v with 2 live transaction nodes", lr)
	}
	if _, err := cl.Claim(ctx, "a"); err == nil || kv.CodeOf(err) != kv.CodeInvalidMutation || !strings.Contains(err.Error(), "log replica") {
		t.Fatalf("claim before the log formed: %v", err)
	}
	// The third live one forms it: the dead b is left out, zones distinct.
	if g := reg("d", "z3"); g != gen+1 {
		t.Fatalf("generation %d after the log formed, want %d", g, gen+1)
	}
	if lr := slices.Sorted(slices.Values(replicas())); !slices.Equal(lr, []string{"a", "c", "d"}) {
		t.Fatalf("log replicas %v, want a c d", lr)
	}
	reg("e", "z4") // formed: no new generation
	if lr := replicas(); len(lr) != 3 || slices.Contains(lr, "e") {
		t.Fatalf("log replicas %v after another node joined", lr)
	}

	for _, id := range []string{"b", "e", "s0", "nobody"} {
		if _, err := cl.Claim(ctx, id); err == nil || kv.CodeOf(err) != kv.CodeInvalidMutation {
			t.Fatalf("claim by %s: %v, want invalid_mutation", id, err)
		}
	}
	g1, err := cl.Claim(ctx, "c")
	if err != nil || g1 != gen+2 {
		t.Fatalf("claim by c: generation %d (want %d), %v", g1, gen+2, err)
	}
	g2, err := cl.Claim(ctx, "d")
	if err != nil || g2 != g1+1 {
		t.Fatalf("claim by d: generation %d (want %d), %v", g2, g1+1, err)
	}
	// c's late report is ignored; d's is recorded.
	cl.RecoveryDone(ctx, "c", g1, 5)
	cl.RecoveryDone(ctx, "d", g2, 7)
	v, err := cl.View(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v.Sequencer != "d" || v.StatelessAddress != "127.0.0.1:1" || v.Generation != g2 || v.LastRecoveryMicros != 7 {
		t.Fatalf("view after the claims: sequencer %q at %q, generation %d, recovery %dµs", v.Sequencer, v.StatelessAddress, v.Generation, v.LastRecoveryMicros)
	}
}

// TestHopLimit: a call already forwarded MaxHops times is answered with
// the leader's address, not forwarded again.
func TestHopLimit(t *testing.T) {
	c := newCluster(t, nil)
	li := c.controller()
	fi := (li + 1) % 3
	cc, err := dial(c.grpc[fi], nil, nil, protover.This)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	api := wire.NewCoordinatorClient(cc)
	ctx := ctxT(t)
	// The follower may not know the new leader yet: wait until it does.
	wait.Within(t, 20*time.Second, "the follower knows a leader", func() bool { return c.nodes[fi].Leader() != "" })
	resp, err := api.View(ctx, &wire.ViewRequest{Hops: MaxHops})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Error == nil || kv.Code(resp.Error.Code) != kv.CodeConnectionFailed || resp.Leader != c.grpc[li] {
		t.Fatalf("view at the hop limit: error %v, leader %q (want %q)", resp.Error, resp.Leader, c.grpc[li])
	}
	resp, err = api.View(ctx, &wire.ViewRequest{Hops: MaxHops - 1})
	if err != nil || resp.Error != nil || resp.Controller != c.grpc[li] {
		t.Fatalf("view one hop below the limit: %v %v", resp, err)
	}
}

// TestMutualTLS: registration forwarded between coordinators over mutual
// TLS; a client whose certificate another CA signed is refused.
func TestMutualTLS(t *testing.T) {
	pki := tlstest.New(t)
	c := newCluster(t, pki)
	li := c.controller()
	ctx := ctxT(t)
	viaFollower := c.client(c.grpc[(li+1)%3])
	if slot, _, _, err := viaFollower.Register(ctx, NodeRegistration{ID: "s0", Addr: "127.0.0.1:7000", Class: coord.ClassStash, Pool: "data", Config: testConfig(t, nil)}); err != nil || slot != 0 {
		t.Fatalf("register over TLS: slot %d, %v", slot, err)
	}

	rogueTLS, err := tlsconf.Client(tlsconf.Files{Cert: pki.OtherClientCert, Key: pki.OtherClientKey, CA: pki.CA})
	if err != nil {
		t.Fatal(err)
	}
	rogue, err := NewClient(strings.Join(c.grpc, ","), ClientOptions{TLS: rogueTLS, AttemptTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer rogue.Close()
	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	if _, err := rogue.View(short); err == nil {
		t.Fatal("a client of another CA got a view")
	}
	plain := c.client(c.grpc...)
	plain.opts.TLS = nil
	short2, cancel2 := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel2()
	if _, err := plain.View(short2); err == nil {
		t.Fatal("a plaintext client got a view")
	}
}

// TestRequestsCheckedAtTheBoundary: malformed requests are refused before
// reaching the controller (the service below has no node at all).
func TestRequestsCheckedAtTheBoundary(t *testing.T) {
	s := &Server{}
	good := func() *wire.RegisterRequest {
		return &wire.RegisterRequest{Id: "s0", Address: "127.0.0.1:1", Class: coord.ClassStash, Pool: "data", Config: testConfig(t, nil)}
	}
	long := strings.Repeat("x", MaxNameBytes+1)
	for _, tc := range []struct {
		name string
		edit func(*wire.RegisterRequest)
		want string
	}{
		{"no id", func(r *wire.RegisterRequest) { r.Id = "" }, "node id missing"},
		{"long id", func(r *wire.RegisterRequest) { r.Id = long }, "node id of 257 bytes"},
		{"no address", func(r *wire.RegisterRequest) { r.Address = "" }, "address missing"},
		{"bad address", func(r *wire.RegisterRequest) { r.Address = "nowhere" }, "not host:port"},
		{"no class", func(r *wire.RegisterRequest) { r.Class = "" }, "class missing"},
		{"unknown class", func(r *wire.RegisterRequest) { r.Class = "storage" }, `class "storage"`},
		{"stash without pool", func(r *wire.RegisterRequest) { r.Pool = "" }, "pool missing"},
		{"transaction with pool", func(r *wire.RegisterRequest) { r.Class = coord.ClassTransaction }, "has no pool"},
		{"long zone", func(r *wire.RegisterRequest) { r.Zone = long }, "zone of"},
		{"no config", func(r *wire.RegisterRequest) { r.Config = "" }, "configuration missing"},
		{"huge config", func(r *wire.RegisterRequest) { r.Config = strings.Repeat("#", MaxConfigBytes+1) }, "configuration of"},
		{"bad config", func(r *wire.RegisterRequest) { r.Config = "[log]\nreplicas = 0\n" }, "log.replicas"},
	} {
		req := good()
		tc.edit(req)
		resp, err := s.Register(context.Background(), req)
		if err != nil || resp.Error == nil || kv.Code(resp.Error.Code) != kv.CodeInvalidMutation || !strings.Contains(resp.Error.Detail, tc.want) {
			t.Errorf("%s: %v %v, want invalid_mutation with %q", tc.name, resp.GetError(), err, tc.want)
		}
	}
	if resp, _ := s.Register(context.Background(), nil); resp.Error == nil {
		t.Error("nil register request accepted")
	}
	if resp, _ := s.Heartbeat(context.Background(), &wire.HeartbeatRequest{}); resp.Error == nil || !strings.Contains(resp.Error.Detail, "node id missing") {
		t.Errorf("heartbeat without an id: %v", resp.Error)
	}
	if resp, _ := s.View(context.Background(), nil); resp.Error == nil {
		t.Error("nil view request accepted")
	}
	if resp, _ := s.Claim(context.Background(), &wire.ClaimRequest{Id: long}); resp.Error == nil || !strings.Contains(resp.Error.Detail, "node id of") {
		t.Errorf("claim with a long id: %v", resp.Error)
	}
	if resp, _ := s.Claim(context.Background(), nil); resp.Error == nil {
		t.Error("nil claim request accepted")
	}
	for _, r := range []*wire.RecoveryDoneRequest{nil, {Generation: 1}, {Id: "t0"}, {Id: "t0", Generation: 1, Micros: -1}} {
		if resp, _ := s.RecoveryDone(context.Background(), r); resp.Error == nil || kv.Code(resp.Error.Code) != kv.CodeInvalidMutation {
			t.Errorf("recovery_done %v accepted: %v", r, resp.Error)
		}
	}
	if _, err := NewClient(" , ", ClientOptions{}); err == nil {
		t.Error("a client of no coordinator")
	}
}

// TestViewHedgesPastASilentCoordinator: a coordinator that accepts
// connections and answers nothing (a paused process) listed first costs
// a View the hedge delay, not the attempt timeout, and the next View asks
// the coordinator that answered first.
func TestViewHedgesPastASilentCoordinator(t *testing.T) {
	c := newCluster(t, nil)
	c.controller()
	silentAddr, _ := silent.Listen(t)
	cl := c.client(append([]string{silentAddr}, c.grpc...)...)
	for i := range 2 {
		began := time.Now()
		if _, err := cl.View(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		took := time.Since(began)
		t.Logf("view %d took %v", i, took.Round(time.Millisecond))
		if bound := []time.Duration{600 * time.Millisecond, 200 * time.Millisecond}[i]; took > bound {
			t.Errorf("view %d took %v with a silent coordinator listed first: want < %v", i, took.Round(time.Millisecond), bound)
		}
	}
}
