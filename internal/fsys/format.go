package fsys

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"strconv"
	"strings"

	"github.com/distash/distash/internal/version"
)

// FormatFile is the marker that states the format version of a directory
// whose files a library owns (a Pebble or SQLite engine, the raft store, a
// coordinator's snapshots): "distash <kind> format <version>\n".
const FormatFile = "FORMAT"

// Unversioned is the format version of files written before format
// versions were stated: a directory without a marker, a file without a
// version field.
const Unversioned = 1

// OpenFormat checks the format marker of dir, which holds files of kind,
// before its owner opens them: a marker of a newer version than want (the
// binary's) is refused with a *version.FormatError naming both, so the
// files are never misread; so is a marker of another kind. No marker (a new
// directory, or one written before markers) is Unversioned. On success it
// returns got, the version found, and mark, which the owner calls once it
// opened the files (and converted them, if got < want) to record want; mark
// logs the upgrade of a directory that had an older version or none.
func OpenFormat(f FS, dir, kind string, want int, logger *slog.Logger) (got int, mark func() error, err error) {
	f = Or(f)
	path := f.PathJoin(dir, FormatFile)
	b, err := ReadFile(f, path)
	present := err == nil
	switch {
	case errors.Is(err, fs.ErrNotExist):
		got = Unversioned
	case err != nil:
		return 0, nil, err
	default:
		var k string
		if k, got, err = parseFormat(string(b)); err != nil {
			return 0, nil, Damaged(path, "%v", err)
		}
		if k != kind {
			return 0, nil, fmt.Errorf("%s: the directory holds %s files, not %s", path, k, kind)
		}
	}
	if err := version.CheckFormat(kind, got, want); err != nil {
		var fe *version.FormatError
		if errors.As(err, &fe) {
			fe.Path = dir
		}
		return got, nil, err
	}
	old := present || hasFiles(f, dir) // files of a release before markers
	mark = func() error {
		if present && got == want {
			return nil
		}
		if err := WriteAtomic(f, path, fmt.Appendf(nil, "distash %s format %d\n", kind, want)); err != nil {
			return fmt.Errorf("record the format of %s: %w", dir, err)
		}
		if old {
			if logger == nil {
				logger = slog.Default()
			}
			logger.Info("upgraded a directory's format in place", "kind", kind, "dir", dir, "from", got, "to", want, "unmarked", !present)
		}
		return nil
	}
	return got, mark, nil
}

// hasFiles reports whether dir holds anything besides the marker and the
// directory lock (LockDir takes it before the marker is read).
func hasFiles(f FS, dir string) bool {
	names, err := f.List(dir)
	if err != nil {
		return false
	}
	for _, n := range names {
		if n != FormatFile && n != LockFile {
			return true
		}
	}
	return false
}

func parseFormat(s string) (kind string, v int, err error) {
	fields := strings.Fields(s)
	if len(fields) != 4 || fields[0] != "distash" || fields[2] != "format" {
		return "", 0, fmt.Errorf("bad format marker %q", s)
	}
	v, err = strconv.Atoi(fields[3])
	if err != nil || v < 1 {
		return "", 0, fmt.Errorf("bad format marker %q", s)
	}
	return fields[1], v, nil
}
