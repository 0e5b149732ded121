package stash

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/distash/distash/internal/fsys"
	"github.com/distash/distash/internal/fsys/formattest"
)

// TestOwnershipFormat: the ownership file states its format in each
// snapshot; a file without (written before format versions) loads, a
// newer one is refused naming both.
func TestOwnershipFormat(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, ownershipFile)
	if err := writeOwnership(fsys.Default, dir, []ownSnapshot{{Version: 5, Ranges: []ownRange{{Begin: []byte("a"), End: []byte("b"), State: serving}}}}); err != nil {
		t.Fatal(err)
	}
	if b, _, err := fsys.ReadChecked(fsys.Default, path); err != nil || !strings.Contains(string(b), `"format":1`) {
		t.Fatalf("ownership file %s, %v", b, err)
	}
	old := `[{"v":5,"r":[{"b":"YQ==","e":"Yg==","s":1}]}]`
	fsys.WriteChecked(fsys.Default, path, []byte(old))
	if _, at, _, found, err := loadOwnership(fsys.Default, dir, 10); err != nil || !found || at.Version != 5 {
		t.Fatalf("unversioned file: at %+v found %v err %v", at, found, err)
	}
	fsys.WriteChecked(fsys.Default, path, []byte(`[{"v":5,"r":[],"format":2}]`))
	_, _, _, _, err := loadOwnership(fsys.Default, dir, 10)
	formattest.Refused(t, err, OwnershipFormatKind, 2, OwnershipFormat)
}
