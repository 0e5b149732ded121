package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/distash/distash/config"
	"github.com/distash/distash/internal/testutil/bank"
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
	run := 3 * time.Second
	if testing.Short() {
		run = time.Second
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
}
