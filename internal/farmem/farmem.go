// Package farmem emulates microsecond-latency memory ("far memory") for
// in-memory indices and caches, as studied by Bando et al., "Analysis and
// Evaluation of Using Microsecond-Latency Memory for In-Memory Indices and
// Caches in SSD-Based Key-Value Stores" (SIGMOD 2025).
//
// The data itself lives in ordinary host memory; what is emulated is the
// timing of one CPU core touching it:
//
//   - Memory is accessed in 64-byte lines. An access to a line the core
//     does not hold costs the latency L_mem: the core stalls (busy-waits,
//     as a real load stalls the pipeline) until the line arrives.
//   - A prefetch starts fetching a line without stalling. An access to a
//     line prefetched at least L_mem earlier costs nothing; one prefetched
//     later stalls only for the rest of L_mem.
//   - Every outstanding fetch occupies one of the core's P line-fill
//     buffers. A prefetch or a miss issued while all P are busy first
//     stalls until the oldest outstanding fetch completes.
//   - Fetched lines stay in a small per-core cache (Config.CacheLines,
//     default 512 lines = 32 KiB, 8-way set associative with FIFO
//     replacement, an L1d); a line evicted from it must be fetched again.
//
// A Core keeps this state for one core and charges time to a Clock, which
// is either real (stalls busy-wait on the monotonic clock) or virtual (a
// discrete-event clock: stalls and compute advance a counter, nothing
// waits, runs are deterministic).
//
// Code that walks a far-memory structure talks to a Ctx: it calls Prefetch
// before it needs a line and Access when it reads it. On a user-level
// thread (package ult) Prefetch also yields so that other threads run while
// the line is in flight; Direct is the Ctx for ordinary calls with no
// emulation (DRAM), and Sync emulates far memory without threads.
package farmem

import (
	"os"
	"time"
	"unsafe"
)

// LineSize is the unit of far-memory accesses in bytes.
const LineSize = 64

// Defaults of Config.
const (
	// DefaultPrefetches is P, the line-fill buffers per core (12 as in the
	// paper's model; Skylake-SP and Ice Lake cores have 12, Sapphire Rapids 16).
	DefaultPrefetches = 12
	// DefaultCacheLines is the per-core cache of arrived lines (32 KiB).
	DefaultCacheLines = 512
	// CacheWays is the associativity of the per-core cache.
	CacheWays = 8
)

// Config describes the emulated memory of one core.
type Config struct {
	// Latency is L_mem, the time from issuing a fetch to the line's arrival.
	Latency time.Duration
	// Prefetches is P, the most fetches in flight per core; 0 means DefaultPrefetches.
	Prefetches int
	// CacheLines is the size of the per-core cache of fetched lines,
	// rounded up to a power of two (at least CacheWays); 0 means
	// DefaultCacheLines.
	CacheLines int
	// Virtual selects virtual (discrete-event) time instead of real time.
	Virtual bool
	// SkipStalls, in real time, makes stalls cost no real time: the clock
	// jumps over them instead of busy-waiting (see NewSkipClock).
	SkipStalls bool
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.Prefetches <= 0 {
		c.Prefetches = DefaultPrefetches
	}
	if c.CacheLines <= 0 {
		c.CacheLines = DefaultCacheLines
	}
	n := CacheWays
	for n < c.CacheLines {
		n <<= 1
	}
	c.CacheLines = n
	if c.Latency < 0 {
		c.Latency = 0
	}
	return c
}

// Clock is one core's time in nanoseconds since the clock was made. A real
// clock reads the monotonic clock and waits by spinning; a virtual clock is
// a counter that waiting and spending advance. A Clock is not safe for
// concurrent use.
type Clock struct {
	virtual bool
	skip    bool
	skipped int64 // time jumped over by a skipping clock
	last    int64
	base    time.Time
}

// NewClock returns a clock at time 0.
func NewClock(virtual bool) *Clock { return &Clock{virtual: virtual, base: time.Now()} }

// NewSkipClock returns a real clock that skips stalls: it runs with the
// monotonic clock, but waiting (WaitUntil) moves it forward at once
// instead of spinning. Computation stays real (Spend spins); only the
// emulated stalls cost no real time. A busy-wait of several microseconds
// on a shared machine slows the code after it (MeasureWaitPenalty), which
// a real stalled load would not do; skipping the wait leaves the core's
// caches as they were.
func NewSkipClock() *Clock { return &Clock{skip: true, base: time.Now()} }

// Virtual reports whether c is a virtual clock.
func (c *Clock) Virtual() bool { return c.virtual }

// Skips reports whether c skips stalls (NewSkipClock).
func (c *Clock) Skips() bool { return c.skip }

// Skipped returns the time a skipping clock has jumped over so far; the
// real time since the clock was made is Now() - Skipped().
func (c *Clock) Skipped() int64 { return c.skipped }

