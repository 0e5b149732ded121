package ingest

import (
	"bytes"
	"context"
	"image/png"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/distash/distash/internal/bench/timeline"
)

// checkPNG fails unless path is a PNG image.
func checkPNG(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if b := img.Bounds(); b.Dx() < 100 || b.Dy() < 100 {
		t.Fatalf("%s: %v, too small", path, b)
	}
}

// runShort runs the benchmark for a few seconds into a DRAM and a Pebble
// pool and checks its figures: every CSV has its header, one row per
// second of each run with numbers where numbers belong, every PNG
// decodes. It returns the Figure 11 rows.
func runShort(t *testing.T, o Options) [][]string {
	t.Helper()
	o.OutDir = t.TempDir()
	o.Pools = []string{"dram", "pebble"}
	o.Clients = []int{4}
	o.Duration = 2 * time.Second
	o.ValueSize = 100
	o.ConfigTOML = TwoPools
	var out bytes.Buffer
	res, err := Run(context.Background(), o, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	t.Log(out.String())
	if len(res) != 2 {
		t.Fatalf("%d results", len(res))
	}
	for _, r := range res {
		if r.Txns == 0 || len(r.PerSecond) != 2 || len(r.Samples) == 0 {
			t.Fatalf("%s: %d txns, %d seconds, %d status samples", r.Pool, r.Txns, len(r.PerSecond), len(r.Samples))
		}
	}
	path := func(f string) string { return filepath.Join(o.OutDir, f) }
	rows9, err := timeline.ReadCSV(path(Fig9CSV), []string{"time_s", "pool", "clients", "txn_per_s", "rate_limit", "rate_limit_reason"}, "time_s", "clients", "txn_per_s", "rate_limit")
	if err != nil {
		t.Fatal(err)
	}
	rows10, err := timeline.ReadCSV(path(Fig10CSV), []string{"time_s", "pool", "clients", "txns", "p50_ms", "p99_ms"}, "time_s", "clients", "txns", "p50_ms", "p99_ms")
	if err != nil {
		t.Fatal(err)
	}
	if len(rows9) != 4 || len(rows10) != 4 {
		t.Fatalf("%d and %d rows, want one per second of each of 2 runs of 2 s", len(rows9), len(rows10))
	}
	var total int64
	for _, r := range rows10 {
		n, _ := strconv.ParseInt(r[3], 10, 64)
		total += n
	}
	if total == 0 || total > res[0].Txns+res[1].Txns {
		t.Fatalf("per-second counts sum to %d of %d transactions", total, res[0].Txns+res[1].Txns)
	}
	rows11, err := timeline.ReadCSV(path(Fig11CSV), timeline.UtilisationHeader("pool", "clients"), "time_s", "clients", "busy_pct", "queue_length", "read_mib_s", "write_mib_s", "read_p99_ms_since_start", "durable_lag_s", "window_mib")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{Fig9PNG, Fig10PNG, Fig11PNG, TimelinePNG} {
		checkPNG(t, path(f))
	}
	return rows11
}

// TestShortRun: without a device model the benchmark writes every
// figure, Figure 11 with no rows (nothing emulated to be busy).
func TestShortRun(t *testing.T) {
	if rows := runShort(t, Options{}); len(rows) != 0 {
		t.Fatalf("Figure 11 without a device: %d rows", len(rows))
	}
}

// TestShortRunOnEmulatedSSD: with a device profile the Pebble pool's
// stash runs on an emulated SSD and Figure 11 has its utilisation per
// second (the DRAM pool has no device, so no rows).
func TestShortRunOnEmulatedSSD(t *testing.T) {
	rows := runShort(t, Options{DeviceProfile: "ssd", DeviceScale: 2})
	if len(rows) == 0 {
		t.Fatal("Figure 11 has no rows on an emulated SSD")
	}
	for _, r := range rows {
		busy, err := strconv.ParseFloat(r[4], 64)
		if r[1] != "pebble" || r[3] != "pebble-0" || err != nil || busy < 0 || busy > 100 {
			t.Fatalf("row %q: want the pebble stash with a utilisation in [0, 100]", r)
		}
	}
}
