package clock

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var epoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// recv returns the value pending on c, failing if there is none.
func recv(t *testing.T, what string, c <-chan time.Time) time.Time {
	t.Helper()
	select {
	case v := <-c:
		return v
	default:
		t.Fatalf("%s: nothing delivered", what)
		return time.Time{}
	}
}

// none fails if a value is pending on c.
func none(t *testing.T, what string, c <-chan time.Time) {
	t.Helper()
	select {
	case v := <-c:
		t.Fatalf("%s: delivered %v, want nothing", what, v)
	default:
	}
}

func TestManualNowSinceUntil(t *testing.T) {
	m := NewManual(epoch)
	if got := m.Now(); !got.Equal(epoch) {
		t.Fatalf("Now = %v, want %v", got, epoch)
	}
	m.Advance(3 * time.Second)
	if got := m.Since(epoch); got != 3*time.Second {
		t.Fatalf("Since = %v, want 3s", got)
	}
	if got := m.Until(epoch.Add(5 * time.Second)); got != 2*time.Second {
		t.Fatalf("Until = %v, want 2s", got)
	}
	m.Advance(0)
	if got := m.Now(); !got.Equal(epoch.Add(3 * time.Second)) {
		t.Fatalf("Now after Advance(0) = %v", got)
	}
}

func TestManualTimerFiresAtItsTime(t *testing.T) {
	m := NewManual(epoch)
	tm := m.NewTimer(time.Second)
	if m.Waiters() != 1 {
		t.Fatalf("Waiters = %d, want 1", m.Waiters())
	}
	m.Advance(999 * time.Millisecond)
	none(t, "before its time", tm.C())
	m.Advance(time.Millisecond)
	if v := recv(t, "at its time", tm.C()); !v.Equal(epoch.Add(time.Second)) {
		t.Fatalf("delivered %v, want its time %v", v, epoch.Add(time.Second))
	}
	if m.Waiters() != 0 {
		t.Fatalf("Waiters after firing = %d, want 0", m.Waiters())
	}
	m.Advance(time.Hour)
	none(t, "a timer fires once", tm.C())
	if tm.Stop() {
		t.Fatal("Stop of a fired and received timer reported true")
	}
}

func TestManualAfterAndImmediate(t *testing.T) {
	m := NewManual(epoch)
	c := m.After(time.Minute)
	m.Advance(2 * time.Minute) // past its time: delivers its own time
	if v := recv(t, "After", c); !v.Equal(epoch.Add(time.Minute)) {
		t.Fatalf("After delivered %v, want %v", v, epoch.Add(time.Minute))
	}
	// Zero and negative durations fire at once, without an Advance.
	for _, d := range []time.Duration{0, -time.Second} {
		if v := recv(t, "After(<=0)", m.After(d)); !v.Equal(m.Now()) {
			t.Fatalf("After(%v) delivered %v, want now %v", d, v, m.Now())
		}
	}
	if m.Waiters() != 0 {
		t.Fatalf("Waiters = %d, want 0", m.Waiters())
	}
}

// TestManualOrder: one Advance fires exactly the timers that fell due, in
// order of their time, each delivering its own time;
// the rest wait for a later Advance.
func TestManualOrder(t *testing.T) {
	m := NewManual(epoch)
	durs := []time.Duration{5, 1, 4, 2, 3, 2, 12}
	var ts []*manualTimer
	shared := make(chan time.Time, len(durs))
	for _, d := range durs {
		tm := m.NewTimer(d * time.Second).(*manualTimer)
		tm.c = shared // one channel for all: the order of delivery shows
		ts = append(ts, tm)
	}
	m.Advance(10 * time.Second)
	var got []time.Duration
	for len(shared) > 0 {
		got = append(got, (<-shared).Sub(epoch)/time.Second)
	}
	want := []time.Duration{1, 2, 2, 3, 4, 5}
	if !slices.Equal(got, want) {
		t.Fatalf("delivered (seconds) %v, want %v", got, want)
	}
	if m.Waiters() != 1 {
		t.Fatalf("Waiters = %d, want 1 (the 12 s timer)", m.Waiters())
	}
	m.Advance(2 * time.Second)
	if v := recv(t, "12 s", shared); !v.Equal(epoch.Add(12 * time.Second)) {
		t.Fatalf("delivered %v, want 12 s", v)
	}
}

