package txlog

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/logentry"
	"github.com/distash/distash/internal/testutil/wait"
	"github.com/hashicorp/raft"
)

// netCluster is a network-mode log of three replicas, each a Log of its
// own over a real TCP transport, all in this process.
type netCluster struct {
	t     *testing.T
	dirs  []string
	peers []Peer
	logs  []*Log // nil while closed
	trs   []*cutTransport
}

// cutTransport is a TCP transport whose outgoing RPCs can be cut, to
// depose a leader without closing its Log. It never pipelines, so that
// every append and heartbeat goes through the cut check.
type cutTransport struct {
	*raft.NetworkTransport
	cut atomic.Bool
}

var errCut = errors.New("test: transport cut")

func (c *cutTransport) AppendEntriesPipeline(raft.ServerID, raft.ServerAddress) (raft.AppendPipeline, error) {
	return nil, raft.ErrPipelineReplicationNotSupported
}

func (c *cutTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	if c.cut.Load() {
		return errCut
	}
	return c.NetworkTransport.AppendEntries(id, target, args, resp)
}

func (c *cutTransport) RequestVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	if c.cut.Load() {
		return errCut
	}
	return c.NetworkTransport.RequestVote(id, target, args, resp)
}

func (c *cutTransport) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	if c.cut.Load() {
		return errCut
	}
	return c.NetworkTransport.RequestPreVote(id, target, args, resp)
}

func (c *cutTransport) InstallSnapshot(id raft.ServerID, target raft.ServerAddress, args *raft.InstallSnapshotRequest, resp *raft.InstallSnapshotResponse, data io.Reader) error {
	if c.cut.Load() {
		return errCut
	}
	return c.NetworkTransport.InstallSnapshot(id, target, args, resp, data)
}

func (c *cutTransport) TimeoutNow(id raft.ServerID, target raft.ServerAddress, args *raft.TimeoutNowRequest, resp *raft.TimeoutNowResponse) error {
	if c.cut.Load() {
		return errCut
	}
	return c.NetworkTransport.TimeoutNow(id, target, args, resp)
}

func newTCPTransport(t *testing.T, addr string) *cutTransport {
	t.Helper()
	var (
		tr  *raft.NetworkTransport
		err error
	)
	// A reopened node binds its old port again: retry briefly in case the
	// kernel has not released it yet.
	if !wait.Until(time.Second, func() bool {
		tr, err = raft.NewTCPTransport(addr, nil, 3, 2*time.Second, io.Discard)
		return err == nil
	}) {
		t.Fatalf("tcp transport on %s: %v", addr, err)
	}
	return &cutTransport{NetworkTransport: tr}
}

func newNetCluster(t *testing.T, n int, tags ...kv.Tag) *netCluster {
	c := &netCluster{t: t}
	base := t.TempDir()
	for i := range n {
		tr := newTCPTransport(t, "127.0.0.1:0")
		c.trs = append(c.trs, tr)
		c.peers = append(c.peers, Peer{ID: fmt.Sprintf("node-%d", i), Addr: string(tr.LocalAddr())})
		c.dirs = append(c.dirs, filepath.Join(base, fmt.Sprint(i)))
	}
	c.logs = make([]*Log, n)
	for i := range n {
		c.logs[i] = openLog(t, c.options(i, c.trs[i], tags))
	}
	t.Cleanup(func() {
		for _, l := range c.logs {
			if l != nil {
				l.Close()
			}
		}
	})
	return c
}

func (c *netCluster) options(i int, tr raft.Transport, tags []kv.Tag) Options {
	return Options{
		Dir: c.dirs[i], Tags: tags, Logger: discardLogger(), PopInterval: 20 * time.Millisecond,
		Network: &NetworkOptions{LocalID: c.peers[i].ID, Peers: c.peers, Transport: tr},
	}
}

// waitLeader waits until exactly one open replica leads and returns it.
func (c *netCluster) waitLeader() int {
	c.t.Helper()
	var leader int
	wait.For(c.t, "a single leader", func() bool {
		n := 0
		for i, l := range c.logs {
			if l != nil && l.IsLeader() {
				leader, n = i, n+1
			}
		}
		return n == 1
	})
	return leader
}

