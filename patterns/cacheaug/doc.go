// Package cacheaug is a cache-augmented data store over DiStash pools (paper
// §2.1, §3.1, Figures 3–5): query results cached in one or more fast pools
// over data in another, kept consistent with the data by doing every read
// and every write in a single DiStash transaction.
//
//	s, err := cacheaug.New(db, cacheaug.Options{
//		CachePools: []string{"cache"}, // DRAM, ephemeral
//		DataPool:   "data",            // SSD, durable; also holds the dependency index
//		Families: []cacheaug.Family{{
//			Name: "sum",
//			Compute: func(r *cacheaug.Reader, args []byte) ([]byte, error) { ... r.Get(k) ... },
//		}},
//	})
//	v, err := s.Get(ctx, cacheaug.Query{Family: "sum", Args: []byte("a,b")}) // read-through
//	err = s.Set(ctx, []byte("a"), []byte("5"), cacheaug.WriteAround)          // or WriteThrough, ReadModifyWrite
//
// # Queries, families and dependencies
//
// A cached entry is the result of a query: a Family (a named, registered
// computation) applied to Args. The family's Compute reads data only
// through the Reader it is given; every data key it reads becomes a
// dependency of the entry. An entry may depend on any number of data keys,
// and its dependencies may change from one computation to the next (a
// query that follows a pointer depends on the pointer and on its target).
//
// # Read-through (Figure 5a)
//
// Get looks the query up in the cache pools, fastest first. A hit in the
// first pool is a plain read. A hit in a later pool is copied to the faster
// pools. On a miss Get computes the result from the data, writes it to every
// cache pool and records its dependencies — all in the transaction that read
// the cache and the data. A concurrent write of any data key the
// computation read makes that transaction abort and retry, so a fill never
// stores a result computed from data that has since changed (the race of
// the paper's Figure 7).
//
// # Writes and policies
//
// Set, Delete, Update and Write change data keys and, in the same
// transaction, every cached entry that depends on them, by the policy the
// call names:
//
//   - WriteAround (Figure 3): delete every dependent entry from every cache
//     pool, with its dependency records.
//   - WriteThrough (Figure 4): recompute every dependent entry from the
//     updated data and write it where it is cached (its dependencies are
//     re-recorded: they may have changed).
//   - ReadModifyWrite: read every dependent entry, let its family's Apply
//     turn the old result and the change into the new result, and write it
//     back. A family without Apply, or an Apply that returns ErrRecompute,
//     falls back to WriteThrough for that entry.
//
// A dependent entry that no cache pool holds any more (evicted) is dropped
// from the dependency index instead of being refreshed. Different calls may
// use different policies on the same keys at the same time: every one keeps
// the invariant below.
//
// # Invariant
//
// At every committed version, every entry present in a cache pool equals
// what its family computes from the data at that version. Verify checks it
// on one snapshot.
//
// # Layout and the dependency index
//
// With namespace ns (default "ca/"), s a spread byte from a stable hash (so
// the keys spread over the shards of their pool), ck the cache key
// (length-prefixed family name, then args) and dk a data key:
//
//	entry        cache pool   prefix | s(ck) | ns "e/" ck          the cached result
//	entry deps   index pool   prefix | s(ck) | ns "m/" ck          version, count, length-prefixed data keys
//	dependency   index pool   prefix | s(dk) | ns "d/" len(dk) dk ck   0x01
//	data         data pool    prefix | s(dk) | dk                  (PoolBackend; other Backends choose)
//
// The index must live in a durable pool (Options.IndexPool, default the
// data pool): the stashes of an ephemeral pool evict each on its own, so a
// dependency record evicted from one replica but not from another would let
// a writer miss an entry that a reader still finds on the other replica.
// A writer of dk reads the dependency range of dk with a read conflict, so
// a concurrent fill that adds a dependency on dk makes one of the two
// retry. Entries evicted from an ephemeral cache pool leave their
// dependency records behind until the next write of one of their data keys
// removes them.
//
// # Data backends
//
// By default the data are plain keys of DataPool (PoolBackend). Any Backend
// can hold them instead — a storage hierarchy (package
// github.com/distash/distash/patterns/hierarchy satisfies Backend) — as long
// as its reads add read conflicts to the caller's transaction.
package cacheaug
