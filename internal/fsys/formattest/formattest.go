// Package formattest checks, for a test of a package that owns a
// persistent file kind, the rules of internal/version's formats: the
// kind's files open when they carry no version (written before versions
// were stated), and a newer version than the binary's is refused naming
// both, before the files are read.
package formattest

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/distash/distash/internal/fsys"
	"github.com/distash/distash/internal/version"
)

// Marker checks a kind whose version is a marker (fsys.OpenFormat) in
// markerDir: open opens the files (creating them on the first call) and
// returns what to close.
func Marker(t *testing.T, kind, markerDir string, open func() (io.Closer, error)) {
	t.Helper()
	want, ok := version.Formats()[kind]
	if !ok {
		t.Fatalf("format kind %q is not registered", kind)
	}
	marker := filepath.Join(markerDir, fsys.FormatFile)
	reopen := func(what string) {
		t.Helper()
		c, err := open()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		c.Close()
	}
	reopen("new files")
	if b, err := os.ReadFile(marker); err != nil || string(b) != fmt.Sprintf("distash %s format %d\n", kind, want) {
		t.Fatalf("marker %s: %q, %v", marker, b, err)
	}
	// The files as a release before format versions left them.
	if err := os.Remove(marker); err != nil {
		t.Fatal(err)
	}
	reopen("files without a marker")
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("not marked when opened: %v", err)
	}
	if err := os.WriteFile(marker, fmt.Appendf(nil, "distash %s format %d\n", kind, want+1), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := open()
	Refused(t, err, kind, want+1, want)
}

// Refused checks that err refuses files of kind at version got, newer
// than the binary's want, naming both.
func Refused(t *testing.T, err error, kind string, got, want int) {
	t.Helper()
	var fe *version.FormatError
	if !errors.As(err, &fe) || fe.Kind != kind || fe.Got != got || fe.Want != want {
		t.Fatalf("%s at version %d: got %v, want a refusal naming versions %d and %d", kind, got, err, got, want)
	}
	for _, s := range []string{kind, fmt.Sprintf("version %d", got), fmt.Sprintf("binary's %d", want)} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("refusal %q does not name %q", err, s)
		}
	}
}
