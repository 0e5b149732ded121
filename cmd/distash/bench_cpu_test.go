package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/distash/distash/internal/bench/cpu"
)

// TestBenchCPUProcesses runs `distash bench cpu --modes processes` with
// tiny settings: three real server processes (a transaction node, a dram
// and a pebble stash node), rows of get and blind for 1 s each. Every row
// shows the client's and the servers' CPU per operation, both positive,
// and their sum; each row has the client's profile and each node's.
func TestBenchCPUProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 3 real server processes for about 15 s")
	}
	bin := buildBinary(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "cluster.toml")
	toml := strings.Replace(cpu.Config, `mvcc_window = "5s"`, `mvcc_window = "1s"`, 1)
	if err := os.WriteFile(cfg, []byte(toml), 0o644); err != nil {
		t.Fatal(err)
	}
	prof, out, nodes := filepath.Join(dir, "prof"), filepath.Join(dir, "out"), filepath.Join(dir, "nodes")
	got, err := run(benchCmd(), "cpu", "--binary", bin, "--modes", "processes", "--config", cfg, "--ops", "get,blind",
		"--records", "200", "--value-bytes", "100", "--clients", "4", "--duration", "1s",
		"--profile-dir", prof, "--out", out, "--dir", nodes, "--keep", "--node-gomaxprocs", "auto")
	t.Logf("output:\n%s", got)
	defer func() {
		if t.Failed() { // the nodes' warnings say why a row failed
			logs, _ := filepath.Glob(filepath.Join(nodes, "*.log"))
			for _, l := range logs {
				b, _ := os.ReadFile(l)
				var warn []string
				for _, line := range strings.Split(string(b), "\n") {
					if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
						warn = append(warn, line)
					}
				}
				t.Logf("%s: %d warnings and errors, the last:\n%s", filepath.Base(l), len(warn), strings.Join(warn[max(0, len(warn)-15):], "\n"))
			}
		}
	}()
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile(`(?m)^processes\s+(dram|pebble)\s+(get|blind)\s+(at rest|-)\s+(\d+)\s+\d+\s+[0-9.]+ ms\s+[0-9.]+ ms\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+0$`)
	rows := row.FindAllStringSubmatch(got, -1)
	if len(rows) != 4 {
		t.Fatalf("%d table rows of processes mode, want 4 (dram, pebble × get, blind)", len(rows))
	}
	for _, m := range rows {
		f := func(s string) float64 { v, _ := strconv.ParseFloat(s, 64); return v }
		ops, client, server, total := f(m[4]), f(m[5]), f(m[6]), f(m[7])
		if ops <= 0 || client <= 0 || server <= 0 {
			t.Errorf("%s %s: %v ops, client %v µs/op, server %v µs/op; want all > 0", m[1], m[2], ops, client, server)
		}
		if d := client + server - total; d > 0.15 || d < -0.15 {
			t.Errorf("%s %s: client %v + server %v != total %v", m[1], m[2], client, server, total)
		}
		for _, node := range []string{"", "-tx1", "-dram1", "-pebble1"} {
			p := filepath.Join(prof, "processes-"+m[1]+"-"+m[2]+node+".pprof")
			if st, err := os.Stat(p); err != nil || st.Size() == 0 {
				t.Errorf("profile %s: %v", p, err)
			}
		}
	}
	for _, f := range []string{"cpu.csv", "cpu.md"} {
		if st, err := os.Stat(filepath.Join(out, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	// --node-gomaxprocs auto: three nodes share the CPUs, and the
	// conditions say so.
	want := fmt.Sprintf("processes: nodes at GOMAXPROCS %d each (3 nodes, %d CPUs)", max(1, runtime.NumCPU()/3), runtime.NumCPU())
	if md, _ := os.ReadFile(filepath.Join(out, "cpu.md")); !strings.Contains(string(md), want) {
		t.Errorf("cpu.md does not say %q:\n%s", want, md)
	}
}

// TestBenchCPURefusesBadFlags: a bad --rounds or --node-gomaxprocs stops
// the benchmark before it starts anything.
func TestBenchCPURefusesBadFlags(t *testing.T) {
	for _, args := range [][]string{{"--rounds", "0"}, {"--node-gomaxprocs", "half"}, {"--node-gomaxprocs", "-2"}} {
		out, err := run(benchCmd(), append([]string{"cpu", "--modes", "embedded"}, args...)...)
		if err == nil || strings.Contains(out, "embedded cluster") {
			t.Errorf("bench cpu %v: error %v, output %q; want an error before any cluster starts", args, err, out)
		}
	}
}
