package stash

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distash/distash/internal/clock"
	"github.com/distash/distash/internal/logentry"
	"github.com/distash/distash/internal/ratekeeper"
	"github.com/distash/distash/internal/testutil/wait"

	"github.com/distash/distash/internal/engine"
	"github.com/distash/distash/internal/engine/memory"
	"github.com/distash/distash/internal/kv"
)

func liveHeap() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// TestWindowBytesBoundMemory checks the window's byte count against the heap
// it holds, for the shapes that stress its overheads: distinct keys one
// version each, distinct keys in large versions (a bulk load) and the same
// keys rewritten. Counting 48 bytes a mutation on top of key and value, the
// window counted a third of what it held.
func TestWindowBytesBoundMemory(t *testing.T) {
	const n = 100_000
	for _, c := range []struct {
		name               string
		perVersion, keyMod int
	}{
		{"one put per version", 1, n},
		{"bulk versions", 1000, n},
		{"rewrites", 1000, 1000},
	} {
		t.Run(c.name, func(t *testing.T) {
			// Keys and values come from the log's memory: allocate them
			// before the baseline. The window copies the keys it keeps.
			keys := make([][]byte, c.keyMod)
			for i := range keys {
				keys[i] = fmt.Appendf(nil, "c/%08d", i)
			}
			values := make([][]byte, n)
			var valueBytes int64
			for i := range values {
				values[i] = []byte("vvvvvvvv")
				valueBytes += int64(len(values[i]))
			}
			before := liveHeap()
			w := newWindow()
			for i := 0; i < n; i++ {
				w.put(kv.Version(1+i/c.perVersion), keys[i%c.keyMod], values[i], true, 0)
			}
			held := liveHeap() - before + valueBytes
			runtime.KeepAlive(keys)
			runtime.KeepAlive(values)
			t.Logf("%d puts: %d bytes counted (%.0f a put), %d held with the values (%.0f a put)",
				n, w.bytes, float64(w.bytes)/n, held, float64(held)/n)
			if w.bytes < held*9/10 || w.bytes > held*3/2 {
				t.Fatalf("the window counts %d bytes and holds %d", w.bytes, held)
			}
			w.drop(kv.Version(1 + n))
			if w.bytes != 0 || w.keys.Len() != 0 || len(w.queue) != 0 {
				t.Fatalf("after dropping everything: %d bytes, %d keys, %d versions", w.bytes, w.keys.Len(), len(w.queue))
			}
		})
	}
}

// TestWindowBytesExact checks that dropping versions returns exactly what
// adding them counted, range clears and partial drops included.
func TestWindowBytesExact(t *testing.T) {
	w := newWindow()
	w.put(1, []byte("a"), []byte("1"), true, 0)
	w.put(1, []byte("b"), []byte("22"), true, 0)
	afterV1 := w.bytes
	w.put(2, []byte("a"), nil, false, 0)
	w.clearRange(3, []byte("a"), []byte("c"))
	w.put(4, []byte("d"), []byte("4444"), true, 0)
	for _, q := range w.queue {
		t.Logf("version %d: %d keys, %d bytes", q.version, len(q.keys), q.bytes)
	}
	var sum int64
	for _, q := range w.queue {
		sum += q.bytes
	}
	if sum != w.bytes {
		t.Fatalf("versions count %d bytes, the window %d", sum, w.bytes)
	}
	if want := int64(2*(putOverhead+keyOverhead) + versionOverhead + 2 + 3); afterV1 != want {
		t.Fatalf("after version 1: %d bytes; want %d", afterV1, want)
	}
	w.drop(2)
	// a and b stay (the range clear at 3 wrote tombstones for them), d too.
	if w.keys.Len() != 3 {
		t.Fatalf("%d keys after dropping version 2; want 3", w.keys.Len())
	}
	w.drop(4)
	if w.bytes != 0 {
		t.Fatalf("%d bytes after dropping everything", w.bytes)
	}
	// An empty slice made from the old one would keep its array alive.
	if w.queue != nil || w.rangeClears != nil {
		t.Fatalf("the empty window still points at its old arrays (queue cap %d, range clears cap %d)", cap(w.queue), cap(w.rangeClears))
	}
}

