//go:build !linux

package ult

import "time"

// threadCPU returns -1: the thread's CPU time is unknown here.
func threadCPU() int64 { return -1 }

// shortSleep sleeps for about d.
func shortSleep(d time.Duration) { time.Sleep(d) }
