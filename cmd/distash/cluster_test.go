package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/distash/distash"
	"github.com/distash/distash/internal/clustertest"
	"github.com/distash/distash/internal/frames"
	"github.com/distash/distash/internal/protover"
	"github.com/distash/distash/internal/raftnet"
	"github.com/distash/distash/internal/testutil/bank"
	"github.com/distash/distash/internal/testutil/wait"
	"github.com/distash/distash/internal/tlsconf"
	"github.com/distash/distash/internal/tlsconf/tlstest"
	"github.com/distash/distash/internal/wire"
)

// freePorts returns n loopback addresses that were free a moment ago.
func freePorts(t *testing.T, n int) []string {
	t.Helper()
	addrs, err := clustertest.FreeAddrs(n)
	if err != nil {
		t.Fatal(err)
	}
	return addrs
}

// nodeOutput is where the test clusters' nodes write their lines: the
// test's standard error with -v, else nowhere (a failure shows a node's
// last lines).
func nodeOutput() io.Writer {
	if testing.Verbose() {
		return os.Stderr
	}
	return nil
}

// procCluster is a cluster of `distash server` processes bound to a test:
// its errors fail the test, and its nodes stop when the test ends.
type procCluster struct {
	*clustertest.Procs
	t *testing.T
}

// newProcs lays out o.Nodes running o.TOML as real processes of the built
// binary (o.Binary, o.Dir and o.Output are filled in).
func newProcs(t *testing.T, o clustertest.ProcsOptions) *procCluster {
	t.Helper()
	o.Binary, o.Dir, o.Output = buildBinary(t), t.TempDir(), nodeOutput()
	// Without -v the nodes log into files, whose last lines a failed test
	// prints (after the nodes stopped): what the cluster said is then in
	// CI's output too.
	o.Logs = o.Logs || o.Output == nil
	procs, err := clustertest.NewProcs(o)
	if err != nil {
		t.Fatal(err)
	}
	c := &procCluster{Procs: procs, t: t}
	t.Cleanup(c.printLogsIfFailed) // runs after stopAll
	t.Cleanup(c.stopAll)
	return c
}

// printLogsIfFailed prints, if the test failed, the last 60 lines of each
// node's log file (audit lines aside).
func (c *procCluster) printLogsIfFailed() {
	if !c.t.Failed() {
		return
	}
	for _, n := range c.Nodes {
		if n.LogPath == "" {
			continue
		}
		b, err := os.ReadFile(n.LogPath)
		if err != nil {
			continue
		}
		var keep []string
		for _, l := range strings.Split(string(b), "\n") {
			if l != "" && !strings.Contains(l, "audit=true") {
				keep = append(keep, l)
			}
		}
		if len(keep) > 60 {
			keep = keep[len(keep)-60:]
		}
		c.t.Logf("%s: last %d lines of %s:\n%s", n.Name, len(keep), n.LogPath, strings.Join(keep, "\n"))
	}
}

// newProcCluster lays out 3 transaction nodes (the coordinators, in two
// DCs), 3 stash nodes of pool data and 2 of pool cache.
func newProcCluster(t *testing.T) *procCluster { return newProcClusterOf(t, bank.ClusterTOML) }

// newProcClusterOf is newProcCluster running configuration toml.
func newProcClusterOf(t *testing.T, toml string) *procCluster {
	nodes := clustertest.BankLayout()
	for i, loc := range [][2]string{{"dc1", "z1"}, {"dc1", "z2"}, {"dc2", "z3"}, {"dc1", "za"}, {"dc1", "zb"}, {"dc2", "zc"}, {"dc1", "za"}, {"dc2", "zc"}} {
		nodes[i].DC, nodes[i].Zone = loc[0], loc[1]
	}
	return newProcs(t, clustertest.ProcsOptions{TOML: toml, Nodes: nodes, Verbose: true})
}

func (c *procCluster) node(name string) *clustertest.Proc {
	if n := c.Node(name); n != nil {
		return n
	}
	c.t.Fatalf("no node %s", name)
	return nil
}

