package coord

import (
	"github.com/distash/distash/internal/fsys"
	"github.com/distash/distash/internal/txlog"
)

// openStore opens the raft log and stable store of a coordinator: the
// transaction log's Pebble store, so the tree has one durable raft store.
func openStore(fs fsys.FS, dir string) (txlog.RaftStore, error) {
	// nil onFail: a coordinator whose raft store fails (a failed fsync, a
	// full disk) exits with a message naming it, as a log replica does.
	return txlog.OpenRaftStoreFS(fs, dir, nil)
}
