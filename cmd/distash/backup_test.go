package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distash/distash"
	"github.com/distash/distash/distashtest"
	"github.com/distash/distash/internal/backup"
	"github.com/distash/distash/internal/clustertest"
	"github.com/distash/distash/internal/testutil/bank"
	"github.com/distash/distash/internal/testutil/wait"
	"github.com/distash/distash/internal/version"
)

// backupClusterTOML is the source cluster of the backup process test: the
// bank's durable pool (3 stashes, R=2, shards of up to 1 MiB, so a few
// MiB make several), an ephemeral pool a backup leaves out, and three log
// replicas.
const backupClusterTOML = `
[cluster]
shard_bytes = "1MiB"

[log]
replicas = 3

[[pool]]
name = "cache"
prefix = "c/"
medium = "dram"
mode = "ephemeral"
engine = "memory"
stashes = 1
replication = 1

[[pool]]
name = "data"
prefix = "d/"
medium = "ssd"
mode = "durable"
engine = "pebble"
stashes = 3
replication = 2
`

// restoreTargetTOML is the cluster a backup is restored into: the same
// pools, in one process.
const restoreTargetTOML = `
[[pool]]
name = "cache"
prefix = "c/"
medium = "dram"
mode = "ephemeral"
engine = "memory"

[[pool]]
name = "data"
prefix = "d/"
medium = "ssd"
mode = "durable"
engine = "pebble"
`

// ackWriter writes new keys of the data pool, one per transaction, and
// records the commit version and value of each acknowledged one. Each
// attempt of a transaction writes its own value (the attempt's number
// before the padding): an attempt whose outcome the client could not know
// (commit_unknown_result, around a log leader's kill) may have committed
// at an earlier version than the retry that was acknowledged, and only
// the acknowledged attempt's value present before its version is a fault.
type ackWriter struct {
	db *distash.DB

	mu    sync.Mutex
	acked map[string]ackedWrite
}

type ackedWrite struct {
	version int64  // the acknowledged commit's version
	value   string // the value the acknowledged attempt wrote
}

func (w *ackWriter) run(ctx context.Context, workers int) (wait func()) {
	var wg sync.WaitGroup
	pad := strings.Repeat("p", 200) // the pool grows, its shards split and move
	for g := 0; g < workers; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				key := fmt.Sprintf("d/ack/%d/%08d", g, i)
				var last *distash.Tx // the attempt that committed
				var value string
				attempt := 0
				tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				err := w.db.Transact(tctx, func(tr *distash.Tx) error {
					attempt++
					last, value = tr, fmt.Sprintf("%d:%s", attempt, pad)
					tr.Set([]byte(key), []byte(value))
					tr.Set([]byte("c/"+key), []byte("cached")) // ephemeral: not backed up
					return nil
				})
				cancel()
				if err == nil {
					w.mu.Lock()
					w.acked[key] = ackedWrite{version: last.CommittedVersion(), value: value}
					w.mu.Unlock()
				}
			}
		}(g)
	}
	return wg.Wait
}

func (w *ackWriter) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.acked)
}

// readAt reads every pair of the data pool at version v (0: the latest)
// and returns them with the version read.
func readAt(ctx context.Context, db *distash.DB, v int64) (map[string]string, int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second) // a version read too late is refused again and again
	defer cancel()
	out := map[string]string{}
	// at is the version asked for; v the one read at. A retry asks again
	// (with v = 0: a fresh read version; a retry at the first attempt's
	// version once pinned every retry to it until it left the window).
	at := v
	err := db.ReadTransact(ctx, func(tr *distash.Tx) error {
		if at != 0 {
			tr.SetReadVersion(at)
		}
		rv, err := tr.ReadVersion()
		if err != nil {
			return err
		}
		v = rv
		clear(out)
		kvs, err := tr.Snapshot().GetRange([]byte("d/"), []byte("d0"), distash.RangeOptions{})
		for _, p := range kvs {
			out[string(p.Key)] = string(p.Value)
		}
		return err
	})
	return out, v, err
}

