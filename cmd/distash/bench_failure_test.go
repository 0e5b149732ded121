package main

import (
	"encoding/csv"
	"image/png"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestBenchFailureSmall runs `distash bench failure` with tiny settings
// (5,000 keys, short phases): 11 real server processes, a stash killed
// and restarted. The CSV and the four PNGs are written, and the time to
// full re-replication was measured.
func TestBenchFailureSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 11 real server processes for about 30 s")
	}
	t.Parallel() // its processes wait on their timers (elections, failure_wait, restarts) most of the time: overlaps another such test
	bin := buildBinary(t)
	out := t.TempDir()
	got, err := run(benchCmd(), "failure", "--binary", bin, "--keys", "5000", "--shard-bytes", "64KiB",
		"--warmup", "3s", "--down", "9s", "--balance-timeout", "15s", "--tail", "2s", "--out", out, "--dir", filepath.Join(t.TempDir(), "nodes"))
	t.Logf("output:\n%s", got)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"failure.csv", "failure-qps.png", "failure-bytes.png", "failure-cpu.png", "failure-throughput.png"} {
		st, err := os.Stat(filepath.Join(out, f))
		if err != nil || st.Size() == 0 {
			t.Errorf("%s: %v (size %d)", f, err, st.Size())
		}
	}
	m := regexp.MustCompile(`full re-replication: ([0-9.]+) s after the kill`).FindStringSubmatch(got)
	if m == nil {
		t.Fatal("no re-replication time in the output")
	}
	if s, err := strconv.ParseFloat(m[1], 64); err != nil || s <= 0 {
		t.Fatalf("re-replication time %q: want > 0", m[1])
	}
}

// layoutsTinyArgs are the tiny settings of the layouts bench in CI: 6 or
// 4 nodes per run (1 transaction node, 3 SSD stashes at R=2, 2 DRAM
// stashes at R=1), 1,000 data keys, short phases; about 20 s per run.
func layoutsTinyArgs(bin, out, dir string) []string {
	return []string{"failure", "--binary", bin, "--tx-nodes", "1", "--ssd-stashes", "3", "--ssd-replication", "2",
		"--dram-stashes", "2", "--results-replication", "1", "--keys", "1000", "--queries", "300", "--clients", "4",
		"--shard-bytes", "64KiB", "--failure-wait", "10s", "--warmup", "2s", "--down", "3s", "--balance-timeout", "3s",
		"--tail", "500ms", "--hit-window", "2s", "--lookup-timeout", "500ms", "--out", out, "--dir", dir}
}

// checkLayoutOutputs checks that every run wrote a CSV whose rows parse
// and PNGs that decode, and that failure-layouts.csv has one row per run;
// it returns the summary's rows by layout.
func checkLayoutOutputs(t *testing.T, out string, runs []string) map[string]map[string]string {
	t.Helper()
	for _, run := range runs {
		base := filepath.Join(out, "failure-"+run)
		rows := readCSV(t, base+".csv")
		if len(rows) < 5 {
			t.Fatalf("%s.csv: %d rows, want the header and samples", base, len(rows))
		}
		for i, row := range rows[1:] {
			for j, col := range []string{"t_s", "lookups", "hits", "under_replicated"} {
				k := slices.Index(rows[0], col)
				if k < 0 {
					t.Fatalf("%s.csv: no column %s", base, col)
				}
				if _, err := strconv.ParseFloat(row[k], 64); err != nil {
					t.Fatalf("%s.csv row %d column %d (%s) %q: %v", base, i+1, j, col, row[k], err)
				}
			}
		}
		for _, p := range []string{"-hit-latency.png", "-hit-rate.png", "-cpu.png"} {
			f, err := os.Open(base + p)
			if err != nil {
				t.Fatal(err)
			}
			_, err = png.Decode(f)
			f.Close()
			if err != nil {
				t.Fatalf("%s%s: %v", base, p, err)
			}
		}
	}
	rows := readCSV(t, filepath.Join(out, "failure-layouts.csv"))
	if len(rows) != len(runs)+1 {
		t.Fatalf("failure-layouts.csv: %d rows, want a header and %d runs", len(rows), len(runs))
	}
	byRun := map[string]map[string]string{}
	for _, row := range rows[1:] {
		m := map[string]string{}
		for i, c := range rows[0] {
			m[c] = row[i]
		}
		for _, c := range []string{"before_lookups", "before_hit_rate", "before_hit_p99_ms", "window_lookups"} {
			if _, err := strconv.ParseFloat(m[c], 64); err != nil {
				t.Errorf("failure-layouts.csv %s %s %q: %v", row[0], c, m[c], err)
			}
		}
		byRun[row[0]] = m
	}
	return byRun
}

func readCSV(t *testing.T, path string) [][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return rows
}

// TestBenchFailureLayoutsSmall runs `distash bench failure --layouts
// 1stash,2stash --local-log --device-profile ssd` with tiny settings: for
// each run (1stash, 2stash, 2stash+local_log) a cluster of real processes,
// a stash of the results' pool killed and restarted within failure_wait.
// The CSVs, PNGs (the SSD stashes' device utilisation too) and the summary
// are written and parse; before the kill the cache answered lookups; the
// DRAM stash came back with its tag only with its local log.
func TestBenchFailureLayoutsSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three clusters of 4 to 6 real server processes for about 20 s each")
	}
	t.Parallel() // its processes wait on their timers (elections, failure_wait, restarts) most of the time: overlaps another such test
	bin := buildBinary(t)
	out := t.TempDir()
	args := append(layoutsTinyArgs(bin, out, filepath.Join(t.TempDir(), "nodes")), "--layouts", "1stash,2stash", "--local-log", "--device-profile", "ssd")
	got, err := run(benchCmd(), args...)
	t.Logf("output:\n%s", got)
	if err != nil {
		t.Fatal(err)
	}
	runs := []string{"1stash", "2stash", "2stash-locallog"}
	sum := checkLayoutOutputs(t, out, runs)
	for _, name := range []string{"1stash", "2stash", "2stash+local_log"} {
		if hr, _ := strconv.ParseFloat(sum[name]["before_hit_rate"], 64); hr < 0.5 {
			t.Errorf("%s: hit rate before the kill %v: the warm cache should answer most lookups", name, hr)
		}
	}
	for _, run := range runs {
		f, err := os.Open(filepath.Join(out, "failure-"+run+"-device.png"))
		if err != nil {
			t.Fatalf("no device utilisation plot with --device-profile ssd: %v", err)
		}
		_, err = png.Decode(f)
		f.Close()
		if err != nil {
			t.Fatalf("failure-%s-device.png: %v", run, err)
		}
	}
	// Restarted within failure_wait, a DRAM stash keeps its tag (and its
	// data) only with its local log; without, it rejoins as a new stash.
	if k := sum["2stash"]["tag_kept"]; k != "false" {
		t.Errorf("2stash: the DRAM stash without a local log kept its tag (tag_kept %s)", k)
	}
	if k := sum["2stash+local_log"]["tag_kept"]; k != "true" {
		t.Errorf("2stash+local_log: the DRAM stash with a local log came back with a new tag (tag_kept %s)", k)
	}
	if !strings.Contains(got, "summary (victim") {
		t.Error("no summary in the output")
	}
}
