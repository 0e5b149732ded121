package locallog_test

import (
	"io"
	"testing"

	"github.com/distash/distash/internal/engine"
	"github.com/distash/distash/internal/engine/locallog"
	"github.com/distash/distash/internal/fsys/formattest"
)

func TestFormat(t *testing.T) {
	dir := t.TempDir()
	formattest.Marker(t, locallog.FormatKind, dir, func() (io.Closer, error) {
		return locallog.Open(engine.Options{Dir: dir}, locallog.Config{Logger: quiet})
	})
}
