package engines

import (
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/distash/distash/internal/engine"
	"github.com/distash/distash/internal/fsys"
	"github.com/distash/distash/internal/fsys/formattest"
)

// TestEngineFormats: an engine's directory is marked with its format; a
// newer one is refused naming both versions before the engine opens, and
// a directory without a marker (written before format versions) opens.
func TestEngineFormats(t *testing.T) {
	for _, name := range []string{"pebble", "sqlite"} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			formattest.Marker(t, FormatKind(name), dir, func() (io.Closer, error) { return Open(name, engine.Options{Dir: dir}) })
		})
	}
	// An engine without files has no marker.
	dir := t.TempDir()
	e, err := Open("memory", engine.Options{Dir: dir, Ephemeral: true})
	if err != nil {
		t.Fatal(err)
	}
	e.Close()
	if _, err := os.Stat(filepath.Join(dir, fsys.FormatFile)); err == nil {
		t.Fatal("the memory engine's directory was marked")
	}
}
