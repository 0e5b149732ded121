package devfs_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/vfs"

	"github.com/distash/distash/internal/fsys/devfs"
)

// BenchmarkPresets measures what each preset delivers on this machine:
// the median wall-clock latency of one 4 KiB read at a time, the IOPS of
// 4 KiB reads with 4x the queue depth in callers, and the bandwidth of
// 1 MiB reads (go test -bench Presets -benchtime 1x ./internal/fsys/devfs).
func BenchmarkPresets(b *testing.B) {
	for _, p := range []string{"hdd", "ssd", "nvm"} {
		m, _ := devfs.Profile(p)
		b.Run(p, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				d := devfs.New(p, m)
				f := memFile(b, d.Wrap(vfs.NewMem()), 1<<20)
				buf := make([]byte, 4096)
				n := 200
				if p == "hdd" {
					n = 20
				}
				lat := timed(n, func() { f.ReadAt(buf, 0) })
				ops, el := hammer(4*m.QueueDepth, time.Second, func(int) {
					var b [4096]byte
					f.ReadAt(b[:], 0)
				})
				bufs := make([][]byte, 8)
				for i := range bufs {
					bufs[i] = make([]byte, 1<<20)
				}
				before := d.Stats().ReadBytes
				_, bel := hammer(8, time.Second, func(w int) { f.ReadAt(bufs[w], 0) })
				bw := float64(d.Stats().ReadBytes-before) / bel.Seconds()
				b.ReportMetric(float64(lat)/1e3, "read-µs")
				b.ReportMetric(float64(ops)/el.Seconds(), "IOPS")
				b.ReportMetric(bw/1e6, "MB/s")
				fmt.Printf("%s: read %v (configured %v), %.0f IOPS (configured %d), %.0f MB/s (configured %d)\n",
					p, lat, m.ReadLatency, float64(ops)/el.Seconds(), m.IOPS, bw/1e6, m.Bandwidth/1e6)
			}
		})
	}
}
