package enginetest

import (
	"fmt"
	"testing"

	"github.com/distash/distash/internal/engine"
	"github.com/distash/distash/internal/fsys"
	"github.com/distash/distash/internal/fsys/faultfs"
	"github.com/distash/distash/internal/kv"
)

// OpenErrFunc opens an engine with opts (Dir and FS filled in by the
// suite) and returns Open's error: under injected faults, failing to open
// is an outcome to check, not a test failure.
type OpenErrFunc func(opts engine.Options) (engine.Engine, error)

// RunFaults checks a durable engine under disk faults injected through
// its file system (engine.Options.FS, a faultfs.FS over a strict
// in-memory FS):
//
//   - a failed fsync fails the engine for good: that Apply and every later
//     one return an error, even once the disk is healthy again, and a
//     reopened engine holds every acknowledged batch;
//   - a failed or short (torn) write returns an error, and whether the
//     torn bytes survive (a restart) or not (a crash), the reopened engine
//     holds every acknowledged batch and nothing of the failed one but
//     all or none of it;
//   - a failed read returns an error, never a missing or wrong value;
//   - a full disk returns an error matching fsys.IsNoSpace, and once space
//     is freed a reopened engine holds every acknowledged batch and takes
//     writes again;
//   - a crash that drops exactly the unsynced writes loses no
//     acknowledged batch.
//
// files is a glob (faultfs.Rule.Path) matching the files that hold the
// engine's data, where reads and writes are failed.
func RunFaults(t *testing.T, open OpenErrFunc, files string) {
	t.Run("FailedSync", func(t *testing.T) { testFailedSync(t, open) })
	t.Run("FailedWrite", func(t *testing.T) { testFailedWrite(t, open, files, false) })
	t.Run("TornWriteRestart", func(t *testing.T) { testFailedWrite(t, open, files, true) })
	t.Run("FailedRead", func(t *testing.T) { testFailedRead(t, open, files) })
	t.Run("NoSpace", func(t *testing.T) { testNoSpace(t, open) })
	t.Run("CrashDropsUnsynced", func(t *testing.T) { testCrashDropsUnsynced(t, open) })
}

// faultEngine is an engine under test on a faultfs, with the model of its
// acknowledged batches.
type faultEngine struct {
	t    *testing.T
	fs   *faultfs.FS
	open OpenErrFunc
	opts engine.Options
	e    engine.Engine
	m    model // acknowledged batches
	v    kv.Version
	// failed: an Apply failed. A failed engine is closed before its
	// process dies: in a test its goroutines outlive the simulated crash,
	// and closing tells them they belong to a dead process.
	failed bool
}

