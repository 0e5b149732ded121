// Package clock puts time behind an interface so roles can be driven by a
// manual clock in tests: reading the time, and waiting for it (timers,
// tickers). Real wraps package time; Manual moves only when a test
// advances it, and fires the timers and tickers that fall due.
//
// A role takes a Clock through its options (nil: Real{}) and never calls
// time.Now, time.After, time.NewTimer or time.NewTicker itself.
package clock

import "time"

// Clock tells the time and makes timers and tickers on it.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// Since returns the time elapsed since t (Now().Sub(t)).
	Since(t time.Time) time.Duration
	// Until returns the duration until t (t.Sub(Now())).
	Until(t time.Time) time.Duration
	// After returns a channel that receives the time once d has passed,
	// as time.After.
	After(d time.Duration) <-chan time.Time
	// NewTimer returns a timer that fires once d has passed, as
	// time.NewTimer.
	NewTimer(d time.Duration) Timer
	// NewTicker returns a ticker that fires every d (d > 0, else it
	// panics), as time.NewTicker.
	NewTicker(d time.Duration) Ticker
}

// Timer is a one-shot timer, as *time.Timer (with Go 1.23's semantics: no
// stale value is received after Stop or Reset returns).
type Timer interface {
	// C returns the channel on which the timer delivers its time.
	C() <-chan time.Time
	// Stop prevents the timer from firing; it reports whether the call
	// stopped it (false: it had fired or was stopped already).
	Stop() bool
	// Reset makes the timer fire after d; it reports whether the timer
	// had been active.
	Reset(d time.Duration) bool
}

// Ticker delivers ticks at intervals, as *time.Ticker.
type Ticker interface {
	// C returns the channel on which the ticks are delivered.
	C() <-chan time.Time
	// Stop turns the ticker off; no tick is delivered after it returns.
	Stop()
	// Reset stops the ticker and restarts it with period d (d > 0).
	Reset(d time.Duration)
}

// Or returns c, or Real{} when c is nil: the default of the roles' Clock
// options.
func Or(c Clock) Clock {
	if c == nil {
		return Real{}
	}
	return c
}

// Real is the system clock.
type Real struct{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// Since returns time.Since(t).
func (Real) Since(t time.Time) time.Duration { return time.Since(t) }

// Until returns time.Until(t).
func (Real) Until(t time.Time) time.Duration { return time.Until(t) }

// After returns time.After(d).
func (Real) After(d time.Duration) <-chan time.Time { return time.After(d) }

// NewTimer returns a time.Timer.
func (Real) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

// NewTicker returns a time.Ticker.
func (Real) NewTicker(d time.Duration) Ticker { return realTicker{time.NewTicker(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time        { return r.t.C }
func (r realTimer) Stop() bool                 { return r.t.Stop() }
func (r realTimer) Reset(d time.Duration) bool { return r.t.Reset(d) }

type realTicker struct{ t *time.Ticker }

func (r realTicker) C() <-chan time.Time   { return r.t.C }
func (r realTicker) Stop()                 { r.t.Stop() }
func (r realTicker) Reset(d time.Duration) { r.t.Reset(d) }
