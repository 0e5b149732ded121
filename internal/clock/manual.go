package clock

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Manual is a clock that moves only when told to (Advance). Its timers and
// tickers fire when an Advance reaches their time; a timer or ticker of
// zero or negative duration fires at once, as a real one does. Safe for
// concurrent use.
//
// A test drives a role on a Manual clock in steps: BlockUntil(ctx, n)
// waits until n timers and tickers are waiting (the role is waiting on the
// clock), Advance fires them, and BlockUntil again waits until the role
// has taken what fired and is waiting again. A timer waits from when it
// is armed until it fires or is stopped; a ticker waits while it runs and
// its last tick has been received, so BlockUntil after an Advance also
// waits for a loop on a ticker to take its tick (when it returns, the
// loop has finished the work of every earlier tick).
//
// Firing: Advance moves the clock to its end first, then delivers every
// timer and ticker that fell due, in order of their time (ties in order of
// arming); each delivers its own time of firing, not the clock's. A ticker
// delivers at most one tick per Advance, however many of its periods the
// Advance spans, as a real ticker's channel holds one tick for a reader
// that fell behind; its next tick is then due at the first multiple of its
// period after the new time. Ticks and timers are delivered on channels of
// one element without blocking, so a tick that is not received before the
// next one is due is dropped, as with package time.
type Manual struct {
	mu      sync.Mutex
	now     time.Time      // Protected by mu.
	armed   []*manualTimer // timers and tickers waiting to fire. Protected by mu.
	seq     uint64         // order of arming, to break ties. Protected by mu.
	changed chan struct{}  // closed when armed changes, if a BlockUntil waits. Protected by mu.
}

// NewManual returns a manual clock set to t.
func NewManual(t time.Time) *Manual { return &Manual{now: t} }

// Now returns the manual time.
func (m *Manual) Now() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.now
}

// Since returns the manual time elapsed since t.
func (m *Manual) Since(t time.Time) time.Duration { return m.Now().Sub(t) }

// Until returns the manual time until t.
func (m *Manual) Until(t time.Time) time.Duration { return t.Sub(m.Now()) }

// After returns the channel of a new timer of duration d.
func (m *Manual) After(d time.Duration) <-chan time.Time { return m.NewTimer(d).C() }

// NewTimer returns a timer that fires when the clock reaches Now()+d.
func (m *Manual) NewTimer(d time.Duration) Timer {
	t := &manualTimer{m: m, c: make(chan time.Time, 1)}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.arm(t, d)
	return t
}

// NewTicker returns a ticker that fires every d of manual time.
func (m *Manual) NewTicker(d time.Duration) Ticker {
	if d <= 0 {
		panic("clock: non-positive interval for NewTicker")
	}
	t := &manualTimer{m: m, c: make(chan time.Time, 1), period: d}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.arm(t, d)
	return (*manualTicker)(t)
}

// Advance moves the clock forward by d (d >= 0) and fires what fell due
// (see Manual).
func (m *Manual) Advance(d time.Duration) {
	if d < 0 {
		panic("clock: Advance by a negative duration")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.now = m.now.Add(d)
	var due []*manualTimer
	for _, t := range m.armed {
		if !t.at.After(m.now) {
			due = append(due, t)
		}
	}
	slices.SortFunc(due, func(a, b *manualTimer) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return cmp.Compare(a.seq, b.seq)
	})
	for _, t := range due {
		t.deliver(t.at)
		if t.period > 0 {
			// The first tick after now: ticks the Advance spanned are
			// dropped, as a slow reader's are.
			missed := m.now.Sub(t.at) / t.period
			t.at = t.at.Add((missed + 1) * t.period)
			continue
		}
		m.disarm(t)
	}
}

// Waiters returns the number of timers and tickers waiting: timers armed
// (made, not stopped, not fired) and tickers running whose last tick has
// been received.
func (m *Manual) Waiters() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, _ := m.waiters()
	return n
}

// waiters returns Waiters() and whether a ticker has a tick pending.
// Called with mu held.
func (m *Manual) waiters() (n int, pending bool) {
	for _, t := range m.armed {
		if t.period > 0 && len(t.c) > 0 {
			pending = true
			continue
		}
		n++
	}
	return n, pending
}

