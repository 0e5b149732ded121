package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/distash/distash/config"
	"github.com/distash/distash/internal/clock"
	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/logentry"
	"github.com/distash/distash/internal/proxy"
	"github.com/distash/distash/internal/resolver"
	"github.com/distash/distash/internal/sequencer"
	"github.com/distash/distash/internal/shardmap"
	"github.com/distash/distash/internal/testutil/wait"
	"github.com/distash/distash/internal/txlog"
)

// TestRoleErrMapsLogErrorsToRetryableCodes: what the log and raft return
// to a deposed or stopping role reaches the client as a retryable code,
// commit_unknown_result where the append may have happened, wrong_node
// where it certainly did not (and for read versions); never
// internal_error. The first case is the error the clients saw
// when a paused leader woke up.
func TestRoleErrMapsLogErrorsToRetryableCodes(t *testing.T) {
	for _, c := range []struct {
		err          error
		commit, read kv.Code // the code of a commit's and a read version's error
	}{
		{fmt.Errorf("%w: %w", txlog.ErrNotLeader, raft.ErrLeadershipLost), kv.CodeWrongNode, kv.CodeWrongNode},
		{txlog.ErrNotLeader, kv.CodeWrongNode, kv.CodeWrongNode},
		{fmt.Errorf("%w: %w", txlog.ErrCommitUnknown, raft.ErrLeadershipLost), kv.CodeCommitUnknownResult, kv.CodeWrongNode},
		{fmt.Errorf("%w: %w", txlog.ErrCommitUnknown, raft.ErrNotLeader), kv.CodeCommitUnknownResult, kv.CodeWrongNode},
		{fmt.Errorf("%w: entry 5 of epoch 1 after generation 2 began", logentry.ErrStaleEpoch), kv.CodeWrongNode, kv.CodeWrongNode},
		{txlog.ErrNoLeader, kv.CodeWrongNode, kv.CodeWrongNode},
		{txlog.ErrClosed, kv.CodeCommitUnknownResult, kv.CodeWrongNode},
		{raft.ErrLeadershipLost, kv.CodeCommitUnknownResult, kv.CodeWrongNode},
		{raft.ErrRaftShutdown, kv.CodeCommitUnknownResult, kv.CodeWrongNode},
		{context.DeadlineExceeded, kv.CodeCommitUnknownResult, kv.CodeWrongNode},
		{kv.Errorf(kv.CodeNotCommitted, "conflict"), kv.CodeNotCommitted, kv.CodeNotCommitted},
		{kv.Errorf(kv.CodePoolFull, "full"), kv.CodePoolFull, kv.CodePoolFull},
	} {
		if got := kv.CodeOf(roleErr(c.err, true)); got != c.commit {
			t.Errorf("commit failing with %q: code %v, want %v", c.err, got, c.commit)
		}
		if got := kv.CodeOf(roleErr(c.err, false)); got != c.read {
			t.Errorf("read version failing with %q: code %v, want %v", c.err, got, c.read)
		}
	}
	if roleErr(nil, true) != nil || roleErr(nil, false) != nil {
		t.Error("roleErr(nil) is not nil")
	}
}

