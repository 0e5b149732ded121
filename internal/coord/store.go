package coord

import (
	"github.com/distash/distash/internal/fsys"
	"github.com/distash/distash/internal/raftstore"
	"github.com/distash/distash/internal/version"
)

// FormatKind and FormatVersion state the format of a coordinator's state
// (its raft commands and snapshots of State) in a marker in its
// directory; bump FormatVersion with any change to their encoding.
const (
	FormatKind    = "coord-state"
	FormatVersion = 1
)

func init() { version.RegisterFormat(FormatKind, FormatVersion) }

// checkFormat refuses a coordinator directory of a newer format before a
// byte of it is read, and marks one of this format (or one written before
// markers, which is this format too).
func checkFormat(fs fsys.FS, dir string) error {
	_, mark, err := fsys.OpenFormat(fs, dir, FormatKind, FormatVersion, nil)
	if err != nil {
		return err
	}
	return mark()
}

// openStore opens the raft log and stable store of a coordinator: the
// Pebble store the log's replicas use too, so the tree has one durable raft
// store.
func openStore(fs fsys.FS, dir string) (*raftstore.Store, error) {
	// nil onFail: a coordinator whose raft store fails (a failed fsync, a
	// full disk) exits with a message naming it, as a log replica does.
	return raftstore.Open(fs, dir, nil)
}