func newFaultEngine(t *testing.T, open OpenErrFunc) *faultEngine {
	fs := faultfs.NewMem()
	if err := fs.MkdirAll("/data", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := fsys.SyncDir(fs, "/"); err != nil {
		t.Fatal(err)
	}
	f := &faultEngine{t: t, fs: fs, open: open, opts: engine.Options{Dir: "/data/engine", FS: fs}, m: model{}}
	f.reopen()
	t.Cleanup(func() {
		if f.e != nil {
			f.e.Close()
		}
	})
	return f
}

func (f *faultEngine) reopen() {
	f.t.Helper()
	e, err := f.open(f.opts)
	if err != nil {
		f.t.Fatalf("open: %v", err)
	}
	f.e = e
}

// batch returns the i-th batch of the test: three keys of its own and an
// overwrite of a shared key.
func faultBatch(v kv.Version) []engine.Write {
	return []engine.Write{
		Set(fmt.Sprintf("k/%06d/a", v), BigValue(int(v), 1)),
		Set(fmt.Sprintf("k/%06d/b", v), "b"),
		Set(fmt.Sprintf("k/%06d/c", v), BigValue(int(v), 2)),
		Set("shared", fmt.Sprint(v)),
	}
}

// apply applies the next batch; it is added to the model if acknowledged.
func (f *faultEngine) apply() error {
	v := f.v + 1
	ws := faultBatch(v)
	err := f.e.Apply(&engine.Batch{Version: v, Writes: ws})
	if err == nil {
		f.v = v
		f.m.apply(ws)
	} else {
		f.failed = true
	}
	return err
}

func (f *faultEngine) applyN(n int) {
	f.t.Helper()
	for i := 0; i < n; i++ {
		if err := f.apply(); err != nil {
			f.t.Fatalf("Apply %d on a healthy disk: %v", f.v+1, err)
		}
	}
}

// restart ends the engine's process (crash: with a power loss that drops
// the unsynced writes; else a kill -9, as the process a failed engine
// takes down) and opens the engine again. The engine's goroutines outlive
// the simulated death in a test: an engine with an Abandon method (Pebble)
// is told it belongs to a dead process; a failed one is closed first.
func (f *faultEngine) restart(crash bool) {
	f.t.Helper()
	if a, ok := f.e.(interface{ Abandon() }); ok {
		a.Abandon()
	} else if f.failed {
		f.e.Close()
	}
	if crash {
		f.fs.Crash()
	} else {
		f.fs.Kill()
	}
	f.e.Close()
	f.e = nil
	f.failed = false
	f.reopen()
}

// checkAcked checks that the engine holds every acknowledged batch and, of
// the failed batch at version failed (0 if none), all of it or nothing.
func (f *faultEngine) checkAcked(failed kv.Version) {
	f.t.Helper()
	got := f.e.Version()
	switch {
	case got == f.v:
		checkModel(f.t, f.e, f.m)
	case failed != 0 && got == failed:
		m := model{}
		for k, v := range f.m {
			m[k] = v
		}
		m.apply(faultBatch(failed))
		checkModel(f.t, f.e, m)
		f.m, f.v = m, failed
	default:
		f.t.Fatalf("version %d after restart, want %d (the last acknowledged) or %d (the failed batch, whole)", got, f.v, failed)
	}
}

func testFailedSync(t *testing.T, open OpenErrFunc) {
	for _, crash := range []bool{false, true} {
		t.Run(fmt.Sprintf("crash=%v", crash), func(t *testing.T) {
			f := newFaultEngine(t, open)
			f.applyN(20)
			f.fs.Fail(faultfs.Rule{Ops: faultfs.OpSync})
			if err := f.apply(); err == nil {
				t.Fatal("Apply returned nil although its fsync failed")
			}
			failed := f.v + 1
			f.fs.Heal()
			// The disk works again, and a sync now would succeed: the
			// engine must not take that as making the failed batch (or any
			// later one) durable.
			for i := 0; i < 3; i++ {
				if err := f.apply(); err == nil {
					t.Fatal("Apply succeeded after a failed fsync: the engine must fail for good")
				}
			}
			f.restart(crash)
			f.checkAcked(failed)
			f.applyN(3)
		})
	}
}

func testFailedWrite(t *testing.T, open OpenErrFunc, files string, torn bool) {
	for _, crash := range []bool{false, true} {
		if torn && crash {
			continue // a crash drops the torn bytes: FailedWrite/crash
		}
		t.Run(fmt.Sprintf("crash=%v", crash), func(t *testing.T) {
			f := newFaultEngine(t, open)
			f.applyN(20)
			f.fs.Fail(faultfs.Rule{Ops: faultfs.OpWrite, Path: files, Partial: torn})
			var failed kv.Version
			for i := 0; i < 200 && failed == 0; i++ {
				if err := f.apply(); err != nil {
					failed = f.v + 1
				}
			}
			if failed == 0 {
				t.Fatalf("no Apply failed with writes to %s failing (%d injected)", files, f.fs.Injected())
			}
			f.fs.Heal()
			f.restart(crash)
			f.checkAcked(failed)
			f.applyN(3)
		})
	}
}

func testFailedRead(t *testing.T, open OpenErrFunc, files string) {
	f := newFaultEngine(t, open)
	f.applyN(50)
	f.e.Close() // reads now come from the files
	f.reopen()
	f.fs.Fail(faultfs.Rule{Ops: faultfs.OpRead, Path: files})
	errs := 0
	for k, want := range f.m {
		v, ok, err := f.e.Get([]byte(k))
		switch {
		case err != nil:
			errs++
		case !ok:
			t.Fatalf("Get(%q) = absent with reads failing; want an error or the value", k)
		case string(v) != want:
			t.Fatalf("Get(%q) = wrong value with reads failing", k)
		}
	}
	if err := f.e.Scan(nil, nil, false, func(k, v []byte) bool {
		if f.m[string(k)] != string(v) {
			t.Fatalf("Scan gave a wrong value for %q with reads failing", k)
		}
		return true
	}); err != nil {
		errs++
	}
	if errs == 0 {
		t.Fatalf("no read failed although reads of %s fail (%d injected): the test does not reach the files", files, f.fs.Injected())
	}
	f.fs.Heal()
	f.restart(false)
	f.checkAcked(0)
}

func testNoSpace(t *testing.T, open OpenErrFunc) {
	for _, crash := range []bool{false, true} {
		t.Run(fmt.Sprintf("crash=%v", crash), func(t *testing.T) {
			f := newFaultEngine(t, open)
			f.applyN(10)
			f.fs.SetSpace(64 << 10)
			var err error
			for i := 0; i < 10000 && err == nil; i++ {
				err = f.apply()
			}
			if err == nil {
				t.Fatal("the disk never filled")
			}
			if !fsys.IsNoSpace(err) {
				t.Fatalf("Apply on a full disk: %v; want an error matching fsys.IsNoSpace", err)
			}
			failed := f.v + 1
			if err := f.apply(); err == nil {
				t.Fatal("Apply succeeded on a full disk after one failed")
			}
			f.fs.SetSpace(-1) // space freed
			f.restart(crash)
			f.checkAcked(failed)
			f.applyN(10)
			f.e.Close()
			f.reopen()
			f.checkAcked(0)
		})
	}
}

func testCrashDropsUnsynced(t *testing.T, open OpenErrFunc) {
	f := newFaultEngine(t, open)
	for round := 0; round < 2; round++ {
		f.applyN(15)
		// Clear ranges too, so tombstones have to survive the crash.
		v := f.v + 1
		ws := []engine.Write{ClearRange(fmt.Sprintf("k/%06d", v-10), fmt.Sprintf("k/%06d", v-5))}
		if err := f.e.Apply(&engine.Batch{Version: v, Writes: ws}); err != nil {
			t.Fatal(err)
		}
		f.v = v
		f.m.apply(ws)
		f.restart(true)
		f.checkAcked(0)
	}
}
