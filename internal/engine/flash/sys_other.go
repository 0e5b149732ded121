//go:build !linux

package flash

import (
	"errors"
	"os"
)

func openRead(path string, direct bool) (*os.File, error) {
	if direct {
		return nil, errors.New("flash: no O_DIRECT here")
	}
	return os.Open(path)
}
