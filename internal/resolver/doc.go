// Package resolver implements DiStash's resolver role: optimistic-concurrency
// conflict detection for commit batches, as FoundationDB's resolvers do.
//
// # Semantics
//
// A commit proxy sends the resolver one batch of transactions per commit
// version, in strictly increasing version order. Every transaction carries the
// version it read at and the key ranges it read and wrote. The resolver
// decides, transaction by transaction and in batch order:
//
//   - TooOld when the transaction has at least one read range and its read
//     version is older than the oldest version the resolver still remembers
//     (Resolver.OldestVersion), which is max(start, version-window) for the
//     batch being resolved. The resolver may have forgotten writes committed
//     before that version, so it cannot prove the reads are still valid.
//   - Conflict when one of its read ranges intersects a write range of a
//     transaction that committed at a version later than its read version:
//     a transaction of an earlier batch, or a transaction earlier in the same
//     batch that committed (those get the batch's version, which is later than
//     any read version in it).
//   - Committed otherwise; its write ranges then become part of the history
//     at the batch's version.
//
// Transactions that conflict or are too old add nothing to the history.
// A transaction without read ranges (a blind write) always commits, whatever
// its read version. A read-only transaction gets an outcome like any other.
// A range whose End is nil extends to the end of the key space (as
// kv.KeyRange.Contains reads it); a range with Begin >= End otherwise is empty
// and is ignored. A read version at or after the batch's version is treated as
// version-1: the transaction then conflicts only with writes earlier in its own
// batch.
//
// The answers are exact: there is no false positive and no false negative for
// read versions the resolver still remembers. The only conservative answer is
// TooOld, for read versions outside the window.
//
// # Data structure
//
// The write history is a step function over the key space, kept in an ordered
// map (a github.com/google/btree BTreeG) from a boundary key to the version of
// the segment that starts there; the segment runs up to the next boundary.
// The version of a key is the commit version of the last committed write range
// that covered it (0 if none, or if that write has been pruned). Because batch
// versions strictly increase, "last" is also "maximum", so:
//
//   - a read range [b, e) conflicts with read version rv iff the maximum
//     version over the segments it intersects is > rv: the segment holding b
//     (the floor boundary of b) and every boundary in (b, e). A point read
//     [k, k+0x00) intersects exactly one segment, so it costs one descent.
//   - a write range [b, e) at the newest version v overwrites: remember the
//     version of the segment holding e, delete every boundary strictly inside
//     (b, e), set boundary b to v and, unless a boundary at e already exists,
//     put one there with the remembered version (so keys from e on keep their
//     version). A point write needs one descent to find the floor of k+0x00
//     (and of k) and at most two inserts, and no key allocation when its
//     boundaries already exist; writing a segment already at v is a no-op.
//
// Tree entries carry the first 32 bytes of their key inline (zero-padded,
// as four big-endian words), so that comparisons during a descent rarely
// follow the key pointer, even for keys that share a pool's prefix and a
// table's name: a descent of a tree of a million boundaries costs cache
// misses on the nodes only. (16 bytes made entries smaller, 4-12% faster on
// 12-byte keys, and 40% slower on keys sharing a 20-byte prefix:
// BenchmarkResolvePoint and BenchmarkResolvePointPrefix.)
//
// Transactions of a batch are processed in order against the same map, so an
// earlier committed transaction's writes (at the batch version) are visible to
// the later ones: this is the intra-batch conflict check.
//
// # Invariants
//
//  1. There is always a boundary at the empty key, so every key has a floor.
//  2. Every version stored is 0 or a committed batch version, and is at most
//     the last batch version.
//  3. For every key k and every read version rv >= OldestVersion(), the
//     stored version of k is > rv iff some transaction committed at a
//     version > rv wrote a range holding k. (Pruning only rewrites versions
//     <= OldestVersion() to 0, which no admissible read version is below.)
//  4. Batch versions strictly increase; a violation is a broken invariant of
//     the caller and panics.
//
// # Pruning
//
// Memory is bounded by the writes of the last window. After each batch the
// resolver advances an incremental sweep over the boundaries, from a cursor
// that wraps around the key space: every visited segment whose version is
// <= OldestVersion() is set to 0, and a boundary whose (new) version equals
// its predecessor's is deleted (the two segments merge). The sweep's budget
// per batch is a constant plus a multiple (4) of the boundaries the batch
// added, so its cost is amortised over the writes and there is no latency
// spike, and a full pass completes while the map grows by at most a third:
// the number of boundaries stays within a small factor of the canonical step
// function of the writes in the window (at most two boundaries per write
// range, plus the empty key). The budget also grows with the versions since
// the previous batch, so that a pass takes at most one window of versions
// even when batches bring no writes: after a burst, the commit proxy's idle
// batches forget it within about three windows.
//
// A Resolver is safe for concurrent use, but batches must be submitted in
// version order; a commit pipeline has a single caller of Resolve.
package resolver
