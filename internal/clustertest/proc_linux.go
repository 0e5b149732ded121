//go:build linux

package clustertest

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"syscall"
)

// procAttr kills a node if the process that started it dies, so that no
// server outlives its test or benchmark.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's utime and stime
// (100 on every Linux port Go supports).
const clockTicks = 100

// ProcessCPUSeconds returns the user+system CPU time pid has used, from
// /proc/<pid>/stat.
func ProcessCPUSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces:
	// the fields after the last ')' start with field 3 (state).
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no ')'", pid)
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	utime, err1 := strconv.ParseInt(string(f[11]), 10, 64) // field 14
	stime, err2 := strconv.ParseInt(string(f[12]), 10, 64) // field 15
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: utime %v, stime %v", pid, err1, err2)
	}
	return float64(utime+stime) / clockTicks, nil
}
