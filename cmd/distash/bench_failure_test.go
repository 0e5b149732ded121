package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
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
