//go:build !linux

package peerserver

import "syscall"

// procAttr is unused off Linux: the binary lookups refuse to run the peers.
func procAttr(uid, gid int) *syscall.SysProcAttr { return nil }
