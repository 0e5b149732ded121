//go:build linux

package flash

import (
	"os"
	"syscall"
)

// openRead opens path read-only on the operating system's files for the
// point-read fast path: with direct, bypassing the page cache (O_DIRECT).
func openRead(path string, direct bool) (*os.File, error) {
	flags := os.O_RDONLY
	if direct {
		flags |= syscall.O_DIRECT
	}
	return os.OpenFile(path, flags, 0)
}
