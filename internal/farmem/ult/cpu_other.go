//go:build !linux

package ult

// threadCPU returns -1: the thread's CPU time is unknown here.
func threadCPU() int64 { return -1 }
