package server

import (
	"io"
	"testing"

	"github.com/distash/distash/internal/fsys"
	"github.com/distash/distash/internal/fsys/formattest"
)

func TestDirFormat(t *testing.T) {
	dir := t.TempDir()
	formattest.Marker(t, DirFormatKind, dir, func() (io.Closer, error) { return io.NopCloser(nil), checkDirFormat(fsys.Default, dir) })
}
