package txlog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/logentry"
	"github.com/distash/distash/internal/testutil/wait"
)

// replicaVersions returns the entry versions held by replica i and its last
// version, or ok=false if it is not running.
func replicaVersions(l *Log, i int) (vs []kv.Version, last kv.Version, ok bool) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	r := l.reps[i]
	if !r.running {
		return nil, 0, false
	}
	r.fsm.mu.RLock()
	defer r.fsm.mu.RUnlock()
	for _, e := range r.fsm.entries {
		vs = append(vs, e.version)
	}
	return vs, r.fsm.lastVersion(), true
}

// waitConverged waits until every running replica has applied up to want
// and holds the same entries.
func waitConverged(t *testing.T, l *Log, want kv.Version) {
	t.Helper()
	converged := func() bool {
		var ref []kv.Version
		for i := range l.reps {
			vs, last, running := replicaVersions(l, i)
			if !running {
				continue
			}
			if last != want || (ref != nil && !slices.Equal(vs, ref)) {
				return false
			}
			ref = vs
		}
		return true
	}
	if !wait.Until(wait.Timeout, converged) {
		for i := range l.reps {
			vs, last, running := replicaVersions(l, i)
			t.Logf("replica %d running=%v last=%d entries=%d", i, running, last, len(vs))
		}
		t.Fatalf("replicas did not converge on version %d", want)
	}
}

func waitAll(t *testing.T, fs []*logentry.Future) {
	t.Helper()
	for _, f := range fs {
		if err := f.Wait(ctxT(t)); err != nil {
			t.Fatalf("append %d: %v", f.Version(), err)
		}
	}
}

func TestThreeReplicas(t *testing.T) {
	opts := testOptions(t.TempDir(), 3, 1, 2)
	opts.TrailingLogs = 20 // a follower that misses more needs a snapshot
	opts.SnapshotThreshold = 1 << 30
	opts.SnapshotInterval = time.Hour
	l := openLog(t, opts)
	defer l.Close()
	a := newAppender(t, l)
	next := kv.Version(1)
	appendRange := func(n int) []*logentry.Future {
		var fs []*logentry.Future
		for i := 0; i < n; i++ {
			fs = append(fs, a.append(next, mut(fmt.Sprint(next), 1), mut(fmt.Sprint("b", next), 2)))
			next++
		}
		return fs
	}
	waitAll(t, appendRange(50))
	waitConverged(t, l, 50)

	// A stopped follower does not stop commits.
	leader := l.Stats().Leader
	if leader < 0 {
		t.Fatal("no leader")
	}
	follower := (leader + 1) % 3
	if err := l.StopReplica(follower); err != nil {
		t.Fatal(err)
	}
	if s := l.Stats(); s.Running != 2 {
		t.Fatalf("running %d", s.Running)
	}
	waitAll(t, appendRange(100))
	l.Pop(1, 120)
	l.Pop(2, 110)
	if err := l.SyncPops(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	// compact the leader's log past what the follower has: it catches up
	// from a snapshot (FSM.Restore over the transport)
	if err := l.Snapshot(); err != nil {
		t.Fatal(err)
	}
	if err := l.StartReplica(follower); err != nil {
		t.Fatal(err)
	}
	waitConverged(t, l, 150)
	if vs, _, _ := replicaVersions(l, follower); len(vs) != 40 || vs[0] != 111 {
		t.Fatalf("restarted follower holds %d entries from %v", len(vs), vs[:1])
	}
	if snaps, _ := os.ReadDir(filepath.Join(opts.Dir, fmt.Sprintf("replica-%d", follower), "snapshots")); len(snaps) == 0 {
		t.Fatalf("restarted follower caught up without installing a snapshot")
	}

	// Stop the leader with appends in flight: each acknowledged one must be
	// in the log; the others may or may not be.
	leader = l.Stats().Leader
	inflight := appendRange(200)
	if err := inflight[40].Wait(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if err := l.StopReplica(leader); err != nil {
		t.Fatal(err)
	}
	acked := map[kv.Version]bool{}
	for _, f := range inflight {
		err := f.Wait(ctxT(t))
		switch {
		case err == nil:
			acked[f.Version()] = true
		case errors.Is(err, ErrCommitUnknown), errors.Is(err, ErrPrevVersion), errors.Is(err, ErrNoLeader):
		default:
			t.Fatalf("in-flight append %d: unexpected error %v", f.Version(), err)
		}
	}
	last, err := l.Resync(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	s := l.Stats()
	if s.Leader < 0 || s.Leader == leader {
		t.Fatalf("leader after stopping %d: %d", leader, s.Leader)
	}
	t.Logf("stopped leader %d with 200 appends in flight: %d acked, log ends at %d, new leader %d", leader, len(acked), last, s.Leader)
	msgs, end := mustPeek(t, l, 1, 110, 0)
	present := map[kv.Version]bool{}
	for i, m := range msgs {
		if m.Version != kv.Version(111+i) {
			t.Fatalf("log not contiguous: message %d has version %d", i, m.Version)
		}
		present[m.Version] = true
	}
	if end != last {
		t.Fatalf("peek end %d, resync %d", end, last)
	}
	for v := range acked {
		if !present[v] {
			t.Fatalf("acknowledged version %d lost", v)
		}
	}

	// Appends go on with the new leader, chained from the resynced version.
	a.last, next = last, last+1
	waitAll(t, appendRange(50))
	if err := l.StartReplica(leader); err != nil {
		t.Fatal(err)
	}
	if err := l.StartReplica(leader); err == nil {
		t.Fatal("starting a running replica succeeded")
	}
	waitAll(t, appendRange(10))
	waitConverged(t, l, next-1)
	if s := l.Stats(); s.Running != 3 || s.LastVersion != next-1 {
		t.Fatalf("final stats %+v", s)
	}
}

func TestCloseWithoutQuorum(t *testing.T) {
	opts := testOptions(t.TempDir(), 3, 1)
	opts.LeaderTimeout = time.Second
	l := openLog(t, opts)
	a := newAppender(t, l)
	a.mustAppend(1, mut("a", 1))
	leader := l.Stats().Leader
	for i := 0; i < 3; i++ {
		if i != leader {
			if err := l.StopReplica(i); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The leader cannot commit; its futures fail once it steps down or
	// shuts down, never hang.
	var fs []*logentry.Future
	for v := kv.Version(2); v < 50; v++ {
		fs = append(fs, a.append(v, mut(fmt.Sprint(v), 1)))
	}
	l.Pop(1, 1)
	start := time.Now()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for _, f := range fs {
		err := f.Wait(ctxT(t))
		if err == nil || !(errors.Is(err, ErrCommitUnknown) || errors.Is(err, ErrNoLeader)) {
			t.Fatalf("append %d without quorum: %v", f.Version(), err)
		}
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("Close without quorum took %v", d)
	}
	// Reopening with all replicas recovers at least the committed entry.
	l = openLog(t, opts)
	defer l.Close()
	if v := l.LastVersion(); v < 1 {
		t.Fatalf("LastVersion after reopen %d", v)
	}
}
