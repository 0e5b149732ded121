package clustertest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/distash/distash"
	"github.com/distash/distash/config"
	"github.com/distash/distash/internal/clusterstatus"
	"github.com/distash/distash/internal/coordrpc"
	"github.com/distash/distash/internal/dd"
	"github.com/distash/distash/internal/fsys"
	"github.com/distash/distash/internal/fsys/faultfs"
	"github.com/distash/distash/internal/protover"
	"github.com/distash/distash/internal/simnet"
	"github.com/distash/distash/internal/wire"
	"github.com/distash/distash/server"
)

// The simnet nodes a Sim's clients dial from: Open's, and the probes'
// (Status, View, Dial), which partitions of the cluster's nodes
// (Others) leave connected.
const (
	ClientNode = "client"
	ProbeNode  = "probe"
)

// SimNode is one node of a Sim.
type SimNode struct {
	Spec
	Addr string // "<name>:4500" on the Sim's network
	Dir  string
	// FS is the file system the node's files go through (nil: the
	// operating system's); it takes effect at the next Start.
	FS fsys.FS
	// Protocol is the protocol versions the node speaks (zero: this
	// binary's; protover.Speaker{Min: 1, Max: 1} acts as the previous
	// release); it takes effect at the next Start.
	Protocol protover.Speaker
	// Interceptor, if set, wraps every gRPC call the node serves (its
	// coordinator's included); it takes effect at the next Start.
	Interceptor grpc.UnaryServerInterceptor

	sim *Sim
	srv *server.Server // guarded by sim.mu; nil while stopped
}

// Server is the running node, nil while it is stopped.
func (n *SimNode) Server() *server.Server {
	n.sim.mu.Lock()
	defer n.sim.mu.Unlock()
	return n.srv
}

// Sim is a multi-process cluster whose nodes are all in this process: each
// runs server.StartNode on a simnet listener and dials through simnet, so
// that the network between them can be partitioned, delayed and paused.
// Its nodes stop when the test ends.
type Sim struct {
	T      testing.TB
	Net    *simnet.Network
	Coords []string // the transaction nodes' addresses: the coordinators
	Nodes  []*SimNode
	Logger *slog.Logger
	// TOML is the nodes' configuration, read at each Start.
	TOML string
	// HTTPAddr is every node's NodeOptions.HTTPAddr ("": none).
	HTTPAddr string
	// Tuning is every node's NodeOptions.Tuning, read at each Start: the
	// test settings of this cluster alone (tests that set them can run in
	// parallel).
	Tuning server.Tuning
	// Replay is appended to StartAll's failure message (how to replay a
	// seeded run).
	Replay string

	root string
	mu   sync.Mutex // guards SimNode.srv
}

// NewSim lays out nodes running toml, under a temporary directory; the
// transaction nodes are the coordinators. The nodes log nothing unless
// DISTASH_FAULT_VERBOSE is set (then at info level, to standard error).
func NewSim(t testing.TB, toml string, nodes ...Spec) *Sim {
	level := slog.Level(100) // nothing
	var out io.Writer = io.Discard
	if os.Getenv("DISTASH_FAULT_VERBOSE") != "" {
		level, out = slog.LevelInfo, os.Stderr
	}
	c := &Sim{T: t, Net: simnet.New(), TOML: toml, root: t.TempDir(),
		Logger: slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: level}))}
	for _, s := range nodes {
		c.Add(s)
	}
	t.Cleanup(c.StopAll)
	return c
}

// Add adds a node that is not started yet; a transaction node is a
// coordinator.
func (c *Sim) Add(s Spec) *SimNode {
	n := &SimNode{Spec: s, Addr: s.Name + ":4500", Dir: filepath.Join(c.root, s.Name), sim: c}
	c.Nodes = append(c.Nodes, n)
	if s.Class == Transaction {
		c.Coords = append(c.Coords, n.Addr)
	}
	return n
}

