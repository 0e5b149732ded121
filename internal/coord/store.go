package coord

import "github.com/distash/distash/internal/txlog"

// openStore opens the raft log and stable store of a coordinator: the
// transaction log's Pebble store, so the tree has one durable raft store.
func openStore(dir string) (txlog.RaftStore, error) { return txlog.OpenRaftStore(dir) }
