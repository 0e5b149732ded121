// Package memory is an in-memory storage engine.
//
// Pairs live in a B-tree ordered by key (github.com/google/btree), so Get,
// set and clear are O(log n) and Scan walks the tree in either direction.
// Scan iterates a copy-on-write clone of the tree taken in O(1), so it sees
// a consistent snapshot and calls fn without any lock held. Stored keys and
// values are private copies that are never modified in place: an overwrite
// replaces the tree item, which is what keeps snapshots and the slices
// handed to fn stable.
//
// An ephemeral engine with a capacity evicts after every write so that its
// resident bytes never exceed the capacity once Apply returns. Resident
// bytes are the live key and value bytes plus a fixed overhead per pair
// (Config.EntryOverhead, about 200 bytes: the pair's item in the key tree,
// its eviction entry, allocation rounding), because for small pairs the
// overhead is most of the memory: counting key and value bytes only, a
// 64 MiB cache would hold 8 million 8-byte pairs in about 1.9 GB. Stats.Bytes still reports
// key and value bytes; Counters reports the resident bytes.
//
// The eviction order is kept by a policy: "lru" (an intrusive list, O(1)
// per reference) or "camp" (GreedyDual-Size priorities in a B-tree). Both
// Get hits and writes count as references. A durable memory engine
// (Ephemeral false) never evicts; it only reports its size.
package memory

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/google/btree"

	"github.com/distash/distash/internal/engine"
	"github.com/distash/distash/internal/kv"
)

// ErrClosed is returned by the methods of a closed engine.
var ErrClosed = errors.New("memory engine: closed")

// Eviction policy names accepted in engine.Options.Eviction.
const (
	EvictionLRU  = "lru"
	EvictionCAMP = "camp"
)

// Config holds the memory engine's settings, passed as engine.Options.Tuning
// (a Config or a *Config; nil means the defaults).
type Config struct {
	// EntryOverhead is the number of bytes an ephemeral engine counts against
	// its capacity for each pair on top of its key and value. 0 means the
	// measured overhead of the engine's structures (DefaultEntryOverhead,
	// more with camp eviction); a negative value counts key and value bytes
	// only, so the capacity no longer bounds the engine's memory (the
	// conformance suite's exact capacity checks use it).
	EntryOverhead int64
}

// DefaultEntryOverhead is the memory one pair costs besides its key and
// value bytes with lru eviction, measured with 10-byte keys on amd64: its
// item in the key tree (56 bytes, times up to two since B-tree nodes run
// between half full and full, and keys inserted in order, as bulk loads do,
// leave them half full), its entry (96 bytes with the value's slice), its
// slot in the hash index that serves Get (24 bytes, times up to two as the
// map grows by doubling) and the rounding of its key and value buffer.
// TestCapacityBoundsMemory measured 291–310 bytes per pair inserted in key
// order (224 before the hash index: the index costs about 70 bytes a pair,
// 30% of a tiny pair's footprint and under 7% of a 1 KB one's, for a Get
// that is one hash lookup instead of about twenty key comparisons, each a
// likely cache miss, down a B-tree of a quarter million keys).
const DefaultEntryOverhead = 312

// campEntryOverhead is what camp eviction adds per pair: its slot in the
// priority tree (measured 20 bytes).
const campEntryOverhead = 24

// entry is the eviction bookkeeping of one stored pair.
type entry struct {
	key     []byte
	value   []byte // the current value (the tree's item has it too), for Get
	size    int64  // key and value bytes
	cost    uint32
	tracked bool // in the policy's order (a buffered reference may outlive that)

	prev, next *entry // lru list links

	h   float64 // camp priority
	seq uint64  // camp tie breaker
}

// item is what the key tree holds: the pair itself (the key inline for
// cache-friendly comparisons) and its entry. Items are immutable, which is
// what makes tree clones snapshots.
type item struct {
	key, value []byte
	e          *entry
}

func lessItem(a, b item) bool { return bytes.Compare(a.key, b.key) < 0 }

