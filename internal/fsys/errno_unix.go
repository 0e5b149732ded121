//go:build unix

package fsys

import "syscall"

var (
	errNoSpace error = syscall.ENOSPC
	errQuota   error = syscall.EDQUOT
)
