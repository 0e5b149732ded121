package distash_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/distash/distash"
	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/testutil/wait"
	"github.com/distash/distash/internal/wire"
)

// A fake multi-process cluster: small gRPC servers, each a "node" serving
// DiStash (answering with its own name, so tests see who served what) and,
// on coordinators, a Coordinator whose View the test controls.

type fakeCluster struct {
	t       *testing.T
	version atomic.Int64
	view    atomic.Pointer[wire.ViewResponse]
	shardMu sync.Mutex // guards shards, which a test may change
	shards  []*wire.Shard
	nodes   map[string]*fakeNode
}

type fakeNode struct {
	wire.UnimplementedDiStashServer
	fc   *fakeCluster
	name string
	addr string
	srv  *grpc.Server

	wrongNode   atomic.Bool // answer every request with wrong_node
	silent      atomic.Bool // answer nothing, as a paused process (its connections stay open)
	breakStream atomic.Bool // break the commit stream on the next commit
	coldest     atomic.Pointer[[][]byte]

	grvs, commits, reads, ranges, views atomic.Int64
}

type fakeCoordinator struct {
	wire.UnimplementedCoordinatorServer
	n *fakeNode
}

func (c *fakeCoordinator) View(ctx context.Context, req *wire.ViewRequest) (*wire.ViewResponse, error) {
	c.n.views.Add(1)
	if c.n.silence(ctx) {
		return nil, ctx.Err()
	}
	v := c.n.fc.view.Load()
	if v == nil {
		return &wire.ViewResponse{Error: &wire.Error{Code: int32(kv.CodeConnectionFailed), Detail: "no controller"}}, nil
	}
	return v, nil
}

func newFakeCluster(t *testing.T, shards []*wire.Shard) *fakeCluster {
	fc := &fakeCluster{t: t, shards: shards, nodes: map[string]*fakeNode{}}
	fc.version.Store(100)
	return fc
}

// node starts a node; a coordinator also serves the Coordinator service.
func (fc *fakeCluster) node(name string, coordinator bool) *fakeNode {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fc.t.Fatal(err)
	}
	n := &fakeNode{fc: fc, name: name, addr: lis.Addr().String(), srv: grpc.NewServer()}
	wire.RegisterDiStashServer(n.srv, n)
	if coordinator {
		wire.RegisterCoordinatorServer(n.srv, &fakeCoordinator{n: n})
	}
	go n.srv.Serve(lis)
	fc.t.Cleanup(n.srv.Stop)
	fc.nodes[name] = n
	return n
}

// setView publishes a view: the stateless node's name ("" while the
// cluster recovers) and, per stash tag, its node's name (a node not
// started, or stopped with dead, is published as given).
func (fc *fakeCluster) setView(gen uint64, stateless string, stashes map[uint32]string, dead ...string) {
	v := &wire.ViewResponse{Generation: gen}
	if stateless != "" {
		v.StatelessAddress = fc.nodes[stateless].addr
	}
	isDead := map[string]bool{}
	for _, d := range dead {
		isDead[d] = true
	}
	for tag := uint32(1); tag <= uint32(len(stashes)); tag++ {
		name := stashes[tag]
		loc := &wire.StashLocation{Tag: tag, Pool: "data", Slot: int32(tag - 1), Node: name}
		if n, ok := fc.nodes[name]; ok {
			loc.Address, loc.Alive = n.addr, !isDead[name]
		}
		v.Stashes = append(v.Stashes, loc)
	}
	fc.view.Store(v)
}

func wrongNodeErr(n *fakeNode) *wire.Error {
	return &wire.Error{Code: int32(kv.CodeWrongNode), Detail: n.name + " holds no such role"}
}

// silence waits until ctx ends if the node is silent, and says so.
func (n *fakeNode) silence(ctx context.Context) bool {
	if !n.silent.Load() {
		return false
	}
	<-ctx.Done()
	return true
}

func (n *fakeNode) GetReadVersion(ctx context.Context, req *wire.GetReadVersionRequest) (*wire.GetReadVersionResponse, error) {
	n.grvs.Add(1)
	if n.silence(ctx) {
		return nil, ctx.Err()
	}
	if n.wrongNode.Load() {
		return &wire.GetReadVersionResponse{Error: wrongNodeErr(n)}, nil
	}
	return &wire.GetReadVersionResponse{Version: n.fc.version.Load()}, nil
}

