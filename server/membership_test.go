package server_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/distash/distash"
	"github.com/distash/distash/internal/clustertest"
	"github.com/distash/distash/internal/coordrpc"
	"github.com/distash/distash/server"
)

// TestWipedTransactionNodeRejoinsAsNewMember: a transaction node (a
// coordinator and a log replica) loses its whole directory and starts
// again. Its coordinator rejoins the coordinators' raft group under a new
// raft id, the old id gone from the configuration; its log replica's old
// member leaves the log's configuration and the node's new replica takes
// its place; the cluster commits throughout, no acknowledged write is
// lost, and status does not call the old replica unreachable forever.
func TestWipedTransactionNodeRejoinsAsNewMember(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an in-process cluster")
	}
	t.Parallel() // waits on the cluster's timers most of the time: overlaps another such test
	c := newSimCluster(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c.StartAll(ctx)
	db := c.Open(ctx)
	var acked []string
	write := func(k string) error {
		wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
		defer wcancel()
		err := db.Transact(wctx, func(tr *distash.Tx) error { tr.Set([]byte("d/"+k), []byte(k)); return nil })
		if err == nil {
			acked = append(acked, k)
		}
		return err
	}
	for i := 0; i < 20; i++ {
		if err := write(fmt.Sprint("before-", i)); err != nil {
			t.Fatal(err)
		}
	}
	v := c.View(ctx)
	// The victim: a log replica not holding the roles (so commits go on).
	_, followers := c.RolesNode(v)
	victim := followers[0]
	oldNode := victim.Server().NodeID()
	var oldCoord, oldLog string
	for _, m := range v.Coordinators {
		if m.Address == victim.Addr {
			oldCoord = m.RaftId
		}
	}
	if i := slices.Index(v.LogReplicas, oldNode); i >= 0 {
		oldLog = v.LogIds[i]
	}
	if oldCoord == "" || oldLog == "" {
		t.Fatalf("%s: coordinator raft id %q, log raft id %q in the view %v", victim.Name, oldCoord, oldLog, v)
	}
	t.Logf("wiping %s: node %s, coordinator %s, log replica %s", victim.Name, oldNode, oldCoord, oldLog)
	c.Crash(victim)
	if err := os.RemoveAll(victim.Dir); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		if err := write(fmt.Sprint("down-", i)); err != nil {
			t.Fatalf("with %s down: %v", victim.Name, err)
		}
	}
	if err := c.Start(ctx, victim); err != nil {
		t.Fatal(err)
	}
	newNode := victim.Server().NodeID()
	if newNode == oldNode {
		t.Fatalf("the wiped node came back as %s, its old id", newNode)
	}
	clustertest.WaitUntil(t, 60*time.Second, "a new coordinator and log replica in place of the old", func() (bool, string) {
		vctx, vcancel := context.WithTimeout(ctx, 5*time.Second)
		defer vcancel()
		cc, _ := coordrpc.NewClient(c.ClusterString(), coordrpc.ClientOptions{Dialer: c.Net.Dialer("probe")})
		defer cc.Close()
		v, err := cc.View(vctx)
		if err != nil {
			return false, err.Error()
		}
		var coordIDs []string
		newCoord := false
		for _, m := range v.Coordinators {
			if m.RaftId != "" {
				coordIDs = append(coordIDs, m.RaftId)
			}
			newCoord = newCoord || m.Address == victim.Addr && m.RaftId != "" && m.RaftId != oldCoord && m.Voter
		}
		state := fmt.Sprintf("coordinators %v, log replicas %v ids %v", coordIDs, v.LogReplicas, v.LogIds)
		return newCoord && len(coordIDs) == 3 && !slices.Contains(coordIDs, oldCoord) &&
			slices.Contains(v.LogReplicas, newNode) && !slices.Contains(v.LogReplicas, oldNode) &&
			!slices.Contains(v.LogIds, oldLog) && len(v.LogReplicas) == 3, state
	})
	// The new replica runs, the old node is gone from status, and nothing
	// is short.
	clustertest.WaitUntil(t, 30*time.Second, "a status with every member alive and no warning", func() (bool, string) {
		st, err := c.Status(ctx)
		if err != nil {
			return false, err.Error()
		}
		var bad []string
		for _, n := range st.Nodes {
			if n.Id == oldNode {
				bad = append(bad, "old node listed as "+n.Health)
			}
			if n.Id == newNode && !slices.Contains(n.Roles, "log") {
				bad = append(bad, fmt.Sprintf("new node roles %v", n.Roles))
			}
		}
		lm, cm := st.LogMembership, st.CoordinatorMembership
		if lm == nil || lm.Alive != 3 || cm == nil || cm.Alive != 3 || cm.Members != 3 {
			bad = append(bad, fmt.Sprintf("log %v coordinators %v", lm, cm))
		}
		bad = append(bad, st.Warnings...)
		return len(bad) == 0, strings.Join(bad, "; ")
	})
	for i := 0; i < 10; i++ {
		if err := write(fmt.Sprint("after-", i)); err != nil {
			t.Fatalf("after the rejoin: %v", err)
		}
	}
	// The new replica holds the log: with the roles' node gone, the other
	// two replicas (the new one among them) still commit.
	// The view is taken once: asked again after the crash, while a new
	// controller may still be in election, it could fail the test.
	roles := c.View(ctx).StatelessAddress
	for _, n := range c.Nodes {
		if n.Addr == roles {
			c.Crash(n)
			defer func() {
				if err := c.Start(ctx, n); err != nil {
					t.Error(err)
				}
			}()
		}
	}
	if err := write("after-leader-crash"); err != nil {
		t.Fatalf("with the roles' node down, on the new replica and one other: %v", err)
	}
	// No acknowledged write is lost.
	err := db.ReadTransact(ctx, func(tr *distash.Tx) error {
		for _, k := range acked {
			got, err := tr.Get([]byte("d/" + k))
			if err != nil {
				return err
			}
			if string(got) != k {
				return fmt.Errorf("acknowledged d/%s reads %q", k, got)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestStatusSaysWhenQuorumIsLost: status warns while a coordinator and a
// log replica are down, and with 2 of 3 down says plainly that the
// coordinators and the log have no quorum, naming who answers, and marks
// the view stale instead of showing it as live.
func TestStatusSaysWhenQuorumIsLost(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an in-process cluster")
	}
	t.Parallel() // waits on the cluster's timers most of the time: overlaps another such test
	c := newSimCluster(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c.StartAll(ctx)
	db := c.Open(ctx)
	if err := db.Transact(ctx, func(tr *distash.Tx) error { tr.Set([]byte("d/x"), []byte("1")); return nil }); err != nil {
		t.Fatal(err)
	}
	var tx []*clustertest.SimNode
	for _, n := range c.Nodes {
		if n.Class == server.ClassTransaction {
			tx = append(tx, n)
		}
	}
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Warnings) > 0 || st.ViewStale || !st.CoordinatorMembership.GetQuorum() || !st.LogMembership.GetQuorum() {
		t.Fatalf("a whole cluster: warnings %q, stale %v, coordinators %v, log %v", st.Warnings, st.ViewStale, st.CoordinatorMembership, st.LogMembership)
	}

	// One transaction node down: a coordinator and a log replica short.
	c.Crash(tx[2])
	clustertest.WaitUntil(t, 20*time.Second, "warnings for the coordinator and the log replica down", func() (bool, string) {
		st, err := c.Status(ctx)
		if err != nil {
			return false, err.Error()
		}
		w := strings.Join(st.Warnings, "\n")
		return strings.Contains(w, "the coordinators run on 2 of 3") && strings.Contains(w, "the log runs on 2 of 3 replicas") &&
			strings.Contains(w, tx[2].Addr) && !st.ViewStale && st.CoordinatorMembership.GetQuorum() && st.LogMembership.GetQuorum(), w
	})

	// Two down: no quorum anywhere.
	c.Crash(tx[1])
	clustertest.WaitUntil(t, 30*time.Second, "a status saying quorum is lost", func() (bool, string) {
		st, err := c.Status(ctx)
		if err != nil {
			return false, err.Error()
		}
		w := strings.Join(st.Warnings, "\n")
		return st.ViewStale && st.ViewFrom == tx[0].Addr && st.ViewAgeMs != 0 &&
			strings.Contains(w, "no controller answers: 1 of 3 coordinators answer ("+tx[0].Addr+")") &&
			strings.Contains(w, "the coordinators have no quorum") &&
			strings.Contains(w, "the log has no quorum") && strings.Contains(w, "commits cannot be made") &&
			!st.CoordinatorMembership.GetQuorum() && !st.LogMembership.GetQuorum(), fmt.Sprintf("stale %v from %q age %d: %s", st.ViewStale, st.ViewFrom, st.ViewAgeMs, w)
	})
}

// TestLostLogDirectoryRejoinsAsNewReplica: a transaction node keeps its
// node id but loses its log directory. Its replica must not answer under
// its old raft id: it comes back under a new one, the log's leader
// replaces the old member by it, and the log has its three replicas
// again.
func TestLostLogDirectoryRejoinsAsNewReplica(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an in-process cluster")
	}
	t.Parallel() // waits on the cluster's timers most of the time: overlaps another such test
	c := newSimCluster(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c.StartAll(ctx)
	db := c.Open(ctx)
	set := func(k string) error {
		wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
		defer wcancel()
		return db.Transact(wctx, func(tr *distash.Tx) error { tr.Set([]byte("d/"+k), []byte(k)); return nil })
	}
	if err := set("a"); err != nil {
		t.Fatal(err)
	}
	v := c.View(ctx)
	_, followers := c.RolesNode(v)
	victim := followers[0]
	id := victim.Server().NodeID()
	old := v.LogIds[slices.Index(v.LogReplicas, id)]
	c.Crash(victim)
	if err := os.RemoveAll(filepath.Join(victim.Dir, "log")); err != nil {
		t.Fatal(err)
	}
	if err := set("b"); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx, victim); err != nil {
		t.Fatal(err)
	}
	if got := victim.Server().NodeID(); got != id {
		t.Fatalf("node id %s, want %s (only its log directory was lost)", got, id)
	}
	clustertest.WaitUntil(t, 60*time.Second, "the node's new log replica in place of its old one", func() (bool, string) {
		st, err := c.Status(ctx)
		if err != nil {
			return false, err.Error()
		}
		lm := st.LogMembership
		var ids []string
		running := false
		for _, m := range lm.GetMember() {
			ids = append(ids, m.Id)
		}
		for _, n := range st.Nodes {
			running = running || n.Id == id && slices.Contains(n.Roles, "log")
		}
		return lm.GetAlive() == 3 && len(ids) == 3 && !slices.Contains(ids, old) && slices.Contains(st.LogReplicas, id) && running && len(st.Warnings) == 0,
			fmt.Sprintf("log members %v, warnings %q", ids, st.Warnings)
	})
	if err := set("c"); err != nil {
		t.Fatal(err)
	}
}
