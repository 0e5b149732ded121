package main

import (
	"io"
	"log/slog"
	"testing"
	"time"
)

// TestIdleTrimmer: the trimmer trims only when no collection ran since it
// last looked, keeps looking every min while trims return much, and backs
// off to max while they return little.
func TestIdleTrimmer(t *testing.T) {
	var cycles uint64
	var trims int
	returned := int64(0)
	tr := &idleTrimmer{min: time.Second, max: 8 * time.Second, worthwhile: 100,
		gcCycles: func() uint64 { return cycles },
		trim: func() int64 {
			trims++
			cycles++ // a trim collects
			return returned
		},
		logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	seen, wait := tr.gcCycles(), tr.min
	cycles += 3 // busy
	if seen, wait = tr.next(seen, wait); trims != 0 || wait != time.Second {
		t.Fatalf("trimmed while the collector ran (trims %d, wait %v)", trims, wait)
	}
	returned = 500 // idle after a burst: a worthwhile trim
	if seen, wait = tr.next(seen, wait); trims != 1 || wait != time.Second || seen != cycles {
		t.Fatalf("idle: trims %d, wait %v, seen %d of %d", trims, wait, seen, cycles)
	}
	returned = 10 // nothing more to gain: back off to max
	for _, want := range []time.Duration{2, 4, 8, 8} {
		seen, wait = tr.next(seen, wait)
		if wait != want*time.Second {
			t.Fatalf("wait %v after a trim that returned little; want %v", wait, want*time.Second)
		}
	}
	cycles++ // busy again
	if _, wait = tr.next(seen, wait); wait != time.Second {
		t.Fatalf("wait %v once busy again; want %v", wait, time.Second)
	}
}