func (n *fakeNode) CommitStream(st wire.DiStash_CommitStreamServer) error {
	for {
		req, err := st.Recv()
		if err != nil {
			return err
		}
		n.commits.Add(1)
		if n.silent.Load() {
			continue // no answer
		}
		if n.breakStream.Swap(false) {
			return status.Error(codes.Unavailable, "injected: stream broke")
		}
		resp := &wire.CommitResponse{}
		if n.wrongNode.Load() {
			resp.Error = wrongNodeErr(n)
		} else {
			resp.Version = n.fc.version.Add(1)
		}
		if err := st.Send(&wire.CommitStreamResponse{Id: req.Id, Response: resp}); err != nil {
			return err
		}
	}
}

func (n *fakeNode) Read(ctx context.Context, req *wire.ReadRequest) (*wire.ReadResponse, error) {
	n.reads.Add(1)
	if n.silence(ctx) {
		return nil, ctx.Err()
	}
	if n.wrongNode.Load() {
		return &wire.ReadResponse{Error: wrongNodeErr(n)}, nil
	}
	resp := &wire.ReadResponse{}
	if req.AtLatest {
		resp.Version = n.fc.version.Load() // its stash has applied every version
	}
	for range req.Keys {
		resp.Values = append(resp.Values, &wire.Value{Present: true, Value: []byte(n.name)})
	}
	return resp, nil
}

func (n *fakeNode) ReadRange(ctx context.Context, req *wire.ReadRangeRequest) (*wire.ReadRangeResponse, error) {
	n.ranges.Add(1)
	if n.silence(ctx) {
		return nil, ctx.Err()
	}
	if n.wrongNode.Load() {
		return &wire.ReadRangeResponse{Error: wrongNodeErr(n)}, nil
	}
	resp := &wire.ReadRangeResponse{Kvs: []*wire.KeyValue{{Key: req.Begin, Value: []byte(n.name)}}}
	if req.AtLatest {
		resp.Version = n.fc.version.Load()
	}
	return resp, nil
}

func (n *fakeNode) Locations(ctx context.Context, req *wire.LocationsRequest) (*wire.LocationsResponse, error) {
	if n.wrongNode.Load() {
		return &wire.LocationsResponse{Error: wrongNodeErr(n)}, nil
	}
	n.fc.shardMu.Lock()
	defer n.fc.shardMu.Unlock()
	return &wire.LocationsResponse{Shards: n.fc.shards}, nil
}

func (n *fakeNode) ClusterInfo(ctx context.Context, req *wire.ClusterInfoRequest) (*wire.ClusterInfoResponse, error) {
	return &wire.ClusterInfoResponse{Pools: []*wire.PoolInfo{{
		Name: "data", Prefix: []byte("d/"), Medium: "ssd", Mode: "durable", Engine: "memory",
		Stashes: 2, Replication: 2, Recency: true,
	}}}, nil
}

func (n *fakeNode) Coldest(ctx context.Context, req *wire.ColdestRequest) (*wire.ColdestResponse, error) {
	var keys [][]byte
	if p := n.coldest.Load(); p != nil {
		keys = *p
	}
	return &wire.ColdestResponse{Keys: keys}, nil
}

// splitShards: stash 1 holds [d/, d/m), stash 2 [d/m, d0).
var splitShards = []*wire.Shard{
	{Begin: []byte("d/"), End: []byte("d/m"), Stashes: []uint32{1}, Pool: "data"},
	{Begin: []byte("d/m"), End: []byte("d0"), Stashes: []uint32{2}, Pool: "data"},
}

// replicatedShards: stashes 1 and 2 both hold the whole pool.
var replicatedShards = []*wire.Shard{
	{Begin: []byte("d/"), End: []byte("d0"), Stashes: []uint32{1, 2}, Pool: "data"},
}

// replicatedFake starts a fake cluster whose one shard (replicatedShards)
// is on stashes 1 and 2, served by nodes a and b; k is its coordinator and
// s its stateless node.
func replicatedFake(t *testing.T) (fc *fakeCluster, k, a, b *fakeNode) {
	fc = newFakeCluster(t, replicatedShards)
	k = fc.node("k", true)
	fc.node("s", false)
	a, b = fc.node("a", false), fc.node("b", false)
	fc.setView(1, "s", map[uint32]string{1: "a", 2: "b"})
	return fc, k, a, b
}

