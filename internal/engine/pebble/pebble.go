// Package pebbleengine is a durable storage engine on Pebble
// (github.com/cockroachdb/pebble), CockroachDB's LSM key-value store.
//
// User keys live under the one-byte prefix 'd' and engine metadata under
// 'm', so user keys may be any bytes (0xff-prefixed system keys included)
// without colliding with the metadata. The metadata is one key holding the
// version and the exact live Keys and Bytes counters; Apply writes it in
// the same Pebble batch as the data and commits with pebble.Sync, so a
// batch and its version become durable atomically. To keep the counters
// exact, Apply reads the previous value of every key it sets or clears and
// iterates the pairs a clear-range removes, through an indexed batch that
// sees the batch's own earlier writes. Reads go straight to Pebble: Get
// copies the value out, Scan walks an iterator (a consistent snapshot) in
// either direction.
package pebbleengine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/bloom"

	"github.com/distash/distash/internal/engine"
	"github.com/distash/distash/internal/engine/pebble/guard"
	"github.com/distash/distash/internal/fsys"
	"github.com/distash/distash/internal/kv"
)

// ErrClosed is returned by the methods of a closed engine.
var ErrClosed = errors.New("pebble engine: closed")

const (
	dataPrefix = 'd'
	dataEnd    = 'e' // upper bound of the data key space
)

// metaKey holds the engine state: version, keys, bytes, each a big-endian
// uint64.
var metaKey = []byte("mstate")

const metaLen = 24

// CacheBytes is the default size of the block cache of each engine. At 16
// MiB a stash of 60 MB of records at rest missed the cache on most reads
// (a pread, a block decode and a cache insert each: a fifth of a point
// read's CPU); 64 MiB is half of PostgreSQL's default shared_buffers and
// is allocated only as blocks are read.
const CacheBytes = 64 << 20

// MemtableBytes is Pebble's default memtable size, and MemtableReserve
// the memory of the memtables it holds, which it charges to the block
// cache (so the engine adds it to the cache).
const (
	MemtableBytes   = 4 << 20
	MemtableReserve = 2 * MemtableBytes
)

// Tuning is the pebble engine's engine.Options.Tuning (nil: defaults).
type Tuning struct {
	// CacheBytes is the block cache's size; 0 means CacheBytes.
	CacheBytes int64
}

// Engine is a durable engine.Engine on Pebble. Create one with Open.
type Engine struct {
	db    *pebble.DB
	dir   string
	guard *guard.Guard // Pebble's fatal errors; once set, every call fails

	stopRoom, roomDone chan struct{} // keepBlockRoom's stop and end

	mu   sync.Mutex // serializes Apply and Close
	kbuf []byte     // prefixed-key scratch for Apply, guarded by mu

	version atomic.Int64
	keys    atomic.Int64
	bytes   atomic.Int64
	closed  atomic.Bool
}

var _ engine.Engine = (*Engine)(nil)

