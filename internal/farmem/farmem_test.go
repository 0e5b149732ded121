package farmem

import (
	"testing"
	"time"
	"unsafe"
)

func virtualCore(lat time.Duration, p int) (*Core, *Clock) {
	clk := NewClock(true)
	return NewCore(Config{Latency: lat, Prefetches: p, Virtual: true}, clk), clk
}

func TestMissStallsForLatency(t *testing.T) {
	c, clk := virtualCore(5*time.Microsecond, 4)
	buf := make([]byte, 4*LineSize)
	p := unsafe.Pointer(&buf[0])
	c.Access(p, 1)
	if clk.Now() != 5000 {
		t.Fatalf("a miss took %d ns; want 5000", clk.Now())
	}
	c.Access(p, 1) // now cached
	if clk.Now() != 5000 {
		t.Fatalf("a hit took %d ns", clk.Now()-5000)
	}
	if s := c.Stats(); s.Misses != 1 || s.Accesses != 2 || s.StallNs != 5000 {
		t.Fatalf("stats %+v", s)
	}
}

func TestPrefetchHidesLatency(t *testing.T) {
	c, clk := virtualCore(2*time.Microsecond, 4)
	buf := make([]byte, 8*LineSize)
	a := unsafe.Pointer(&buf[0])
	b := unsafe.Pointer(&buf[4*LineSize])
	c.Prefetch(a, 1)
	clk.Spend(3 * time.Microsecond) // other work, longer than the latency
	c.Access(a, 1)
	if clk.Now() != 3000 {
		t.Fatalf("an access to a line prefetched long enough ago stalled: now %d", clk.Now())
	}
	c.Prefetch(b, 1)
	clk.Spend(500 * time.Nanosecond)
	c.Access(b, 1) // arrives at 3000+2000
	if clk.Now() != 5000 {
		t.Fatalf("a late line should stall until its arrival: now %d", clk.Now())
	}
	if s := c.Stats(); s.Late != 1 || s.Misses != 0 || s.Prefetches != 2 || s.StallNs != 1500 {
		t.Fatalf("stats %+v", s)
	}
}

func TestLineFillBufferLimit(t *testing.T) {
	const p = 3
	c, clk := virtualCore(10*time.Microsecond, p)
	buf := make([]byte, 16*LineSize)
	for i := 0; i < p; i++ {
		c.Prefetch(unsafe.Pointer(&buf[i*LineSize]), 1)
	}
	if clk.Now() != 0 {
		t.Fatalf("P prefetches stalled: %d", clk.Now())
	}
	c.Prefetch(unsafe.Pointer(&buf[p*LineSize]), 1) // waits for the first to arrive
	if clk.Now() != 10000 {
		t.Fatalf("the (P+1)th prefetch issued at %d; want 10000", clk.Now())
	}
	if s := c.Stats(); s.LFBStallNs != 10000 {
		t.Fatalf("stats %+v", s)
	}
	// Prefetching a line in flight or present costs nothing.
	c.Prefetch(unsafe.Pointer(&buf[0]), 1)
	c.Prefetch(unsafe.Pointer(&buf[p*LineSize]), 1)
	if s := c.Stats(); s.Redundant != 2 || clk.Now() != 10000 {
		t.Fatalf("stats %+v at %d", s, clk.Now())
	}
	// A range spans lines.
	c.Prefetch(unsafe.Pointer(&buf[8*LineSize+10]), 2*LineSize)
	if s := c.Stats(); s.Prefetches != p+1+3 {
		t.Fatalf("a 128-byte range at offset 10 should fetch 3 lines: %+v", s)
	}
}

func TestCacheEvictsOldestInSet(t *testing.T) {
	c, _ := virtualCore(time.Microsecond, 12)
	sets := DefaultCacheLines / CacheWays
	buf := make([]byte, (CacheWays+2)*sets*LineSize+LineSize)
	base := (uintptr(unsafe.Pointer(&buf[0])) + LineSize - 1) &^ (LineSize - 1)
	line := func(i int) unsafe.Pointer { // lines i*sets all map to one set
		return unsafe.Add(unsafe.Pointer(&buf[0]), int(base-uintptr(unsafe.Pointer(&buf[0])))+i*sets*LineSize)
	}
	for i := 0; i <= CacheWays; i++ {
		c.Access(line(i), 1)
	}
	before := c.Stats().Misses
	c.Access(line(CacheWays), 1) // still there
	c.Access(line(1), 1)         // still there
	if c.Stats().Misses != before {
		t.Fatal("recent lines were evicted")
	}
	c.Access(line(0), 1) // the oldest was replaced
	if c.Stats().Misses != before+1 {
		t.Fatal("the oldest line of a full set was not replaced")
	}
}

func TestRealClockSpins(t *testing.T) {
	c := NewCore(Config{Latency: 200 * time.Microsecond}, NewClock(false))
	buf := make([]byte, LineSize)
	start := time.Now()
	c.Access(unsafe.Pointer(&buf[0]), 1)
	if d := time.Since(start); d < 200*time.Microsecond {
		t.Fatalf("a real-time miss took %v", d)
	}
	Direct.Prefetch(unsafe.Pointer(&buf[0]), LineSize) // must not fault
	PrefetchLine(nil)
}

func TestMeasureWaitPenalty(t *testing.T) {
	got := MeasureWaitPenalty([]time.Duration{0, 2 * time.Microsecond}, 20*time.Millisecond)
	if len(got) != 2 || got[0].Wait != 0 || got[1].Wait != 2*time.Microsecond {
		t.Fatalf("MeasureWaitPenalty = %+v", got)
	}
	for _, p := range got {
		// Work after a wait cannot be faster than a fraction of work back
		// to back, nor absurdly slower; anything else is a broken probe.
		if !(p.Ratio > 0.3 && p.Ratio < 50) {
			t.Fatalf("ratio %v after %v", p.Ratio, p.Wait)
		}
	}
}

func TestSkipClockJumpsOverStalls(t *testing.T) {
	clk := NewSkipClock()
	c := NewCore(Config{Latency: 50 * time.Millisecond, Prefetches: 4, SkipStalls: true}, clk)
	buf := make([]byte, 4*LineSize)
	start := time.Now()
	c.Access(unsafe.Pointer(&buf[0]), 1) // a 50 ms miss
	if real := time.Since(start); real > 20*time.Millisecond {
		t.Fatalf("a skipped stall took %v of real time", real)
	}
	if now := clk.Now(); now < int64(50*time.Millisecond) {
		t.Fatalf("clock at %v after a 50 ms stall", time.Duration(now))
	}
	if s := c.Stats(); s.Misses != 1 || s.StallNs < int64(50*time.Millisecond) {
		t.Fatalf("stats %+v", s)
	}
	if clk.Skipped() < int64(49*time.Millisecond) {
		t.Fatalf("skipped %v", time.Duration(clk.Skipped()))
	}
	// Computation is real.
	start = time.Now()
	clk.Spend(5 * time.Millisecond)
	if real := time.Since(start); real < 5*time.Millisecond {
		t.Fatalf("Spend(5ms) took %v of real time", real)
	}
}
