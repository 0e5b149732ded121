//go:build !unix

package fsys

import "errors"

var (
	errNoSpace = errors.New("no space left on device")
	errQuota   = errors.New("disk quota exceeded")
)
