//go:build !race

// go-ycsb's core workload shares its operation chooser (a Discrete
// generator) between threads without a lock, so the race detector flags
// go-ycsb itself; this test runs without -race (go test ./cmd/distash).

package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/distash/distash/internal/bench/peerserver"
)

// TestBenchYCSBSmall runs `distash bench ycsb` with tiny settings on the
// embedded cluster (500 records, 2,000 operations of workloads A and C, 8
// threads) and checks the table and the PNG; then, with the peers that are
// installed, the same with them.
func TestBenchYCSBSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("runs YCSB workloads on an embedded cluster")
	}
	small := []string{"ycsb", "--records", "500", "--operations", "2000", "--workloads", "a,c", "--threads", "8"}
	check := func(t *testing.T, got, out string, stores ...string) {
		t.Helper()
		for _, s := range stores {
			for _, wl := range []string{"load", "a", "c"} {
				m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(s) + `\s+` + wl + `\s+(\d+)\s`).FindStringSubmatch(got)
				if m == nil {
					t.Errorf("no table row for %s, workload %s", s, wl)
					continue
				}
				if n, _ := strconv.Atoi(m[1]); n <= 0 {
					t.Errorf("%s, workload %s: %s ops/s", s, wl, m[1])
				}
			}
		}
		for _, op := range []string{"INSERT", "READ", "UPDATE"} {
			if !regexp.MustCompile(`(?m)\s` + op + `\s+\d+\s+[0-9.]+ ms\s+[0-9.]+ ms\s+\d+$`).MatchString(got) {
				t.Errorf("no %s row with p50 and p99 in the table", op)
			}
		}
		if st, err := os.Stat(filepath.Join(out, "ycsb.png")); err != nil || st.Size() == 0 {
			t.Errorf("ycsb.png: %v", err)
		}
	}

	out := t.TempDir()
	got, err := run(benchCmd(), append(small, "--out", out)...)
	t.Logf("output:\n%s", got)
	if err != nil {
		t.Fatal(err)
	}
	check(t, got, out, "distash:dram")

	t.Run("peers", func(t *testing.T) {
		var peers []string
		if _, err := peerserver.RedisBinary(); err == nil {
			peers = append(peers, "redis")
		}
		if _, _, err := peerserver.PostgresBinaries(); err == nil {
			peers = append(peers, "postgres")
		}
		if _, err := peerserver.EtcdBinary(); err == nil {
			peers = append(peers, "etcd")
		}
		if len(peers) == 0 {
			t.Skip("no peer server installed (Debian packages redis-server, postgresql, etcd-server)")
		}
		out := t.TempDir()
		got, err := run(benchCmd(), append(small, "--out", out, "--no-install", "--peers", strings.Join(peers, ","))...)
		t.Logf("output:\n%s", got)
		if err != nil {
			t.Fatal(err)
		}
		check(t, got, out, append([]string{"distash:dram"}, peers...)...)
		// The stores take turns phase by phase: every store's load comes
		// before DiStash's workload A.
		phaseLine := func(store, wl string) int {
			loc := regexp.MustCompile(`  ` + regexp.QuoteMeta(store) + `\s+` + wl + `\s+\d+ ops/s`).FindStringIndex(got)
			if loc == nil {
				t.Fatalf("no progress line for %s, %s", store, wl)
			}
			return loc[0]
		}
		for _, p := range peers {
			if phaseLine(p, "load") > phaseLine("distash:dram", "a") {
				t.Errorf("%s's load ran after DiStash's workload A: the stores should take turns phase by phase", p)
			}
		}
		for _, p := range peers {
			if !regexp.MustCompile(`(?m)^` + p + `\s+a\s+\d+\s+[0-9.]+×`).MatchString(got) {
				t.Errorf("no ratio to DiStash for %s", p)
			}
		}
	})
}
