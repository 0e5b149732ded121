package backup_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/distash/distash"
	"github.com/distash/distash/distashtest"
	"github.com/distash/distash/internal/backup"
	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/wire"
)

// Two durable pools (the bank and acknowledged writes) and an ephemeral
// one, which a backup leaves out by default.
const twoPools = `
[cluster]
shard_bytes = "8KiB"

[[pool]]
name = "bank"
prefix = "b/"
medium = "ssd"
mode = "durable"
engine = "pebble"
stashes = 2
replication = 1

[[pool]]
name = "acks"
prefix = "w/"
medium = "ssd"
mode = "durable"
engine = "pebble"
stashes = 1
replication = 1

[[pool]]
name = "cache"
prefix = "c/"
medium = "dram"
mode = "ephemeral"
engine = "memory"
stashes = 1
replication = 1
`

const accounts, initial = 50, 1000

func backupClient(t *testing.T, addr string) wire.BackupClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return wire.NewBackupClient(conn)
}

func status(t *testing.T, ctx context.Context, c wire.BackupClient) backup.Status {
	t.Helper()
	resp, err := c.Status(ctx, &wire.BackupStatusRequest{})
	if err != nil || resp.Error != nil {
		t.Fatalf("backup status: %v %v", err, resp.GetError())
	}
	var st backup.Status
	if err := json.Unmarshal([]byte(resp.StatusJson), &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// waitStatus polls the backup status until ok holds.
func waitStatus(t *testing.T, ctx context.Context, c wire.BackupClient, what string, ok func(backup.Status) bool) backup.Status {
	t.Helper()
	for {
		st := status(t, ctx, c)
		if ok(st) {
			return st
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: last status %+v", what, st)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// snapshot reads every pair of the durable pools at version v (0: the latest),
// returning them and the version read.
func snapshot(t *testing.T, ctx context.Context, db *distash.DB, v int64) (map[string]string, int64) {
	t.Helper()
	out := map[string]string{}
	at := v // a retry of a latest read takes a fresh read version, not the first attempt's
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
		for _, prefix := range []string{"b/", "w/"} { // the durable pools: not the ephemeral c/
			kvs, err := tr.Snapshot().GetRange([]byte(prefix), kv.PrefixEnd([]byte(prefix)), distash.RangeOptions{})
			if err != nil {
				return err
			}
			for _, p := range kvs {
				out[string(p.Key)] = string(p.Value)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("snapshot read at %d: %v", v, err)
	}
	return out, v
}

// workload runs bank transfers and acknowledged writes until stop closes,
// recording each acknowledged write's commit version.
type workload struct {
	mu    sync.Mutex
	acked map[string]int64 // key -> commit version
	seq   int
}

func (w *workload) run(ctx context.Context, t *testing.T, db *distash.DB, stop <-chan struct{}, wg *sync.WaitGroup) {
	for c := 0; c < 4; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), uint64(time.Now().UnixNano())))
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if c == 0 {
					w.mu.Lock()
					w.seq++
					key := fmt.Sprintf("w/%06d", w.seq)
					w.mu.Unlock()
					var tr0 *distash.Tx
					err := db.Transact(ctx, func(tr *distash.Tx) error {
						tr0 = tr
						tr.Set([]byte(key), []byte("ack"))
						return nil
					})
					if err == nil {
						w.mu.Lock()
						w.acked[key] = tr0.CommittedVersion()
						w.mu.Unlock()
					}
					continue
				}
				a, b := rng.IntN(accounts), rng.IntN(accounts)
				if a == b {
					continue
				}
				amount := int64(rng.IntN(10))
				db.Transact(ctx, func(tr *distash.Tx) error {
					ka, kb := acct(a), acct(b)
					vals, err := tr.GetMulti([][]byte{ka, kb})
					if err != nil {
						return err
					}
					tr.Set(ka, distash.EncodeInt64(distash.Int64(vals[0])-amount))
					if i%3 == 0 {
						tr.Add(kb, amount) // an atomic operation goes through the log too
					} else {
						tr.Set(kb, distash.EncodeInt64(distash.Int64(vals[1])+amount))
					}
					if i%7 == 0 {
						tr.Set(fmt.Appendf(nil, "b/pad/%d/%d", c, i), bytes.Repeat([]byte{'p'}, 300))
					}
					if i%11 == 0 {
						tr.ClearRange(fmt.Appendf(nil, "b/pad/%d/", c), fmt.Appendf(nil, "b/pad/%d/%d", c, i-20))
					}
					return nil
				})
			}
		}(c)
	}
}

func acct(i int) []byte { return fmt.Appendf(nil, "b/acct/%03d", i) }

