package coord

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestRecruitLogClaimAndFailover: the log forms once enough transaction
// nodes live, a log replica claims the stateless roles, reports its
// recovery, and a controller failover keeps it all.
func TestRecruitLogClaimAndFailover(t *testing.T) {
	c := newCluster(t, 3, nil)
	li := c.controller(5 * time.Second)
	leader := c.nodes[li]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	apply(t, leader, SetConfig(testConfig(t, nil))) // 3 log replicas
	for _, n := range []NodeInfo{
		{ID: "a", Class: ClassTransaction, DC: "dc1", Zone: "z1", Machine: "m1"},
		{ID: "b", Class: ClassTransaction, DC: "dc1", Zone: "z1", Machine: "m2"},
		{ID: "c", Class: ClassTransaction, DC: "dc1", Zone: "z2", Machine: "m3"},
		{ID: "d", Class: ClassTransaction, DC: "dc1", Zone: "z3", Machine: "m4"},
		{ID: "s", Class: ClassStash, Pool: "data"},
	} {
		n.Addr = n.ID + ":1"
		apply(t, leader, RegisterNode(n))
	}
	gen := leader.State().Generation
	recruit := func(want bool) {
		t.Helper()
		if ok, err := leader.RecruitLog(ctx); ok != want || err != nil {
			t.Fatalf("RecruitLog: %v %v, want %v", ok, err, want)
		}
	}
	recruit(false) // nobody alive
	leader.Heartbeat("a")
	leader.Heartbeat("b")
	leader.Heartbeat("s")
	recruit(false) // two transaction nodes for three replicas
	leader.Heartbeat("c")
	leader.Heartbeat("d")
	recruit(true)
	st := leader.State()
	lr := st.Roles.LogReplicas
	if st.Generation != gen+1 || len(lr) != 3 || len(zonesOf(st, lr)) != 3 {
		t.Fatalf("generation %d (want %d), log replicas %v not in 3 zones", st.Generation, gen+1, lr)
	}
	if st.Roles.Sequencer != "" || st.Roles.Controller != c.addrs[li] {
		t.Fatalf("roles %+v: stateless roles before a claim", st.Roles)
	}
	recruit(false) // formed already
	follower := follower2(c, li)
	var nle *NotLeaderError
	if _, err := follower.RecruitLog(ctx); !errors.As(err, &nle) {
		t.Fatalf("RecruitLog on a follower: %v", err)
	}
	if _, err := follower.Claim(ctx, lr[0]); !errors.As(err, &nle) || nle.Leader != c.addrs[li] {
		t.Fatalf("Claim on a follower: %v", err)
	}

	// Only a log replica may claim.
	var outsider string
	for _, id := range []string{"a", "b", "c", "d"} {
		if !slices.Contains(lr, id) {
			outsider = id
		}
	}
	if _, err := leader.Claim(ctx, outsider); !errors.Is(err, ErrNotLogReplica) {
		t.Fatalf("claim by %s, no log replica: %v", outsider, err)
	}
	if _, err := leader.Claim(ctx, "nobody"); err == nil || !strings.Contains(err.Error(), "not registered") {
		t.Fatalf("claim by an unregistered node: %v", err)
	}
	before := time.Now().UnixMilli()
	g, err := leader.Claim(ctx, lr[1])
	if err != nil || g != gen+2 {
		t.Fatalf("claim: generation %d (want %d), %v", g, gen+2, err)
	}
	st = leader.State()
	if st.Roles.Sequencer != lr[1] || st.Roles.Resolver != lr[1] || !slices.Equal(st.Roles.CommitProxies, []string{lr[1]}) ||
		!slices.Equal(st.Roles.GRVProxies, []string{lr[1]}) || !slices.Equal(st.Roles.LogReplicas, lr) {
		t.Fatalf("roles after the claim %+v", st.Roles)
	}
	if r := st.Recovery; r == nil || r.Node != lr[1] || r.Generation != g || r.ClaimedUnixMs < before || r.ClaimedUnixMs > time.Now().UnixMilli() {
		t.Fatalf("recovery %+v", r)
	}
	if leader.Controller() != g {
		t.Fatalf("the controller's generation %d, want %d", leader.Controller(), g)
	}
	// Reports: another node's and an old generation's are ignored.
	for _, r := range []struct {
		id  string
		gen uint64
	}{{lr[0], g}, {lr[1], g - 1}, {lr[1], g}} {
		if err := leader.RecoveryDone(ctx, r.id, r.gen, 4242); err != nil {
			t.Fatal(err)
		}
		if got := leader.State().Recovery.Micros; (got == 4242) != (r.id == lr[1] && r.gen == g) {
			t.Fatalf("after RecoveryDone(%s, %d): micros %d", r.id, r.gen, got)
		}
	}
	if err := follower.RecoveryDone(ctx, lr[1], g, 1); !errors.As(err, &nle) {
		t.Fatalf("RecoveryDone on a follower: %v", err)
	}
	c.converged(li)

	// Failover: a new generation with the same roles and recovery.
	want := leader.State()
	c.stop(li)
	ni := c.controller(5 * time.Second)
	got := c.nodes[ni].State()
	want.Roles.Controller = c.addrs[ni]
	if got.Generation != want.Generation+1 || !reflect.DeepEqual(got.Roles, want.Roles) || !reflect.DeepEqual(got.Recovery, want.Recovery) {
		t.Fatalf("after failover: generation %d (want %d), roles %+v, recovery %+v", got.Generation, want.Generation+1, got.Roles, got.Recovery)
	}
	// Another log replica takes the roles over: the new claim replaces
	// the old one.
	g2, err := c.nodes[ni].Claim(ctx, lr[2])
	if err != nil || g2 != got.Generation+1 {
		t.Fatalf("second claim: generation %d, %v", g2, err)
	}
	if r := c.nodes[ni].State().Recovery; r.Node != lr[2] || r.Generation != g2 || r.Micros != 0 {
		t.Fatalf("recovery after the second claim %+v", r)
	}
	c.start(li)
	c.converged(ni)
}
