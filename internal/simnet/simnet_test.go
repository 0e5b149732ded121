package simnet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/distash/distash/internal/testutil/wait"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func serveHealth(t *testing.T, n *Network, node string) *grpc.Server {
	t.Helper()
	lis, err := n.Listen(node)
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	healthpb.RegisterHealthServer(s, health.NewServer())
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return s
}

// TestGRPCAcrossFaults: a gRPC call works, fails across a partition and
// after a kill, and works again after Heal and a restart.
func TestGRPCAcrossFaults(t *testing.T) {
	n := New()
	serveHealth(t, n, "server")
	conn, err := grpc.NewClient("passthrough:///server", grpc.WithContextDialer(n.Dialer("client")),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	api := healthpb.NewHealthClient(conn)
	check := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		_, err := api.Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	}
	// waitOK retries: gRPC reconnects with backoff after a broken link.
	waitOK := func(what string) {
		t.Helper()
		if !wait.Until(wait.Timeout, func() bool { return check() == nil }) {
			t.Fatalf("%s: %v", what, check())
		}
	}
	waitOK("healthy network")
	n.Partition([]string{"client"}, []string{"server"})
	if err := check(); err == nil {
		t.Fatal("a call crossed a partition")
	}
	n.Heal()
	waitOK("after Heal")
	n.SetDelay("client", "server", 50*time.Millisecond)
	start := time.Now()
	waitOK("with a delay")
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Fatalf("a call over a 50 ms link (both ways) took %v", d)
	}
	n.SetDelay("client", "server", 0)
	n.Kill("server")
	if err := check(); err == nil {
		t.Fatal("a call reached a killed node")
	}
	serveHealth(t, n, "server") // restart
	waitOK("after a restart")
}

// TestRaftElectsAcrossAPartition: three raft nodes over the network elect
// a leader; cut off from the others, the leader is replaced by one of them;
// healed, the group has one leader again.
func TestRaftElectsAcrossAPartition(t *testing.T) {
	n := New()
	names := []string{"r1", "r2", "r3"}
	var servers []raft.Server
	for _, name := range names {
		servers = append(servers, raft.Server{ID: raft.ServerID(name), Address: raft.ServerAddress(name)})
	}
	nodes := map[string]*raft.Raft{}
	for _, name := range names {
		sl, err := n.StreamLayer(name)
		if err != nil {
			t.Fatal(err)
		}
		trans := raft.NewNetworkTransport(sl, 3, time.Second, io.Discard)
		conf := raft.DefaultConfig()
		conf.LocalID = raft.ServerID(name)
		conf.HeartbeatTimeout, conf.ElectionTimeout, conf.LeaderLeaseTimeout = 150*time.Millisecond, 150*time.Millisecond, 100*time.Millisecond
		conf.Logger = nil
		conf.LogOutput = io.Discard
		store := raft.NewInmemStore()
		snaps := raft.NewInmemSnapshotStore()
		if err := raft.BootstrapCluster(conf, store, store, snaps, trans, raft.Configuration{Servers: servers}); err != nil {
			t.Fatal(err)
		}
		r, err := raft.NewRaft(conf, &nopFSM{}, store, store, snaps, trans)
		if err != nil {
			t.Fatal(err)
		}
		nodes[name] = r
		t.Cleanup(func() { r.Shutdown().Error() })
	}
	leader := func(among []string) string {
		var found string
		wait.For(t, fmt.Sprintf("a leader among %v", among), func() bool {
			for _, name := range among {
				if nodes[name].State() == raft.Leader {
					found = name
					return true
				}
			}
			return false
		})
		return found
	}
	first := leader(names)
	var others []string
	for _, name := range names {
		if name != first {
			others = append(others, name)
		}
	}
	n.Partition([]string{first}, others)
	second := leader(others)
	if err := nodes[second].Apply([]byte("x"), time.Second).Error(); err != nil {
		t.Fatalf("the majority's leader %s cannot commit: %v", second, err)
	}
	if err := nodes[first].Apply([]byte("y"), 500*time.Millisecond).Error(); err == nil {
		t.Fatalf("the isolated old leader %s committed", first)
	}
	n.Heal()
	wait.For(t, "one leader after Heal, the old one a follower", func() bool {
		leaders := 0
		for _, r := range nodes {
			if r.State() == raft.Leader {
				leaders++
			}
		}
		return leaders == 1 && nodes[first].State() == raft.Follower
	})
	t.Logf("leader %s, then %s across the partition", first, second)
}

type nopFSM struct{}

func (*nopFSM) Apply(*raft.Log) any                 { return nil }
func (*nopFSM) Snapshot() (raft.FSMSnapshot, error) { return nil, fmt.Errorf("no snapshots") }
func (*nopFSM) Restore(io.ReadCloser) error         { return nil }

// TestDrop: a dropped link loses writes silently (the reader sees
// nothing, the writer no error) and hangs dials; Heal breaks the
// connection that lost bytes and lets dials through again.
func TestDrop(t *testing.T) {
	n := New()
	lis, err := n.Listen("b")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	accepted := make(chan net.Conn, 2)
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	a, err := n.Dial(context.Background(), "a", "b")
	if err != nil {
		t.Fatal(err)
	}
	b := <-accepted
	n.Drop([]string{"a"}, []string{"b"})
	if k, err := a.Write([]byte("lost")); k != 4 || err != nil {
		t.Fatalf("a write on a dropped link: %d, %v", k, err)
	}
	b.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if k, err := b.Read(make([]byte, 4)); err == nil {
		t.Fatalf("read %d bytes across a dropped link", k)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	start := time.Now()
	_, err = n.Dial(ctx, "a", "b")
	cancel()
	if err == nil || time.Since(start) < 40*time.Millisecond {
		t.Fatalf("a dial across a dropped link: %v after %v", err, time.Since(start))
	}
	n.Heal()
	if _, err := a.Write([]byte("x")); err == nil {
		t.Fatal("the connection that lost bytes survived Heal")
	}
	a2, err := n.Dial(context.Background(), "a", "b")
	if err != nil {
		t.Fatal(err)
	}
	defer a2.Close()
	b2 := <-accepted
	go a2.Write([]byte("ok"))
	buf := make([]byte, 2)
	if _, err := io.ReadFull(b2, buf); err != nil || string(buf) != "ok" {
		t.Fatalf("after Heal: %q, %v", buf, err)
	}
}

// TestPause: a paused node's connections stay open but carry nothing
// either way, writes honour their deadline, dials wait, and everything
// flows again, in order and complete, after Resume.
func TestPause(t *testing.T) {
	n := New()
	lis, err := n.Listen("b")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	accepted := make(chan net.Conn, 2)
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	a, err := n.Dial(context.Background(), "a", "b")
	if err != nil {
		t.Fatal(err)
	}
	b := <-accepted
	n.Pause("b")
	a.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := a.Write([]byte("x")); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a write to a paused node past its deadline: %v", err)
	}
	a.SetWriteDeadline(time.Time{})
	wrote := make(chan error, 1)
	go func() { _, err := a.Write([]byte("held")); wrote <- err }()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	_, err = n.Dial(ctx, "c", "b")
	cancel()
	if err == nil {
		t.Fatal("dialled a paused node")
	}
	select {
	case err := <-wrote:
		t.Fatalf("a write to a paused node returned: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	n.Resume("b")
	buf := make([]byte, 4)
	if _, err := io.ReadFull(b, buf); err != nil || string(buf) != "held" {
		t.Fatalf("after Resume: %q, %v", buf, err)
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
}