// tickPoll is how often BlockUntil looks again while a tick is pending:
// receiving it does not go through the clock.
const tickPoll = 200 * time.Microsecond

// BlockUntil waits until at least n timers and tickers are waiting
// (Waiters() >= n), or ctx ends (then it returns an error that says how
// many there were).
func (m *Manual) BlockUntil(ctx context.Context, n int) error {
	for {
		m.mu.Lock()
		have, pending := m.waiters()
		if have >= n {
			m.mu.Unlock()
			return nil
		}
		if m.changed == nil {
			m.changed = make(chan struct{})
		}
		ch := m.changed
		m.mu.Unlock()
		var poll *time.Timer
		var polled <-chan time.Time
		if pending {
			poll = time.NewTimer(tickPoll)
			polled = poll.C
		}
		select {
		case <-ch:
		case <-polled:
		case <-ctx.Done():
			return fmt.Errorf("clock: %d of %d waiters: %w", have, n, ctx.Err())
		}
		if poll != nil {
			poll.Stop()
		}
	}
}

// arm schedules t to fire after d, or fires it now when d <= 0 (a
// ticker's d is positive). Called with mu held and t not armed.
func (m *Manual) arm(t *manualTimer, d time.Duration) {
	if d <= 0 {
		t.deliver(m.now)
		return
	}
	m.seq++
	t.at, t.seq, t.armed = m.now.Add(d), m.seq, true
	m.armed = append(m.armed, t)
	m.notify()
}

// disarm removes t from the armed set. Called with mu held; reports
// whether t was armed.
func (m *Manual) disarm(t *manualTimer) bool {
	if !t.armed {
		return false
	}
	t.armed = false
	if i := slices.Index(m.armed, t); i >= 0 {
		m.armed = slices.Delete(m.armed, i, i+1)
	}
	m.notify()
	return true
}

// notify wakes the BlockUntil calls. Called with mu held.
func (m *Manual) notify() {
	if m.changed != nil {
		close(m.changed)
		m.changed = nil
	}
}

// manualTimer is a timer or (period > 0) a ticker of a Manual clock. Its
// fields are protected by m.mu.
type manualTimer struct {
	m      *Manual
	c      chan time.Time
	at     time.Time // when it fires next, while armed
	seq    uint64
	period time.Duration // 0: a timer
	armed  bool
}

// deliver sends at unless a value is pending already.
func (t *manualTimer) deliver(at time.Time) {
	select {
	case t.c <- at:
	default:
	}
}

// drain drops a pending value; it reports whether there was one.
func (t *manualTimer) drain() bool {
	select {
	case <-t.c:
		return true
	default:
		return false
	}
}

func (t *manualTimer) C() <-chan time.Time { return t.c }

// Stop disarms the timer and drops a value it delivered that was not
// received (so none is received after Stop); a timer whose value was still
// pending counts as stopped by this call, as with package time.
func (t *manualTimer) Stop() bool {
	t.m.mu.Lock()
	defer t.m.mu.Unlock()
	wasArmed := t.m.disarm(t)
	return t.drain() || wasArmed
}

// Reset stops the timer (dropping a pending value) and arms it to fire
// after d.
func (t *manualTimer) Reset(d time.Duration) bool {
	t.m.mu.Lock()
	defer t.m.mu.Unlock()
	wasArmed := t.m.disarm(t)
	active := t.drain() || wasArmed
	t.m.arm(t, d)
	return active
}

// manualTicker is a manualTimer with a period, behind the Ticker methods.
type manualTicker manualTimer

func (t *manualTicker) C() <-chan time.Time { return t.c }

func (t *manualTicker) Stop() { (*manualTimer)(t).Stop() }

func (t *manualTicker) Reset(d time.Duration) {
	if d <= 0 {
		panic("clock: non-positive interval for Ticker.Reset")
	}
	mt := (*manualTimer)(t)
	mt.m.mu.Lock()
	defer mt.m.mu.Unlock()
	mt.m.disarm(mt)
	mt.drain()
	mt.period = d
	mt.m.arm(mt, d)
}
