//go:build race

package flash_test

// raceEnabled: the race detector slows the hand-offs of lookups tenfold,
// so throughput ratios are not asserted under it.
const raceEnabled = true
