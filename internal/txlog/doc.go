// Package txlog is DiStash's log role: the durable, raft-replicated log of
// tagged mutations, one log for all pools (docs/architecture.md: "The roles" and "Durability and recovery").
//
// # What it stores
//
// Commit proxies Append one Entry per commit batch: a version, the previous
// batch's version (the entries form a chain) and the batch's mutations, each
// tagged with the stashes that own its key. Every Entry is one raft log
// record (a compact binary codec, see codec.go) replicated by
// github.com/hashicorp/raft to Options.Replicas replicas that all run in this
// process over raft's in-memory transport (plus the heartbeat fast path
// raft's network transport has, see transport.go), each with its own
// directory (Dir/replica-<i>), a Pebble raft log/stable store (pebblestore.go:
// one synced Pebble batch, i.e. one WAL fdatasync, per stored raft batch) and
// a raft.FileSnapshotStore.
//
// Each replica's raft state machine keeps in memory the committed entries
// that some tag has not popped yet, indexed per tag: Peek(tag, after) is a
// binary search in that tag's message queue, never a scan of other tags'
// mutations. A Peek that is ahead of the log waits on a channel that is
// closed (and replaced) every time a replica applies a batch.
//
// # How pops and snapshots bound it
//
// A stash calls Pop(tag, v) once everything <= v is durable in its engine.
// Pops are batched: every Options.PopInterval (200 ms) the log, if anything
// changed, replicates a "pop" raft command carrying the popped version of
// every tag of the tag set (Options.Tags, changed by SetTags). Applying it,
// every replica drops the entries <= the minimum popped version over the set,
// so all replicas trim identically and popped versions survive restarts. Raft
// snapshots (taken after SnapshotThreshold = 4096 new records, keeping
// TrailingLogs = 1024 records behind) hold the popped map and the unpopped
// entries only, so the on-disk raft log and snapshots stay bounded by what
// the slowest stash has not popped. An empty tag set drops nothing.
//
// In memory, each replica holds its unpopped entries (Stats.Memory: the
// raft commands and the per-tag index, where the tags that get every
// mutation of an entry share one slice) and a cache of its most recent
// raft records (logcache.go: at most 1024 records and RaftCacheBytes,
// 32 MiB). Stashes pop what they flushed, so entries stay about one MVCC
// window (5 s); when the entries pass Options.MemoryBytes (256 MiB),
// OverMemoryBudget tells durable stashes to flush, and pop, everything they
// applied without waiting for the window.
//
// # Guarantees
//
//   - Once Future.Wait returns nil, the entry is committed by a raft quorum
//     (each member fsynced it) and applied by the leader: it survives kill -9
//     of the process and, with several replicas, the loss of a minority.
//   - The committed log is a chain: an entry is applied only if its
//     PrevVersion is the previous committed entry's Version (all replicas
//     decide alike). Append rejects out-of-order entries at once
//     (ErrOutOfOrder); the state machine rejects an entry that does not chain
//     because an earlier append was lost (ErrPrevVersion, definitely not
//     committed).
//   - Raft failures of an in-flight append (leader lost, shutdown) are
//     reported as ErrCommitUnknown: the entry may still commit. ErrNoLeader
//     means the entry was never submitted (and later appends fail fast until
//     Resync). After any append error the appender waits for its in-flight
//     futures, calls Resync, and chains from the version it returns.
//   - Peek only returns committed entries; its end version never goes
//     backwards for a given replica set, and a tag sees every message with a
//     version in (after, end].
//
// Raft is tuned for one machine (250 ms heartbeat/election/lease timeouts,
// 5 ms commit timeout, 512-record batches with BatchApplyCh): concurrent
// Appends are pipelined and raft writes a whole batch with one fdatasync.
package txlog