// TestDeposedProxyEndsInFlightWorkRetryable runs a commit proxy and a GRV
// proxy over the leader of a real three-replica network log, then cuts
// the leader off from the other replicas (its connections stay, nothing
// arrives: as if its followers stopped hearing it) while commits and
// read-version requests are in flight and keep coming. Every one of them
// ends, through the service's mapping, with success or a retryable code;
// none with internal_error, none hangs.
func TestDeposedProxyEndsInFlightWorkRetryable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := t.TempDir()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var peers []txlog.Peer
	var trans []*raft.InmemTransport
	for i := range 3 {
		addr, tr := raft.NewInmemTransport(raft.ServerAddress(fmt.Sprint("log", i)))
		trans = append(trans, tr)
		peers = append(peers, txlog.Peer{ID: fmt.Sprint("n", i), Addr: string(addr)})
	}
	for _, a := range trans {
		for _, b := range trans {
			if a != b {
				a.Connect(b.LocalAddr(), b)
			}
		}
	}
	logs := make([]*txlog.Log, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Go(func() {
			logs[i], errs[i] = txlog.Open(txlog.Options{Dir: filepath.Join(dir, fmt.Sprint(i)), Logger: quiet,
				Network: &txlog.NetworkOptions{LocalID: peers[i].ID, Peers: peers, Transport: trans[i]}})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
		defer logs[i].Close()
	}
	var l *txlog.Log
	var leader int
	wait.For(t, "a log leader", func() bool {
		for i, lg := range logs {
			if lg.IsLeader() {
				l, leader = lg, i
			}
		}
		return l != nil
	})
	recovered, err := l.BeginGeneration(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	seq := sequencer.New(clock.Real{}, recovered)
	var shards []shardmap.Shard
	var tags []kv.Tag
	for i, p := range cfg.Pools {
		tags = append(tags, kv.Tag(i+1))
		shards = append(shards, shardmap.Shard{Begin: []byte(p.Prefix), End: kv.PrefixEnd([]byte(p.Prefix)), Pool: p.Name, Team: []kv.Tag{kv.Tag(i + 1)}})
	}
	cp := proxy.NewCommitProxy(proxy.CommitOptions{Pools: proxyPools(cfg), Sequencer: seq, Resolver: resolver.NewAt(5_000_000, recovered),
		Log: l, Epoch: 1, Shards: shardmap.New(shards), Usage: proxy.NewUsageBoard(), MaxInflightBatches: 4, Logger: quiet})
	grv := proxy.NewGRVProxy(seq, nil).WithConfirm(l.VerifyLeader)
	rctx, rcancel := context.WithCancel(ctx)
	defer rcancel()
	go cp.Run(rctx)
	key := []byte(cfg.Pools[0].Prefix + "k")
	commit := func(i int) error {
		_, err := cp.Commit(ctx, proxy.Txn{Mutations: []kv.Mutation{{Type: kv.MutSet, Key: key, Param: fmt.Append(nil, i)}},
			WriteConflicts: []kv.KeyRange{kv.PointRange(key)}})
		return roleErr(err, true)
	}
	if err := commit(0); err != nil {
		t.Fatalf("commit before the cut: %v", err)
	}
	if _, err := grv.GetReadVersion(ctx); err != nil {
		t.Fatalf("read version before the cut: %v", err)
	}

	var mu sync.Mutex
	results := map[kv.Code]int{}
	answered := 0
	note := func(err error) {
		mu.Lock()
		results[kv.CodeOf(err)]++
		answered++
		mu.Unlock()
	}
	answers := func() int {
		mu.Lock()
		defer mu.Unlock()
		return answered
	}
	ok := func() int {
		mu.Lock()
		defer mu.Unlock()
		return results[kv.CodeOK]
	}
	stop := make(chan struct{})
	var load sync.WaitGroup
	for w := range 8 {
		load.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if w%2 == 0 {
					note(commit(i))
				} else {
					_, err := grv.GetReadVersion(ctx)
					note(roleErr(err, false))
				}
			}
		})
	}
	// The load runs against the leader before the cut.
	wait.For(t, "16 requests served before the cut", func() bool { return ok() >= 16 })
	trans[leader].DisconnectAll()
	for i, tr := range trans {
		if i != leader {
			tr.Disconnect(trans[leader].LocalAddr())
		}
	}
	// The old leader steps down once its lease runs out without a quorum.
	wait.Within(t, 10*time.Second, "the cut-off leader steps down", func() bool { return !l.IsLeader() })
	// ... and the load goes on against the deposed proxy: its requests
	// end (with retryable errors), they do not wait.
	deposed := answers()
	wait.Within(t, 20*time.Second, "8 requests answered after the step-down", func() bool { return answers() >= deposed+8 })
	close(stop)
	done := make(chan struct{})
	go func() { load.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("requests to the deposed proxy still wait 20 s after it stepped down")
	}
	t.Logf("results by code: %v", results)
	for code, n := range results {
		if code != kv.CodeOK && !code.Retryable() {
			t.Errorf("%d requests ended with %s (%d), not retryable", n, code.Name(), code)
		}
	}
	if results[kv.CodeWrongNode]+results[kv.CodeCommitUnknownResult] == 0 {
		t.Error("no request failed once the leader was cut off")
	}
}
