package main

import (
	"context"
	"log/slog"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// idleTrimmer returns freed memory to the operating system once the server
// is idle. The runtime collects only as the program allocates and returns
// memory lazily: after a burst of large transactions an idle server kept
// the memory the burst needed (1.5 GB resident for 200 MB live, with
// GOGC=400) until its next collection, minutes later. When no collection
// ran during an interval, the trimmer collects and returns what is free
// (debug.FreeOSMemory); when that returns little, it looks less often (up
// to max), so that an idle server is not collected every few seconds.
type idleTrimmer struct {
	min, max time.Duration
	// worthwhile is what a trim must return to keep looking every min.
	worthwhile int64
	// gcCycles counts the collections so far; trim collects and returns
	// the bytes it gave back to the system. Both are the runtime's, except
	// in tests.
	gcCycles func() uint64
	trim     func() int64
	logger   *slog.Logger
}

func newIdleTrimmer(logger *slog.Logger) *idleTrimmer {
	return &idleTrimmer{min: 5 * time.Second, max: 2 * time.Minute, worthwhile: 64 << 20, gcCycles: gcCycles, trim: freeOSMemory, logger: logger}
}

func gcCycles() uint64 {
	s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// freeOSMemory collects, returns free memory to the system and reports how
// much of the heap it returned.
func freeOSMemory() int64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	before := int64(ms.HeapSys - ms.HeapReleased)
	debug.FreeOSMemory()
	runtime.ReadMemStats(&ms)
	return before - int64(ms.HeapSys-ms.HeapReleased)
}

// next looks once, trimming if the runtime collected nothing since seen
// collections, and returns the collections seen and how long to wait.
func (t *idleTrimmer) next(seen uint64, wait time.Duration) (uint64, time.Duration) {
	if c := t.gcCycles(); c != seen {
		return c, t.min // busy: the collector keeps memory in check
	}
	released := t.trim()
	if released >= t.worthwhile {
		t.logger.Info("returned idle memory to the system", "bytes", released)
		wait = t.min
	} else {
		wait = min(2*wait, t.max)
	}
	return t.gcCycles(), wait
}

// run trims until ctx is done.
func (t *idleTrimmer) run(ctx context.Context) {
	seen, wait := t.gcCycles(), t.min
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		seen, wait = t.next(seen, wait)
		timer.Reset(wait)
	}
}
