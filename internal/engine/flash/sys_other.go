//go:build !linux

package flash

import (
	"errors"
	"os"
)

func openDirect(path string) (*os.File, error) { return nil, errors.New("flash: no O_DIRECT here") }

func datasync(f *os.File) error { return f.Sync() }

func lockDir(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
}
