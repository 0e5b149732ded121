package peerserver

import "syscall"

// procAttr runs a server as uid:gid (unless uid < 0) and kills it if this
// process dies, so that no server outlives the benchmark.
func procAttr(uid, gid int) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if uid >= 0 {
		a.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	return a
}
