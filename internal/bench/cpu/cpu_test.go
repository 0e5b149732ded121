package cpu

import (
	"bytes"
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/distash/distash/internal/embedded"
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

// TestRoundsAlternateModes runs two rounds of both modes, the "processes"
// one an embedded cluster reached as processes mode reaches its nodes
// (through its cluster string, no node to sample): each round has both
// modes' row, the second round in the reverse order, profiles are named
// by round, and the summary gives each round's ratio and their median.
func TestRoundsAlternateModes(t *testing.T) {
	if testing.Short() {
		t.Skip("runs four embedded clusters for a few seconds each")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	toml := strings.Replace(Config, `mvcc_window = "5s"`, `mvcc_window = "1s"`, 1)
	dir := t.TempDir()
	started := 0
	asProcesses := func(ctx context.Context, toml string, _ bool, _ io.Writer) (*ProcessCluster, error) {
		started++
		c, err := embedded.StartTOML(ctx, toml, embedded.Options{Dir: filepath.Join(dir, fmt.Sprintf("p%d", started))})
		if err != nil {
			return nil, err
		}
		return &ProcessCluster{Cluster: c.Server.ClusterString(), Stop: c.Close, Note: "an embedded cluster"}, nil
	}
	o := Options{Modes: []string{ModeEmbedded, ModeProcesses}, Rounds: 2, Ops: []string{"get"}, Pools: []string{"dram"},
		Clients: 2, Count: 10, Records: 20, ValueBytes: 16, ConfigTOML: toml, Processes: asProcesses,
		ProfileDir: filepath.Join(dir, "prof"), OutDir: filepath.Join(dir, "out")}
	var out bytes.Buffer
	rows, err := Run(ctx, o, &out)
	t.Logf("output:\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, r := range rows {
		order = append(order, fmt.Sprintf("%s/%d", r.Mode, r.Round))
		if want := fmt.Sprintf("%s-dram-get-r%d.pprof", r.Mode, r.Round); len(r.Profiles) == 0 || filepath.Base(r.Profiles[0]) != want {
			t.Errorf("%s round %d: profiles %v, want %s first", r.Mode, r.Round, r.Profiles, want)
		}
	}
	if got, want := strings.Join(order, " "), "embedded/1 processes/1 processes/2 embedded/2"; got != want {
		t.Errorf("rows %s, want %s", got, want)
	}
	ratios := Ratios(rows)
	if len(ratios) != 2 || !regexp.MustCompile(`^dram get at rest: ops/s [0-9.]+, [0-9.]+ \([0-9.]+×\); CPU [0-9.]+, [0-9.]+ \([0-9.]+×\)$`).MatchString(ratios[1]) {
		t.Errorf("ratios %q", ratios)
	}
	md, _ := os.ReadFile(filepath.Join(o.OutDir, "cpu.md"))
	if !strings.Contains(string(md), "| processes r2 | dram | get | at rest | 10 |") || !strings.Contains(string(md), "- "+ratios[1]) ||
		!strings.Contains(string(md), "processes: an embedded cluster") {
		t.Errorf("cpu.md:\n%s", md)
	}
}

func TestRatiosMedian(t *testing.T) {
	row := func(mode string, round int, opsPerSec float64, cpu time.Duration) Row {
		return Row{Mode: mode, Pool: "dram", Op: "blind", Round: round, Ops: 100, OpsPerSec: opsPerSec, Client: cpu, Server: -1}
	}
	rows := []Row{
		row(ModeEmbedded, 1, 1000, 10*time.Millisecond), row(ModeProcesses, 1, 500, 20*time.Millisecond),
		row(ModeProcesses, 2, 900, 10*time.Millisecond), row(ModeEmbedded, 2, 1000, 10*time.Millisecond),
		row(ModeEmbedded, 3, 1000, 10*time.Millisecond), row(ModeProcesses, 3, 700, 40*time.Millisecond),
		row(ModeProcesses, 4, 300, 10*time.Millisecond), // no embedded row of round 4: not compared
	}
	got := Ratios(rows)
	want := "dram blind: ops/s 0.50, 0.90, 0.70 (0.70×); CPU 2.00, 1.00, 4.00 (2.00×)"
	if len(got) != 2 || got[1] != want {
		t.Errorf("Ratios = %q, want [header, %q]", got, want)
	}
	if Ratios(rows[:1]) != nil {
		t.Error("Ratios of embedded rows alone: want nil")
	}
}