// TestProcessClusterBackupThroughKillsAndMoves is issue 23's backup test on
// real processes: a continuous backup of a 7-process cluster under the
// bank and a writer of acknowledged keys, during which a stash node is
// killed with SIGKILL and restarted, then the node holding the log's raft
// leader, and a stash is excluded so data distribution moves its shards
// away. The backup is then restored, with the CLI, at its first
// restorable version, one in the middle and its last, each into a fresh
// cluster: each restore equals the source's snapshot read at that
// version, keeps the bank's total, and holds every write acknowledged by
// then and none acknowledged after.
func TestProcessClusterBackupThroughKillsAndMoves(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 7 real server processes")
	}
	t.Parallel() // its processes wait on their timers (elections, failure_wait, restarts) most of the time: overlaps another such test
	c := newProcs(t, clustertest.ProcsOptions{TOML: backupClusterTOML, Verbose: true,
		Nodes: clustertest.Specs("tx1 transaction", "tx2 transaction", "tx3 transaction",
			"data1 stash data", "data2 stash data", "data3 stash data", "cache1 stash cache")})
	began := time.Now()
	phase := func(what string) { t.Logf("%6.1fs %s", time.Since(began).Seconds(), what) }
	c.start()
	phase("cluster serves")
	checkNodesProtocol(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	db, b := c.openBank(ctx)
	defer db.Close()
	cli := func(args ...string) (string, error) {
		if !slices.Contains(args, "--timeout") {
			args = append(args, "--timeout", "20s")
		}
		return run(cliCmd(), append(args, "--cluster", c.Coordinators)...)
	}
	status := func() (backup.Status, error) {
		out, err := cli("backup", "status", "--json")
		if err != nil {
			return backup.Status{}, fmt.Errorf("%v: %s", err, out)
		}
		var st backup.Status
		return st, json.Unmarshal([]byte(out), &st)
	}
	var last backup.Status
	waitStatus := func(what string, ok func(backup.Status) bool) backup.Status {
		t.Helper()
		var lastErr error
		wait.Every(t, 100*time.Millisecond, 90*time.Second, what, func() bool {
			st, err := status()
			if err != nil {
				lastErr = err
				return false
			}
			last = st
			return ok(st)
		})
		if lastErr != nil {
			t.Logf("while waiting for %s, status failed at times: %v", what, lastErr)
		}
		return last
	}

	// 6 MiB of bulk: the backup's snapshot takes several chunks (of 1 MiB),
	// so the first kill usually comes while it runs.
	val := strings.Repeat("b", 8<<10)
	for i := 0; i < 768; i += 32 {
		if err := db.Transact(ctx, func(tr *distash.Tx) error {
			for j := i; j < i+32; j++ {
				tr.Set(fmt.Appendf(nil, "d/bulk/%05d", j), []byte(val))
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	phase("bulk written")
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	failures, waitBank := b.Run(wctx, 2, 7)
	w := &ackWriter{db: db, acked: map[string]ackedWrite{}}
	waitWriter := w.run(wctx, 2)
	// progressed waits for an acknowledged transfer and write after since,
	// then for the backup's log to pass a version committed after since.
	progressed := func(since time.Time, what string) {
		t.Helper()
		wait.Within(t, 60*time.Second, "commits after "+what, func() bool { return b.LastCommit.Load() > since.UnixNano() })
		_, v, err := readAt(ctx, db, 0)
		if err != nil {
			t.Fatalf("read after %s: %v", what, err)
		}
		st := waitStatus("the backup's log past "+what, func(s backup.Status) bool { return int64(s.RestorableTo) >= v })
		phase(fmt.Sprintf("backup copied to %d after %s (last error %q)", st.RestorableTo, what, st.LastError))
	}

	dir := t.TempDir()
	url := "file://" + dir
	if out, err := cli("backup", "start", "--to", url); err != nil || !strings.Contains(out, "started at version") {
		t.Fatalf("backup start: %v %s", err, out)
	}
	// kill -9 of a stash node while the snapshot runs, restarted. On a
	// fast machine the snapshot may end between two status polls (the
	// suite saw it): data1 is then killed just after it.
	st := waitStatus("the backup's snapshot to begin", func(s backup.Status) bool {
		return s.State == "snapshot" && s.RangeFiles > 0 || s.SnapshotDone
	})
	killed := time.Now()
	c.kill("data1")
	if st.SnapshotDone {
		phase(fmt.Sprintf("killed data1 just after the snapshot, which ended between two status polls (%d range files)", st.RangeFiles))
	} else {
		phase(fmt.Sprintf("killed data1 during the snapshot (%s, %d range files)", st.Snapshot, st.RangeFiles))
	}
	st = waitStatus("the first restorable version", func(s backup.Status) bool { return s.RestorableFrom > 0 })
	first := int64(st.RestorableFrom)
	wantFirst, _, err := readAt(ctx, db, first) // inside the MVCC window: read it now
	if err != nil {
		t.Fatalf("snapshot read at the first restorable version %d: %v", first, err)
	}
	phase(fmt.Sprintf("first restorable version %d: %d keys in %d range files", first, len(wantFirst), st.RangeFiles))
	progressed(killed, "kill -9 of data1")
	c.start("data1")
	phase("data1 restarted")

	// kill -9 of the node holding the log's raft leader, restarted.
	leader, roles := "", []string(nil)
	wait.Every(t, 100*time.Millisecond, 30*time.Second, "a log leader", func() bool {
		for _, n := range c.Transactions() {
			s, err := c.Status(ctx, n.Addr)
			if err == nil && slices.Contains(s.GetNode().GetRoles(), "log_leader") {
				leader, roles = n.Name, s.GetNode().GetRoles()
				return true
			}
		}
		return false
	})
	killed = time.Now()
	c.kill(leader)
	phase(fmt.Sprintf("killed %s, the log leader (roles %v)", leader, roles))
	progressed(killed, "kill -9 of the log leader "+leader)
	c.start(leader)
	phase(leader + " restarted")
	wantMid, mid, err := readAt(ctx, db, 0)
	if err != nil {
		t.Fatal(err)
	}

	// A shard move: data3 is excluded, data distribution moves its shards
	// to the two others.
	d, shares, err := poolDistribution(ctx, c.Coordinators, "data")
	if err != nil {
		t.Fatal(err)
	}
	phase(fmt.Sprintf("before the exclude: %d shards; shares %v", d.Shards, shares))
	if out, err := cli("exclude", c.node("data3").Addr, "--wait", "--timeout", "60s"); err != nil {
		t.Fatalf("exclude data3: %v %s", err, out)
	}
	phase("data3 holds no shard")
	progressed(time.Now(), "the exclude of data3")

	wcancel()
	waitBank()
	waitWriter()
	// Nothing writes the data pool from now on, but for commits that were
	// on their way when their Transact gave up. Once two snapshot reads,
	// before and after the backup's log passed the first, are equal, that
	// snapshot is the pool's state at every version between them, the last
	// restorable one among them. (A read at that version itself may be
	// refused: a shard moved since has no older versions on its new
	// stashes.)
	var wantLast map[string]string
	var lastV int64
	wait.Every(t, 10*time.Millisecond, 60*time.Second, "the data pool to stop changing", func() bool {
		before, end, err := readAt(ctx, db, 0)
		if err != nil {
			t.Fatal(err)
		}
		st = waitStatus("the log to pass the last write", func(s backup.Status) bool { return int64(s.RestorableTo) >= end })
		after, _, err := readAt(ctx, db, 0)
		if err != nil {
			t.Fatal(err)
		}
		wantLast, lastV = after, int64(st.RestorableTo)
		return maps.Equal(before, after)
	})
	phase(fmt.Sprintf("workload stopped: %d transfers (%d failed attempts), %d acknowledged writes; status %+v",
		b.Commits.Load(), failures.Load(), w.count(), st))
	if st.LastError != "" {
		t.Logf("the worker's last error (it retried): %s", st.LastError)
	}
	if out, err := cli("backup", "stop"); err != nil || !strings.Contains(out, "state: stopped") {
		t.Fatalf("backup stop: %v %s", err, out)
	}
	if out, err := run(cliCmd(), "backup", "verify", "--from", url); err != nil {
		t.Fatalf("backup verify: %v\n%s", err, out)
	}
	for _, r := range []struct {
		what string
		v    int64
		want map[string]string
	}{{"first", first, wantFirst}, {"middle", mid, wantMid}, {"last", lastV, wantLast}} {
		checkProcessRestore(t, ctx, url, r.what, r.v, r.want, w, b)
	}
	phase("three restores checked")
}

// checkProcessRestore restores the backup at url to version v into a fresh
// cluster with the CLI, and checks it against want (the source's snapshot
// read at v), the bank's total and the acknowledged writes.
func checkProcessRestore(t *testing.T, ctx context.Context, url, what string, v int64, want map[string]string, w *ackWriter, src *bank.Bank) {
	t.Helper()
	target := distashtest.Start(t, restoreTargetTOML)
	out, err := run(cliCmd(), "restore", "--from", url, "--version", fmt.Sprint(v), "--cluster", target.Server.Addr(), "--timeout", "60s")
	if err != nil || !strings.Contains(out, "restore: done") {
		t.Fatalf("restore of the %s version %d: %v\n%s", what, v, err, out)
	}
	have, _, err := readAt(ctx, target.DB, 0)
	if err != nil {
		t.Fatal(err)
	}
	diff := 0
	for k, val := range want {
		if have[k] != val {
			diff++
			if diff <= 5 {
				t.Errorf("%s version %d: %q restored as %q, want %q", what, v, k, have[k], val)
			}
		}
	}
	for k := range have {
		if _, ok := want[k]; !ok {
			diff++
			if diff <= 5 {
				t.Errorf("%s version %d: %q restored, absent from the source", what, v, k)
			}
		}
	}
	if diff > 0 {
		t.Errorf("%s version %d: %d keys differ from the source's snapshot (%d keys)", what, v, diff, len(want))
	}
	restored := &bank.Bank{DB: target.DB, Data: src.Data, Cache: src.Cache, Accounts: src.Accounts, Initial: src.Initial}
	if err := restored.Audit(ctx); err != nil {
		t.Errorf("%s version %d: %v", what, v, err)
	}
	var cached []distash.KeyValue
	if err := target.DB.ReadTransact(ctx, func(tr *distash.Tx) error {
		cached, err = tr.GetRange([]byte("c/"), []byte("c0"), distash.RangeOptions{Limit: 1})
		return err
	}); err != nil || len(cached) != 0 {
		t.Errorf("%s version %d: the ephemeral pool was restored (%v, %v)", what, v, cached, err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	by, after, earlier := 0, 0, 0
	for k, a := range w.acked {
		val, ok := have[k]
		switch cv := a.version; {
		case cv <= v && val != a.value:
			t.Errorf("%s version %d: write %s acknowledged at %d is missing (present %v, restored %.10q, acknowledged %.10q)", what, v, k, cv, ok, val, a.value)
		case cv > v && val == a.value:
			t.Errorf("%s version %d: write %s acknowledged at %d is present", what, v, k, cv)
		case cv > v && ok:
			earlier++ // an earlier attempt of unknown outcome committed
		case cv <= v:
			by++
		default:
			after++
		}
	}
	t.Logf("restored the %s version %d: %d keys, %d acknowledged writes present, %d acknowledged later absent, %d present from an earlier attempt of unknown outcome", what, v, len(have), by, after, earlier)
}

// TestCLIBackupOverTLS runs a backup of an embedded cluster served over
// mutual TLS with [auth]: the backup worker, a role of the server's own
// process, reads the cluster in process (its server certificate, which
// allows only server authentication, is no client certificate), so
// `backup status` shows the snapshot done and the log copied. An operator
// (admin) starts it and reads its status; a client without admin may not.
func TestCLIBackupOverTLS(t *testing.T) {
	_, as := startTLSServer(t, `
[[pool]]
name = "data"
prefix = "d/"
medium = "ssd"
mode = "durable"
engine = "pebble"

[auth]
[[auth.role]]
name = "app"
members = ["app1"]
read = ["data"]
write = ["data"]

[[auth.role]]
name = "operator"
members = ["alice"]
admin = true
status = true
`, 10*time.Second)
	if out, err := as("app1", "set", "d/k", "v"); err != nil {
		t.Fatalf("set: %v %s", err, out)
	}
	url := "file://" + t.TempDir()
	if out, err := as("alice", "backup", "start", "--to", url); err != nil {
		t.Fatalf("backup start: %v %s", err, out)
	}
	var st backup.Status
	wait.Every(t, 50*time.Millisecond, 30*time.Second, "the backup to be restorable", func() bool {
		out, err := as("alice", "backup", "status", "--json")
		if err != nil {
			t.Fatalf("backup status over TLS: %v %s", err, out)
		}
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("backup status: %v in %q", err, out)
		}
		return st.RestorableTo > 0
	})
	if st.RangeFiles != 1 || st.LastError != "" {
		t.Errorf("status %+v", st)
	}
	if out, err := as("app1", "backup", "status"); err == nil || !strings.Contains(err.Error(), "permission_denied") {
		t.Errorf("backup status as app1 (no admin): %v %s", err, out)
	}
	if out, err := run(cliCmd(), "backup", "verify", "--from", url); err != nil {
		t.Fatalf("backup verify: %v\n%s", err, out)
	}
}

// checkNodesProtocol: the cluster's status json shows each node's
// protocol range and build, and the range they all speak; status prints
// them.
func checkNodesProtocol(t *testing.T, c *procCluster) {
	t.Helper()
	out, err := run(cliCmd(), "status", "json", "--cluster", c.Coordinators)
	if err != nil {
		t.Fatalf("status json: %v\n%s", err, out)
	}
	var doc struct {
		ProtocolMin, ProtocolMax int
		BuildVersion             string
		Nodes                    []struct {
			Address                  string
			ProtocolMin, ProtocolMax int
			BuildVersion             string
		}
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.ProtocolMin != version.MinProtocol || doc.ProtocolMax != version.Protocol || doc.BuildVersion != "" || len(doc.Nodes) != len(c.Nodes) {
		t.Errorf("status json: cluster protocol %d-%d, build %q, %d nodes", doc.ProtocolMin, doc.ProtocolMax, doc.BuildVersion, len(doc.Nodes))
	}
	for _, n := range doc.Nodes {
		if n.ProtocolMin != version.MinProtocol || n.ProtocolMax != version.Protocol || n.BuildVersion == "" {
			t.Errorf("status json: node %s speaks %d-%d, build %q", n.Address, n.ProtocolMin, n.ProtocolMax, n.BuildVersion)
		}
	}
	out, err = run(cliCmd(), "status", "--cluster", c.Coordinators)
	if want := fmt.Sprintf("protocol %d-%d (every node that answers speaks it)", version.MinProtocol, version.Protocol); err != nil || !strings.Contains(out, want) || !strings.Contains(out, "PROTOCOL") {
		t.Errorf("status: %v; want %q and a PROTOCOL column:\n%s", err, want, out)
	}
}