// byAddr is the node listening on addr.
func (c *procCluster) byAddr(addr string) *clustertest.Proc {
	if n := c.ByAddr(addr); n != nil {
		return n
	}
	c.t.Fatalf("no node at %s", addr)
	return nil
}

// start starts nodes (all of them if none is named) and waits until each
// serves. They start together: the first ones wait for a coordinator
// quorum.
func (c *procCluster) start(names ...string) {
	c.t.Helper()
	var ns []*clustertest.Proc
	for _, name := range names {
		ns = append(ns, c.node(name))
	}
	if err := c.Start(context.Background(), ns...); err != nil {
		c.t.Fatal(err)
	}
}

// openBank opens a client, waiting up to a minute for the cluster, and the
// bank's 20 accounts in it (bank.ClusterTOML's pools).
func (c *procCluster) openBank(ctx context.Context) (*distash.DB, *bank.Bank) {
	c.t.Helper()
	octx, ocancel := context.WithTimeout(ctx, time.Minute)
	db, err := distash.Open(octx, c.Coordinators)
	ocancel()
	if err != nil {
		c.t.Fatal(err)
	}
	b := &bank.Bank{DB: db, Data: "d/", Cache: "c/", Accounts: 20, Initial: 1000}
	if err := b.Open(ctx); err != nil {
		db.Close()
		c.t.Fatal(err)
	}
	return db, b
}

// kill kills node name with SIGKILL.
func (c *procCluster) kill(name string) { c.node(name).Kill() }

// stopAll stops every node; a node that cannot stop exits after its
// stopTimeout with its goroutines' stacks: its last lines are logged.
func (c *procCluster) stopAll() {
	if err := c.StopAll(); err != nil {
		c.t.Logf("nodes did not stop cleanly: %v", err)
	}
}