// checkRestore restores dest at version v into a fresh cluster and checks
// it equals want (the source's snapshot read at v), the bank's total and
// the acknowledged writes up to v.
func checkRestore(t *testing.T, ctx context.Context, dest backup.Destination, v int64, want map[string]string, w *workload) {
	t.Helper()
	c := distashtest.Start(t, twoPools)
	var progress strings.Builder
	got, err := backup.Restore(ctx, dest, c.DB, backup.RestoreOptions{Version: kv.Version(v), Progress: &progress})
	if err != nil {
		t.Fatalf("restore to %d: %v", v, err)
	}
	if int64(got) != v || !strings.Contains(progress.String(), "restore: done") {
		t.Fatalf("restored %d, want %d; progress:\n%s", got, v, progress.String())
	}
	have, _ := snapshot(t, ctx, c.DB, 0)
	for k, val := range want {
		if have[k] != val {
			t.Errorf("version %d: key %q restored as %q, want %q", v, k, have[k], val)
		}
	}
	for k := range have {
		if _, ok := want[k]; !ok {
			t.Errorf("version %d: key %q restored but absent from the source", v, k)
		}
	}
	var total int64
	for i := 0; i < accounts; i++ {
		total += distash.Int64([]byte(have[string(acct(i))]))
	}
	if total != accounts*initial {
		t.Errorf("version %d: bank total %d, want %d", v, total, accounts*initial)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for k, cv := range w.acked {
		_, ok := have[k]
		if cv <= v && !ok {
			t.Errorf("version %d: write %s acknowledged at %d is missing", v, k, cv)
		}
		if cv > v && ok {
			t.Errorf("version %d: write %s acknowledged at %d is present", v, k, cv)
		}
		if cv <= v {
			n++
		}
	}
	t.Logf("restored version %d: %d keys, %d acknowledged writes", v, len(have), n)
	// A second restore into the same (now full) ranges is refused.
	if _, err := backup.Restore(ctx, dest, c.DB, backup.RestoreOptions{Version: kv.Version(v)}); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Errorf("restore into a non-empty range: %v, want a refusal", err)
	}
}

// TestBackupRestoreUnderLoad backs up a bank and acknowledged writes
// under load, through a restart of the cluster, and restores three
// versions (the first restorable, one in the middle, the last) into fresh
// clusters: each equals the source's snapshot read at that version.
func TestBackupRestoreUnderLoad(t *testing.T) {
	ctx := distashtest.Context(t, 60*time.Second)
	src := distashtest.Start(t, twoPools)
	if err := src.DB.Transact(ctx, func(tr *distash.Tx) error {
		for i := 0; i < accounts; i++ {
			tr.Set(acct(i), distash.EncodeInt64(initial))
		}
		tr.Set([]byte("c/ignored"), []byte("ephemeral"))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	url := "file://" + dir
	bc := backupClient(t, src.Server.Addr())
	w := &workload{acked: map[string]int64{}}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	w.run(ctx, t, src.DB, stop, &wg)

	resp, err := bc.Start(ctx, &wire.BackupStartRequest{Url: url})
	if err != nil || resp.Error != nil {
		t.Fatalf("backup start: %v %v", err, resp.GetError())
	}
	if resp, _ := bc.Start(ctx, &wire.BackupStartRequest{Url: "file://" + t.TempDir()}); resp.GetError() == nil {
		t.Error("a second backup started while one runs")
	}
	st := waitStatus(t, ctx, bc, "the first restorable version", func(s backup.Status) bool { return s.RestorableFrom > 0 })
	first := int64(st.RestorableFrom)
	wantFirst, _ := snapshot(t, ctx, src.DB, first) // inside the MVCC window: read it now

	// Restart the cluster on its directory during the backup.
	close(stop)
	wg.Wait()
	addr := src.Server.Addr()
	src.Stop()
	src.Restart(t)
	if src.Server.Addr() != addr {
		bc = backupClient(t, src.Server.Addr())
	}
	stop = make(chan struct{})
	w.run(ctx, t, src.DB, stop, &wg)
	waitStatus(t, ctx, bc, "the worker after the restart", func(s backup.Status) bool { return s.State == "running" })
	var mid int64
	var wantMid map[string]string
	waitStatus(t, ctx, bc, "more load after the restart", func(s backup.Status) bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.acked) > 300
	})
	wantMid, mid = snapshot(t, ctx, src.DB, 0)
	waitStatus(t, ctx, bc, "the log to pass the middle version", func(s backup.Status) bool { return int64(s.RestorableTo) >= mid })
	close(stop)
	wg.Wait()
	wantLast, last := snapshot(t, ctx, src.DB, 0)
	st = waitStatus(t, ctx, bc, "the log to pass the last write", func(s backup.Status) bool { return int64(s.RestorableTo) >= last })
	if st.LagVersions < 0 || st.Bytes == 0 || st.RangeFiles < 2 || st.LogFiles == 0 {
		t.Errorf("status %+v", st)
	}
	last = int64(st.RestorableTo) // nothing was committed since: the same state

	dest, err := backup.Open(url)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := backup.Verify(ctx, dest, &out); err != nil {
		t.Fatalf("verify: %v\n%s", err, out.String())
	}
	checkRestore(t, ctx, dest, first, wantFirst, w)
	checkRestore(t, ctx, dest, mid, wantMid, w)
	checkRestore(t, ctx, dest, last, wantLast, w)

	// Stop: status says stopped, and the restorable range stays.
	if resp, err := bc.Stop(ctx, &wire.BackupStopRequest{}); err != nil || resp.Error != nil {
		t.Fatalf("backup stop: %v %v", err, resp.GetError())
	}
	if st := status(t, ctx, bc); st.State != "stopped" || int64(st.RestorableTo) < last {
		t.Errorf("status after stop: %+v", st)
	}

	// A damaged file: verify and restore name it.
	m, err := backup.ReadManifest(ctx, dest)
	if err != nil {
		t.Fatal(err)
	}
	victim := m.LogFiles[len(m.LogFiles)/2].Name
	p := filepath.Join(dir, filepath.FromSlash(victim))
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x40
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := backup.Verify(ctx, dest, &out); err == nil || !strings.Contains(out.String(), victim) {
		t.Errorf("verify of a damaged backup: %v\n%s", err, out.String())
	}
	fresh := distashtest.Start(t, twoPools)
	if _, err := backup.Restore(ctx, dest, fresh.DB, backup.RestoreOptions{}); err == nil || !strings.Contains(err.Error(), victim) {
		t.Errorf("restore of a damaged backup: %v, want an error naming %s", err, victim)
	}
}
