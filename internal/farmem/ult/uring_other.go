//go:build !linux

package ult

import "errors"

type uring struct{ backend }

func newUring(depth int) (*uring, error) { return nil, errors.New("ult: io_uring needs Linux") }