// Open opens (creating if needed) the engine stored in opts.Dir and
// restores its version and counters. The engine is durable whatever
// opts.Ephemeral says: it never evicts, and CapacityBytes is only reported
// against by the caller.
func Open(opts engine.Options) (*Engine, error) {
	if opts.Dir == "" {
		return nil, errors.New("pebble engine: Options.Dir is empty")
	}
	fs := fsys.Or(opts.FS)
	// Pebble syncs its directory, not the directory's entry in its parent:
	// without that a crash can take the whole engine with it.
	if err := fs.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("pebble engine: %w", err)
	}
	if err := fsys.SyncDir(fs, fs.PathDir(opts.Dir)); err != nil {
		return nil, fmt.Errorf("pebble engine: %w", err)
	}
	cacheBytes := int64(CacheBytes)
	switch t := opts.Tuning.(type) {
	case nil:
	case Tuning:
		if t.CacheBytes > 0 {
			cacheBytes = t.CacheBytes
		}
	default:
		return nil, fmt.Errorf("pebble engine: engine.Options.Tuning is a %T, want a pebble Tuning", opts.Tuning)
	}
	g := guard.New("pebble engine "+opts.Dir, "github.com/distash/distash/internal/engine/pebble.", nil)
	// Pebble charges its memtables to the block cache (Cache.Reserve): a
	// cache of cacheBytes alone held no blocks at all when cacheBytes was
	// below the memtables' size, which made a small [pool.pebble] cache
	// silently a cache of nothing. The memtables get their own room
	// (keepBlockRoom), so that blocks have cacheBytes.
	cache := pebble.NewCache(cacheBytes + MemtableReserve)
	defer cache.Unref()
	po := &pebble.Options{
		Cache:        cache,
		MemTableSize: MemtableBytes,
		Logger:       g.Logger(),
		FS:           g.FS(fs),
	}
	// Bloom filters on every level: a Get of an absent key reads no data block.
	po.Levels = make([]pebble.LevelOptions, 7)
	for i := range po.Levels {
		po.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
		po.Levels[i].FilterType = pebble.TableFilter
	}
	db, err := openDB(opts.Dir, po, g)
	if err != nil {
		return nil, err
	}
	e := &Engine{db: db, dir: opts.Dir, guard: g, stopRoom: make(chan struct{}), roomDone: make(chan struct{})}
	v, closer, err := db.Get(metaKey)
	switch {
	case errors.Is(err, pebble.ErrNotFound):
	case err != nil:
		db.Close()
		return nil, e.wrap("read metadata", err)
	default:
		if len(v) != metaLen {
			closer.Close()
			db.Close()
			return nil, fmt.Errorf("pebble engine: metadata is %d bytes, want %d", len(v), metaLen)
		}
		e.version.Store(int64(binary.BigEndian.Uint64(v)))
		e.keys.Store(int64(binary.BigEndian.Uint64(v[8:])))
		e.bytes.Store(int64(binary.BigEndian.Uint64(v[16:])))
		closer.Close()
	}
	cache.Ref() // keepBlockRoom's, for its reservation may outlive an abandoned database
	go e.keepBlockRoom(cache)
	return e, nil
}

// keepBlockRoom keeps the block cache's room for blocks at the size
// asked for. The cache has MemtableReserve more, for Pebble's memtables:
// once it has written a few memtables' worth, Pebble holds two of
// MemtableBytes for good (the mutable one, and a flushed one it keeps to
// recycle), but before that its memtables grow from 256 KiB, and a
// cache whose blocks had up to 8 MiB more than asked for made runs of
// the media benchmarks on small caches differ with how much each stash
// had written. So the engine reserves what Pebble's memtables leave of
// MemtableReserve, checked every second, until stopBlockRoom.
func (e *Engine) keepBlockRoom(cache *pebble.Cache) {
	defer close(e.roomDone)
	var release func()
	held := 0
	defer func() {
		if release != nil {
			release()
		}
		cache.Unref()
	}()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		if m, err := e.metrics(); err == nil {
			want := max(0, MemtableReserve-int(m.MemTable.Size+m.MemTable.ZombieSize))
			if want != held {
				if release != nil {
					release()
					release = nil
				}
				if want > 0 {
					release = cache.Reserve(want)
				}
				held = want
			}
		}
		select {
		case <-e.stopRoom:
			return
		case <-t.C:
		}
	}
}

// metrics returns Pebble's metrics, or why it cannot (closed, or failed:
// a panic in Pebble fails the engine rather than the process). Status and
// metrics scrapes poll it; Metrics takes Pebble's lock (see apart).
func (e *Engine) metrics() (*pebble.Metrics, error) {
	var m *pebble.Metrics
	if err := e.apart(func() { m = e.db.Metrics() }); err != nil {
		return nil, err // m is not read: fn may still write it
	}
	return m, nil
}

