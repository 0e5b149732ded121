// Package txlog is DiStash's log role: the durable, raft-replicated log of
// tagged mutations, one log for all pools (docs/architecture.md: "The roles" and "Durability and recovery").
//
// # What it stores
//
// Commit proxies Append one Entry per commit batch: a version, the previous
// batch's version (the entries form a chain), the proxy's epoch and the
// batch's mutations, each tagged with the stashes that own its key. The
// values (Entry, TaggedMutation, Message, the Future of an append,
// ErrTrimmed and ErrStaleEpoch) live in internal/logentry, which links
// neither raft nor Pebble: the commit proxy and the stashes speak to the
// log through them, and their tests to fake logs. Every
// Entry is one raft log record (a compact binary codec, see codec.go)
// replicated by github.com/hashicorp/raft. Each replica has its own
// directory, a Pebble raft log/stable store (internal/raftstore: one synced
// Pebble batch, i.e. one WAL fdatasync, per stored raft batch) and a
// raft.FileSnapshotStore.
//
// # Embedded and network mode
//
// In embedded mode (Options.Network nil) the Options.Replicas replicas all
// run in this process over raft's in-memory transport (plus the heartbeat
// fast path raft's network transport has, see transport.go), in
// Dir/replica-<i>; Open waits for a leader and Append waits for one
// (LeaderTimeout).
//
// In network mode every transaction node process runs one Log holding ONE
// replica (Dir/replica) of the same raft group, over the caller's
// raft.Transport; Options.Network lists every peer, identically on every
// node, and a new directory bootstraps raft with all of them (each node
// does, which raft allows), unless NetworkOptions.Join says the replica
// joins a running log: the leader adds it (AddVoter, after RemoveServer of
// a lost member; Members reads the configuration) and catches it up.
// txlog.meta records the mode so a directory is
// never reopened in the other one. Open does not wait for a leader (the
// other nodes may start later). Only the leader's Log accepts Append,
// Resync, BeginGeneration, VerifyLeader and pop flushes; the others fail at
// once with ErrNotLeader (nothing submitted, nothing blocked). IsLeader,
// Leader and Subscribe (a channel holding the latest leadership state)
// tell callers where the leader is. Peek, Pop and the Stats work on every
// node: Peek serves what the local replica applied, which is committed.
// Raft timeouts are 500 ms (Options.RaftTimeout) since RPCs cross sockets.
//
// # Generations and epochs
//
// A commit proxy that takes over (a new leader, or a new proxy) calls
// BeginGeneration(epoch) on the leader with an epoch above every earlier
// one (e.g. from the coordinator). After a raft barrier (everything
// committed in earlier terms is applied) it replicates a generation
// command: every replica raises its epoch, and from then on rejects, all
// alike, any Entry of a lower Epoch (ErrStaleEpoch, definitely not
// committed, the chain unaffected). BeginGeneration returns the log's last
// version when the generation began: every acknowledged append of earlier
// generations is at or below it, and the new proxy chains from it. The
// epoch is kept in snapshots. The GRV proxy calls VerifyLeader before
// handing out a read version, so a deposed leader never hands out a stale
// one. Embedded mode never begins a generation: epoch 0 throughout, and
// the records and snapshots it writes are byte for byte what they were
// before epochs existed.
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
// snapshots hold the popped map and the unpopped entries only, so the
// on-disk raft log and snapshots stay bounded by what the slowest stash has
// not popped. Each replica takes one (checking every SnapshotInterval) once
// SnapshotThreshold = 4096 records were applied since the last one and
// those records add up to at least twice the unpopped entries' size, which
// is what the snapshot writes, keeping TrailingLogs = 1024 records behind:
// a log holding a gigabyte for a stash that is down does not write it again
// every few seconds, snapshots write at most half of what is appended, and
// the raft log holds about twice the unpopped entries' size past the last
// snapshot. An empty tag set drops nothing.
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
// A stash that stops popping makes the log hold its entries. Past twice
// MemoryBytes of memory, a replica's state machine spills its oldest
// entries to segment files in its directory (spill.go), keeping for each
// only where it is and which tags it has messages for, 8 MiB at a time
// (the apply that spills holds the lock); a Peek below the spilled
// version reads them back, checking each against its checksum
// (ErrCorrupt otherwise: the replica then rebuilds its state from its
// raft snapshot and log, as a restart would). The
// files are scratch, cleared when the replica starts: raft's log and
// snapshots hold every entry (a snapshot reads the spilled ones back), and
// a restored state machine spills again as it decodes. Stats.Spilled says
// how much. A new segment must leave 1 GiB of free disk plus twice what
// the log holds (raft's store must not fill the disk); a failed or refused
// spill write leaves entries in memory, and the hold bound below is then
// at most MemoryHoldFactor × MemoryBytes.
//
// A stash that never pops (dead, or cut off) would make the log hold
// everything forever. When the leader's unpopped entries (the memory of
// those in memory and the size of those spilled) pass Options.HoldBytes
// (default 16 × MemoryBytes), its pop flush force-pops the
// tag furthest behind (never the system tag, 0) up to the version that
// brings them back under MemoryBytes, logs a warning naming the tag and
// version, and reports it in Stats.Dropped. That stash has lost the
// mutations up to there: its later Peek below the trim point fails with
// ErrTrimmed, and it must be rebuilt (e.g. from its team) rather than
// catch up from the log. A tag Options.MayDrop refuses (its entries are
// the only copy of acknowledged writes) is never force-popped: the log
// keeps it, drops no other tag past it (that would free nothing), and
// reports it (Withheld) for the ratekeeper to hold writes back.
//
// In network mode only the leader replicates pops. Followers record Pops
// and keep them; when a replica becomes leader it first applies everything
// committed (a barrier), then merges the replicated popped versions into
// its own (max per tag; and, without Options.Tags or SetTags, the
// replicated tag set into its own) so a flush never carries less than what
// is replicated. Pops given to a follower's Log are only replicated if it
// becomes leader: stashes should pop on the leader.
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
//     futures, calls Resync, and chains from the version it returns. In
//     network mode ErrNotLeader means never submitted, and a proxy of a new
//     generation chains from what BeginGeneration returns.
//   - Peek only returns committed entries; its end version never goes
//     backwards for a given replica set, and a tag sees every message with a
//     version in (after, end].
//
// Raft is tuned for one machine or a local network (250 ms
// heartbeat/election/lease timeouts, 500 ms in network mode; 5 ms commit
// timeout, 512-record batches with BatchApplyCh): concurrent Appends are
// pipelined and raft writes a whole batch with one fdatasync.
package txlog
