package guard

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"regexp"

	"github.com/cockroachdb/pebble"

	"github.com/distash/distash/internal/fsys"
)

// Damage returns err as a *fsys.DamageError naming the damaged file of
// the Pebble store in dir (dir itself when err names no file), its reason
// prefixed by what, if Pebble reports damage at rest: data that fails its
// checksum (pebble.ErrCorruption), or a file the MANIFEST lists that is
// not there. Otherwise it returns nil. Shared by the Pebble engine and the
// raft store.
func Damage(dir, what string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pebble.ErrCorruption) || errors.Is(err, fs.ErrNotExist) || damageText.MatchString(err.Error()) {
		return &fsys.DamageError{Path: damagedFile(dir, err), Reason: fmt.Sprintf("%s: %v", what, err)}
	}
	return nil
}

// damageText recognises Pebble's reports of damage that carry no marker:
// a file the MANIFEST lists that is missing ("unknown to the objstorage
// provider: file does not exist"), a block whose checksum fails ("invalid
// table 000012 (checksum mismatch ...)").
var damageText = regexp.MustCompile(`file does not exist|checksum mismatch|invalid table|corrupt`)

// pebbleFile finds a file of the store in an error's text: a path, or a
// Pebble file number ("000012.sst", "sstable 000012", "MANIFEST-000001").
var pebbleFile = regexp.MustCompile(`(MANIFEST-\d+|OPTIONS-\d+|\d{6,}\.(?:sst|log)|(?:sstable|table|file|backing file) (\d{6,}))`)

// damagedFile returns the path of the file err names, or dir when it names
// none.
func damagedFile(dir string, err error) string {
	m := pebbleFile.FindStringSubmatch(err.Error())
	switch {
	case m == nil:
		return dir
	case m[2] != "":
		return filepath.Join(dir, m[2]+".sst")
	default:
		return filepath.Join(dir, m[1])
	}
}
