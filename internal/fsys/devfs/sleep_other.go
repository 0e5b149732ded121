//go:build !linux

package devfs

import "time"

// sleep blocks the calling goroutine for about d nanoseconds (Go's timers:
// about 1 ms granularity on some systems; waitUntil's overshoot estimate
// absorbs it, spinning the rest).
func sleep(d int64) { time.Sleep(time.Duration(d)) }
