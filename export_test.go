package distash

import "time"

// SetRecentReadVersionAge sets how old a version SetRecentReadVersion may
// use (tests lengthen it, so that a slow machine still exercises the
// recent-version path) and returns a function restoring it.
func SetRecentReadVersionAge(d time.Duration) func() {
	old := recentReadVersionAge.Swap(int64(d))
	return func() { recentReadVersionAge.Store(old) }
}