// Now reads the clock (a real clock costs one monotonic-clock read).
func (c *Clock) Now() int64 {
	if !c.virtual {
		c.last = int64(time.Since(c.base)) + c.skipped
	}
	return c.last
}

// Last returns the most recent reading without reading the clock again.
func (c *Clock) Last() int64 { return c.last }

// WaitUntil stalls until time t (a virtual clock jumps to t) and returns
// the time afterwards, which a real clock may read slightly past t.
func (c *Clock) WaitUntil(t int64) int64 {
	if c.virtual {
		if t > c.last {
			c.last = t
		}
		return c.last
	}
	if c.skip {
		if now := c.Now(); t > now {
			c.skipped += t - now
			c.last = t
		}
		return c.last
	}
	for {
		if n := c.Now(); n >= t {
			return n
		}
	}
}

// Spend accounts d nanoseconds of computation: a real clock spins for d, a
// virtual one advances by d.
func (c *Clock) Spend(d time.Duration) {
	if d <= 0 {
		return
	}
	if c.virtual {
		c.last += int64(d)
		return
	}
	// Computation is real, also on a skipping clock.
	end := c.Now() + int64(d)
	for c.Now() < end {
	}
}

// Stats counts one core's far-memory traffic.
type Stats struct {
	Accesses   int64 // lines accessed
	Prefetches int64 // prefetches sent to far memory
	Redundant  int64 // prefetches of lines already present or in flight
	Misses     int64 // accesses to lines not present: a full L_mem stall
	Late       int64 // accesses to prefetched lines that had not arrived yet
	StallNs    int64 // time stalled in accesses (misses and late lines)
	LFBStallNs int64 // time stalled waiting for a free line-fill buffer
}

// Sub returns s - o, the traffic between two snapshots.
func (s Stats) Sub(o Stats) Stats {
	return Stats{
		Accesses:   s.Accesses - o.Accesses,
		Prefetches: s.Prefetches - o.Prefetches,
		Redundant:  s.Redundant - o.Redundant,
		Misses:     s.Misses - o.Misses,
		Late:       s.Late - o.Late,
		StallNs:    s.StallNs - o.StallNs,
		LFBStallNs: s.LFBStallNs - o.LFBStallNs,
	}
}

// Add returns s + o.
func (s Stats) Add(o Stats) Stats {
	return Stats{
		Accesses:   s.Accesses + o.Accesses,
		Prefetches: s.Prefetches + o.Prefetches,
		Redundant:  s.Redundant + o.Redundant,
		Misses:     s.Misses + o.Misses,
		Late:       s.Late + o.Late,
		StallNs:    s.StallNs + o.StallNs,
		LFBStallNs: s.LFBStallNs + o.LFBStallNs,
	}
}

// Stalls returns the total stalled time.
func (s Stats) Stalls() int64 { return s.StallNs + s.LFBStallNs }

// Core is the far-memory state of one emulated CPU core: its line-fill
// buffers and its cache of arrived lines. A Core is not safe for concurrent
// use; each core (scheduler) owns one.
type Core struct {
	clock *Clock
	cfg   Config
	lat   int64

	// lfb holds the arrival times of the fetches in flight in issue order;
	// all fetches take the same latency, so issue order is arrival order.
	lfb         []int64
	head, count int

	// The cache: set s holds ways [s*CacheWays, (s+1)*CacheWays).
	tags   []uintptr // line number + 1 held by each way, 0 if none
	ready  []int64   // arrival time of the line in each way
	victim []uint8   // next way to replace in each set (FIFO)
	mask   uintptr   // sets - 1

	st Stats
}

// NewCore returns a core with empty buffers and cache whose time is clock.
func NewCore(cfg Config, clock *Clock) *Core {
	cfg = cfg.WithDefaults()
	return &Core{
		clock:  clock,
		cfg:    cfg,
		lat:    int64(cfg.Latency),
		lfb:    make([]int64, cfg.Prefetches),
		tags:   make([]uintptr, cfg.CacheLines),
		ready:  make([]int64, cfg.CacheLines),
		victim: make([]uint8, cfg.CacheLines/CacheWays),
		mask:   uintptr(cfg.CacheLines/CacheWays - 1),
	}
}

// lookup returns the way holding line l, or -1.
func (c *Core) lookup(l uintptr) int {
	base := int(l&c.mask) * CacheWays
	tags := c.tags[base : base+CacheWays]
	for i, t := range tags {
		if t == l+1 {
			return base + i
		}
	}
	return -1
}

// fill puts line l, arriving at arrive, into its set in place of the
// oldest line there.
func (c *Core) fill(l uintptr, arrive int64) {
	set := int(l & c.mask)
	w := set*CacheWays + int(c.victim[set])
	c.victim[set] = (c.victim[set] + 1) % CacheWays
	c.tags[w] = l + 1
	c.ready[w] = arrive
}

// Clock returns the core's clock.
func (c *Core) Clock() *Clock { return c.clock }

// Config returns the core's configuration (with defaults applied).
func (c *Core) Config() Config { return c.cfg }