// TestProcessClusterSurvivesKill9OfEveryNode runs a multi-process cluster
// of real `distash server` processes on loopback (3 transaction nodes that
// are the coordinators and hold 3 log replicas in two DCs, 3 stash nodes of
// a durable Pebble pool with replication 2, 2 stash nodes of a DRAM pool
// with replication 2) under a bank workload across both pools and a
// writer recording acknowledged keys. It kills -9 and restarts each stash
// node in turn, then each transaction node in turn, auditing the bank
// after each; then it kills every node at once and restarts them all.
func TestProcessClusterSurvivesKill9OfEveryNode(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 8 real server processes")
	}
	c := newProcCluster(t)
	defer c.stopAll()
	c.start()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	db, b := c.openBank(ctx)
	defer db.Close()
	w := &bank.Writer{DB: db, Prefix: "d/"}
	wctx, wcancel := context.WithCancel(ctx)
	failures, waitBank := b.Run(wctx, 4, 1)
	waitWriter := w.Run(wctx, 2)

	// audit reads every account and cached copy (GetMulti) and scans the
	// accounts (GetRange): with a node down, each read kind must go to
	// the live replicas (the transfers' Gets do too).
	audit := func(when string) {
		t.Helper()
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := b.Audit(actx); err != nil {
			t.Fatalf("audit %s: %v", when, err)
		}
		if err := b.AuditRange(actx); err != nil {
			t.Fatalf("range audit %s: %v", when, err)
		}
	}
	// waitCommits waits until the workload commits again after a kill and
	// returns how long that took.
	waitCommits := func(since time.Time, what string) time.Duration {
		t.Helper()
		for time.Since(since) < 60*time.Second {
			if last := b.LastCommit.Load(); last > since.UnixNano() {
				return time.Unix(0, last).Sub(since)
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("no commit within 60 s after %s", what)
		return 0
	}
	// Windows of the scenario are counts of transfers, not fixed times:
	// the workload runs before the first kill, while each node is down
	// and after it is back.
	const window = 50
	transfers := func(n int64, what string) {
		t.Helper()
		from := b.Commits.Load()
		wait.Within(t, 60*time.Second, fmt.Sprintf("%d transfers %s", n, what), func() bool { return b.Commits.Load() >= from+n })
	}
	// caughtUp waits until the restarted node name has applied what the
	// cluster had committed when it came back: its stashes healthy at or
	// past that version, or its log replica durable at it; and, for a
	// stash node, until its pool has every shard on two live replicas
	// again, its stashes among them. Only then is the next node killed (a
	// pool of replication 2 keeps a replica). A healthy stash is not yet
	// a replica: a dram stash comes back as a new, empty stash that the
	// data distributor fills from the other one (docs/cluster.md), and
	// killing that one before the copy is done leaves the cache's shards
	// with no replica for failure_wait.
	caughtUp := func(name string) {
		t.Helper()
		var v int64
		if err := db.ReadTransact(ctx, func(tr *distash.Tx) (err error) {
			v, err = tr.ReadVersion()
			return err
		}); err != nil {
			t.Fatal(err)
		}
		n := c.node(name)
		wait.Within(t, 60*time.Second, name+" caught up with version "+fmt.Sprint(v), func() bool {
			sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			st, err := c.Status(sctx, n.Addr)
			if err != nil {
				return false
			}
			if n.Class == clustertest.Transaction {
				return st.GetNode().GetLogDurableVersion() >= v
			}
			for _, s := range st.Stashes {
				if s.Health != "healthy" || s.Version < v {
					return false
				}
			}
			if len(st.Stashes) == 0 {
				return false
			}
			d, shares, err := poolDistribution(sctx, c.Coordinators, n.Pool)
			if err != nil || d.UnderReplicated != 0 {
				return false
			}
			for _, s := range st.Stashes {
				// Listed once a shard's team or destinations name it (a
				// round before, the distributor may not know it yet).
				if sh := shares[s.Id]; sh == nil || sh.Fetching != 0 {
					return false
				}
			}
			return true
		})
	}
	transfers(window, "before any kill")
	audit("before any kill")

	var longest time.Duration
	longestWhat := ""
	for _, name := range []string{"data1", "data2", "data3", "cache1", "cache2", "tx1", "tx2", "tx3"} {
		before := b.Commits.Load()
		b.ResetGap()
		killed := time.Now()
		c.kill(name)
		waitCommits(killed, "kill -9 of "+name)
		transfers(window, "with "+name+" down")
		audit("with " + name + " down")
		c.start(name)
		caughtUp(name)
		transfers(window, "after "+name+" restarted")
		audit("after " + name + " restarted")
		// The longest time between two acknowledged transfers from the
		// kill until now: the time without commits the kill caused.
		gap := b.MaxGap()
		if gap > longest {
			longest, longestWhat = gap, name
		}
		t.Logf("kill -9 %s: longest time without a commit %v; %d transfers committed meanwhile", name, gap.Round(time.Millisecond), b.Commits.Load()-before)
	}
	t.Logf("longest wait for commits after a kill: %v (%s)", longest.Round(time.Millisecond), longestWhat)
	if longest > 10*time.Second {
		t.Errorf("commits stopped for %v after killing %s: want < 10 s", longest, longestWhat)
	}
	wcancel()
	waitBank()
	waitWriter()
	t.Logf("%d transfers acknowledged, %d failed attempts (during kills), %d keys acknowledged by the writer",
		b.Commits.Load(), failures.Load(), len(w.Acked()))
	audit("at the end")
	if missing, err := w.Check(ctx, db); err != nil || missing > 0 {
		t.Fatalf("%d acknowledged writes missing (err %v)", missing, err)
	}
	db.Close()

	// Every node at once.
	for _, n := range c.Nodes {
		n.Kill()
	}
	c.start()
	octx, ocancel := context.WithTimeout(ctx, time.Minute)
	db2, err := distash.Open(octx, c.Coordinators)
	ocancel()
	if err != nil {
		t.Fatal(err)
	}
	defer db2.Close()
	b.DB = db2
	audit("after kill -9 of every node")
	if missing, err := w.Check(ctx, db2); err != nil || missing > 0 {
		t.Fatalf("after kill -9 of every node, %d acknowledged writes missing (err %v)", missing, err)
	}
	err = db2.ReadTransact(ctx, func(tr *distash.Tx) error {
		kvs, err := tr.GetRange([]byte("c/"), []byte("c0"), distash.RangeOptions{Limit: 10})
		if err != nil {
			return err
		}
		if len(kvs) != 0 {
			return fmt.Errorf("the DRAM pool kept %d keys (first %q) across kill -9 of every node", len(kvs), kvs[0].Key)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestProcessClusterOverMutualTLS runs a small multi-process cluster (3
// transaction nodes, one Pebble stash node) with --tls-* on every node:
// clients, node-to-node gRPC and both raft groups go through mutual TLS.
// A client with the CA's certificate reads and writes; a plaintext client
// and one with another CA's certificate get nothing.
func TestProcessClusterOverMutualTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 4 real server processes")
	}
	clearTLSEnv(t)
	pki := tlstest.New(t)
	toml := "[log]\nreplicas = 3\n\n[[pool]]\nname = \"data\"\nprefix = \"d/\"\nmedium = \"ssd\"\nmode = \"durable\"\nengine = \"pebble\"\nstashes = 1\nreplication = 1\n"
	nodes := clustertest.Specs("0 transaction", "1 transaction", "2 transaction", "3 stash data")
	for i := range nodes {
		nodes[i].Zone = fmt.Sprint("z", i)
	}
	c := newProcs(t, clustertest.ProcsOptions{TOML: toml, Nodes: nodes})
	tlsArgs := []string{"--tls-cert", pki.NodeCert, "--tls-key", pki.NodeKey, "--tls-ca", pki.CA}
	var addrs []string
	for _, n := range c.Nodes {
		n.Args = append(n.Args, tlsArgs...)
		addrs = append(addrs, n.Addr)
	}
	c.start()
	coordinators := c.Coordinators
	out, err := run(cliCmd(), "set", "d/user:1", "Ada", "--cluster", coordinators, "--timeout", "60s",
		"--tls-cert", pki.ClientCert, "--tls-key", pki.ClientKey, "--tls-ca", pki.CA)
	if err != nil || !strings.HasPrefix(out, "committed at version") {
		t.Fatalf("cli set over mutual TLS: %q, %v", out, err)
	}
	out, err = run(cliCmd(), "get", "d/user:1", "--cluster", coordinators,
		"--tls-cert", pki.ClientCert, "--tls-key", pki.ClientKey, "--tls-ca", pki.CA)
	if err != nil || out != "Ada\n" {
		t.Fatalf("cli get over mutual TLS: %q, %v", out, err)
	}
	out, err = run(cliCmd(), "status", "--cluster", coordinators,
		"--tls-cert", pki.ClientCert, "--tls-key", pki.ClientKey, "--tls-ca", pki.CA)
	if err != nil || !strings.Contains(out, "log_leader") || strings.Contains(out, "unreachable") {
		t.Fatalf("cli status over mutual TLS: %q, %v", out, err)
	}
	if out, err := run(cliCmd(), "get", "d/user:1", "--cluster", coordinators, "--timeout", "2s"); err == nil {
		t.Fatalf("plaintext cli get succeeded: %q", out)
	}
	// A client certificate reaches the data, not the node-to-node calls.
	cliTLS, err := distash.TLSConfigFromFiles(pki.ClientCert, pki.ClientKey, pki.CA)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(addrs[0], grpc.WithTransportCredentials(credentials.NewTLS(cliTLS)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ccancel()
	if _, err := wire.NewCoordinatorClient(conn).View(cctx, &wire.ViewRequest{}); err != nil {
		t.Errorf("a client's View: %v", err)
	}
	for i, a := range addrs[:4] {
		checkNodeOnlyCalls(t, a, cliTLS, i < 3)
	}
	// Nor raft: a client certificate speaking raft as a peer (AppendEntries
	// at a far higher term would depose the log's leader) is refused at the
	// node's multiplexer, by every transaction node, for both groups.
	for _, a := range addrs[:3] {
		for _, kind := range []byte{'C', 'L'} {
			if err := raftAppendEntries(t, pki, a, kind); err == nil {
				t.Errorf("%s accepted AppendEntries (%c) from a client certificate", a, kind)
			}
		}
	}
	// No certificate at all reaches nothing.
	noCert := &tls.Config{RootCAs: cliTLS.RootCAs, MinVersion: tls.VersionTLS12}
	noConn, err := grpc.NewClient(addrs[0], grpc.WithTransportCredentials(credentials.NewTLS(noCert)))
	if err != nil {
		t.Fatal(err)
	}
	defer noConn.Close()
	if _, err := wire.NewCoordinatorClient(noConn).View(cctx, &wire.ViewRequest{}); err == nil {
		t.Error("a View without a client certificate succeeded")
	}
	// A second server started by mistake on a running node's directory
	// exits at once, before it touches the directory or the cluster's
	// record of the node.
	second := exec.Command(c.Binary, append([]string{"server", "--config", c.Config, "--dir", c.Node("3").Dir,
		"--listen", freePorts(t, 1)[0], "--coordinators", coordinators, "--class", "stash", "--pool", "data", "--zone", "z3"}, tlsArgs...)...)
	done := make(chan []byte, 1)
	go func() { b, _ := second.CombinedOutput(); done <- b }()
	select {
	case b := <-done:
		if second.ProcessState.Success() || !strings.Contains(string(b), "in use by another process") {
			t.Errorf("a second server on a node's directory: exit %v, output %q", second.ProcessState, b)
		}
	case <-time.After(30 * time.Second):
		second.Process.Kill()
		t.Fatal("a second server on a running node's directory did not exit")
	}
	// The cluster was not disturbed: it still commits, and the node whose
	// directory it was is reachable where it was.
	out, err = run(cliCmd(), "status", "--cluster", coordinators,
		"--tls-cert", pki.ClientCert, "--tls-key", pki.ClientKey, "--tls-ca", pki.CA)
	if err != nil || strings.Contains(out, "unreachable") || !strings.Contains(out, addrs[3]) {
		t.Errorf("cli status after the second server: %q, %v", out, err)
	}
	out, err = run(cliCmd(), "set", "d/user:2", "Grace", "--cluster", coordinators, "--timeout", "30s",
		"--tls-cert", pki.ClientCert, "--tls-key", pki.ClientKey, "--tls-ca", pki.CA)
	if err != nil || !strings.HasPrefix(out, "committed at version") {
		t.Fatalf("cli set after the raft attempts: %q, %v", out, err)
	}
	if out, err := run(cliCmd(), "get", "d/user:1", "--cluster", coordinators, "--timeout", "2s",
		"--tls-cert", pki.OtherClientCert, "--tls-key", pki.OtherClientKey, "--tls-ca", pki.CA); err == nil {
		t.Fatalf("cli get with another CA's certificate succeeded: %q", out)
	}
}

// checkNodeOnlyCalls calls every node-to-node RPC of the node at addr with
// cliTLS (a client's certificate) and wants PermissionDenied for each (a
// node that is no coordinator does not serve the coordinators' calls),
// the log's PeekStream also on the frames transport.
func checkNodeOnlyCalls(t *testing.T, addr string, cliTLS *tls.Config, coordinator bool) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cliTLS)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	co, lg, ds := wire.NewCoordinatorClient(conn), wire.NewLogClient(conn), wire.NewDiStashClient(conn)
	calls := map[string]func() error{
		"Register":     func() error { _, err := co.Register(ctx, &wire.RegisterRequest{}); return err },
		"Heartbeat":    func() error { _, err := co.Heartbeat(ctx, &wire.HeartbeatRequest{}); return err },
		"Claim":        func() error { _, err := co.Claim(ctx, &wire.ClaimRequest{Id: "x"}); return err },
		"RecoveryDone": func() error { _, err := co.RecoveryDone(ctx, &wire.RecoveryDoneRequest{}); return err },
		"Retire":       func() error { _, err := co.Retire(ctx, &wire.RetireRequest{}); return err },
		"JoinCoordinators": func() error {
			_, err := co.JoinCoordinators(ctx, &wire.JoinCoordinatorsRequest{})
			return err
		},
		"SetLogReplicas": func() error { _, err := co.SetLogReplicas(ctx, &wire.SetLogReplicasRequest{}); return err },
		"Peek":           func() error { _, err := lg.Peek(ctx, &wire.PeekRequest{Tag: 1}); return err },
		"PeekStream": func() error {
			s, err := lg.PeekStream(ctx)
			if err != nil {
				return err
			}
			// A stream the server refused fails Send with io.EOF at
			// times; its status is what Recv returns.
			_ = s.Send(&wire.PeekRequest{Tag: 1})
			_, err = s.Recv()
			return err
		},
		"PeekStream on frames": func() error { return framesPeek(ctx, addr, cliTLS) },
		"Pop":                  func() error { _, err := lg.Pop(ctx, &wire.PopRequest{Tag: 1, UpTo: 1}); return err },
		"Report":               func() error { _, err := lg.Report(ctx, &wire.ReportRequest{}); return err },
		"ShardMetrics":         func() error { _, err := ds.ShardMetrics(ctx, &wire.ShardMetricsRequest{}); return err },
	}
	coordCalls := []string{"Register", "Heartbeat", "Claim", "RecoveryDone", "Retire", "JoinCoordinators", "SetLogReplicas"}
	for name, call := range calls {
		err := call()
		if !coordinator && slices.Contains(coordCalls, name) && status.Code(err) == codes.Unimplemented {
			continue
		}
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("%s: a client's %s: %v, want PermissionDenied", addr, name, err)
		}
	}
}

// framesPeek opens the log's PeekStream on the frames transport of the
// node at addr with cliTLS, as a stash node's pull does, and returns what
// its first answer is: the stream's error, nil if it was served.
func framesPeek(ctx context.Context, addr string, cliTLS *tls.Config) error {
	cfg := cliTLS.Clone()
	cfg.NextProtos = nil
	c, err := (&tls.Dialer{Config: cfg}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	cs, err := frames.Open(ctx, c, []byte{frames.RouteByte}, wire.Log_PeekStream_FullMethodName, protover.This)
	if err != nil {
		return err
	}
	defer cs.Close()
	if err := cs.Send(&wire.PeekRequest{Tag: 1}); err != nil {
		return err
	}
	return cs.Recv(new(wire.PeekResponse))
}

// raftAppendEntries sends one raft AppendEntries, at a term far above any
// real one, to the raft group kind ('C' coordinators, 'L' log) of the node
// at addr, dialling with a client's certificate as the node's own stream
// layer would; it returns the error, nil if the node answered.
func raftAppendEntries(t *testing.T, pki *tlstest.PKI, addr string, kind byte) error {
	t.Helper()
	srvTLS, err := tlsconf.Server(tlsconf.Files{Cert: pki.NodeCert, Key: pki.NodeKey, CA: pki.CA}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cliTLS, err := tlsconf.Client(tlsconf.Files{Cert: pki.ClientCert, Key: pki.ClientKey, CA: pki.CA})
	if err != nil {
		t.Fatal(err)
	}
	mux, err := raftnet.Listen("127.0.0.1:0", srvTLS, cliTLS)
	if err != nil {
		t.Fatal(err)
	}
	defer mux.Close()
	trans := raft.NewNetworkTransport(mux.StreamLayer(kind, mux.Addr().String()), 1, 3*time.Second, io.Discard)
	defer trans.Close()
	var resp raft.AppendEntriesResponse
	return trans.AppendEntries("intruder", raft.ServerAddress(addr), &raft.AppendEntriesRequest{
		RPCHeader: raft.RPCHeader{ID: []byte("intruder"), Addr: []byte(mux.Addr().String())},
		Term:      1 << 40, PrevLogEntry: 0, PrevLogTerm: 0, LeaderCommitIndex: 0,
	}, &resp)
}
