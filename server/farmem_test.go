package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/distash/distash/config"
	"github.com/distash/distash/internal/testutil/bank"
	"github.com/distash/distash/internal/wire"
)

// farMemoryTOML makes the bank's durable pool a flash pool whose index is
// in 2 µs far memory; no write buffer and no read cache, so point and
// range reads go to the segment files through the schedulers' IO, and
// small segments so that the cleaner relocates entries under lookups.
const farMemoryTOML = `engine = "flash"
stashes = 3
replication = 2
capacity = "unlimited"

[pool.flash]
far_memory = "2us"
cache = "0"
write_buffer = "0"
segment = "1MiB"
`

// TestBankOnFarMemoryFlashPool runs the bank (transfers written through to
// the cache pool, point and range audits) and the writer of acknowledged
// keys on an embedded cluster whose durable pool serves its reads through
// far memory, while the stashes flush to their engines every 20 ms: every
// audit holds, every acknowledged write reads back.
func TestBankOnFarMemoryFlashPool(t *testing.T) {
	toml := strings.Replace(bank.ClusterTOML, "engine = \"pebble\"\nstashes = 3\nreplication = 2\ncapacity = \"unlimited\"\n", farMemoryTOML, 1)
	// A short window: the engines, not the stashes' windows, serve most reads.
	toml = strings.Replace(toml, `mvcc_window = "5s"`, `mvcc_window = "1s"`, 1)
	if toml == bank.ClusterTOML {
		t.Fatal("bank.ClusterTOML changed: the data pool was not replaced")
	}
	cfg, err := config.Parse([]byte(toml))
	if err != nil {
		t.Fatal(err)
	}
	srv, db := start(t, t.TempDir(), cfg)
	defer srv.Stop()
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b := &bank.Bank{DB: db, Data: "d/", Cache: "c/", Accounts: 40, Initial: 1000}
	if err := b.Open(ctx); err != nil {
		t.Fatal(err)
	}
	run := 4 * time.Second
	if testing.Short() {
		run = 2 * time.Second
	}
	wctx, wcancel := context.WithTimeout(ctx, run)
	defer wcancel()
	failures, waitBank := b.Run(wctx, 8, 1)
	w := &bank.Writer{DB: db, Prefix: "d/"}
	waitWriter := w.Run(wctx, 4)
	audits := 0
	for wctx.Err() == nil {
		for _, audit := range []func(context.Context) error{b.Audit, b.AuditRange} {
			if err := audit(wctx); err != nil {
				if bank.IsViolation(err) {
					t.Fatal(err)
				}
				continue
			}
			audits++
		}
	}
	waitBank()
	waitWriter()
	t.Logf("%d transfers (%d failed attempts), %d audits, %d acknowledged writes", b.Commits.Load(), failures.Load(), audits, w.Count())
	if b.Commits.Load() == 0 || audits == 0 || w.Count() == 0 {
		t.Fatal("the workload did nothing")
	}
	if err := b.Audit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.AuditRange(ctx); err != nil {
		t.Fatal(err)
	}
	missing, err := w.Check(ctx, db)
	if err != nil || missing > 0 {
		t.Fatalf("%d of %d acknowledged writes missing (%v)", missing, w.Count(), err)
	}
	// The reads went through far memory: the status of each data stash
	// shows its lookups, their far-memory accesses and device reads.
	conn, err := grpc.NewClient(srv.ClusterString(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	st, err := wire.NewDiStashClient(conn).Status(ctx, &wire.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var lookups, reads int64
	for _, s := range st.Stashes {
		f := s.FarMemory
		if s.Pool != "data" {
			if f != nil {
				t.Errorf("stash %d of pool %s shows far memory: %v", s.Id, s.Pool, f)
			}
			continue
		}
		if f == nil {
			t.Fatalf("data stash %d shows no far memory", s.Id)
		}
		t.Logf("stash %d far memory: %v", s.Id, f)
		if f.LatencyNs != 2000 || !f.Prefetch || f.Lookups > 0 && (f.Accesses == 0 || f.Prefetches == 0) {
			t.Errorf("stash %d far memory status %v", s.Id, f)
		}
		lookups += f.Lookups
		reads += f.DeviceReads
	}
	if lookups == 0 {
		t.Error("no read of the data pool went through far memory")
	}
	if reads == 0 {
		t.Error("no lookup of the data pool read the device")
	}
}
