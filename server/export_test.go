package server

import "time"

// SetDistributionInterval sets the data distributor's round for the
// tests of this package and returns a function restoring it.
func SetDistributionInterval(d time.Duration) func() {
	old := ddRound.Swap(int64(d))
	return func() { ddRound.Store(old) }
}
