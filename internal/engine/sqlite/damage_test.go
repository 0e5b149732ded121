package sqliteengine_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/distash/distash/internal/engine"
	sqliteengine "github.com/distash/distash/internal/engine/sqlite"
	"github.com/distash/distash/internal/fsys"
	"github.com/distash/distash/internal/kv"
)

// TestDamageAtRest: SQLite keeps no page checksums (off by default), but
// its structure checks catch a damaged page of the tree or a garbled file
// header; the engine reports them as a *fsys.DamageError naming stash.db,
// at open (which reads every key) or on the read or write that trips.
func TestDamageAtRest(t *testing.T) {
	fill := func(t *testing.T) string {
		dir := t.TempDir()
		e, err := sqliteengine.Open(engine.Options{Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		for v := 1; v <= 20; v++ {
			var ws []engine.Write
			for i := range 50 {
				ws = append(ws, engine.Write{Key: []byte(fmt.Sprintf("k/%03d/%02d", i, v)), Value: []byte(strings.Repeat("v", 200))})
			}
			if err := e.Apply(&engine.Batch{Version: kv.Version(v), Writes: ws}); err != nil {
				t.Fatal(err)
			}
		}
		if err := e.Close(); err != nil { // checkpoints the WAL into stash.db
			t.Fatal(err)
		}
		return dir
	}
	damage := func(t *testing.T, dir string, off int64, b []byte) {
		f, err := os.OpenFile(filepath.Join(dir, sqliteengine.FileName), os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteAt(b, off); err != nil {
			t.Fatal(err)
		}
	}
	check := func(t *testing.T, dir string) {
		t.Helper()
		e, err := sqliteengine.Open(engine.Options{Dir: dir})
		if err == nil {
			defer e.Close()
			err = e.Scan(nil, nil, false, func(k, v []byte) bool { return true })
		}
		var de *fsys.DamageError
		if !errors.As(err, &de) || !errors.Is(err, fsys.ErrDamaged) {
			t.Fatalf("err = %v; want a *fsys.DamageError", err)
		}
		if want := filepath.Join(dir, sqliteengine.FileName); de.Path != want {
			t.Fatalf("damage names %s; want %s", de.Path, want)
		}
		t.Logf("%v", err)
	}
	t.Run("tree-page", func(t *testing.T) {
		dir := fill(t)
		// The header of a page of the tree (pages are 4 KiB; page 1 is
		// the file header and the schema).
		damage(t, dir, 6*4096, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
		check(t, dir)
	})
	t.Run("file-header", func(t *testing.T) {
		dir := fill(t)
		damage(t, dir, 0, []byte("not a database!!"))
		check(t, dir)
	})
}
