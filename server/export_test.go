package server

import "time"

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
