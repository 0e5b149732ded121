package flash_test

import (
	"io"
	"testing"

	"github.com/distash/distash/internal/engine"
	"github.com/distash/distash/internal/engine/engines"
	"github.com/distash/distash/internal/fsys/formattest"
)

func TestFormat(t *testing.T) {
	dir := t.TempDir()
	formattest.Marker(t, engines.FormatKind("flash"), dir, func() (io.Closer, error) { return engines.Open("flash", engine.Options{Dir: dir}) })
}