// Engine is an in-memory engine.Engine. Create one with Open.
type Engine struct {
	mu        sync.RWMutex
	tree      *btree.BTreeG[item]
	index     map[string]*entry // the tree's pairs by key: a Get is one hash lookup
	pol       policy            // nil when no eviction order is kept
	refs      *refs             // references not yet replayed into pol (nil with pol)
	refBuf    []ref             // drain's scratch space, used under mu
	evict     bool              // evict to stay within capacity
	capacity  int64
	overhead  int64 // counted per pair against capacity, besides key and value
	keys      int64
	bytes     int64 // key and value bytes of live pairs
	evictions int64
	closed    bool

	version atomic.Int64
}

var _ engine.Engine = (*Engine)(nil)

// Open returns a new, empty engine. opts.Dir is ignored; opts.Tuning is nil
// or a Config. An eviction order is kept when opts.Eviction is set or the
// engine is ephemeral ("lru" by default); the engine evicts only when it is
// ephemeral with a positive capacity.
func Open(opts engine.Options) (*Engine, error) {
	var cfg Config
	switch t := opts.Tuning.(type) {
	case nil:
	case Config:
		cfg = t
	case *Config:
		if t != nil {
			cfg = *t
		}
	default:
		return nil, fmt.Errorf("memory engine: Tuning of type %T, want memory.Config", opts.Tuning)
	}
	e := &Engine{
		tree:     btree.NewG(32, lessItem),
		index:    map[string]*entry{},
		capacity: opts.CapacityBytes,
		evict:    opts.Ephemeral && opts.CapacityBytes > 0,
		overhead: cfg.EntryOverhead,
	}
	if e.overhead == 0 {
		e.overhead = DefaultEntryOverhead
		if opts.Eviction == EvictionCAMP {
			e.overhead += campEntryOverhead
		}
	}
	e.overhead = max(e.overhead, 0)
	switch opts.Eviction {
	case EvictionLRU:
		e.pol = newLRU()
	case EvictionCAMP:
		e.pol = newCAMP()
	case "":
		if opts.Ephemeral {
			e.pol = newLRU()
		}
	default:
		return nil, fmt.Errorf("memory engine: unknown eviction policy %q (want %q or %q)",
			opts.Eviction, EvictionLRU, EvictionCAMP)
	}
	if e.pol != nil {
		e.refs = newRefs()
	}
	return e, nil
}

// Get returns a copy of key's value. A hit counts as a reference for the
// eviction order; it takes only the read lock (see refs).
func (e *Engine) Get(key []byte) ([]byte, bool, error) { return e.get(key, true) }

// GetShared is Get without the copy (engine.SharedGetter): stored values
// are never modified in place.
func (e *Engine) GetShared(key []byte) ([]byte, bool, error) { return e.lookup(key, true) }

// Peek is Get without counting a reference in the eviction order
// (engine.Peeker).
func (e *Engine) Peek(key []byte) ([]byte, bool, error) { return e.get(key, false) }

func (e *Engine) get(key []byte, reference bool) ([]byte, bool, error) {
	value, ok, err := e.lookup(key, reference)
	if !ok || err != nil {
		return nil, false, err
	}
	// The value's bytes are never modified, so copying them after unlocking
	// is safe.
	return append(make([]byte, 0, len(value)), value...), true, nil
}

// lookup returns key's stored value itself (not a copy).
func (e *Engine) lookup(key []byte, reference bool) ([]byte, bool, error) {
	e.mu.RLock()
	if e.closed {
		e.mu.RUnlock()
		return nil, false, ErrClosed
	}
	ent, ok := e.index[string(key)]
	var value []byte
	if ok {
		value = ent.value
	}
	e.mu.RUnlock()
	if ok && reference && e.refs != nil && e.refs.record(ent) && e.mu.TryLock() {
		// This reader's stripe is full and no one holds the lock: replay
		// the buffered references now rather than drop the next ones.
		e.drainRefs()
		e.mu.Unlock()
	}
	return value, ok, nil
}

