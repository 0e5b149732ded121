package ult

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/distash/distash/internal/farmem"
)

func testFile(t *testing.T) *os.File {
	t.Helper()
	path := filepath.Join(t.TempDir(), "data")
	data := make([]byte, 64<<10)
	for i := range data {
		data[i] = byte(i / 4096)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// body reads block (id % 16) and checks it, with a far-memory step before.
func body(t *testing.T, f *os.File, bad *int) func(tk *Task) {
	line := make([]byte, farmem.LineSize)
	return func(tk *Task) {
		buf := make([]byte, 4096)
		for tk.Running() {
			tk.Compute(200 * time.Nanosecond)
			tk.Prefetch(unsafe.Pointer(&line[0]), 1)
			tk.Access(unsafe.Pointer(&line[0]), 1)
			blk := int64(tk.Rand().Intn(16))
			n, err := tk.ReadAt(f, buf, blk*4096)
			if err != nil || n != 4096 || buf[0] != byte(blk) || buf[4095] != byte(blk) {
				*bad++
			}
			tk.EndOp()
		}
	}
}

func TestVirtualDeterministic(t *testing.T) {
	f := testFile(t)
	run := func() Result {
		s, err := New(Config{Tasks: 16, Mem: farmem.Config{Latency: 2 * time.Microsecond, Virtual: true},
			IO: IOConfig{Latency: 20 * time.Microsecond, Jitter: 0.3}, SwitchCost: 100, Seed: 7})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		bad := 0
		r, err := s.Run(context.Background(), RunOptions{Duration: 5 * time.Millisecond, Warmup: time.Millisecond}, body(t, f, &bad))
		if err != nil || bad != 0 {
			t.Fatalf("run: %v, %d bad reads", err, bad)
		}
		return r
	}
	a, b := run(), run()
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("two virtual runs differ:\n%+v\n%+v", a, b)
	}
	if a.ElapsedNs < int64(5*time.Millisecond) || a.ElapsedNs > int64(5*time.Millisecond+10*time.Microsecond) || a.Ops == 0 {
		t.Fatalf("result %+v", a)
	}
	// Each operation: one memory, one pre-IO and one post-IO suboperation.
	if k := a.Kinds; k[KindMem].Count < a.Ops-16 || k[KindPre].Count < a.Ops-16 || k[KindPost].Count != a.Ops {
		t.Fatalf("kinds %+v for %d ops", k, a.Ops)
	}
	if m := a.Kinds[KindMem].MeanNs(); m < 300 || m > 301 {
		t.Fatalf("memory suboperation %v ns; want compute 200 + switch 100", m)
	}
}

func TestBackends(t *testing.T) {
	f := testFile(t)
	modes := []IOMode{IOInline, IOThreads}
	if runtime.GOOS == "linux" {
		modes = append(modes, IOUring)
	}
	for _, m := range modes {
		t.Run(m.String(), func(t *testing.T) {
			s, err := New(Config{Tasks: 8, IO: IOConfig{Mode: m}})
			if err != nil {
				if m == IOUring {
					t.Skipf("io_uring unavailable: %v", err)
				}
				t.Fatal(err)
			}
			defer s.Close()
			bad := 0
			r, err := s.Run(context.Background(), RunOptions{MaxOps: 2000}, body(t, f, &bad))
			if err != nil || bad != 0 || r.Ops < 2000 || s.IOMode() != m {
				t.Fatalf("%v: %v, %d bad reads, %+v", m, err, bad, r)
			}
			if r.CPUShare() <= 0 {
				t.Fatalf("CPU share %v", r.CPUShare())
			}
		})
	}
}

func TestEmulatedDeviceLatency(t *testing.T) {
	f := testFile(t)
	s, err := New(Config{Tasks: 4, IO: IOConfig{Mode: IOInline, Latency: 300 * time.Microsecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	bad := 0
	r, err := s.Run(context.Background(), RunOptions{MaxOps: 200}, body(t, f, &bad))
	if err != nil || bad != 0 {
		t.Fatal(err, bad)
	}
	// Reads still in flight when the run stops count as submitted only.
	if wait := r.IOWaitNs / (r.IOs - 4); wait < int64(300*time.Microsecond) {
		t.Fatalf("reads completed after %d ns; the device takes 300 µs", wait)
	}
	// 4 threads, 300 µs per read: at most about 4/300µs ops per second.
	if x := r.Throughput(); x > 4/300e-6*1.1 {
		t.Fatalf("throughput %.0f beyond what the device allows", x)
	}
}

func TestMeasureSwitch(t *testing.T) {
	c, err := MeasureSwitch(20000)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", c)
	if c.Coroutine <= 0 || c.Scheduler <= 0 || c.Scheduler > 100*time.Microsecond {
		t.Fatalf("%+v", c)
	}
}

// TestSkipStalls: with a skipping clock, stalls and the device's latency
// advance the clock without costing real time, the run is still bounded by
// them (throughput as if they had been waited out), and the thread's CPU
// share is taken over the real time only.
func TestSkipStalls(t *testing.T) {
	f := testFile(t)
	const lat, dev = 200 * time.Microsecond, 2 * time.Millisecond
	s, err := New(Config{Tasks: 4, Mem: farmem.Config{Latency: lat, SkipStalls: true},
		IO: IOConfig{Mode: IOInline, Latency: dev}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !s.Clock().Skips() {
		t.Fatal("SkipStalls did not give a skipping clock")
	}
	bad := 0
	start := time.Now()
	r, err := s.Run(context.Background(), RunOptions{MaxOps: 400}, body(t, f, &bad))
	real := time.Since(start)
	if err != nil || bad != 0 {
		t.Fatal(err, bad)
	}
	// Each operation stalls 200 µs on its line (the threads share it, so
	// often less) and waits 2 ms for its read with 4 threads: 400 ops take
	// at least 200 ms of the clock's time, but skipped, far less real time.
	if r.ElapsedNs < int64(200*time.Millisecond) || r.SkippedNs < r.ElapsedNs/2 {
		t.Fatalf("elapsed %v, skipped %v", time.Duration(r.ElapsedNs), time.Duration(r.SkippedNs))
	}
	if real > time.Duration(r.ElapsedNs)/2 {
		t.Fatalf("the run took %v of real time for %v of clock time: the stalls were not skipped", real, time.Duration(r.ElapsedNs))
	}
	if x := r.Throughput(); x > 4/dev.Seconds()*1.1 {
		t.Fatalf("throughput %.0f beyond what the device allows", x)
	}
	if sh := r.CPUShare(); sh > 0 && sh < 0.2 {
		t.Fatalf("CPU share %.2f: skipped time counted as time off the CPU", sh)
	}
}
