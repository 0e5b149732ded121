//go:build !linux

package clustertest

import (
	"errors"
	"syscall"
)

func procAttr() *syscall.SysProcAttr { return nil }

// ProcessCPUSeconds needs /proc: CPU figures stay empty elsewhere.
func ProcessCPUSeconds(pid int) (float64, error) {
	return 0, errors.New("process CPU time needs Linux /proc")
}