// Scan calls fn for the pairs in [begin, end) of a snapshot taken when
// Scan starts (an O(1) copy-on-write clone of the key tree), so the scan
// sees every Apply entirely or not at all and fn may call back into the
// engine. A scan does not count as a reference for the eviction order.
func (e *Engine) Scan(begin, end []byte, reverse bool, fn func(key, value []byte) bool) error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return ErrClosed
	}
	snap := e.tree.Clone()
	e.mu.Unlock()
	if end != nil && bytes.Compare(begin, end) >= 0 {
		return nil
	}
	if !reverse {
		snap.AscendGreaterOrEqual(item{key: begin}, func(it item) bool {
			if end != nil && bytes.Compare(it.key, end) >= 0 {
				return false
			}
			return fn(it.key, it.value)
		})
		return nil
	}
	visit := func(it item) bool {
		if bytes.Compare(it.key, begin) < 0 {
			return false
		}
		return fn(it.key, it.value)
	}
	if end == nil {
		snap.Descend(visit)
		return nil
	}
	snap.DescendLessOrEqual(item{key: end}, func(it item) bool {
		if bytes.Equal(it.key, end) {
			return true
		}
		return visit(it)
	})
	return nil
}

// Snapshot returns the engine's version and a function that walks its
// pairs as of that version, in key order, with each pair's cost (for a
// local log's snapshot file: package locallog). Both come from one O(1)
// clone of the key tree taken under the lock, so the walk sees exactly the
// state at that version however the engine changes meanwhile; walk may run
// in another goroutine and stops when fn returns false. The slices passed
// to fn must not be modified. A walk does not count as a reference.
func (e *Engine) Snapshot() (kv.Version, func(fn func(key, value []byte, cost uint32) bool)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return e.Version(), func(func([]byte, []byte, uint32) bool) {}
	}
	snap := e.tree.Clone()
	return e.Version(), func(fn func(key, value []byte, cost uint32) bool) {
		// An entry's cost is rewritten in place under the lock when its
		// key is set again, so costs are read under the read lock, a
		// chunk of pairs at a time (a later write's cost is as good a
		// hint for eviction as the snapshot's).
		const chunk = 256
		buf := make([]item, 0, chunk)
		costs := make([]uint32, chunk)
		flush := func() bool {
			e.mu.RLock()
			for i, it := range buf {
				costs[i] = it.e.cost
			}
			e.mu.RUnlock()
			for i, it := range buf {
				if !fn(it.key, it.value, costs[i]) {
					return false
				}
			}
			buf = buf[:0]
			return true
		}
		stopped := false
		snap.Ascend(func(it item) bool {
			buf = append(buf, it)
			if len(buf) == chunk && !flush() {
				stopped = true
				return false
			}
			return true
		})
		if !stopped && len(buf) > 0 {
			flush()
		}
	}
}

// Apply applies b atomically: readers see all of it or none of it. An
// ephemeral engine with a capacity evicts after each write as needed.
func (e *Engine) Apply(b *engine.Batch) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return ErrClosed
	}
	// Evictions below must see the reads made since the last write.
	e.drainRefs()
	for i := range b.Writes {
		w := &b.Writes[i]
		switch {
		case w.IsClearRange():
			e.clearRange(w.Key, w.End)
		case w.IsClear():
			if ent, ok := e.index[string(w.Key)]; ok {
				e.drop(ent)
			}
		default:
			e.set(w.Key, w.Value, w.Cost)
		}
	}
	e.version.Store(int64(b.Version))
	return nil
}

// drainRefs replays the references buffered by readers into the eviction
// order. The caller holds e.mu exclusively.
func (e *Engine) drainRefs() {
	if e.refs != nil && !e.closed {
		e.refBuf = e.refs.drain(e.pol, e.refBuf)
	}
}

// drop removes e from the tree, the policy and the counters.
func (e *Engine) drop(ent *entry) {
	e.tree.Delete(item{key: ent.key})
	delete(e.index, string(ent.key))
	if e.pol != nil {
		e.pol.remove(ent)
	}
	e.keys--
	e.bytes -= ent.size
}

