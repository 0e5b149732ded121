// Package hierarchy is a storage hierarchy S0..Sh-1 over DiStash pools
// (paper §2.3, Flashstore): pools ordered fastest first, a get that searches
// them top-down, promotion of a key found in S_i (i >= 1) to S0, exclusive
// (one copy) or inclusive (copies) content, and a migrator that demotes the
// coldest keys of a tier nearing its capacity to the next tier. Every
// operation — a get with its promotion, a put, a delete, each single move of
// the migrator — is one DiStash transaction, so a key is never lost and, in
// an exclusive hierarchy, never in two tiers.
//
//	h, err := hierarchy.New(db, hierarchy.Options{
//		Tiers: []string{"nvm", "ssd", "hdd"}, // pool names, fastest first
//		Mode:  hierarchy.Exclusive,
//	})
//	err = h.Put(ctx, []byte("k"), []byte("v"))  // into S0
//	v, err := h.Get(ctx, []byte("k"))           // top-down, promotes to S0
//	go h.RunMigrator(ctx, 100*time.Millisecond) // demotes the coldest keys
//
// # Tiers and their order
//
// Tiers are named pools. They must be ordered fastest first by medium,
// dram < nvm < ssd < hdd (two tiers on the same medium are allowed, e.g. an
// ephemeral flash SSD pool staging a durable SSD pool); New rejects any other
// order, an unknown pool name, and a pool named twice.
//
// Exclusive mode keeps the only copy of each key, so New rejects an
// exclusive hierarchy with an ephemeral tier anywhere (an ephemeral pool may
// evict, and a dram pool loses its content on restart: either would lose
// the key). Inclusive mode keeps every key in the last tier and copies of
// it above; New requires that last tier to be durable. Upper tiers of an
// inclusive hierarchy may be ephemeral: a copy they evict is still below.
//
// # Operations
//
// Get reads S0, S1, ... in turn and stops at the first tier holding the
// key. A hit in S0 is a read (plus, in a managed tier, a conflict-free
// recency update, below). A hit in S_i, i >= 1, promotes, in the
// transaction that read it and with read conflicts on every tier it looked
// at (so a concurrent put or move makes the promotion retry instead of
// resurrecting an old value): in exclusive mode the key moves from S_i to
// S0; in inclusive mode it is copied to every tier above S_i (S0..S_i-1),
// so that a copy evicted from an ephemeral S0 is found again one tier down.
//
// Put writes S0. In exclusive mode it removes the key from every other tier
// in the same transaction. In inclusive mode it also writes the last tier,
// overwrites a copy in an intermediate durable tier and removes a copy from
// an intermediate ephemeral tier, so all copies are equal at every version
// and a get never serves an older value. PutCold writes the last tier only
// and removes the key from the tiers above (a bulk load of cold data).
//
// # Managed tiers, usage and recency
//
// A tier is managed when it is durable and not the last one: it has a
// capacity, the migrator may demote from it, and the hierarchy keeps its
// usage and recency in the tier's own pool:
//
//	value   prefix | s | ns "v/" key                    the key's value
//	atime   prefix | s | ns "t/" key                    last access, int64 LE
//	index   prefix | b | ns "i/" be64(atime) key        0x01; ordered by time
//	usage   prefix | b | ns "u"                         int64 LE bytes, per bucket
//
// where s is a spread byte from a stable hash of the key (so a tier's keys
// spread over all the pool's shards) and b = s & 0xf0 one of 16 buckets.
// Usage counts the bytes of keys plus values of the tier's entries; it is
// changed with atomic Add by the transaction that changes the entry, after a
// conflicting read of the entry's old value, so it is exact. Capacity
// defaults to the pool's capacity × stashes / replication; usage does not
// count engine or metadata overhead, hence the high-water mark below 1.
//
// Recency is an access-time index. A hit or a write stamps the key with the
// current time (in units of Options.RecencyGranularity): atomic Max on atime,
// a new index entry at the stamp, a clear of the entry at the old stamp read
// with a snapshot read. None of these reads or writes conflicts with
// another get, so reads never abort each other over recency. Races can
// leave a stale index entry (an old stamp, or a key no longer in the tier);
// the migrator checks every entry against atime and the value with
// conflicting reads in the move's transaction and clears the stale ones
// (lazy deletion). Invariant: for every key in a managed tier, the index
// holds an entry at its atime. Stamps move forward only when the stamp
// changes, so with a granularity of 10 ms a hot key costs at most 100
// recency writes a second.
//
// Unmanaged tiers keep no metadata: an ephemeral tier of an inclusive
// hierarchy relies on its stashes' own eviction (LRU or CAMP), and the last
// tier never demotes.
//
// # Migration
//
// Migrate makes one pass over the managed tiers, top-down: when a tier's
// usage exceeds HighWater × capacity, it reads the coldest index entries
// (merging the heads of the 16 buckets) and moves keys one transaction per
// key (MigrateParallelism moves at a time) to the next tier, until usage
// falls to LowWater × capacity. A move
// reads the value and atime with conflicts; it skips (and clears) a stale
// entry, and skips a key touched since the scan (its atime moved), so a key
// accessed during migration stays. The moved key keeps its access time in
// the next tier. In inclusive mode a move drops the tier's copy and copies
// the value down only if the next tier lacks it.
//
// # Left out
//
// The paper's hierarchy avoids the device read of a miss with a Bloom
// filter at each stash (Pebble has its own, SQLite and the flash engine
// would need theirs). That lives in the stash, on the server side, and is
// not part of this package: here a miss in a tier is an ordinary read that
// the tier's stash answers from its engine.
//
// The stashes of an ephemeral pool already keep LRU order, but DiStash has
// no API to ask a stash for its coldest keys yet, so the hierarchy keeps
// its own access-time index (above). A stash-side recency API would let the
// migrator ask the tier for its coldest keys and drop the index writes.
package hierarchy