// Node is the node named name; the test fails if there is none.
func (c *Sim) Node(name string) *SimNode {
	for _, n := range c.Nodes {
		if n.Name == name {
			return n
		}
	}
	c.T.Fatalf("no node %s", name)
	return nil
}

// ClusterString is the coordinators' addresses, comma-separated.
func (c *Sim) ClusterString() string { return strings.Join(c.Coords, ",") }

// Open opens a client of the cluster, dialing from ClientNode; it is
// closed when the test ends.
func (c *Sim) Open(ctx context.Context) *distash.DB {
	c.T.Helper()
	db, err := distash.Open(ctx, c.ClusterString(), distash.WithDialer(c.Net.Dialer(ClientNode)))
	if err != nil {
		c.T.Fatal(err)
	}
	c.T.Cleanup(func() { db.Close() })
	return db
}

// Start starts n (again, after a stop) on its directory; it returns once
// the node has registered with the controller.
func (c *Sim) Start(ctx context.Context, n *SimNode) error {
	cfg, err := config.Parse([]byte(c.TOML))
	if err != nil {
		return err
	}
	ln, err := c.Net.Listen(n.Addr)
	if err != nil {
		return err
	}
	srv, err := server.StartNode(ctx, server.NodeOptions{
		Dir: n.Dir, Config: cfg, Listen: n.Addr, Listener: ln, Dialer: c.Net.Dialer(n.Addr),
		Coordinators: c.Coords, Class: n.Class, Pool: n.Pool, DC: n.DC, Zone: n.Zone, Machine: n.Name,
		Logger: c.Logger.With("name", n.Name), FlushInterval: 20 * time.Millisecond, HTTPAddr: c.HTTPAddr, FS: n.FS,
		Protocol: n.Protocol, Interceptor: n.Interceptor, Tuning: c.Tuning,
	})
	if err != nil {
		ln.Close()
		return fmt.Errorf("start %s: %w", n.Name, err)
	}
	c.mu.Lock()
	n.srv = srv
	c.mu.Unlock()
	return nil
}

// StartAll starts every node together (the first ones wait for a
// coordinator quorum); the test fails if one does not start.
func (c *Sim) StartAll(ctx context.Context) {
	c.T.Helper()
	errs := make(chan error, len(c.Nodes))
	for _, n := range c.Nodes {
		go func() { errs <- c.Start(ctx, n) }()
	}
	for range c.Nodes {
		if err := <-errs; err != nil {
			c.T.Fatalf("%v (%s)", err, c.Replay)
		}
	}
}

// take marks n stopped and returns what ran.
func (c *Sim) take(n *SimNode) *server.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	srv := n.srv
	n.srv = nil
	return srv
}

// Stop stops n as a shutdown does.
func (c *Sim) Stop(n *SimNode) {
	if srv := c.take(n); srv != nil {
		srv.Stop()
	}
}

// Crash stops n as a crash would: its links break at once (it can reach
// no one while its goroutines wind down), then it stops.
func (c *Sim) Crash(n *SimNode) {
	srv := c.take(n)
	if srv == nil {
		return
	}
	c.Net.Partition([]string{n.Addr}, c.Others(n.Addr))
	c.Net.Kill(n.Addr)
	srv.Stop()
	c.Net.Heal()
}

// Kill9 stops n, whose FS must be a *faultfs.FS, as kill -9 does: what its
// process wrote stays (the page cache), and from that instant nothing more
// of it reaches the disk, not even what its shutdown would write; its
// links break at once. The restarted node gets a new view of the same
// disk.
func (c *Sim) Kill9(n *SimNode) {
	fs := n.FS.(*faultfs.FS)
	fs.Kill()
	fs.Fail(faultfs.Rule{})
	c.Crash(n)
	n.FS = faultfs.New(nil)
}

// Others is every node's address but except's, and ClientNode.
func (c *Sim) Others(except ...string) []string {
	out := []string{ClientNode}
	for _, n := range c.Nodes {
		if !slices.Contains(except, n.Addr) {
			out = append(out, n.Addr)
		}
	}
	return out
}

