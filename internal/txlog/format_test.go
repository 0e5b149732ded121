package txlog

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/distash/distash/internal/fsys"
	"github.com/distash/distash/internal/fsys/formattest"
)

// TestMetaFormat: txlog.meta states its format; one without (written
// before format versions) opens, a newer one is refused naming both.
func TestMetaFormat(t *testing.T) {
	dir := t.TempDir()
	if err := checkMeta(fsys.Default, dir, 3, nil); err != nil {
		t.Fatal(err)
	}
	b, _, err := fsys.ReadChecked(fsys.Default, filepath.Join(dir, "txlog.meta"))
	if err != nil || !strings.HasPrefix(string(b), "format=1\n") {
		t.Fatalf("txlog.meta %q, %v", b, err)
	}
	// As written before format versions (and before checksums).
	os.WriteFile(filepath.Join(dir, "txlog.meta"), []byte("replicas=3\n"), 0o644)
	if err := checkMeta(fsys.Default, dir, 3, nil); err != nil {
		t.Fatalf("unversioned txlog.meta: %v", err)
	}
	fsys.WriteChecked(fsys.Default, filepath.Join(dir, "txlog.meta"), []byte("format=2\nreplicas=3\n"))
	formattest.Refused(t, checkMeta(fsys.Default, dir, 3, nil), FormatKind, 2, FormatVersion)
}
