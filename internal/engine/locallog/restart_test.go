package locallog_test

import (
	"encoding/binary"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/distash/distash/config"
	"github.com/distash/distash/internal/engine"
	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/testutil/wait"
)

// TestRestartTime measures how long a stash's engine takes to reload
// DISTASH_LOCALLOG_BYTES (e.g. 1GiB) of cached data (1 KiB values) from
// its local log: once from the log alone (no snapshot yet) and once from
// a snapshot. A measurement, not part of the suite: it runs only with
// the variable set.
func TestRestartTime(t *testing.T) {
	s := os.Getenv("DISTASH_LOCALLOG_BYTES")
	if s == "" {
		t.Skip("a measurement: set DISTASH_LOCALLOG_BYTES=1GiB")
	}
	var total config.Size
	if err := total.UnmarshalText([]byte(s)); err != nil {
		t.Fatal(err)
	}
	const valueBytes, batchPairs = 1024, 4096
	for _, mode := range []string{"log", "snapshot"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			snap := int64(1 << 62) // never
			if mode == "snapshot" {
				snap = int64(total) / 4
			}
			opts := engine.Options{Dir: dir, Ephemeral: true, CapacityBytes: 2 * int64(total), Eviction: "lru"}
			e := openWith(t, opts, snap)
			val := make([]byte, valueBytes)
			var written int64
			start := time.Now()
			for i, v := 0, kv.Version(1); written < int64(total); v++ {
				b := &engine.Batch{Version: v}
				for range batchPairs {
					key := []byte("c/k" + strconv.Itoa(i))
					binary.LittleEndian.PutUint64(val, uint64(i))
					b.Writes = append(b.Writes, engine.Write{Key: key, Value: append([]byte(nil), val...)})
					written += int64(len(key) + valueBytes)
					i++
				}
				if err := e.Apply(b); err != nil {
					t.Fatal(err)
				}
			}
			fill := time.Since(start)
			if mode == "snapshot" {
				// Snapshots at a quarter and then each time the log
				// outgrows the last: the rest is replayed from the log.
				wait.For(t, "a snapshot of half the log", func() bool {
					return e.Status().Snapshots > 0 && e.Status().LastSnapshotVersion >= e.Version()/2
				})
			}
			keys := e.Stats().Keys
			e.Close()
			runtime.GC()
			start = time.Now()
			e = openWith(t, opts, snap)
			took := time.Since(start)
			rec := e.Recovered()
			if rec.Keys != keys {
				t.Fatalf("recovered %d keys, want %d", rec.Keys, keys)
			}
			t.Logf("%s: %d MiB of pairs (%d keys) written in %v; reloaded in %v (%.0f MiB/s): snapshot at %d, %d log records, %d MiB read",
				mode, written>>20, keys, fill.Round(time.Millisecond), took.Round(time.Millisecond),
				float64(written)/(1<<20)/took.Seconds(), rec.SnapshotVersion, rec.Records, rec.ReadBytes>>20)
			e.Close()
		})
	}
}