// apart runs fn, a call into Pebble that takes its database lock
// (Metrics, Compact), in a goroutine of its own and returns when fn does
// or when the engine fails for good, whichever is first. A commit that
// failed for good may hold that lock forever, and the engine can fail
// between the usable check and the call: a status read once hung a test's
// cluster for good that way. fn is then left blocked. A panic in fn fails
// the engine and is apart's error.
func (e *Engine) apart(fn func()) error {
	if err := e.usable(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() {
		var err error
		defer func() { done <- err }()
		defer e.guard.Recover(&err)
		fn()
	}()
	select {
	case err := <-done:
		return err
	case <-e.guard.Failed():
		return e.guard.Err()
	}
}

// stopBlockRoom ends keepBlockRoom, waiting for it unless the database
// is being abandoned (a stuck Pebble may hold it in Metrics).
func (e *Engine) stopBlockRoom(wait bool) {
	close(e.stopRoom)
	if wait {
		<-e.roomDone
	}
}

// dataKey returns 'd'+key, in buf when it is large enough.
func dataKey(buf, key []byte) []byte {
	buf = append(buf[:0], dataPrefix)
	return append(buf, key...)
}

// Get returns a copy of key's value.
func (e *Engine) Get(key []byte) (_ []byte, _ bool, err error) {
	if err := e.usable(); err != nil {
		return nil, false, err
	}
	defer e.guard.Recover(&err)
	var small [64]byte
	v, closer, err := e.db.Get(dataKey(small[:0], key))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, e.wrap("get", err)
	}
	out := append(make([]byte, 0, len(v)), v...)
	closer.Close()
	return out, true, nil
}

// Scan calls fn for the pairs in [begin, end) of a consistent snapshot.
func (e *Engine) Scan(begin, end []byte, reverse bool, fn func(key, value []byte) bool) (err error) {
	if err := e.usable(); err != nil {
		return err
	}
	defer e.guard.Recover(&err)
	lower := dataKey(nil, begin)
	upper := []byte{dataEnd}
	if end != nil {
		upper = dataKey(nil, end)
	}
	if bytes.Compare(lower, upper) >= 0 {
		return nil
	}
	it, err := e.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return e.wrap("scan", err)
	}
	var ok bool
	if reverse {
		ok = it.Last()
	} else {
		ok = it.First()
	}
	for ; ok; ok = step(it, reverse) {
		v, err := it.ValueAndErr()
		if err != nil {
			it.Close()
			return e.wrap("scan", err)
		}
		if !fn(it.Key()[1:], v) {
			break
		}
	}
	if err := it.Close(); err != nil {
		return e.wrap("scan", err)
	}
	return nil
}

func step(it *pebble.Iterator, reverse bool) bool {
	if reverse {
		return it.Prev()
	}
	return it.Next()
}

// Apply writes b and the new version and counters in one Pebble batch,
// synced to stable storage before it returns.
func (e *Engine) Apply(b *engine.Batch) (err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.usable(); err != nil {
		return err
	}
	defer e.guard.Recover(&err)
	pb := e.db.NewIndexedBatch()
	defer pb.Close()
	keys, size := e.keys.Load(), e.bytes.Load()
	pre, err := e.oldLens(b)
	if err != nil {
		return e.wrap("apply", err)
	}
	for i := range b.Writes {
		w := &b.Writes[i]
		if w.IsClearRange() {
			lo, hi := dataKey(nil, w.Key), dataKey(nil, w.End)
			if bytes.Compare(lo, hi) >= 0 {
				continue
			}
			n, sz, err := countRange(pb, lo, hi)
			if err != nil {
				return e.wrap("apply", err)
			}
			if n == 0 {
				continue
			}
			if err := pb.DeleteRange(lo, hi, nil); err != nil {
				return err
			}
			keys -= n
			size -= sz
			continue
		}
		e.kbuf = dataKey(e.kbuf, w.Key)
		var old int
		var found bool
		if pre != nil && pre[i].ok {
			old, found = pre[i].n, pre[i].found
		} else if old, found, err = valueLen(pb, e.kbuf); err != nil {
			return e.wrap("apply", err)
		}
		if w.IsClear() {
			if found {
				if err := pb.Delete(e.kbuf, nil); err != nil {
					return err
				}
				keys--
				size -= int64(len(w.Key) + old)
			}
			continue
		}
		if err := pb.Set(e.kbuf, w.Value, nil); err != nil {
			return err
		}
		if found {
			size += int64(len(w.Value) - old)
		} else {
			keys++
			size += int64(len(w.Key) + len(w.Value))
		}
	}
	var meta [metaLen]byte
	binary.BigEndian.PutUint64(meta[:], uint64(b.Version))
	binary.BigEndian.PutUint64(meta[8:], uint64(keys))
	binary.BigEndian.PutUint64(meta[16:], uint64(size))
	if err := pb.Set(metaKey, meta[:], nil); err != nil {
		return err
	}
	if err := pb.Commit(pebble.Sync); err != nil {
		// Pebble reports a failed WAL write or sync through Fatalf (the
		// guard turns it into a panic recovered above); an error here is
		// one all the same: nothing of this batch may be taken as durable.
		return e.guard.Fail(e.wrap("commit", err))
	}
	e.version.Store(int64(b.Version))
	e.keys.Store(keys)
	e.bytes.Store(size)
	return nil
}

