//go:build !linux

package anomalies

import "syscall"

// procAttr is unused off Linux: findBinaries refuses to run the peers.
func procAttr(uid, gid int) *syscall.SysProcAttr { return nil }
