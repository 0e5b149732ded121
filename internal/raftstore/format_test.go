package raftstore

import (
	"io"
	"testing"

	"github.com/distash/distash/internal/fsys/formattest"
)

func TestFormat(t *testing.T) {
	dir := t.TempDir()
	formattest.Marker(t, FormatKind, dir, func() (io.Closer, error) { return Open(nil, dir, func(error) {}) })
}