// slowEngine delays every Apply, like an engine slower than the log, and
// records the stash's window bytes at each: a flush sees the window at its
// fullest.
type slowEngine struct {
	engine.Engine
	delay    time.Duration
	s        *Stash
	maxBytes atomic.Int64
}

func (e *slowEngine) Apply(b *engine.Batch) error {
	if s := e.s; s != nil {
		_, wb, _ := s.Pressure()
		if wb > e.maxBytes.Load() {
			e.maxBytes.Store(wb)
		}
	}
	time.Sleep(e.delay)
	return e.Engine.Apply(b)
}

// TestWindowStaysWithinBudget feeds a stash ten times its window budget at
// once through an engine that takes 5 ms per Apply: the stash must apply
// no faster than it flushes. When a full window only signalled the flush
// loop, the stash applied everything and its window held it all.
func TestWindowStaysWithinBudget(t *testing.T) {
	mem, _ := memory.Open(engine.Options{})
	eng := &slowEngine{Engine: mem, delay: 5 * time.Millisecond}
	log := newFakeLog(3)
	const budget = 64 << 10
	s := New(Options{Tag: 1, Engine: eng, Log: log, WindowBytes: budget, WindowVersions: 1 << 40, FlushInterval: time.Hour, Logger: quiet})
	eng.s = s
	s.SetOwned([]kv.KeyRange{{Begin: []byte("k"), End: []byte("l")}})
	var maxMsg int64 // window bytes of the largest Peek (the fake log returns up to 4 messages)
	var last kv.Version
	for v := kv.Version(1); v <= 200; v++ {
		msg := logentry.Message{Version: v}
		for i := 0; i < 20; i++ {
			msg.Mutations = append(msg.Mutations, kv.Mutation{Type: kv.MutSet, Key: fmt.Appendf(nil, "k%06d", int(v)*20+i), Param: []byte("12345678")})
		}
		w := newWindow()
		for _, m := range msg.Mutations {
			w.put(v, m.Key, m.Param, true, 0)
		}
		maxMsg = max(maxMsg, 4*w.bytes)
		log.push(msg)
		last = v
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	defer func() { cancel(); <-done; s.Close() }()
	var peak int64
	wait.Every(t, 100*time.Microsecond, 20*time.Second, "applied everything", func() bool {
		_, wb, _ := s.Pressure()
		peak = max(peak, wb)
		return s.AppliedVersion() >= last
	})
	peak = max(peak, eng.maxBytes.Load())
	t.Logf("window peak %d bytes for a budget of %d (one Peek: up to %d)", peak, budget, maxMsg)
	if peak > budget+maxMsg {
		t.Fatalf("the window reached %d bytes; budget %d plus one Peek (%d)", peak, budget, maxMsg)
	}
}

// budgetLog is a fakeLog whose memory budget the test sets.
type budgetLog struct {
	*fakeLog
	over atomic.Bool
}

func (l *budgetLog) OverMemoryBudget() bool { return l.over.Load() }

// TestLogOverBudgetFlushes: a durable stash keeps its window (here, hours)
// until the log says it holds more than its memory budget; then the stash
// flushes and pops everything it applied, so the log can drop it.
func TestLogOverBudgetFlushes(t *testing.T) {
	eng, _ := memory.Open(engine.Options{})
	log := &budgetLog{fakeLog: newFakeLog(5)}
	log.noFaults = true
	clk := clock.NewManual(time.Unix(0, 0))
	s := New(Options{Tag: 1, Engine: eng, Log: log, WindowVersions: 1 << 40, FlushInterval: time.Millisecond, Logger: quiet, Clock: clk})
	s.SetOwned([]kv.KeyRange{{Begin: []byte("k"), End: []byte("l")}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	defer func() { cancel(); <-done; s.Close() }()
	for v := kv.Version(1); v <= 20; v++ {
		log.push(logentry.Message{Version: v, Mutations: []kv.Mutation{{Type: kv.MutSet, Key: fmt.Appendf(nil, "k%02d", v), Param: []byte("v")}}})
	}
	wait.For(t, "applied 20", func() bool { return s.AppliedVersion() == 20 })
	flushTicks(t, ctx, clk, 20)
	if st := s.Stats(); st.Durable != 0 || st.WindowBytes == 0 {
		t.Fatalf("flushed to %d within the MVCC window with the log under budget", st.Durable)
	}
	log.over.Store(true)
	flushTicks(t, ctx, clk, 1)
	wait.For(t, "durable 20", func() bool { return s.Stats().Durable == 20 })
	log.mu.Lock()
	popped := log.popped
	log.mu.Unlock()
	if st := s.Stats(); popped != 20 || st.WindowBytes != 0 {
		t.Fatalf("popped %d, %d window bytes left; want 20 and 0", popped, st.WindowBytes)
	}
}

// TestWindowFlushesEarlyBelowThePressurePoint: writes arriving faster than
// the MVCC window ages them out, into an engine that keeps up, must not
// fill the window to the ratekeeper's pressure point (3/4 of the budget,
// ratekeeper.WindowPressure): the stash flushes its oldest versions early
// once the window holds half its budget. Before, it kept every version of
// the window's span until the window was full, and the ratekeeper
// throttled every transaction meanwhile.
func TestWindowFlushesEarlyBelowThePressurePoint(t *testing.T) {
	eng, _ := memory.Open(engine.Options{})
	log := newFakeLog(1)
	log.noFaults = true
	clk := clock.NewManual(time.Unix(0, 0))
	const budget = 256 << 10
	s := New(Options{Tag: 1, Engine: eng, Log: log, WindowBytes: budget, WindowVersions: 1 << 40, FlushInterval: time.Millisecond, Logger: quiet, Clock: clk})
	s.SetOwned([]kv.KeyRange{{Begin: []byte("k"), End: []byte("l")}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	defer func() { cancel(); <-done; s.Close() }()
	var peak, msgBytes int64
	const versions = 400 // about 3 budgets of writes
	for v := kv.Version(1); v <= versions; v++ {
		msg := logentry.Message{Version: v, Mutations: []kv.Mutation{{Type: kv.MutSet, Key: fmt.Appendf(nil, "k%06d", v%50), Param: make([]byte, 2000)}}}
		w := newWindow()
		w.put(v, msg.Mutations[0].Key, msg.Mutations[0].Param, true, 0)
		msgBytes = w.bytes
		log.push(msg)
		wait.Every(t, 50*time.Microsecond, 10*time.Second, "applied", func() bool { return s.AppliedVersion() >= v })
		if v%10 == 0 {
			flushTicks(t, ctx, clk, 2)
		}
		_, wb, _ := s.Pressure()
		peak = max(peak, wb)
	}
	limit := int64(ratekeeper.WindowPressure*budget) - msgBytes
	t.Logf("window peak %d bytes for a budget of %d (pressure point %d)", peak, budget, int64(ratekeeper.WindowPressure*budget))
	if peak > limit {
		t.Fatalf("the window reached %d bytes: past the ratekeeper's pressure point less one message (%d)", peak, limit)
	}
	if st := s.Stats(); st.Durable == 0 {
		t.Fatal("nothing was flushed")
	}
}

// flushTicks advances a stash's manual clock by n flush intervals (of 1 ms)
// one at a time, and returns once the stash has flushed on every one. At
// rest the stash waits on two: its flush ticker and its fetch loop's timer
// (a fakeLog with noFaults, so no Peek retry waits).
func flushTicks(t *testing.T, ctx context.Context, clk *clock.Manual, n int) {
	t.Helper()
	// The ticker is taken once its loop finished the previous tick: one
	// more tick than asked for.
	for i := 0; i <= n; i++ {
		clk.Advance(time.Millisecond)
		if err := clk.BlockUntil(ctx, 2); err != nil {
			t.Fatal(err)
		}
	}
}
