package cpu

import (
	"bytes"
	"context"
	"encoding/csv"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestEmbeddedRows runs every row on a tiny embedded cluster (mvcc_window
// 1 s, 200 records, 40 operations per row, 4 clients, fresh rows too):
// every row does its count without errors and costs a positive CPU time;
// reads at rest began with the pools' windows empty and fresh reads with
// the records in them; the profiles, the CSV and the markdown are written.
func TestEmbeddedRows(t *testing.T) {
	if testing.Short() {
		t.Skip("runs an embedded cluster for a few seconds")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	toml := strings.Replace(Config, `mvcc_window = "5s"`, `mvcc_window = "1s"`, 1)
	if toml == Config {
		t.Fatal("Config has no mvcc_window = \"5s\" to shorten")
	}
	const count, records, valueBytes = 40, 200, 100
	dir := t.TempDir()
	o := Options{Modes: []string{ModeEmbedded}, Clients: 4, Count: count, Records: records, ValueBytes: valueBytes, Fresh: true,
		ConfigTOML: toml, ProfileDir: filepath.Join(dir, "prof"), OutDir: filepath.Join(dir, "out")}
	var out bytes.Buffer
	rows, err := Run(ctx, o, &out)
	t.Logf("output:\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	// 2 pools × (3 reads at rest + 3 fresh + 2 writes).
	if len(rows) != 16 {
		t.Fatalf("%d rows, want 16", len(rows))
	}
	seen := map[string]bool{}
	for _, r := range rows {
		id := r.Pool + "/" + r.Op + "/" + r.Data()
		seen[id] = true
		if r.Ops != count || r.Errors != 0 {
			t.Errorf("%s: %d operations, %d errors (%s); want %d, 0", id, r.Ops, r.Errors, r.FirstErr, count)
		}
		if tot := r.TotalUsPerOp(); !(tot > 0) || r.Client <= 0 {
			t.Errorf("%s: CPU %v, %.1f µs/op; want > 0", id, r.Client, tot)
		}
		if !math.IsNaN(r.ClientUsPerOp()) || !math.IsNaN(r.ServerUsPerOp()) {
			t.Errorf("%s: embedded rows have no client/server split, got %.1f/%.1f", id, r.ClientUsPerOp(), r.ServerUsPerOp())
		}
		if r.OpsPerSec <= 0 || r.P50 <= 0 || r.P99 < r.P50 {
			t.Errorf("%s: %.0f ops/s, p50 %v, p99 %v", id, r.OpsPerSec, r.P50, r.P99)
		}
		switch r.Data() {
		case "at rest":
			if r.WindowBytes > records*valueBytes/100 {
				t.Errorf("%s: the window held %d bytes when reads at rest began", id, r.WindowBytes)
			}
		case "fresh":
			if r.WindowBytes < records*valueBytes {
				t.Errorf("%s: the window held %d bytes when fresh reads began; want the %d rewritten", id, r.WindowBytes, records*valueBytes)
			}
		}
		if len(r.Profiles) != 1 {
			t.Errorf("%s: profiles %v, want this process's", id, r.Profiles)
		}
		for _, p := range r.Profiles {
			if st, err := os.Stat(p); err != nil || st.Size() == 0 {
				t.Errorf("%s: profile %s: %v", id, p, err)
			}
		}
	}
	for _, pool := range []string{"dram", "pebble"} {
		for _, id := range []string{"get/at rest", "getmulti10/at rest", "range1/at rest", "get/fresh", "getmulti10/fresh", "range1/fresh", "blind/-", "rmw/-"} {
			if !seen[pool+"/"+id] {
				t.Errorf("no row %s/%s", pool, id)
			}
		}
	}
	f, err := os.Open(filepath.Join(o.OutDir, "cpu.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 17 || len(recs[0]) < 12 || recs[0][11] != "total_us_per_op" {
		t.Errorf("cpu.csv: %d lines, header %v; want a header and 16 rows", len(recs), recs[0])
	}
	md, err := os.ReadFile(filepath.Join(o.OutDir, "cpu.md"))
	if err != nil || !strings.Contains(string(md), "| embedded | dram | get | at rest | 40 |") {
		t.Errorf("cpu.md: %v\n%s", err, md)
	}
}

func TestOptions(t *testing.T) {
	o, err := Options{Ops: []string{"rmw", "get"}, Modes: []string{ModeEmbedded}}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(o.Ops, ",") != "get,rmw" || o.Clients != 64 || o.Duration != 5*time.Second || o.Records != 20000 || o.ValueBytes != 1000 {
		t.Errorf("defaults: %+v", o)
	}
	for _, bad := range []Options{
		{Ops: []string{"scan"}},
		{Modes: []string{"cloud"}},
		{Modes: []string{ModeProcesses}}, // nothing to start processes with
		{Modes: []string{ModeEmbedded}, Records: 5},
	} {
		if _, err := bad.withDefaults(); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
}

func TestNodeGOMAXPROCS(t *testing.T) {
	for _, c := range []struct {
		s           string
		nodes, cpus int
		want        int
		bad         bool
	}{
		{"", 3, 2, 0, false},
		{"0", 3, 2, 0, false},
		{"auto", 3, 2, 1, false},
		{"auto", 3, 16, 5, false},
		{"auto", 0, 4, 4, false},
		{"2", 3, 2, 2, false},
		{"-1", 3, 2, 0, true},
		{"half", 3, 2, 0, true},
	} {
		got, err := NodeGOMAXPROCS(c.s, c.nodes, c.cpus)
		if (err != nil) != c.bad || got != c.want {
			t.Errorf("NodeGOMAXPROCS(%q, %d, %d) = %d, %v; want %d (error %v)", c.s, c.nodes, c.cpus, got, err, c.want, c.bad)
		}
	}
}