// resident is what the capacity bounds: key and value bytes plus the
// overhead of every pair.
func (e *Engine) resident() int64 { return e.bytes + e.keys*e.overhead }

func (e *Engine) set(key, value []byte, cost uint32) {
	size := int64(len(key) + len(value))
	ent, exists := e.index[string(key)]
	if e.evict && size+e.overhead > e.capacity {
		// The pair can never fit: drop it (and the value it replaces).
		if exists {
			e.drop(ent)
		}
		e.evictions++
		return
	}
	if exists {
		if e.pol != nil {
			e.pol.remove(ent)
		}
		e.bytes += size - ent.size
		ent.size = size
		ent.cost = cost
		ent.value = append(make([]byte, 0, len(value)), value...)
		e.tree.ReplaceOrInsert(item{key: ent.key, value: ent.value, e: ent})
		if e.pol != nil {
			e.pol.add(ent)
		}
	} else {
		buf := make([]byte, len(key)+len(value))
		copy(buf, key)
		copy(buf[len(key):], value)
		ent = &entry{key: buf[:len(key):len(key)], value: buf[len(key):], size: size, cost: cost}
		e.tree.ReplaceOrInsert(item{key: ent.key, value: ent.value, e: ent})
		e.index[keyString(ent.key)] = ent
		if e.pol != nil {
			e.pol.add(ent)
		}
		e.keys++
		e.bytes += size
	}
	if e.evict {
		for e.resident() > e.capacity {
			v := e.pol.evict()
			if v == nil {
				break
			}
			e.tree.Delete(item{key: v.key})
			delete(e.index, string(v.key))
			e.keys--
			e.bytes -= v.size
			e.evictions++
		}
	}
}

// keyString is the index's key for a stored key: a string sharing its
// bytes, which are never modified (no second copy of every key).
func keyString(key []byte) string {
	if len(key) == 0 {
		return ""
	}
	return unsafe.String(&key[0], len(key))
}

func (e *Engine) clearRange(begin, end []byte) {
	if bytes.Compare(begin, end) >= 0 {
		return
	}
	var victims []*entry
	e.tree.AscendRange(item{key: begin}, item{key: end}, func(it item) bool {
		victims = append(victims, it.e)
		return true
	})
	for _, v := range victims {
		e.drop(v)
	}
}

// Version returns the version of the last Apply.
func (e *Engine) Version() kv.Version { return kv.Version(e.version.Load()) }

// Stats returns the live pair count, their key and value bytes and the
// evictions so far.
func (e *Engine) Stats() engine.Stats {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return engine.Stats{Keys: e.keys, Bytes: e.bytes, Evictions: e.evictions}
}

var _ engine.Counted = (*Engine)(nil)

// Counters reports resident_bytes, what an ephemeral engine's capacity
// bounds (Stats.Bytes plus the per-pair overhead), and the overhead counted
// per pair.
func (e *Engine) Counters() []engine.Counter {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return []engine.Counter{
		{Name: "resident_bytes", Value: e.resident()},
		{Name: "entry_overhead_bytes", Value: e.overhead},
	}
}

// Coldest returns copies of up to n keys in eviction order, coldest first,
// for a storage-hierarchy migrator. It returns nil when the engine keeps no
// eviction order (durable with no Eviction option). It does not count as a
// reference.
func (e *Engine) Coldest(n int) [][]byte {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.pol == nil || e.closed || n <= 0 {
		return nil
	}
	e.drainRefs()
	out := make([][]byte, 0, min(n, int(e.keys)))
	e.pol.coldest(func(ent *entry) bool {
		out = append(out, append([]byte(nil), ent.key...))
		return len(out) < n
	})
	return out
}

// Close drops the engine's data. Later calls return ErrClosed; a second
// Close returns nil.
func (e *Engine) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.closed = true
	e.tree = nil
	e.index = nil
	return nil
}