// valueLen returns the length of the value of the prefixed key k as seen
// by the indexed batch pb.
func valueLen(pb *pebble.Batch, k []byte) (int, bool, error) {
	v, closer, err := pb.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	n := len(v)
	closer.Close()
	return n, true, nil
}

// oldLen is the length of a key's value before a batch.
type oldLen struct {
	n         int
	found, ok bool // ok: read (else Apply reads it through the batch)
}

// oldLenReaders bounds the concurrent reads of oldLens.
const oldLenReaders = 8

// oldLens reads the current value length of each point write of b that
// is the first write of its key in b, from the database, several at a
// time; nil when b holds a clear-range (which only the indexed batch sees
// applied to later keys) or fewer than two writes. Apply reads them one
// after another otherwise: on a slow disk a stash's flush of a few
// thousand keys then took seconds per thousand, and its durability lag
// grew a second per second. Called with e.mu held, so no other Apply
// changes the values between these reads and the batch's commit.
func (e *Engine) oldLens(b *engine.Batch) ([]oldLen, error) {
	if len(b.Writes) < 2 {
		return nil, nil
	}
	first := make(map[string]bool, len(b.Writes))
	var idx []int
	for i := range b.Writes {
		w := &b.Writes[i]
		if w.IsClearRange() {
			return nil, nil
		}
		if !first[string(w.Key)] {
			first[string(w.Key)] = true
			idx = append(idx, i)
		}
	}
	lens := make([]oldLen, len(b.Writes))
	var (
		wg    sync.WaitGroup
		next  atomic.Int64
		errMu sync.Mutex
		ferr  error
	)
	for range min(oldLenReaders, len(idx)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var k []byte
			for {
				j := int(next.Add(1)) - 1
				if j >= len(idx) {
					return
				}
				i := idx[j]
				k = dataKey(k, b.Writes[i].Key)
				if err := e.readLen(k, &lens[i]); err != nil {
					errMu.Lock()
					if ferr == nil {
						ferr = err
					}
					errMu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	return lens, ferr
}

// readLen reads the length of the prefixed key k's value into l (a
// goroutine of oldLens: Pebble's panics are recovered here).
func (e *Engine) readLen(k []byte, l *oldLen) (err error) {
	defer e.guard.Recover(&err)
	v, closer, err := e.db.Get(k)
	switch {
	case errors.Is(err, pebble.ErrNotFound):
		*l = oldLen{ok: true}
		return nil
	case err != nil:
		return err
	}
	*l = oldLen{n: len(v), found: true, ok: true}
	return closer.Close()
}

// countRange returns the number of pairs in [lo, hi) (prefixed keys) and
// their user key and value bytes, as seen by the indexed batch pb.
func countRange(pb *pebble.Batch, lo, hi []byte) (n, size int64, err error) {
	it, err := pb.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return 0, 0, err
	}
	for ok := it.First(); ok; ok = it.Next() {
		n++
		lv := it.LazyValue()
		size += int64(len(it.Key()) - 1 + lv.Len())
	}
	return n, size, it.Close()
}

// Version returns the version of the last Apply.
func (e *Engine) Version() kv.Version { return kv.Version(e.version.Load()) }

// Stats returns the live pair count and bytes; Evictions is always 0.
func (e *Engine) Stats() engine.Stats {
	st := engine.Stats{Keys: e.keys.Load(), Bytes: e.bytes.Load()}
	if m, err := e.metrics(); err == nil {
		// Pebble counts the data-block reads its Bloom filters avoided.
		st.FilterNegatives = m.Filter.Hits
	}
	return st
}

// Counters implements engine.Counted with the figures that say what a
// read of data at rest costs: the LSM's read amplification (sublevels in
// L0 plus non-empty levels below), L0's files, the compaction debt, and
// the block cache's hits and misses (a miss reads the device).
func (e *Engine) Counters() []engine.Counter {
	m, err := e.metrics()
	if err != nil {
		return nil
	}
	return []engine.Counter{
		{Name: "read_amp", Value: int64(m.ReadAmp())},
		{Name: "l0_files", Value: m.Levels[0].NumFiles},
		{Name: "sstables", Value: m.Total().NumFiles},
		{Name: "compaction_debt_bytes", Value: int64(m.Compact.EstimatedDebt)},
		{Name: "compactions", Value: m.Compact.Count},
		{Name: "memtable_bytes", Value: int64(m.MemTable.Size)},
		{Name: "block_cache_bytes", Value: m.BlockCache.Size},
		{Name: "block_cache_hits", Value: m.BlockCache.Hits},
		{Name: "block_cache_misses", Value: m.BlockCache.Misses},
	}
}

// Compact implements engine.Compactor: it flushes the memtable and
// compacts every table into the last level, so that a read of a key at
// rest consults one table.
func (e *Engine) Compact() error {
	var cerr error
	if err := e.apart(func() { cerr = e.db.Compact([]byte{0}, []byte{0xff, 0xff}, true) }); err != nil {
		return err // cerr is not read: fn may still write it
	}
	if cerr != nil {
		return e.wrap("compact", cerr)
	}
	return nil
}

// Close flushes nothing extra (every Apply is already synced) and closes
// the database. A second Close returns nil.
// Close must not run concurrently with other methods; calls made after it
// return ErrClosed.
func (e *Engine) Close() (err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed.Swap(true) {
		return nil
	}
	if ferr := e.guard.Err(); ferr != nil {
		e.stopBlockRoom(false)
		// Pebble's state after a fatal error is not to be trusted (its
		// commit pipeline may hold a lock): close it if it lets us, in the
		// background, and report the failure.
		e.guard.Abandon(e.db.Close)
		return ferr
	}
	e.stopBlockRoom(true)
	defer e.guard.Recover(&err)
	return e.db.Close()
}

// Abandon gives the engine up as a killed process would, for crash tests
// that go on in the same process: its database and goroutines may no
// longer create, rename or remove files, a fatal error in them only ends
// them, and the database is closed in the background as far as it can be.
func (e *Engine) Abandon() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed.Swap(true) {
		return
	}
	e.stopBlockRoom(false)
	e.guard.Abandon(e.db.Close)
}

// usable returns the error a call must fail with: ErrClosed, or the fatal
// error that failed the engine for good.
func (e *Engine) usable() error {
	if e.closed.Load() {
		return ErrClosed
	}
	return e.guard.Err()
}

// openDB opens Pebble in dir; damage it finds is a *fsys.DamageError.
func openDB(dir string, po *pebble.Options, g *guard.Guard) (db *pebble.DB, err error) {
	defer g.Recover(&err)
	db, err = pebble.Open(dir, po)
	if err != nil {
		return nil, wrapErr(dir, "open", err)
	}
	return db, nil
}

func (e *Engine) wrap(op string, err error) error { return wrapErr(e.dir, op, err) }

// wrapErr names the engine and the operation, and turns what Pebble says
// is damage into a *fsys.DamageError naming the file: data that fails its
// checksum (pebble.ErrCorruption), or a file the MANIFEST lists that is
// not there.
func wrapErr(dir, op string, err error) error {
	if errors.Is(err, fsys.ErrDamaged) {
		return err
	}
	if de := guard.Damage(dir, "pebble engine "+op, err); de != nil {
		return de
	}
	return fmt.Errorf("pebble engine %s: %s: %w", dir, op, err)
}
