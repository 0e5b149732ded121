package farmem

import (
	"context"
	"encoding/csv"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TestClusterShort runs the cluster mode in seconds (two latencies, a
// few hundred keys, reads of three keys) and checks that the CSV and the
// PNG are written and parse, and that every read reached far memory for
// each of its keys.
func TestClusterShort(t *testing.T) {
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := RunCluster(ctx, ClusterOptions{Latencies: []time.Duration{100 * time.Nanosecond, 5 * time.Microsecond},
		Records: 300, Threads: 8, KeysPerRead: 3, Duration: 400 * time.Millisecond, Rounds: 2, OutDir: out, Dir: t.TempDir()}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 4 {
		t.Fatalf("%d points, want 4", len(res))
	}
	for _, p := range res {
		if p.OpsPerS <= 0 || p.Lines < 2.5 || p.Norm <= 0 || p.Model <= 0 || p.ModelCounted <= 0 {
			t.Errorf("point %+v: no reads through far memory, or no model", p)
		}
	}
	f, err := os.Open(filepath.Join(out, "farmem-cluster.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 5 || len(rows[0]) != len(ClusterCSVHeader) {
		t.Fatalf("CSV: %d rows of %d columns", len(rows), len(rows[0]))
	}
	for _, r := range rows[1:] {
		for i, c := range r {
			if i == 1 {
				if _, err := strconv.ParseBool(c); err != nil {
					t.Errorf("CSV %s: %v", ClusterCSVHeader[i], err)
				}
				continue
			}
			if _, err := strconv.ParseFloat(c, 64); err != nil {
				t.Errorf("CSV %s: %v", ClusterCSVHeader[i], err)
			}
		}
	}
	b, err := os.ReadFile(filepath.Join(out, "farmem-cluster.png"))
	if err != nil || len(b) < 8 || string(b[1:4]) != "PNG" {
		t.Fatalf("PNG: %v (%d bytes)", err, len(b))
	}
}
