// Package engine defines the storage engine interface that every stash uses
// to keep its data, and the options engines are opened with. Implementations
// live in subpackages (memory, pebble, sqlite, flash); package
// engine/engines opens one by name; package engine/enginetest is the
// conformance suite every implementation must pass.
//
// An engine holds one stash's data as of the stash's durable version: the
// stash keeps the newer, not yet durable versions in its in-memory MVCC
// window and hands them to the engine in version order with Apply.
package engine

import (
	"github.com/distash/distash/internal/fsys"
	"github.com/distash/distash/internal/kv"
)

// Engine stores the key-value pairs of one stash.
//
// Engines are safe for concurrent use: reads (Get, Scan, Stats) may run
// concurrently with each other and with one Apply at a time.
type Engine interface {
	// Get returns the value of key; ok is false when the key is absent
	// (never written, cleared, or evicted by an ephemeral engine). A Get of
	// an ephemeral engine counts as a reference for its eviction order.
	Get(key []byte) (value []byte, ok bool, err error)

	// Scan calls fn for each key in [begin, end), ascending, or descending
	// when reverse is set, until fn returns false. The slices passed to fn
	// are only valid during the call. end == nil means no upper bound.
	Scan(begin, end []byte, reverse bool, fn func(key, value []byte) bool) error

	// Apply applies the writes of b in order and atomically, and records
	// b.Version as the engine's version. A durable engine returns only after
	// the batch is on stable storage (fsync); after a crash it holds either
	// all of the batch or none of it. An ephemeral engine may evict other
	// keys to stay within its capacity.
	Apply(b *Batch) error

	// Version returns the version recorded by the last Apply, 0 for a new engine.
	Version() kv.Version

	// Stats returns sizes and counters.
	Stats() Stats

	// Close releases the engine's resources. A durable engine keeps its data.
	Close() error
}

// Write is one change in a Batch: a set (Value non-nil), a clear of Key
// (Value nil, End nil) or a clear of [Key, End) (End non-nil).
type Write struct {
	Key   []byte
	Value []byte
	End   []byte
	// Cost is the recomputation cost given with SetWithCost; camp eviction uses it.
	Cost uint32
}

// IsClearRange reports whether w clears a range.
func (w Write) IsClearRange() bool { return w.End != nil }

// IsClear reports whether w clears the single key Key.
func (w Write) IsClear() bool { return w.Value == nil && w.End == nil }

// Batch is an ordered list of writes applied atomically at Version.
type Batch struct {
	Version kv.Version
	Writes  []Write
}

// Stats describes an engine's content. Bytes counts the keys and values of
// live pairs (what capacity limits are checked against).
type Stats struct {
	Keys      int64
	Bytes     int64
	Evictions int64 // pairs dropped to stay within capacity (ephemeral engines)
	// FilterNegatives counts Gets of absent keys answered by a Bloom filter
	// without a device read.
	FilterNegatives int64
}

// Peeker is implemented by engines whose Get has side effects (a
// reference in the eviction order, a read-cache fill, counters): Peek reads
// the same value with none of them, for status and accounting that must not
// disturb what they measure.
type Peeker interface {
	Peek(key []byte) (value []byte, ok bool, err error)
}

// Peek reads key from e without side effects: e's Peek if it has one, else
// its Get (which then has none).
func Peek(e Engine, key []byte) ([]byte, bool, error) {
	if p, ok := e.(Peeker); ok {
		return p.Peek(key)
	}
	return e.Get(key)
}

// SharedGetter is implemented by engines that can return a stored value
// without copying it: GetShared is Get whose value is the engine's own
// slice, which the caller must not modify. The engine never modifies a
// stored value in place, so the slice stays valid and unchanged after later
// writes. A stash's read path uses it: the value goes straight into the
// reply, one allocation and copy fewer per read.
type SharedGetter interface {
	GetShared(key []byte) (value []byte, ok bool, err error)
}

// ReadServer is implemented by engines that serve reads through their own
// scheduler (the flash engine with far memory: user-level threads that
// overlap lookups). When ServesReads is true a stash reads a client's keys
// with one GetMany, so that they run as concurrent lookups, and its range
// reads with ScanServed; otherwise it uses Get and Scan as any engine.
type ReadServer interface {
	ServesReads() bool
	// GetMany is Get of each key; the lookups may run concurrently.
	GetMany(keys [][]byte) (values [][]byte, present []bool, err error)
	// ScanServed is Scan run on the engine's scheduler; fn must not block
	// (it runs on a scheduler thread, holding up its other lookups).
	ScanServed(begin, end []byte, reverse bool, fn func(key, value []byte) bool) error
}

// ServesReads returns e as a ReadServer if it serves reads through its own
// scheduler, nil otherwise.
func ServesReads(e Engine) ReadServer {
	if rs, ok := e.(ReadServer); ok && rs.ServesReads() {
		return rs
	}
	return nil
}

// Counter is one named figure of an engine's internals, for status
// displays. Names are lower_snake_case; those ending in _bytes are sizes.
type Counter struct {
	Name  string
	Value int64
}

// Counted is implemented by engines that report counters of their
// internals beyond Stats (the flash engine: segments, cleaning, cache).
type Counted interface {
	Counters() []Counter
}

// Compactor is implemented by engines whose reads of data at rest depend
// on a shape they can be asked to settle (Pebble: the LSM's levels).
type Compactor interface {
	// Compact puts every pair into the shape that reads it cheapest (an
	// LSM's last level), flushing what is in memory first.
	Compact() error
}

// Options configure an engine when it is opened.
type Options struct {
	// Dir is where a durable engine keeps its files. Unused by memory.
	Dir string
	// FS is the file system the engine's files go through; nil means the
	// operating system's (fsys.Default). Tests pass a faultfs.FS to inject
	// disk faults. SQLite's database file itself cannot go through it (see
	// docs/architecture.md).
	FS fsys.FS
	// CapacityBytes is the per-stash capacity; 0 means unlimited. An
	// ephemeral engine evicts to stay within it; a durable engine only
	// reports its size (the commit proxy refuses writes past capacity).
	CapacityBytes int64
	// Ephemeral engines may evict; durable ones never drop an applied write.
	Ephemeral bool
	// Eviction is "lru" or "camp" for ephemeral engines.
	Eviction string
	// Tuning holds engine-specific settings: a flash.Config for the flash
	// engine, a pebble Tuning for pebble; nil means the engine's defaults.
	// Other engines take none.
	Tuning any
}

// RecencyOrdered is implemented by engines that keep their keys in eviction
// order (the memory engine with lru or camp eviction). A storage hierarchy
// reads it to demote the coldest keys of a tier.
type RecencyOrdered interface {
	// Coldest returns up to n keys, coldest (next to be evicted) first, or
	// nil if the engine keeps no such order.
	Coldest(n int) [][]byte
}