func TestManualTimerStop(t *testing.T) {
	m := NewManual(epoch)
	tm := m.NewTimer(time.Second)
	if !tm.Stop() {
		t.Fatal("Stop of an armed timer reported false")
	}
	if tm.Stop() {
		t.Fatal("second Stop reported true")
	}
	if m.Waiters() != 0 {
		t.Fatalf("Waiters after Stop = %d", m.Waiters())
	}
	m.Advance(time.Hour)
	none(t, "stopped timer", tm.C())

	// A timer that fired but was not received: Stop drops the value and
	// reports true (Go 1.23 timers: nothing stale after Stop).
	tm = m.NewTimer(time.Second)
	m.Advance(time.Second)
	if !tm.Stop() {
		t.Fatal("Stop of a fired, unreceived timer reported false")
	}
	none(t, "after Stop", tm.C())
}

func TestManualTimerReset(t *testing.T) {
	m := NewManual(epoch)
	tm := m.NewTimer(time.Second)
	m.Advance(500 * time.Millisecond)
	if !tm.Reset(time.Second) { // now due at 1.5 s
		t.Fatal("Reset of an armed timer reported false")
	}
	m.Advance(600 * time.Millisecond) // 1.1 s: the old time has passed
	none(t, "old time after Reset", tm.C())
	if m.Waiters() != 1 {
		t.Fatalf("Waiters = %d, want 1", m.Waiters())
	}
	m.Advance(400 * time.Millisecond)
	if v := recv(t, "new time", tm.C()); !v.Equal(epoch.Add(1500 * time.Millisecond)) {
		t.Fatalf("delivered %v, want 1.5 s", v)
	}
	// Reset of a fired, received timer rearms it and reports false.
	if tm.Reset(time.Second) {
		t.Fatal("Reset of a fired timer reported true")
	}
	// Reset of a fired, unreceived timer drops the stale value.
	m.Advance(time.Second)
	if !tm.Reset(time.Second) {
		t.Fatal("Reset of a fired, unreceived timer reported false")
	}
	none(t, "stale value after Reset", tm.C())
	m.Advance(time.Second)
	recv(t, "after second Reset", tm.C())
	// Reset to zero fires at once.
	tm.Reset(0)
	recv(t, "Reset(0)", tm.C())
}

// TestManualTickerOnePerAdvance: a ticker fires on every period; an Advance
// that spans several periods delivers one tick (the first it spanned), and
// the next is due at the first multiple of the period after the new time.
func TestManualTickerOnePerAdvance(t *testing.T) {
	m := NewManual(epoch)
	tk := m.NewTicker(time.Second)
	for i := 1; i <= 3; i++ {
		m.Advance(time.Second)
		if v := recv(t, "tick", tk.C()); !v.Equal(epoch.Add(time.Duration(i) * time.Second)) {
			t.Fatalf("tick %d delivered %v", i, v)
		}
	}
	if m.Waiters() != 1 {
		t.Fatalf("Waiters = %d, want 1 (a ticker stays armed)", m.Waiters())
	}
	// 3 s -> 7.5 s: one tick (of 4 s), the next at 8 s.
	m.Advance(4500 * time.Millisecond)
	if v := recv(t, "big advance", tk.C()); !v.Equal(epoch.Add(4 * time.Second)) {
		t.Fatalf("big Advance delivered %v, want the 4 s tick", v)
	}
	none(t, "one tick per Advance", tk.C())
	m.Advance(499 * time.Millisecond)
	none(t, "before 8 s", tk.C())
	m.Advance(time.Millisecond)
	if v := recv(t, "8 s", tk.C()); !v.Equal(epoch.Add(8 * time.Second)) {
		t.Fatalf("delivered %v, want the 8 s tick", v)
	}
	// An unreceived tick is not overwritten by the next: it is dropped.
	m.Advance(time.Second)
	m.Advance(time.Second)
	if v := recv(t, "pending", tk.C()); !v.Equal(epoch.Add(9 * time.Second)) {
		t.Fatalf("pending tick %v, want the 9 s one", v)
	}
	none(t, "dropped tick", tk.C())
}

func TestManualTickerStopReset(t *testing.T) {
	m := NewManual(epoch)
	tk := m.NewTicker(time.Second)
	m.Advance(time.Second)
	tk.Stop() // drops the pending tick
	none(t, "after Stop", tk.C())
	m.Advance(5 * time.Second)
	none(t, "stopped ticker", tk.C())
	if m.Waiters() != 0 {
		t.Fatalf("Waiters after Stop = %d", m.Waiters())
	}
	tk.Reset(2 * time.Second) // from now (6 s), every 2 s
	m.Advance(time.Second)
	none(t, "7 s", tk.C())
	m.Advance(time.Second)
	if v := recv(t, "8 s", tk.C()); !v.Equal(epoch.Add(8 * time.Second)) {
		t.Fatalf("delivered %v, want 8 s", v)
	}
	m.Advance(2 * time.Second)
	recv(t, "10 s", tk.C())
	for _, f := range []func(){
		func() { m.NewTicker(0) },
		func() { tk.Reset(-time.Second) },
		func() { m.Advance(-time.Second) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			f()
		}()
	}
}

