package enginetest

import (
	"testing"
	"time"

	"github.com/cockroachdb/pebble/vfs"

	"github.com/distash/distash/internal/engine"
	"github.com/distash/distash/internal/fsys/devfs"
)

// deviceTestLatency bounds the slowest latency of a device RunDevices
// emulates: the presets scaled down (a hundredfold, more for the disk) so
// that the suite stays fast while every I/O still waits on the device.
const deviceTestLatency = 30 * time.Microsecond

// RunDevices runs the conformance suite (Run) with the engine's files on
// each emulated device profile (ssd, hdd, nvm) over an in-memory FS, the
// presets' latencies scaled down to at most 30 µs, and checks that the
// device saw the engine's reads, writes and syncs. open must use
// opts.FS; crash is as in Run.
func RunDevices(t *testing.T, open OpenFunc, crash CrashFunc) {
	for _, p := range []string{"ssd", "hdd", "nvm"} {
		t.Run(p, func(t *testing.T) {
			// The profiles run together: most of their time is waiting
			// on the emulated device, not CPU.
			t.Parallel()
			m, err := devfs.Profile(p)
			if err != nil {
				t.Fatal(err)
			}
			slowest := max(m.ReadLatency, m.WriteLatency, m.SyncLatency)
			m = m.Scale(min(0.01, float64(deviceTestLatency)/float64(slowest)))
			d, mem := devfs.New(p, m), vfs.NewMem()
			onDevice := func(t *testing.T, opts engine.Options) engine.Engine {
				opts.FS = d.Wrap(mem)
				return open(t, opts)
			}
			Run(t, onDevice, onDevice, crash)
			st := d.Stats()
			t.Logf("%s (%v): %d reads, %d writes, %d syncs, read p50 %v, busy %v",
				p, m, st.Reads, st.Writes, st.Syncs, st.ReadLatency.Quantile(0.5), st.Busy)
			if st.Reads == 0 || st.Writes == 0 || st.Syncs == 0 {
				t.Errorf("the device saw %d reads, %d writes, %d syncs", st.Reads, st.Writes, st.Syncs)
			}
		})
	}
}