// waitPeek waits until replica i has applied up to last and returns tag's
// message versions.
func (c *netCluster) waitPeek(i int, tag kv.Tag, last kv.Version) []kv.Version {
	c.t.Helper()
	wait.For(c.t, fmt.Sprintf("replica %d at version %d", i, last), func() bool { return c.logs[i].LastVersion() >= last })
	msgs, end := mustPeek(c.t, c.logs[i], tag, c.logs[i].Stats().Trimmed, 0)
	if end != last {
		c.t.Fatalf("replica %d: peek end %d, want %d", i, end, last)
	}
	var vs []kv.Version
	for _, m := range msgs {
		vs = append(vs, m.Version)
	}
	return vs
}

// waitSub reads leadership notifications until one says want (true) or
// 5s pass (false).
func waitSub(ch <-chan bool, want bool) bool {
	timeout := time.After(5 * time.Second)
	for {
		select {
		case v := <-ch:
			if v == want {
				return true
			}
		case <-timeout:
			return false
		}
	}
}

func versions(from, to kv.Version) []kv.Version {
	var vs []kv.Version
	for v := from; v <= to; v++ {
		vs = append(vs, v)
	}
	return vs
}

func TestNetworkCluster(t *testing.T) {
	start := time.Now()
	c := newNetCluster(t, 3, 1, 2)
	subs := make([]<-chan bool, 3)
	for i, l := range c.logs {
		subs[i], _ = l.Subscribe()
	}
	lead := c.waitLeader()
	ll := c.logs[lead]
	fol := (lead + 1) % 3
	t.Logf("leader %s after %v", c.peers[lead].ID, time.Since(start))

	// A follower rejects appends at once, and they do not block it.
	t0 := time.Now()
	err := c.logs[fol].Append(&logentry.Entry{Version: 1, Epoch: 1, Mutations: []logentry.TaggedMutation{mut("x", 1)}}).Wait(ctxT(t))
	if !errors.Is(err, ErrNotLeader) || time.Since(t0) > 100*time.Millisecond {
		t.Fatalf("append on a follower: %v after %v", err, time.Since(t0))
	}
	if err := c.logs[fol].VerifyLeader(ctxT(t)); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("VerifyLeader on a follower: %v", err)
	}
	if _, err := c.logs[fol].BeginGeneration(ctxT(t), 1); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("BeginGeneration on a follower: %v", err)
	}
	if err := ll.VerifyLeader(ctxT(t)); err != nil {
		t.Fatalf("VerifyLeader on the leader: %v", err)
	}
	// The follower may not have heard from the leader yet.
	wait.For(t, "the follower sees the leader", func() bool {
		id, addr := c.logs[fol].Leader()
		return id == c.peers[lead].ID && addr == c.peers[lead].Addr
	})

	// Generation 1: appends on the leader reach every replica.
	v, err := ll.BeginGeneration(ctxT(t), 1)
	if err != nil || v != 0 {
		t.Fatalf("BeginGeneration(1) = %d, %v", v, err)
	}
	a := &appender{t: t, l: ll, last: v}
	appendN := func(a *appender, epoch uint64, from, to kv.Version) []*logentry.Future {
		var fs []*logentry.Future
		for v := from; v <= to; v++ {
			fs = append(fs, a.l.Append(&logentry.Entry{Version: v, PrevVersion: a.last, Epoch: epoch, Mutations: []logentry.TaggedMutation{mut(fmt.Sprint(v), 1, 2)}}))
			a.last = v
		}
		return fs
	}
	waitAll(t, appendN(a, 1, 1, 20))
	for i := range c.logs {
		if vs := c.waitPeek(i, 1, 20); !slices.Equal(vs, versions(1, 20)) {
			t.Fatalf("replica %d holds %v", i, vs)
		}
	}

	// Generation 2 fences the proxy of generation 1.
	if _, err := ll.BeginGeneration(ctxT(t), 1); !errors.Is(err, logentry.ErrStaleEpoch) {
		t.Fatalf("BeginGeneration(1) again: %v", err)
	}
	v, err = ll.BeginGeneration(ctxT(t), 2)
	if err != nil || v != 20 {
		t.Fatalf("BeginGeneration(2) = %d, %v", v, err)
	}
	if err := appendN(&appender{t: t, l: ll, last: 20}, 1, 21, 21)[0].Wait(ctxT(t)); !errors.Is(err, logentry.ErrStaleEpoch) {
		t.Fatalf("append of epoch 1 after generation 2: %v", err)
	}
	a = &appender{t: t, l: ll, last: v}
	waitAll(t, appendN(a, 2, 21, 40))
	if s := ll.Stats(); s.Epoch != 2 || !s.Network || s.Leader != 0 || s.LeaderID != c.peers[lead].ID || s.LastVersion != 40 || s.Running != 1 {
		t.Fatalf("leader stats %+v", s)
	}
	if s := c.logs[fol].Stats(); s.Leader != -1 || !s.Network {
		t.Fatalf("follower stats %+v", s)
	}
	// Pops replicate from the leader and trim every replica.
	ll.Pop(1, 10)
	ll.Pop(2, 15)
	if err := ll.SyncPops(ctxT(t)); err != nil {
		t.Fatalf("SyncPops on the leader: %v", err)
	}
	if err := c.logs[fol].SyncPops(ctxT(t)); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("SyncPops on a follower: %v", err)
	}
	for i := range c.logs {
		wait.For(t, fmt.Sprintf("replica %d trimmed to 10", i), func() bool { return c.logs[i].Stats().Trimmed == 10 })
	}

	// Close the leader with appends in flight: another replica takes over,
	// and every acknowledged append survives.
	inflight := appendN(a, 2, 41, 200)
	if err := inflight[10].Wait(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	t0 = time.Now()
	if err := ll.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	c.logs[lead] = nil
	acked := kv.Version(40)
	for _, f := range inflight {
		err := f.Wait(ctxT(t))
		switch {
		case err == nil:
			if f.Version() != acked+1 {
				t.Fatalf("append %d acknowledged after %d", f.Version(), acked)
			}
			acked = f.Version()
		case errors.Is(err, ErrCommitUnknown), errors.Is(err, ErrPrevVersion), errors.Is(err, ErrClosed):
		default:
			t.Fatalf("in-flight append %d: %v", f.Version(), err)
		}
	}
	// The subscription holds the latest state: false once closed.
	if !waitSub(subs[lead], false) {
		t.Fatal("closed leader's subscription still says leading")
	}
	old := lead
	lead = c.waitLeader()
	ll = c.logs[lead]
	t.Logf("new leader %s %v after the close; %d acknowledged", c.peers[lead].ID, time.Since(t0), acked)
	if !waitSub(subs[lead], true) {
		t.Fatal("new leader's subscription never said leading")
	}

	// The new leader's Log never saw generation 2 begin: the state machine
	// itself rejects the old proxy's entry, on every replica.
	last, err := ll.Resync(ctxT(t))
	if err != nil || last < acked {
		t.Fatalf("Resync on the new leader: %d, %v (acknowledged %d)", last, err, acked)
	}
	if err := appendN(&appender{t: t, l: ll, last: last}, 1, last+1, last+1)[0].Wait(ctxT(t)); !errors.Is(err, logentry.ErrStaleEpoch) {
		t.Fatalf("append of epoch 1 on the new leader: %v", err)
	}
	v, err = ll.BeginGeneration(ctxT(t), 3)
	if err != nil || v != last {
		t.Fatalf("BeginGeneration(3) = %d, %v; want %d", v, err, last)
	}
	a = &appender{t: t, l: ll, last: v}
	waitAll(t, appendN(a, 3, v+1, v+20))
	final := v + 20
	for i := range c.logs {
		if c.logs[i] == nil {
			continue
		}
		if vs := c.waitPeek(i, 1, final); !slices.Equal(vs, versions(11, final)) {
			t.Fatalf("replica %d holds %v, want 11..%d", i, vs, final)
		}
	}

	// The closed replica reopens on its directory and catches up.
	c.trs[old] = newTCPTransport(t, c.peers[old].Addr)
	c.logs[old] = openLog(t, c.options(old, c.trs[old], nil))
	if vs := c.waitPeek(old, 1, final); !slices.Equal(vs, versions(11, final)) {
		t.Fatalf("reopened replica holds %v, want 11..%d", vs, final)
	}
	if s := c.logs[old].Stats(); s.Epoch != 3 || s.Trimmed != 10 || s.Popped[1] != 10 || s.Popped[2] != 15 {
		t.Fatalf("reopened replica: %+v", s)
	}

	// Cut the leader off the network (its outgoing RPCs fail) with appends
	// in flight: it loses leadership and reports what it could not commit
	// as ErrCommitUnknown; the others elect a leader whose generation
	// starts above every acknowledged append.
	inflight = appendN(a, 3, final+1, final+100)
	cut := lead
	t0 = time.Now()
	c.trs[cut].cut.Store(true)
	inflight = append(inflight, appendN(a, 3, final+101, final+200)...)
	acked, unknown := final, 0
	for _, f := range inflight {
		err := f.Wait(ctxT(t))
		switch {
		case err == nil:
			if f.Version() != acked+1 {
				t.Fatalf("append %d acknowledged after %d", f.Version(), acked)
			}
			acked = f.Version()
		case errors.Is(err, ErrCommitUnknown), errors.Is(err, ErrPrevVersion):
			unknown++
		default:
			t.Fatalf("in-flight append %d: %v", f.Version(), err)
		}
	}
	wait.For(t, "a leader cut off from its followers steps down", func() bool { return !c.logs[cut].IsLeader() })
	if err := c.logs[cut].VerifyLeader(ctxT(t)); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("VerifyLeader on the cut-off leader: %v", err)
	}
	cutLog := c.logs[cut]
	c.logs[cut] = nil
	lead = c.waitLeader()
	ll = c.logs[lead]
	t.Logf("cut off the leader: %d acknowledged, %d unknown, new leader %s after %v", acked-final, unknown, c.peers[lead].ID, time.Since(t0))
	v, err = ll.BeginGeneration(ctxT(t), 4)
	if err != nil || v < acked {
		t.Fatalf("BeginGeneration(4) = %d, %v; acknowledged up to %d", v, err, acked)
	}
	a = &appender{t: t, l: ll, last: v}
	waitAll(t, appendN(a, 4, v+1, v+10))
	for i := range c.logs {
		if c.logs[i] != nil {
			if vs := c.waitPeek(i, 1, v+10); !slices.Equal(vs, versions(11, v+10)) {
				t.Fatalf("replica %d holds %v, want 11..%d", i, vs, v+10)
			}
		}
	}
	if err := cutLog.Close(); err != nil {
		t.Logf("closing the cut-off replica: %v", err)
	}
	t.Logf("total %v", time.Since(start))
}