// Stats returns the traffic so far.
func (c *Core) Stats() Stats { return c.st }

// Stalls returns the total time stalled so far (cheaper than Stats).
func (c *Core) Stalls() int64 { return c.st.StallNs + c.st.LFBStallNs }

// retire frees the buffers of fetches that have arrived by now.
func (c *Core) retire(now int64) {
	p := len(c.lfb)
	for c.count > 0 && c.lfb[c.head] <= now {
		c.head++
		if c.head == p {
			c.head = 0
		}
		c.count--
	}
}

// issue takes a line-fill buffer for a fetch issued now (stalling first if
// all are busy) and returns the fetch's arrival time.
func (c *Core) issue() int64 {
	now := c.clock.Now()
	c.retire(now)
	if c.count == len(c.lfb) {
		after := c.clock.WaitUntil(c.lfb[c.head])
		c.st.LFBStallNs += after - now
		now = after
		c.retire(now)
	}
	arrive := now + c.lat
	i := c.head + c.count
	if i >= len(c.lfb) {
		i -= len(c.lfb)
	}
	c.lfb[i] = arrive
	c.count++
	return arrive
}

func lines(p unsafe.Pointer, n uintptr) (first, last uintptr) {
	a := uintptr(p)
	if n == 0 {
		n = 1
	}
	return a / LineSize, (a + n - 1) / LineSize
}

// Prefetch starts fetching the lines holding [p, p+n) and issues a real
// PREFETCHT0 for each. Lines present or in flight cost nothing more.
func (c *Core) Prefetch(p unsafe.Pointer, n uintptr) {
	first, last := lines(p, n)
	for l := first; l <= last; l++ {
		if c.lookup(l) >= 0 {
			c.st.Redundant++
			continue
		}
		c.fill(l, c.issue())
		c.st.Prefetches++
		prefetchT0(l * LineSize)
	}
}

// Access reads the lines holding [p, p+n): it stalls for lines in flight
// until they arrive and for lines not present for a whole L_mem.
func (c *Core) Access(p unsafe.Pointer, n uintptr) {
	first, last := lines(p, n)
	for l := first; l <= last; l++ {
		c.st.Accesses++
		if i := c.lookup(l); i >= 0 {
			r := c.ready[i]
			if r <= c.clock.Last() {
				continue
			}
			now := c.clock.Now()
			if r <= now {
				continue
			}
			c.st.Late++
			c.st.StallNs += c.clock.WaitUntil(r) - now
			continue
		}
		c.st.Misses++
		arrive := c.issue()
		now := c.clock.Last()
		c.st.StallNs += c.clock.WaitUntil(arrive) - now
		c.fill(l, arrive)
	}
}

// Ctx is how code touches a far-memory structure. Call Prefetch for the
// lines a step will read, then Access them; on a user-level thread Prefetch
// yields in between so the fetch overlaps other threads' work. ReadAt is an
// SSD read, which a user-level thread overlaps with other threads too, and
// Yield lets other threads run while waiting (for example for a lock).
type Ctx interface {
	Prefetch(p unsafe.Pointer, n uintptr)
	Access(p unsafe.Pointer, n uintptr)
	ReadAt(f *os.File, buf []byte, off int64) (int, error)
	Yield()
}

// Direct is the Ctx of ordinary calls: host DRAM, no emulated latency; its
// Prefetch only issues the real prefetch instructions.
var Direct Ctx = direct{}

type direct struct{}

func (direct) Prefetch(p unsafe.Pointer, n uintptr) {
	first, last := lines(p, n)
	for l := first; l <= last; l++ {
		prefetchT0(l * LineSize)
	}
}
func (direct) Access(unsafe.Pointer, uintptr) {}
func (direct) ReadAt(f *os.File, buf []byte, off int64) (int, error) {
	return f.ReadAt(buf, off)
}
func (direct) Yield() {}

// Sync is a Ctx that emulates far memory on a goroutine without user-level
// threads: prefetches are issued but the caller does not yield, so an
// access right after its prefetch stalls for nearly all of L_mem. It is
// not safe for concurrent use.
type Sync struct{ Core *Core }

// Prefetch implements Ctx.
func (s Sync) Prefetch(p unsafe.Pointer, n uintptr) { s.Core.Prefetch(p, n) }

// Access implements Ctx.
func (s Sync) Access(p unsafe.Pointer, n uintptr) { s.Core.Access(p, n) }

// ReadAt implements Ctx with a blocking read.
func (s Sync) ReadAt(f *os.File, buf []byte, off int64) (int, error) { return f.ReadAt(buf, off) }

// Yield implements Ctx; it does nothing.
func (s Sync) Yield() {}

// PrefetchLine issues a real prefetch (PREFETCHT0 on amd64, nothing
// elsewhere) of the line holding p, without emulation.
func PrefetchLine(p unsafe.Pointer) { prefetchT0(uintptr(p)) }
