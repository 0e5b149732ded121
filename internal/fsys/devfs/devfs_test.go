package devfs_test

import (
	"errors"
	"io"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/vfs"

	"github.com/distash/distash/internal/fsys"
	"github.com/distash/distash/internal/fsys/devfs"
	"github.com/distash/distash/internal/fsys/faultfs"
)

func TestProfiles(t *testing.T) {
	for _, name := range devfs.Profiles {
		m, err := devfs.Profile(name)
		if err != nil {
			t.Fatalf("Profile(%q): %v", name, err)
		}
		if m.IsZero() != (name == "none") {
			t.Errorf("Profile(%q).IsZero() = %v", name, m.IsZero())
		}
	}
	if _, err := devfs.Profile("floppy"); err == nil {
		t.Error("Profile(floppy) succeeded")
	}
	// The presets are ordered as the media are.
	if !(devfs.NVM.ReadLatency < devfs.SSD.ReadLatency && devfs.SSD.ReadLatency < devfs.HDD.ReadLatency) {
		t.Error("read latencies not ordered nvm < ssd < hdd")
	}
	s := devfs.SSD.Scale(10)
	want := devfs.Model{ReadLatency: 800 * time.Microsecond, WriteLatency: time.Millisecond, SyncLatency: 10 * time.Millisecond,
		IOPS: 5000, Bandwidth: 50e6, QueueDepth: 32}
	if s != want {
		t.Errorf("SSD.Scale(10) = %v, want %v", s, want)
	}
	if f := devfs.HDD.Scale(1e6); f.IOPS != 1 || f.Bandwidth != 150 {
		t.Errorf("a scaled limit must stay a limit: %v", f)
	}
	if !(devfs.Model{QueueDepth: 4}).IsZero() {
		t.Error("a model with only a queue depth emulates nothing")
	}
}

func TestHistogram(t *testing.T) {
	d := devfs.New("test", devfs.Model{})
	fs := d.Wrap(vfs.NewMem())
	f, err := fs.Create("f")
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("x"))
	h := d.Stats().WriteLatency
	if h.Count != 1 || h.Quantile(0.5) != h.Sum || h.Quantile(0) != h.Sum || h.Quantile(1) != h.Sum {
		t.Errorf("one sample: count %d sum %v p50 %v", h.Count, h.Sum, h.Quantile(0.5))
	}
	b := h.Buckets()
	if len(b) != 71 || b[0].UpperBound != time.Microsecond || b[70].UpperBound != 10*time.Second || b[70].Count != 1 {
		t.Errorf("buckets: %d, first %v, last %v", len(b), b[0], b[70])
	}
	for i := 1; i < len(b); i++ {
		if b[i].UpperBound <= b[i-1].UpperBound || b[i].Count < b[i-1].Count {
			t.Fatalf("buckets not increasing at %d: %v %v", i, b[i-1], b[i])
		}
	}
	if (devfs.Histogram{}).Quantile(0.5) != 0 {
		t.Error("empty histogram has a quantile")
	}
}