// TestNetworkOptions checks the validation of network options and that a
// directory keeps its mode.
func TestNetworkOptions(t *testing.T) {
	dir := t.TempDir()
	openLog(t, testOptions(dir, 1)).Close()
	peers := []Peer{{ID: "a", Addr: "127.0.0.1:1"}, {ID: "b", Addr: "127.0.0.1:2"}}
	for _, tc := range []struct {
		name string
		opts Options
	}{
		{"embedded dir", Options{Dir: dir, Network: &NetworkOptions{LocalID: "a", Peers: peers}}},
		{"replicas mismatch", Options{Dir: t.TempDir(), Replicas: 3, Network: &NetworkOptions{LocalID: "a", Peers: peers}}},
		{"unknown local id", Options{Dir: t.TempDir(), Network: &NetworkOptions{LocalID: "c", Peers: peers}}},
		{"duplicate peer", Options{Dir: t.TempDir(), Network: &NetworkOptions{LocalID: "a", Peers: append(peers, peers[0])}}},
	} {
		_, tr := raft.NewInmemTransport("")
		tc.opts.Logger = discardLogger()
		tc.opts.Network.Transport = tr
		if l, err := Open(tc.opts); err == nil {
			l.Close()
			t.Errorf("%s: Open succeeded", tc.name)
		}
	}
	// A network replica's directory does not reopen in embedded mode.
	ndir := t.TempDir()
	_, tr := raft.NewInmemTransport("127.0.0.1:1")
	l, err := Open(Options{Dir: ndir, Logger: discardLogger(), Network: &NetworkOptions{LocalID: "a", Peers: peers, Transport: tr}})
	if err != nil {
		t.Fatal(err)
	}
	if l.IsLeader() {
		t.Fatal("a replica without its peers leads")
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if l, err := Open(testOptions(ndir, 2)); err == nil {
		l.Close()
		t.Fatal("a network replica's directory opened in embedded mode")
	}
}

// TestHoldBoundDropsTag: a tag that never pops is force-popped once the log
// holds more than HoldBytes, the system tag never.
func TestHoldBoundDropsTag(t *testing.T) {
	opts := testOptions(t.TempDir(), 1, systemTag, 1, 2)
	opts.MemoryBytes = 32 << 10
	opts.HoldBytes = 128 << 10
	l := openLog(t, opts)
	defer l.Close()
	a := newAppender(t, l)
	big := func(v kv.Version) logentry.TaggedMutation {
		return logentry.TaggedMutation{Mutation: kv.Mutation{Type: kv.MutSet, Key: []byte(fmt.Sprint(v)), Param: make([]byte, 4<<10)}, Tags: []kv.Tag{systemTag, 1, 2}}
	}
	// The system tag and tag 1 keep up; tag 2 (a dead stash) never pops.
	for v := kv.Version(1); v <= 40; v++ {
		a.mustAppend(v, big(v))
		l.Pop(systemTag, v)
		l.Pop(1, v)
	}
	if err := l.SyncPops(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	s := l.Stats()
	if s.Memory+s.Spilled > opts.HoldBytes || len(s.Dropped) != 1 || s.Dropped[2] == 0 || s.Trimmed != s.Dropped[2] {
		t.Fatalf("after passing HoldBytes: %+v", s)
	}
	if _, _, err := l.Peek(ctxT(t), 2, 0, 0); !errors.Is(err, logentry.ErrTrimmed) {
		t.Fatalf("dropped tag peeks below the trim point: %v", err)
	}
	if msgs, _ := mustPeek(t, l, 2, s.Dropped[2], 0); len(msgs) == 0 || msgs[len(msgs)-1].Version != 40 {
		t.Fatalf("dropped tag peeks from its trim point: %d messages", len(msgs))
	}

	// Past HoldBytes with only the system tag behind: nothing is dropped.
	for v := kv.Version(41); v <= 80; v++ {
		a.mustAppend(v, big(v))
		l.Pop(1, v)
		l.Pop(2, v)
	}
	if err := l.SyncPops(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if s2 := l.Stats(); s2.Memory+s2.Spilled <= opts.HoldBytes || len(s2.Dropped) != 1 || s2.Trimmed != 40 {
		t.Fatalf("with the system tag behind: %+v", s2)
	}
}

// TestHoldBoundKeepsTagsMayDropRefuses: a tag MayDrop keeps (a durable
// stash with no other live replica) is never force-popped, however much
// the log holds: Withheld names it, and another tag behind is not dropped
// past it either (that would lose its entries and free nothing). Once
// MayDrop allows it (a replica came back), the bound drops it as before,
// and Withheld clears.
func TestHoldBoundKeepsTagsMayDropRefuses(t *testing.T) {
	opts := testOptions(t.TempDir(), 1, systemTag, 1, 2, 3)
	opts.MemoryBytes = 32 << 10
	opts.HoldBytes = 128 << 10
	var mayDrop2 atomic.Bool
	opts.MayDrop = func(tag kv.Tag) bool { return tag != 2 || mayDrop2.Load() }
	l := openLog(t, opts)
	defer l.Close()
	a := newAppender(t, l)
	big := func(v kv.Version) logentry.TaggedMutation {
		return logentry.TaggedMutation{Mutation: kv.Mutation{Type: kv.MutSet, Key: []byte(fmt.Sprint(v)), Param: make([]byte, 4<<10)}, Tags: []kv.Tag{systemTag, 1, 2, 3}}
	}
	// Tag 2 (kept) never pops; tag 3 (droppable) pops up to 20 only.
	for v := kv.Version(1); v <= 60; v++ {
		a.mustAppend(v, big(v))
		l.Pop(systemTag, v)
		l.Pop(1, v)
		if v <= 20 {
			l.Pop(3, v)
		}
	}
	if err := l.SyncPops(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	s := l.Stats()
	if len(s.Dropped) != 0 || s.Memory+s.Spilled <= opts.HoldBytes || s.Trimmed != 0 {
		t.Fatalf("with only a kept tag furthest behind: %+v", s)
	}
	if tag, ok := l.Withheld(); !ok || tag != 2 {
		t.Fatalf("Withheld = %d, %v; want 2, true", tag, ok)
	}
	if msgs, _ := mustPeek(t, l, 2, 0, 0); len(msgs) != 60 {
		t.Fatalf("the kept tag peeks %d messages, want all 60", len(msgs))
	}
	if msgs, _ := mustPeek(t, l, 3, 20, 0); len(msgs) != 40 {
		t.Fatalf("the droppable tag behind it peeks %d messages from its pop, want 40", len(msgs))
	}

	// A replica of tag 2's shards is back: it may be dropped now, and
	// then tag 3, behind too (a flush drops one tag).
	mayDrop2.Store(true)
	for range 2 {
		if err := l.SyncPops(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	}
	s = l.Stats()
	if s.Dropped[2] == 0 || s.Dropped[3] == 0 || s.Memory+s.Spilled > opts.HoldBytes {
		t.Fatalf("once MayDrop allows it: %+v", s)
	}
	if _, ok := l.Withheld(); ok {
		t.Fatal("Withheld still set after the bound dropped the tag")
	}
}

// TestFSMEpoch: the state machine rejects entries of an epoch below its
// own, and keeps its epoch in snapshots.
func TestFSMEpoch(t *testing.T) {
	f := newFSM(0, discardLogger(), func() {})
	apply := func(b []byte) (any, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.applyRecordLocked(b)
	}
	if _, err := apply(encodeEntry(&logentry.Entry{Version: 1, Mutations: []logentry.TaggedMutation{mut("a", 1)}})); err != nil {
		t.Fatal(err)
	}
	if resp, err := apply(encodeGeneration(2)); err != nil || resp != kv.Version(1) {
		t.Fatalf("generation 2: %v, %v", resp, err)
	}
	for _, epoch := range []uint64{2, 1} {
		if _, err := apply(encodeGeneration(epoch)); !errors.Is(err, logentry.ErrStaleEpoch) {
			t.Fatalf("generation %d at epoch 2: %v", epoch, err)
		}
	}
	if _, err := apply(encodeEntry(&logentry.Entry{Version: 2, PrevVersion: 1, Epoch: 1})); !errors.Is(err, logentry.ErrStaleEpoch) {
		t.Fatalf("entry of epoch 1: %v", err)
	}
	if _, err := apply(encodeEntry(&logentry.Entry{Version: 2, PrevVersion: 1, Epoch: 2, Mutations: []logentry.TaggedMutation{mut("b", 1)}})); err != nil {
		t.Fatalf("entry of epoch 2: %v", err)
	}
	nf, err := decodeSnapshot(snapshotBytes(t, f), 0, discardLogger(), func() {})
	if err != nil {
		t.Fatal(err)
	}
	if st := nf.state(); st.Epoch != 2 || st.Last != 2 || st.Entries != 2 {
		t.Fatalf("restored state %+v", st)
	}
	if msgs, _, err := nf.peek(1, 0, 0); err != nil || len(msgs) != 2 || msgs[1].Version != 2 {
		t.Fatalf("restored peek: %v %v", msgs, err)
	}
}