// StopAll stops every running node at once.
func (c *Sim) StopAll() {
	var wg sync.WaitGroup
	for _, n := range c.Nodes {
		if srv := c.take(n); srv != nil {
			wg.Add(1)
			go func() {
				defer wg.Done()
				srv.Stop()
			}()
		}
	}
	wg.Wait()
}

// Distribution is the data distributor's status, from the node that
// holds the stateless roles (nil if none does now).
func (c *Sim) Distribution() map[string]dd.PoolStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.Nodes {
		if n.srv != nil {
			if d := n.srv.Distribution(); d != nil {
				return d
			}
		}
	}
	return nil
}

// PoolBytes is the live bytes of each running stash node of pool, by name.
func (c *Sim) PoolBytes(pool string) map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int64{}
	for _, n := range c.Nodes {
		if n.srv == nil || n.Pool != pool {
			continue
		}
		for _, st := range n.srv.Stashes() {
			out[n.Name] += st.Bytes
		}
	}
	return out
}

// StashOf is the status of node n's stash with tag (any tag if 0); false
// if n is stopped or has none.
func (c *Sim) StashOf(n *SimNode, tag uint32) (server.StashStats, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n.srv == nil {
		return server.StashStats{}, false
	}
	for _, st := range n.srv.Stashes() {
		if tag == 0 || st.Tag == tag {
			return st, true
		}
	}
	return server.StashStats{}, false
}

// Status is the cluster's status as `distash cli status` gathers it.
func (c *Sim) Status(ctx context.Context) (*wire.StatusResponse, error) {
	sctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	return clusterstatus.GatherWith(sctx, c.ClusterString(), clusterstatus.Options{Dialer: c.Net.Dialer(ProbeNode)})
}

// Coordinators is a client of the coordinators, dialing from ProbeNode;
// it is closed when the test ends.
func (c *Sim) Coordinators() *coordrpc.Client {
	c.T.Helper()
	cc, err := coordrpc.NewClient(c.ClusterString(), coordrpc.ClientOptions{Dialer: c.Net.Dialer(ProbeNode)})
	if err != nil {
		c.T.Fatal(err)
	}
	c.T.Cleanup(func() { cc.Close() })
	return cc
}

// View is the controller's view; the test fails if there is none.
func (c *Sim) View(ctx context.Context) *wire.ViewResponse {
	c.T.Helper()
	cc, err := coordrpc.NewClient(c.ClusterString(), coordrpc.ClientOptions{Dialer: c.Net.Dialer(ProbeNode)})
	if err != nil {
		c.T.Fatal(err)
	}
	defer cc.Close()
	v, err := cc.View(ctx)
	if err != nil {
		c.T.Fatal(err)
	}
	return v
}

// RolesNode is the transaction node holding the stateless roles in view
// v (nil if none does), and the other transaction nodes.
func (c *Sim) RolesNode(v *wire.ViewResponse) (roles *SimNode, others []*SimNode) {
	for _, n := range c.Nodes {
		switch {
		case n.Class != Transaction:
		case n.Addr == v.StatelessAddress:
			roles = n
		default:
			others = append(others, n)
		}
	}
	return roles, others
}

// Dial is a gRPC connection to the node at addr from the simnet node
// from; it is closed when the test ends.
func (c *Sim) Dial(from, addr string) *grpc.ClientConn {
	c.T.Helper()
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithContextDialer(c.Net.Dialer(from)),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		c.T.Fatal(err)
	}
	c.T.Cleanup(func() { conn.Close() })
	return conn
}

// WaitUntil polls cond every 50 ms until it holds and returns how long
// that took; the test fails if it does not within timeout.
func WaitUntil(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) time.Duration {
	t.Helper()
	d, err := Until(context.Background(), timeout, 50*time.Millisecond, what, cond)
	if err != nil {
		t.Fatal(err)
	}
	return d
}