// timed runs op n times in a row and returns the median wall time of one.
func timed(n int, op func()) time.Duration {
	ds := make([]time.Duration, n)
	for i := range ds {
		t0 := time.Now()
		op()
		ds[i] = time.Since(t0)
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[n/2]
}

func within(t *testing.T, what string, got, want, tol float64) {
	t.Helper()
	t.Logf("%s: %.4g (configured %.4g, %+.1f%%)", what, got, want, 100*(got-want)/want)
	if math.Abs(got-want) > tol*want {
		t.Errorf("%s = %.4g, want %.4g ± %.0f%%", what, got, want, 100*tol)
	}
}

// TestLatency: one I/O at a time, each costs its kind's latency, as seen
// by the caller and as the histograms report it.
func TestLatency(t *testing.T) {
	m := devfs.Model{ReadLatency: 2 * time.Millisecond, WriteLatency: 3 * time.Millisecond, SyncLatency: 1500 * time.Microsecond}
	d := devfs.New("custom", m)
	fs := d.Wrap(vfs.NewMem())
	f, err := fs.Create("f")
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	const n = 40
	w := timed(n, func() { f.Write(buf) })
	s := timed(n, func() { f.Sync() })
	r := timed(n, func() { f.ReadAt(buf, 0) })
	within(t, "read latency (ms)", ms(r), ms(m.ReadLatency), 0.1)
	within(t, "write latency (ms)", ms(w), ms(m.WriteLatency), 0.1)
	within(t, "sync latency (ms)", ms(s), ms(m.SyncLatency), 0.1)
	st := d.Stats()
	within(t, "histogram read p50 (ms)", ms(st.ReadLatency.Quantile(0.5)), ms(m.ReadLatency), 0.1)
	within(t, "histogram write p50 (ms)", ms(st.WriteLatency.Quantile(0.5)), ms(m.WriteLatency), 0.1)
	within(t, "histogram sync p50 (ms)", ms(st.SyncLatency.Quantile(0.5)), ms(m.SyncLatency), 0.1)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// hammer runs workers goroutines doing op on the device's file for about
// dur, and returns the operations done and the time they took.
func hammer(workers int, dur time.Duration, op func(w int)) (int64, time.Duration) {
	var n atomic.Int64
	var wg sync.WaitGroup
	t0 := time.Now()
	stop := t0.Add(dur)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				op(w)
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	return n.Load(), time.Since(t0)
}

func memFile(t *testing.T, fs fsys.FS, size int) fsys.File {
	t.Helper()
	f, err := fs.Create("data")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(make([]byte, size)); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestIOPS: many concurrent small I/Os complete at the device's IOPS.
func TestIOPS(t *testing.T) {
	m := devfs.Model{ReadLatency: 200 * time.Microsecond, IOPS: 2000, QueueDepth: 8}
	d := devfs.New("custom", m)
	f := memFile(t, d.Wrap(vfs.NewMem()), 4096)
	n, el := hammer(16, 800*time.Millisecond, func(int) {
		var b [512]byte
		f.ReadAt(b[:], 0)
	})
	within(t, "IOPS", float64(n)/el.Seconds(), float64(m.IOPS), 0.1)
}

// TestBandwidth: large reads and writes share the device's bandwidth.
func TestBandwidth(t *testing.T) {
	m := devfs.Model{ReadLatency: 100 * time.Microsecond, WriteLatency: 100 * time.Microsecond, Bandwidth: 32 << 20, QueueDepth: 4}
	d := devfs.New("custom", m)
	fs := d.Wrap(vfs.NewMem())
	const size = 128 << 10
	f := memFile(t, fs, size)
	before := d.Stats()
	bufs := make([][]byte, 8)
	for i := range bufs {
		bufs[i] = make([]byte, size)
	}
	n, el := hammer(8, 800*time.Millisecond, func(w int) {
		if w%2 == 0 {
			f.ReadAt(bufs[w], 0)
		} else {
			f.WriteAt(bufs[w], 0)
		}
	})
	st := d.Stats()
	moved := st.ReadBytes + st.WrittenBytes - before.ReadBytes - before.WrittenBytes
	if moved != uint64(n)*size {
		t.Errorf("bytes counted %d, moved %d", moved, uint64(n)*size)
	}
	within(t, "bandwidth (MiB/s)", float64(moved)/el.Seconds()/(1<<20), float64(m.Bandwidth)/(1<<20), 0.1)
}

// TestQueueing: past the queue depth, I/Os wait: the p99 latency grows
// with the number of concurrent callers, in proportion.
func TestQueueing(t *testing.T) {
	m := devfs.Model{ReadLatency: time.Millisecond, QueueDepth: 2}
	p99 := func(workers int) time.Duration {
		d := devfs.New("custom", m)
		f := memFile(t, d.Wrap(vfs.NewMem()), 4096)
		hammer(workers, 300*time.Millisecond, func(int) {
			var b [64]byte
			f.ReadAt(b[:], 0)
		})
		return d.Stats().ReadLatency.Quantile(0.99)
	}
	at2, at8 := p99(2), p99(8)
	t.Logf("read p99: %v with 2 callers (queue depth 2), %v with 8", at2, at8)
	// 8 callers on 2 slots wait for 3 I/Os ahead of them: ~4 ms, against
	// ~1 ms (plus the machine's wake-up delays, which a loaded machine
	// adds to both).
	if at8 < 3*time.Millisecond || at8 < 2*at2 {
		t.Errorf("p99 %v at queue depth, %v at 4x: queueing not visible", at2, at8)
	}
}

// TestStatsExact: the counters count exactly the I/Os that reached the
// device and the bytes they moved; metadata costs nothing.
func TestStatsExact(t *testing.T) {
	d := devfs.New("ssd", devfs.SSD.Scale(0.01))
	fs := d.Wrap(vfs.NewMem())
	if err := fs.MkdirAll("dir", 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := fs.Create("dir/f")
	if err != nil {
		t.Fatal(err)
	}
	f.Write(make([]byte, 1000))
	f.Write(make([]byte, 24))
	f.Sync()
	f.SyncData()
	f.SyncTo(1024)
	f.Close()
	fs.Rename("dir/f", "dir/g")
	fs.Stat("dir/g")
	fs.List("dir")
	if st := d.Stats(); st.Reads != 0 || st.Writes != 2 || st.Syncs != 3 || st.WrittenBytes != 1024 {
		t.Fatalf("after writes: %+v", st)
	}
	g, err := fs.Open("dir/g")
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 600)
	if n, _ := g.Read(buf); n != 600 {
		t.Fatalf("read %d", n)
	}
	if n, _ := g.Read(buf); n != 424 {
		t.Fatalf("short read %d", n)
	}
	if n, err := g.Read(buf); n != 0 || err != io.EOF {
		t.Fatalf("read at EOF: %d %v", n, err)
	}
	if n, _ := g.ReadAt(buf[:10], 1020); n != 4 {
		t.Fatalf("ReadAt %d", n)
	}
	g.Close()
	dir, err := fs.OpenDir("dir")
	if err != nil {
		t.Fatal(err)
	}
	dir.Sync()
	dir.Close()
	st := d.Stats()
	if st.Profile != "ssd" || st.Reads != 3 || st.ReadBytes != 1028 || st.Writes != 2 || st.WrittenBytes != 1024 || st.Syncs != 4 {
		t.Errorf("stats %+v", st)
	}
	if st.ReadLatency.Count != 3 || st.WriteLatency.Count != 2 || st.SyncLatency.Count != 4 {
		t.Errorf("histogram counts %d %d %d", st.ReadLatency.Count, st.WriteLatency.Count, st.SyncLatency.Count)
	}
	if st.QueueLength != 0 || st.InService != 0 {
		t.Errorf("idle device with a queue: %d %d", st.QueueLength, st.InService)
	}
}

// TestBusy: an idle device is not busy, a saturated one is busy all the
// time, and while saturated its queue holds the callers.
func TestBusy(t *testing.T) {
	m := devfs.Model{ReadLatency: 2 * time.Millisecond, QueueDepth: 1}
	d := devfs.New("custom", m)
	f := memFile(t, d.Wrap(vfs.NewMem()), 4096)
	b0 := d.Stats().Busy
	time.Sleep(200 * time.Millisecond)
	if idle := d.Stats().Busy - b0; idle > time.Millisecond {
		t.Errorf("idle device busy for %v", idle)
	}
	t0, b1 := time.Now(), d.Stats().Busy
	var sawQueue atomic.Bool
	go func() {
		time.Sleep(100 * time.Millisecond)
		st := d.Stats()
		sawQueue.Store(st.InService == 1 && st.QueueLength >= 3)
		if !sawQueue.Load() {
			t.Logf("saturated device: queue %d, in service %d", st.QueueLength, st.InService)
		}
	}()
	hammer(4, 300*time.Millisecond, func(int) {
		var b [64]byte
		f.ReadAt(b[:], 0)
	})
	frac := float64(d.Stats().Busy-b1) / float64(time.Since(t0))
	within(t, "busy fraction of a saturated device", frac, 1, 0.05)
	if !sawQueue.Load() {
		t.Error("a saturated device showed no queue")
	}
	if bf := d.BusyFraction(10 * time.Second); bf < 0.5 {
		t.Errorf("BusyFraction = %.2f after 300 ms saturated of ~500 ms", bf)
	}
}

// TestOverFaultFS: a device over faultfs sees its faults as errors and
// charges nothing for an I/O that failed without moving a byte.
func TestOverFaultFS(t *testing.T) {
	ffs := faultfs.NewMem()
	d := devfs.New("nvm", devfs.NVM)
	fs := d.Wrap(ffs)
	f, err := fs.Create("a.log")
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("hello"))
	ffs.Fail(faultfs.Rule{Ops: faultfs.OpWrite | faultfs.OpSync, Path: "*.log"})
	if _, err := f.Write([]byte("world")); !errors.Is(err, syscall.EIO) {
		t.Fatalf("write under a fault: %v", err)
	}
	if err := f.Sync(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("sync under a fault: %v", err)
	}
	if st := d.Stats(); st.Writes != 1 || st.WrittenBytes != 5 || st.Syncs != 0 {
		t.Errorf("stats %+v", st)
	}
}

// TestUnderFaultFS: faultfs over a device over a strict in-memory FS can
// still crash it: unsynced writes are lost, synced ones kept, and the
// device counted them all.
func TestUnderFaultFS(t *testing.T) {
	d := devfs.New("hdd", devfs.HDD.Scale(0.001))
	ffs := faultfs.New(d.Wrap(vfs.NewStrictMem()))
	if err := ffs.MkdirAll("d", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := fsys.SyncDir(ffs, ""); err != nil {
		t.Fatal(err)
	}
	if err := fsys.WriteChecked(ffs, "d/kept", []byte("synced")); err != nil {
		t.Fatal(err)
	}
	f, err := ffs.Create("d/lost")
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("unsynced"))
	ffs.Crash()
	if got, _, err := fsys.ReadChecked(ffs, "d/kept"); err != nil || string(got) != "synced" {
		t.Errorf("synced file after the crash: %q %v", got, err)
	}
	if _, err := ffs.Stat("d/lost"); err == nil {
		t.Error("an unsynced file survived the crash")
	}
	if st := d.Stats(); st.Writes != 2 || st.Syncs != 3 || st.Reads == 0 {
		t.Errorf("stats %+v", st)
	}
}
