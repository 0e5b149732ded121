package server

import (
	"time"

	"github.com/distash/distash/internal/engine"
)

// SetWindowBytes sets the MVCC window budget of the stashes the servers
// of this package's tests open (0: the default) and returns a function
// restoring it.
func SetWindowBytes(n int64) func() {
	old := windowBytes.Swap(n)
	return func() { windowBytes.Store(old) }
}

// SetWrapEngine makes the servers of this package's tests wrap every
// stash engine they open with wrap (pool, and the stash's index in its
// pool: its slot on a stash node), to inject faults; it returns a
// function restoring the default.
func SetWrapEngine(wrap func(pool string, index int, e engine.Engine) engine.Engine) func() {
	old := wrapEngine
	wrapEngine = wrap
	return func() { wrapEngine = old }
}

// SetDistributionInterval sets the data distributor's round for the
// tests of this package and returns a function restoring it.
func SetDistributionInterval(d time.Duration) func() {
	old := ddRound.Swap(int64(d))
	return func() { ddRound.Store(old) }
}

// SetLogMemoryBytes sets txlog.Options.MemoryBytes of the logs the
// servers this package's tests start open (0: the default; HoldBytes is
// four times it) and returns a function restoring it.
func SetLogMemoryBytes(n int64) func() {
	old := logMemoryBytes.Swap(n)
	return func() { logMemoryBytes.Store(old) }
}
