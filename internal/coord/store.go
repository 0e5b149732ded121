package coord

import (
	"github.com/distash/distash/internal/fsys"
	"github.com/distash/distash/internal/raftstore"
)

// openStore opens the raft log and stable store of a coordinator: the
// Pebble store the log's replicas use too, so the tree has one durable raft
// store.
func openStore(fs fsys.FS, dir string) (*raftstore.Store, error) {
	// nil onFail: a coordinator whose raft store fails (a failed fsync, a
	// full disk) exits with a message naming it, as a log replica does.
	return raftstore.Open(fs, dir, nil)
}
