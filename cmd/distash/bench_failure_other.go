//go:build !linux

package main

import (
	"errors"
	"syscall"
)

func failureProcAttr() *syscall.SysProcAttr { return nil }

// processCPUSeconds needs /proc: the CPU plot stays empty elsewhere.
func processCPUSeconds(pid int) (float64, error) {
	return 0, errors.New("process CPU time needs Linux /proc")
}