func openFake(t *testing.T, ctx context.Context, cluster string) *distash.DB {
	t.Helper()
	db, err := distash.Open(ctx, cluster)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func getString(tr *distash.Tx, key string) (string, error) {
	v, err := tr.Get([]byte(key))
	return string(v), err
}

// TestClusterRouting: Open finds a multi-process cluster through its
// coordinators; read versions and commits go to the stateless node, reads
// to the node of the stash holding the key, ColdestKeys to every stash.
func TestClusterRouting(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	fc := newFakeCluster(t, splitShards)
	k1, k2 := fc.node("k1", true), fc.node("k2", true)
	s, a, b := fc.node("s", false), fc.node("a", false), fc.node("b", false)
	fc.setView(1, "s", map[uint32]string{1: "a", 2: "b"})
	db := openFake(t, ctx, k1.addr+","+k2.addr)
	if k1.views.Load() == 0 {
		t.Fatal("Open did not ask the first coordinator for the view")
	}

	err := db.Transact(ctx, func(tr *distash.Tx) error {
		if v, err := getString(tr, "d/apple"); err != nil || v != "a" {
			return fmt.Errorf("d/apple served by %q, want a (err %v)", v, err)
		}
		if v, err := getString(tr, "d/pear"); err != nil || v != "b" {
			return fmt.Errorf("d/pear served by %q, want b (err %v)", v, err)
		}
		kvs, err := tr.GetRange([]byte("d/a"), []byte("d/b"), distash.RangeOptions{})
		if err != nil || len(kvs) != 1 || string(kvs[0].Value) != "a" {
			return fmt.Errorf("range [d/a, d/b) = %q, %v; want one pair from a", kvs, err)
		}
		tr.Set([]byte("d/apple"), []byte("x"))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if s.grvs.Load() == 0 || s.commits.Load() != 1 {
		t.Fatalf("stateless node: %d read versions, %d commits; want > 0 and 1", s.grvs.Load(), s.commits.Load())
	}
	if s.reads.Load()+s.ranges.Load() != 0 || a.reads.Load() != 1 || b.reads.Load() != 1 || a.ranges.Load() != 1 {
		t.Fatalf("reads: s %d+%d, a %d+%d, b %d; want 0, 1+1, 1", s.reads.Load(), s.ranges.Load(), a.reads.Load(), a.ranges.Load(), b.reads.Load())
	}
	for _, n := range []*fakeNode{k1, k2, a, b} {
		if n.grvs.Load()+n.commits.Load() != 0 {
			t.Fatalf("node %s got %d read versions and %d commits", n.name, n.grvs.Load(), n.commits.Load())
		}
	}

	// Each stash node answers for its own stash; the client interleaves.
	a.coldest.Store(&[][]byte{[]byte("d/1"), []byte("d/2"), []byte("d/3")})
	b.coldest.Store(&[][]byte{[]byte("d/2"), []byte("d/4")})
	pool, err := db.Pool("data")
	if err != nil {
		t.Fatal(err)
	}
	keys, err := db.ColdestKeys(ctx, pool, 3)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprintf("%q", keys); got != `["d/1" "d/2" "d/4"]` {
		t.Fatalf("ColdestKeys = %s, want [d/1 d/2 d/4]", got)
	}
}

// TestClusterSwitchOnWrongNode: the stateless node's roles move; it
// answers wrong_node, the client asks the coordinators and follows.
func TestClusterSwitchOnWrongNode(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	fc := newFakeCluster(t, splitShards)
	k := fc.node("k", true)
	s1, s2 := fc.node("s1", false), fc.node("s2", false)
	fc.node("a", false)
	fc.node("b", false)
	fc.setView(1, "s1", map[uint32]string{1: "a", 2: "b"})
	db := openFake(t, ctx, k.addr)
	write := func(tr *distash.Tx) error {
		if _, err := tr.Get([]byte("d/apple")); err != nil {
			return err
		}
		tr.Set([]byte("d/apple"), []byte("x"))
		return nil
	}
	if err := db.Transact(ctx, write); err != nil {
		t.Fatal(err)
	}

	s1.wrongNode.Store(true)
	fc.setView(2, "s2", map[uint32]string{1: "a", 2: "b"})
	before := s1.grvs.Load()
	start := time.Now()
	if err := db.Transact(ctx, write); err != nil {
		t.Fatal(err)
	}
	t.Logf("switched in %v", time.Since(start))
	if s1.grvs.Load() == before {
		t.Fatal("the old stateless node was not asked (the switch did not follow its wrong_node)")
	}
	if s2.grvs.Load() == 0 || s2.commits.Load() != 1 {
		t.Fatalf("new stateless node: %d read versions, %d commits; want > 0 and 1", s2.grvs.Load(), s2.commits.Load())
	}
	if s1.commits.Load() != 1 {
		t.Fatalf("old stateless node got %d commits, want 1 (before the move)", s1.commits.Load())
	}
}

// TestClusterSwitchOnDeadProxy: the stateless node dies, and with it the
// coordinator the client asked last; the view names no stateless node for
// a while, then a new one; Transact waits and succeeds there.
func TestClusterSwitchOnDeadProxy(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	fc := newFakeCluster(t, splitShards)
	k1, k2 := fc.node("k1", true), fc.node("k2", true)
	s1, s2 := fc.node("s1", false), fc.node("s2", false)
	fc.node("a", false)
	fc.node("b", false)
	fc.setView(1, "s1", map[uint32]string{1: "a", 2: "b"})
	db := openFake(t, ctx, k1.addr+","+k2.addr)
	write := func(tr *distash.Tx) error {
		if _, err := tr.Get([]byte("d/pear")); err != nil {
			return err
		}
		tr.Set([]byte("d/pear"), []byte("x"))
		return nil
	}
	if err := db.Transact(ctx, write); err != nil {
		t.Fatal(err)
	}

	s1.srv.Stop()
	k1.srv.Stop()
	fc.setView(2, "", map[uint32]string{1: "a", 2: "b"}) // recovering
	asked := k2.views.Load()
	go func() {
		// The client asked the live coordinator twice, so it was told
		// the cluster is recovering; then the new stateless node comes.
		wait.Until(5*time.Second, func() bool { return k2.views.Load() >= asked+2 })
		fc.setView(3, "s2", map[uint32]string{1: "a", 2: "b"})
	}()
	start := time.Now()
	if err := db.Transact(ctx, write); err != nil {
		t.Fatal(err)
	}
	t.Logf("switched in %v", time.Since(start))
	if s2.commits.Load() != 1 {
		t.Fatalf("new stateless node got %d commits, want 1", s2.commits.Load())
	}
	if k2.views.Load() == 0 {
		t.Fatal("the live coordinator was never asked")
	}
}

// TestClusterCommitStreamBreaks: a commit whose stream breaks after it was
// sent has an unknown result, never a success.
func TestClusterCommitStreamBreaks(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	fc := newFakeCluster(t, splitShards)
	k := fc.node("k", true)
	s := fc.node("s", false)
	fc.node("a", false)
	fc.node("b", false)
	fc.setView(1, "s", map[uint32]string{1: "a", 2: "b"})
	db := openFake(t, ctx, k.addr)

	s.breakStream.Store(true)
	tr, err := db.CreateTransaction(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Get([]byte("d/apple")); err != nil {
		t.Fatal(err)
	}
	tr.Set([]byte("d/apple"), []byte("x"))
	if err := tr.Commit(); !errors.Is(err, distash.ErrCommitUnknownResult) {
		t.Fatalf("commit over a broken stream: %v, want commit_unknown_result", err)
	}
	// The next commit opens a new stream and succeeds.
	if err := db.Transact(ctx, func(tr *distash.Tx) error {
		tr.Set([]byte("d/apple"), []byte("y"))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if s.commits.Load() != 2 {
		t.Fatalf("stateless node got %d commits, want 2", s.commits.Load())
	}
}

// TestClusterDeadCoordinatorSkipped: a dead first address of the cluster
// string costs little.
func TestClusterDeadCoordinatorSkipped(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := lis.Addr().String()
	lis.Close()
	fc := newFakeCluster(t, splitShards)
	k := fc.node("k", true)
	s := fc.node("s", false)
	fc.node("a", false)
	fc.node("b", false)
	fc.setView(1, "s", map[uint32]string{1: "a", 2: "b"})
	start := time.Now()
	db := openFake(t, ctx, dead+","+k.addr)
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Open took %v with a dead first coordinator", d)
	}
	if err := db.Transact(ctx, func(tr *distash.Tx) error {
		tr.Set([]byte("d/apple"), []byte("x"))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if s.commits.Load() != 1 {
		t.Fatalf("stateless node got %d commits, want 1", s.commits.Load())
	}
}

// TestClusterReadsAvoidDeadStashNode: a stash node that died (still alive
// in the view, or no longer) is marked down and its replica serves.
func TestClusterReadsAvoidDeadStashNode(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	fc, k, a, b := replicatedFake(t)
	db := openFake(t, ctx, k.addr)

	a.srv.Stop() // the view still says a is alive
	read := func(want string) {
		t.Helper()
		for i := 0; i < 20; i++ {
			readServedBy(t, ctx, db, fmt.Sprintf("d/k%d", i), want)
		}
	}
	read("b")

	// The view learns that a died, and b moves: its stash is served by c.
	c := fc.node("c", false)
	fc.setView(2, "s", map[uint32]string{1: "a", 2: "c"}, "a")
	b.wrongNode.Store(true)
	// Well within stashDownFor (2s): retries rotate among replicas that
	// are all marked down instead of waiting for one to come back.
	wait.Every(t, 10*time.Millisecond, 1500*time.Millisecond, "reads served by c after the view moved stash 2 to it", func() bool {
		var got string
		err := db.ReadTransact(ctx, func(tr *distash.Tx) error {
			var err error
			got, err = getString(tr, "d/x")
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return got == "c"
	})
	if c.reads.Load() == 0 {
		t.Fatal("c served no read")
	}
}

// readServedBy reads key and the range [d/a, d/b) in one transaction of
// the fake cluster and checks that node want served both (a fake node
// answers with its name).
func readServedBy(t *testing.T, ctx context.Context, db *distash.DB, key, want string) {
	t.Helper()
	var got, gotRange string
	err := db.ReadTransact(ctx, func(tr *distash.Tx) error {
		var err error
		if got, err = getString(tr, key); err != nil {
			return err
		}
		kvs, err := tr.GetRange([]byte("d/a"), []byte("d/b"), distash.RangeOptions{})
		if err == nil && len(kvs) == 1 {
			gotRange = string(kvs[0].Value)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if got != want || gotRange != want {
		t.Fatalf("read served by %q and range by %q, want %q", got, gotRange, want)
	}
}

// TestClusterReadsFollowAReplacedReplica: a client that last loaded the
// shard map before a replica was replaced (team [1 2], the map now says
// [1 3] and the view calls 2 retired) still reads once the other old
// replica's node dies. Before, every read picked stash 1 (down, but
// retired stashes come last), failed to connect and was retried on stash 1
// again: only a wrong_shard_server answer reloaded the map, and nothing
// asked stash 2 any more, so reads failed until their deadline (seen as
// TestProcessClusterSurvivesKill9OfEveryNode's "audit with cache2 down").
func TestClusterReadsFollowAReplacedReplica(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	fc, k, a, b := replicatedFake(t)
	db := openFake(t, ctx, k.addr)
	readsServedBy := func(want string) { t.Helper(); readServedBy(t, ctx, db, "d/x", want) }
	// Stash 2 is replaced by stash 3 on c: the view calls 2 retired, and
	// the proxy's map names [1 3] only once the client has seen the view,
	// so the client holds the old map [1 2] and the new view.
	c := fc.node("c", false)
	fc.view.Store(&wire.ViewResponse{Generation: 1, StatelessAddress: fc.nodes["s"].addr, Stashes: []*wire.StashLocation{
		{Tag: 1, Pool: "data", Slot: 0, Node: "a", Address: a.addr, Alive: true},
		{Tag: 2, Pool: "data", Slot: 1, Node: "b", Address: b.addr, Retired: true},
		{Tag: 3, Pool: "data", Slot: 1, Node: "c", Address: c.addr, Alive: true},
	}})
	// b's node dies: a read it fails refreshes the view.
	b.srv.Stop()
	wait.Every(t, 10*time.Millisecond, 5*time.Second, "the client saw stash 2 retired", func() bool {
		readsServedBy("a")
		return db.StashRetired(2)
	})
	fc.shardMu.Lock()
	fc.shards = []*wire.Shard{{Begin: []byte("d/"), End: []byte("d0"), Stashes: []uint32{1, 3}, Pool: "data"}}
	fc.shardMu.Unlock()
	// Now a's node dies too: stash 3 serves.
	a.srv.Stop()
	readsServedBy("c")
	if c.reads.Load() == 0 || c.ranges.Load() == 0 {
		t.Fatalf("c served %d reads and %d range reads", c.reads.Load(), c.ranges.Load())
	}
}

// TestClusterReadsOfALostShardFailLoudly: when the view calls every stash
// of a shard's team retired (the data distributor keeps a durable shard
// with no replica left under its old team), a read of it fails with
// stash_unavailable naming the loss, as the commit proxy refuses a write
// to it, instead of asking retired stashes until its deadline and ending
// with their wrong_shard_server.
func TestClusterReadsOfALostShardFailLoudly(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	fc, k, a, b := replicatedFake(t)
	db := openFake(t, ctx, k.addr)
	fc.view.Store(&wire.ViewResponse{Generation: 1, StatelessAddress: fc.nodes["s"].addr, Stashes: []*wire.StashLocation{
		{Tag: 1, Pool: "data", Slot: 0, Node: "a", Address: a.addr, Retired: true},
		{Tag: 2, Pool: "data", Slot: 1, Node: "b", Address: b.addr, Retired: true},
	}})
	// Both nodes die: a failed read refreshes the view.
	a.srv.Stop()
	b.srv.Stop()
	wait.Every(t, 10*time.Millisecond, 10*time.Second, "the client saw stashes 1 and 2 retired", func() bool {
		rctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		_ = db.ReadTransact(rctx, func(tr *distash.Tx) error { _, err := tr.Get([]byte("d/x")); return err })
		return db.StashRetired(1) && db.StashRetired(2)
	})
	for _, read := range []struct {
		what string
		f    func(tr *distash.Tx) error
	}{
		{"get", func(tr *distash.Tx) error { _, err := tr.Get([]byte("d/x")); return err }},
		{"range", func(tr *distash.Tx) error {
			_, err := tr.GetRange([]byte("d/a"), []byte("d/b"), distash.RangeOptions{})
			return err
		}},
	} {
		rctx, cancel := context.WithTimeout(ctx, time.Second) // retryable: it ends at the deadline, with this error as the last
		err := db.ReadTransact(rctx, read.f)
		cancel()
		if err == nil || !strings.Contains(err.Error(), "no replica left") || !strings.Contains(err.Error(), "stash_unavailable") {
			t.Fatalf("%s of a shard whose team is retired: %v, want stash_unavailable saying no replica is left", read.what, err)
		}
	}
}

// TestClusterOpenWaitsForRoles: while the cluster forms, the coordinators
// know no stateless node (or no controller); Open waits for one.
func TestClusterOpenWaitsForRoles(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	fc := newFakeCluster(t, splitShards)
	k := fc.node("k", true)
	s := fc.node("s", false)
	fc.node("a", false)
	fc.node("b", false)
	var wg sync.WaitGroup
	wg.Go(func() {
		// Open is told there is no controller, then that there is no
		// stateless node, and asks again each time.
		wait.Until(5*time.Second, func() bool { return k.views.Load() >= 1 })
		fc.setView(1, "", map[uint32]string{1: "a", 2: "b"})
		asked := k.views.Load()
		wait.Until(5*time.Second, func() bool { return k.views.Load() >= asked+1 })
		fc.setView(1, "s", map[uint32]string{1: "a", 2: "b"})
	})
	db := openFake(t, ctx, k.addr)
	wg.Wait()
	if err := db.Transact(ctx, func(tr *distash.Tx) error {
		tr.Set([]byte("d/apple"), []byte("x"))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if s.commits.Load() != 1 {
		t.Fatalf("stateless node got %d commits, want 1", s.commits.Load())
	}
}