// TestManualBlockUntil: a goroutine's loop on the clock, driven in steps
// without sleeping: BlockUntil sees it waiting, Advance wakes it, and
// BlockUntil again sees it done with its step.
func TestManualBlockUntil(t *testing.T) {
	m := NewManual(epoch)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var mu sync.Mutex
	steps := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 5; i++ {
			<-m.After(time.Second)
			mu.Lock()
			steps++
			mu.Unlock()
		}
	}()
	for i := 1; i <= 5; i++ {
		if err := m.BlockUntil(ctx, 1); err != nil {
			t.Fatal(err)
		}
		m.Advance(time.Second)
		if i < 5 {
			// Fired timers are no longer waiters: the loop armed its
			// next one once it counted this step.
			if err := m.BlockUntil(ctx, 1); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			got := steps
			mu.Unlock()
			if got != i {
				t.Fatalf("after %d advances, %d steps", i, got)
			}
		}
	}
	<-done
	if steps != 5 {
		t.Fatalf("steps = %d, want 5", steps)
	}

	// A loop on a ticker: BlockUntil after an Advance returns once the
	// loop took its tick, so the work of every earlier tick is done.
	tk := m.NewTicker(time.Second)
	var ticks atomic.Int32
	stop := make(chan struct{})
	looped := make(chan struct{})
	go func() {
		defer close(looped)
		for {
			select {
			case <-stop:
				return
			case <-tk.C():
				ticks.Add(1)
			}
		}
	}()
	for i := int32(1); i <= 20; i++ {
		m.Advance(time.Second)
		if m.Waiters() == 1 && ticks.Load() < i-1 {
			t.Fatalf("tick %d: waiting with %d ticks taken", i, ticks.Load())
		}
		if err := m.BlockUntil(ctx, 1); err != nil {
			t.Fatal(err)
		}
		if got := ticks.Load(); got < i-1 {
			t.Fatalf("after tick %d was taken, %d ticks counted", i, got)
		}
	}
	close(stop)
	<-looped
	tk.Stop()

	short, cancel2 := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel2()
	if err := m.BlockUntil(short, 1); err == nil {
		t.Fatal("BlockUntil with no waiter returned nil")
	}
}

// TestManualConcurrent runs timers, tickers, Stop, Reset and Advance from
// several goroutines (for -race).
func TestManualConcurrent(t *testing.T) {
	m := NewManual(epoch)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tk := m.NewTicker(time.Millisecond)
			defer tk.Stop()
			for {
				tm := m.NewTimer(2 * time.Millisecond)
				select {
				case <-stop:
					tm.Stop()
					return
				case <-tm.C():
				case <-tk.C():
					tm.Reset(time.Millisecond)
					tm.Stop()
				}
				_ = m.Now()
			}
		}()
	}
	for i := 0; i < 2000; i++ {
		m.Advance(time.Millisecond)
		_ = m.Waiters()
	}
	close(stop)
	wg.Wait()
}

func TestReal(t *testing.T) {
	var c Clock = Real{}
	if c2 := Or(nil); c2 != (Real{}) {
		t.Fatalf("Or(nil) = %v", c2)
	}
	m := NewManual(epoch)
	if Or(m) != Clock(m) {
		t.Fatal("Or(m) is not m")
	}
	start := c.Now()
	tm := c.NewTimer(time.Millisecond)
	<-tm.C()
	if c.Since(start) < time.Millisecond {
		t.Fatal("timer fired early")
	}
	if c.Until(start) >= 0 {
		t.Fatal("Until of a past time is not negative")
	}
	tk := c.NewTicker(time.Millisecond)
	<-tk.C()
	tk.Reset(time.Millisecond)
	<-tk.C()
	tk.Stop()
	if tm.Reset(time.Hour) {
		t.Fatal("Reset of a fired timer reported true")
	}
	if !tm.Stop() {
		t.Fatal("Stop of an armed timer reported false")
	}
	<-c.After(0)
}
