package flash

import (
	"errors"
	"math"
	"runtime"
	"time"
	"unsafe"

	"github.com/distash/distash/internal/engine"
	"github.com/distash/distash/internal/farmem"
	"github.com/distash/distash/internal/farmem/ult"
)

// Far memory in the serving path. With Config.FarMemory > 0 the engine's
// hash index and key tree are taken to live in emulated memory of that
// latency, and every read a client makes of them (Get, GetMany,
// ScanServed) runs as a lookup on a user-level thread of the engine's own
// per-core schedulers (ult.Server): each bucket (and, in a scan, each key
// visited) is prefetched before it is read, the thread yields meanwhile
// so other lookups run, and device reads go through the schedulers' IO
// backend. Writers (Apply, the cleaner, index rebuilds) are unchanged:
// lookups take the engine's read lock only between yields (rlock yields
// while a writer holds it) and restart if the index was rebuilt.

// DefaultLookupThreads is the number of user-level threads per core used
// when Config.LookupThreads is 0, for far-memory latency lat. In the
// model (package model), a core running N threads round-robin comes back
// to a thread after N memory suboperations of T_mem + T_sw each; the line
// the thread prefetched has arrived if N·(T_mem+T_sw) >= L_mem. With
// T_mem + T_sw about 250 ns for a bucket probe on the machines measured
// (docs/flash.md), N = L_mem/250ns hides the latency when every thread is
// in its memory phase; twice that leaves room for the threads waiting on
// device reads, which do not help. The floor is ult.DefaultTasks (64),
// the ceiling 1024.
func DefaultLookupThreads(lat time.Duration) int {
	const subop = 250 * time.Nanosecond
	n := int(math.Ceil(2 * float64(lat) / float64(subop)))
	return min(max(n, ult.DefaultTasks), 1024)
}

// DefaultServeCores is the number of schedulers an engine serving reads
// starts when Config.Cores is 0: half the Go processors, at least one. A
// scheduler's thread spins while it has lookups (and briefly after), so
// one on every processor would starve the goroutines that hand it the
// lookups (gRPC handlers, the client): on 2 processors, 32 concurrent
// Gets took 18-26 µs each with 2 schedulers and 3.1-3.9 µs with 1
// (BenchmarkServeGetParallel).
func DefaultServeCores() int { return max(1, runtime.GOMAXPROCS(0)/2) }

func (e *Engine) startServer(cfg Config) error {
	if cfg.FarMemory <= 0 {
		return nil
	}
	if cfg.Cores <= 0 {
		cfg.Cores = DefaultServeCores()
	}
	tasks := cfg.LookupThreads
	if tasks <= 0 {
		tasks = DefaultLookupThreads(cfg.FarMemory)
	}
	srv, err := ult.NewServer(ult.ServeConfig{
		Cores:      cfg.Cores,
		Tasks:      tasks,
		Mem:        farmem.Config{Latency: cfg.FarMemory},
		IO:         ult.IOConfig{Mode: cfg.IO},
		NoPrefetch: cfg.NoPrefetch,
	})
	if err != nil {
		return err
	}
	e.srv = srv
	return nil
}

var _ engine.ReadServer = (*Engine)(nil)

// ServesReads reports whether reads are served by the engine's own
// schedulers (far memory configured): then GetMany and ScanServed are the
// way to read (engine.ReadServer).
func (e *Engine) ServesReads() bool { return e.srv != nil }

// ServeStats returns the schedulers' counters; false without far memory.
func (e *Engine) ServeStats() (ult.ServeStats, bool) {
	if e.srv == nil {
		return ult.ServeStats{}, false
	}
	return e.srv.Stats(), true
}

// serve runs fns as concurrent lookups.
func (e *Engine) serve(fns []func(c farmem.Ctx)) error {
	if err := e.srv.DoAll(fns); err != nil {
		if errors.Is(err, ult.ErrServerClosed) {
			return ErrClosed
		}
		return err
	}
	return nil
}

// GetMany reads keys as concurrent lookups (engine.ReadServer); without
// far memory it reads them one after another.
func (e *Engine) GetMany(keys [][]byte) ([][]byte, []bool, error) {
	values := make([][]byte, len(keys))
	present := make([]bool, len(keys))
	if e.srv == nil {
		for i, k := range keys {
			v, ok, err := e.GetCtx(farmem.Direct, k)
			if err != nil {
				return nil, nil, err
			}
			values[i], present[i] = v, ok
		}
		return values, present, nil
	}
	if e.closed.Load() {
		return nil, nil, ErrClosed
	}
	errs := make([]error, len(keys))
	fns := make([]func(c farmem.Ctx), len(keys))
	for i, k := range keys {
		fns[i] = func(c farmem.Ctx) { values[i], present[i], errs[i] = e.GetCtx(c, k) }
	}
	if err := e.serve(fns); err != nil {
		return nil, nil, err
	}
	if err := errors.Join(errs...); err != nil {
		return nil, nil, err
	}
	return values, present, nil
}

// ScanServed is Scan as a lookup on the engine's schedulers
// (engine.ReadServer): each key visited is read from far memory and values
// are read from the device through the schedulers. fn runs on a scheduler
// thread: it must not block. Without far memory it is Scan.
func (e *Engine) ScanServed(begin, end []byte, reverse bool, fn func(key, value []byte) bool) error {
	if e.srv == nil {
		return e.Scan(begin, end, reverse, fn)
	}
	if e.closed.Load() {
		return ErrClosed
	}
	var err error
	if serr := e.serve([]func(c farmem.Ctx){func(c farmem.Ctx) { err = e.scan(c, begin, end, reverse, fn) }}); serr != nil {
		return serr
	}
	return err
}

// touchItem reads the tree item it from far memory: the key tree's
// entries are in far memory too, one line per item (its fields; the key
// bytes are accounted with it when they share the line).
func touchItem(c farmem.Ctx, it *item) {
	p := unsafe.Pointer(it)
	n := unsafe.Sizeof(*it)
	c.Prefetch(p, n)
	c.Access(p, n)
}
