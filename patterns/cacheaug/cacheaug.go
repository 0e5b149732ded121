package cacheaug

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/distash/distash"
	"github.com/distash/distash/patterns/internal/layout"
)

// Policy is how a write maintains the cached entries that depend on the
// data it changes.
type Policy int

const (
	// WriteAround deletes every dependent entry (Figure 3).
	WriteAround Policy = iota + 1
	// WriteThrough recomputes and rewrites every dependent entry (Figure 4).
	WriteThrough
	// ReadModifyWrite updates every dependent entry incrementally with its
	// family's Apply, falling back to recomputation.
	ReadModifyWrite
)

// String names the policy: "write-around", "write-through", "read-modify-write".
func (p Policy) String() string {
	switch p {
	case WriteAround:
		return "write-around"
	case WriteThrough:
		return "write-through"
	case ReadModifyWrite:
		return "read-modify-write"
	}
	return fmt.Sprintf("Policy(%d)", int(p))
}

// ErrRecompute, returned by a Family's Apply, asks for the entry to be
// recomputed from the data instead.
var ErrRecompute = errors.New("cacheaug: recompute")

// Change is one change of a data key, given to Family.Apply.
type Change struct {
	// Key is the data key.
	Key []byte
	// Old is its value before the change, nil if absent.
	Old []byte
	// New is its value after the change, nil if deleted.
	New []byte
}

// Family is a kind of query whose results are cached.
type Family struct {
	// Name identifies the family; not empty. Part of every cache key.
	Name string
	// Compute computes the result of the query with args, reading data
	// only through r. It may run several times (transactions retry) and
	// must be a function of the data it reads and args. Required.
	Compute func(r *Reader, args []byte) ([]byte, error)
	// Apply, optional, updates a cached result for the ReadModifyWrite
	// policy: the new result after ch, from the cached one. It returns
	// ErrRecompute when it cannot (e.g. the change alters which keys the
	// query reads).
	Apply func(cached, args []byte, ch Change) ([]byte, error)
}

// Query names one cached result: a family applied to args.
type Query struct {
	// Family is the name of a registered Family.
	Family string
	// Args are the query's parameters, passed to Compute and Apply.
	Args []byte
}

// Backend holds the data. Its reads must add read conflicts to tr (as
// Tx.Get does), so that a fill conflicts with a concurrent write of what it
// read.
type Backend interface {
	// GetTx reads key in tr; nil when absent.
	GetTx(tr *distash.Tx, key []byte) ([]byte, error)
	// PutTx writes key in tr.
	PutTx(tr *distash.Tx, key, value []byte) error
	// DeleteTx removes key in tr.
	DeleteTx(tr *distash.Tx, key []byte) error
}

// PoolBackend keeps each data key k in a pool at prefix | s(k) | k, where
// s(k) is a spread byte from a stable hash of k.
type PoolBackend struct {
	pool   *distash.Pool
	prefix []byte
}

// NewPoolBackend returns a Backend over pool.
func NewPoolBackend(pool *distash.Pool) *PoolBackend {
	return &PoolBackend{pool: pool, prefix: pool.Prefix()}
}

// Pool is the backend's pool.
func (b *PoolBackend) Pool() *distash.Pool { return b.pool }

// Key is where data key k is stored.
func (b *PoolBackend) Key(k []byte) []byte { return layout.Key(b.prefix, layout.SpreadByte(k), "", k) }

// GetTx reads k with a read conflict.
func (b *PoolBackend) GetTx(tr *distash.Tx, k []byte) ([]byte, error) { return tr.Get(b.Key(k)) }

// GetMultiTx reads several keys with read conflicts, one round per stash.
func (b *PoolBackend) GetMultiTx(tr *distash.Tx, keys [][]byte) ([][]byte, error) {
	phys := make([][]byte, len(keys))
	for i, k := range keys {
		phys[i] = b.Key(k)
	}
	return tr.GetMulti(phys)
}

// PutTx writes k.
func (b *PoolBackend) PutTx(tr *distash.Tx, k, v []byte) error {
	tr.Set(b.Key(k), v)
	return nil
}

// DeleteTx clears k.
func (b *PoolBackend) DeleteTx(tr *distash.Tx, k []byte) error {
	tr.Clear(b.Key(k))
	return nil
}

// multiGetter is a Backend that reads several keys in one round.
type multiGetter interface {
	GetMultiTx(tr *distash.Tx, keys [][]byte) ([][]byte, error)
}

// DefaultNamespace is the default Options.Namespace.
const DefaultNamespace = "ca/"

// maxValueBytes is DiStash's value limit: larger results are not cached.
const maxValueBytes = 100_000

// Options configure a Store.
type Options struct {
	// CachePools names the pools that cache query results, fastest first
	// (by medium: dram < nvm < ssd < hdd). At least one.
	CachePools []string
	// DataPool names the pool of the data (a PoolBackend). Exactly one of
	// DataPool and Backend.
	DataPool string
	// Backend holds the data instead of DataPool.
	Backend Backend
	// IndexPool names the durable pool of the dependency index. Default:
	// DataPool. Required with Backend.
	IndexPool string
	// Namespace separates this store's keys from other data in the same
	// pools. Default "ca/".
	Namespace string
	// Families are the kinds of queries the store caches.
	Families []Family
}

// Store is a cache-augmented data store. It is safe for concurrent use;
// Stores in several processes over the same pools and namespace cooperate
// through their transactions.
type Store struct {
	db       *distash.DB
	caches   []*distash.Pool
	cachePfx [][]byte
	index    *distash.Pool
	indexPfx []byte
	backend  Backend
	ns       string
	families map[string]*Family

	hits        []atomic.Int64
	misses      atomic.Int64
	invalidated atomic.Int64
	refreshed   atomic.Int64
	applied     atomic.Int64
}

// New checks opts against the cluster's pools and returns a Store. It fails
// with a descriptive error for an unknown pool (wrapping
// distash.ErrUnknownPool), cache pools not fastest first or named twice, an
// ephemeral index pool, and bad families.
func New(db *distash.DB, opts Options) (*Store, error) {
	if db == nil {
		return nil, errors.New("cacheaug: nil DB")
	}
	s := &Store{db: db, ns: opts.Namespace, families: map[string]*Family{}}
	if s.ns == "" {
		s.ns = DefaultNamespace
	}
	if len(opts.CachePools) == 0 {
		return nil, errors.New("cacheaug: no CachePools")
	}
	seen := map[string]bool{}
	for i, name := range opts.CachePools {
		if seen[name] {
			return nil, fmt.Errorf("cacheaug: cache pool %q named twice", name)
		}
		seen[name] = true
		p, err := db.Pool(name)
		if err != nil {
			return nil, fmt.Errorf("cacheaug: cache pool %d: %w", i, err)
		}
		if i > 0 {
			prev := s.caches[i-1]
			rp, _ := layout.MediumRank(prev.Medium())
			rc, ok := layout.MediumRank(p.Medium())
			if !ok || rc < rp {
				return nil, fmt.Errorf("cacheaug: cache pools must be ordered fastest first (%s): %q (%s) is slower than %q (%s)",
					layout.MediaOrder, prev.Name(), prev.Medium(), p.Name(), p.Medium())
			}
		}
		s.caches = append(s.caches, p)
		s.cachePfx = append(s.cachePfx, p.Prefix())
	}
	switch {
	case opts.DataPool != "" && opts.Backend != nil:
		return nil, errors.New("cacheaug: give DataPool or Backend, not both")
	case opts.DataPool != "":
		p, err := db.Pool(opts.DataPool)
		if err != nil {
			return nil, fmt.Errorf("cacheaug: data pool: %w", err)
		}
		s.backend = NewPoolBackend(p)
		if opts.IndexPool == "" {
			opts.IndexPool = opts.DataPool
		}
	case opts.Backend != nil:
		s.backend = opts.Backend
		if opts.IndexPool == "" {
			return nil, errors.New("cacheaug: IndexPool is required with a Backend")
		}
	default:
		return nil, errors.New("cacheaug: no DataPool or Backend")
	}
	idx, err := db.Pool(opts.IndexPool)
	if err != nil {
		return nil, fmt.Errorf("cacheaug: index pool: %w", err)
	}
	if !idx.Durable() {
		return nil, fmt.Errorf("cacheaug: the dependency index needs a durable pool, but %q is %s: a dependency record evicted from one replica would let a write miss a cached entry",
			idx.Name(), map[bool]string{true: "ephemeral", false: "not durable"}[idx.Ephemeral()])
	}
	s.index, s.indexPfx = idx, idx.Prefix()
	for i := range opts.Families {
		f := opts.Families[i]
		switch {
		case f.Name == "":
			return nil, fmt.Errorf("cacheaug: family %d has no name", i)
		case f.Compute == nil:
			return nil, fmt.Errorf("cacheaug: family %q has no Compute", f.Name)
		case s.families[f.Name] != nil:
			return nil, fmt.Errorf("cacheaug: family %q defined twice", f.Name)
		}
		s.families[f.Name] = &f
	}
	s.hits = make([]atomic.Int64, len(s.caches))
	return s, nil
}

// CachePools are the cache pools, fastest first.
func (s *Store) CachePools() []*distash.Pool { return append([]*distash.Pool(nil), s.caches...) }

// IndexPool is the pool of the dependency index.
func (s *Store) IndexPool() *distash.Pool { return s.index }

// Backend is where the data live.
func (s *Store) Backend() Backend { return s.backend }

// Keys.

func cacheKey(q Query) []byte {
	return append(layout.AppendBytes(nil, []byte(q.Family)), q.Args...)
}

func parseCacheKey(ck []byte) (Query, error) {
	fam, args, err := layout.ReadBytes(ck)
	if err != nil {
		return Query{}, err
	}
	return Query{Family: string(fam), Args: args}, nil
}

func (s *Store) entryKey(level int, ck []byte) []byte {
	return layout.Key(s.cachePfx[level], layout.SpreadByte(ck), s.ns, []byte("e/"), ck)
}

func (s *Store) depsKey(ck []byte) []byte {
	return layout.Key(s.indexPfx, layout.SpreadByte(ck), s.ns, []byte("m/"), ck)
}

func (s *Store) depRangePrefix(dk []byte) []byte {
	return layout.Key(s.indexPfx, layout.SpreadByte(dk), s.ns, []byte("d/"), layout.AppendBytes(nil, dk))
}

func (s *Store) depKey(dk, ck []byte) []byte { return append(s.depRangePrefix(dk), ck...) }

// depMark is the value of a dependency record. Not empty: a stash flushes
// an empty value to its engine as a clear (a server bug), losing the record.
var depMark = []byte{1}

const depsFormat = 1

func encodeDeps(deps [][]byte) []byte {
	out := []byte{depsFormat}
	out = binary.AppendUvarint(out, uint64(len(deps)))
	for _, d := range deps {
		out = layout.AppendBytes(out, d)
	}
	return out
}

func decodeDeps(b []byte) ([][]byte, error) {
	if len(b) == 0 || b[0] != depsFormat {
		return nil, errors.New("cacheaug: malformed dependency list")
	}
	b = b[1:]
	n, w := binary.Uvarint(b)
	if w <= 0 || n > uint64(len(b)) {
		return nil, errors.New("cacheaug: malformed dependency list")
	}
	b = b[w:]
	out := make([][]byte, 0, n)
	for i := uint64(0); i < n; i++ {
		d, rest, err := layout.ReadBytes(b)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
		b = rest
	}
	return out, nil
}

// Reader reads data for a Family's Compute and records what it read as
// dependencies. It is safe for concurrent use by one computation.
type Reader struct {
	tr      *distash.Tx
	backend Backend

	mu   sync.Mutex
	deps map[string]bool // Protected by mu.
	list [][]byte        // Protected by mu. In first-read order.
}

func newReader(tr *distash.Tx, b Backend) *Reader {
	return &Reader{tr: tr, backend: b, deps: map[string]bool{}}
}

func (r *Reader) record(k []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.deps[string(k)] {
		r.deps[string(k)] = true
		r.list = append(r.list, append([]byte(nil), k...))
	}
}

// Get reads data key k (nil if absent) and records it as a dependency.
func (r *Reader) Get(k []byte) ([]byte, error) {
	r.record(k)
	return r.backend.GetTx(r.tr, k)
}

// GetMulti reads several data keys and records them as dependencies.
func (r *Reader) GetMulti(keys [][]byte) ([][]byte, error) {
	for _, k := range keys {
		r.record(k)
	}
	if m, ok := r.backend.(multiGetter); ok {
		return m.GetMultiTx(r.tr, keys)
	}
	out := make([][]byte, len(keys))
	for i, k := range keys {
		v, err := r.backend.GetTx(r.tr, k)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

func (r *Reader) dependencies() [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][]byte(nil), r.list...)
}

// compute runs q's family in tr and returns the result and its dependencies.
func (s *Store) compute(tr *distash.Tx, q Query) ([]byte, [][]byte, error) {
	f := s.families[q.Family]
	if f == nil {
		return nil, nil, fmt.Errorf("cacheaug: unknown family %q", q.Family)
	}
	r := newReader(tr, s.backend)
	v, err := f.Compute(r, q.Args)
	if err != nil {
		return nil, nil, err
	}
	return v, r.dependencies(), nil
}

func cost(deps [][]byte) uint32 { return uint32(max(1, len(deps))) }

// record writes the dependency records of ck: deps replaces oldDeps.
func (s *Store) record(tr *distash.Tx, ck []byte, oldDeps, deps [][]byte) {
	keep := map[string]bool{}
	for _, d := range deps {
		keep[string(d)] = true
	}
	for _, d := range oldDeps {
		if !keep[string(d)] {
			tr.Clear(s.depKey(d, ck))
		}
	}
	for _, d := range deps {
		tr.Set(s.depKey(d, ck), depMark)
	}
	tr.Set(s.depsKey(ck), encodeDeps(deps))
}

// readDeps reads the dependency list of ck (nil when none), with a read conflict.
func (s *Store) readDeps(tr *distash.Tx, ck []byte) ([][]byte, error) {
	b, err := tr.Get(s.depsKey(ck))
	if err != nil || b == nil {
		return nil, err
	}
	return decodeDeps(b)
}

// Get returns the result of q: from the first cache pool holding it, or
// computed from the data and cached, in one transaction (read-through).
func (s *Store) Get(ctx context.Context, q Query) ([]byte, error) {
	v, _, err := s.Lookup(ctx, q)
	return v, err
}

// Lookup is Get that also reports the cache pool that answered (its index
// in CachePools), or -1 when the result was computed.
func (s *Store) Lookup(ctx context.Context, q Query) ([]byte, int, error) {
	if s.families[q.Family] == nil {
		return nil, -1, fmt.Errorf("cacheaug: unknown family %q", q.Family)
	}
	var v []byte
	var level int
	err := s.db.Transact(ctx, func(tr *distash.Tx) error {
		var err error
		v, level, err = s.get(tr, q)
		return err
	})
	if err != nil {
		return nil, -1, err
	}
	if level < 0 {
		s.misses.Add(1)
	} else {
		s.hits[level].Add(1)
	}
	return v, level, nil
}

// GetTx is Get inside the caller's transaction.
func (s *Store) GetTx(tr *distash.Tx, q Query) ([]byte, error) {
	v, _, err := s.get(tr, q)
	return v, err
}

func (s *Store) get(tr *distash.Tx, q Query) ([]byte, int, error) {
	ck := cacheKey(q)
	for level := range s.caches {
		v, err := tr.Get(s.entryKey(level, ck))
		if err != nil {
			return nil, -1, err
		}
		if v == nil {
			continue
		}
		for up := 0; up < level; up++ { // copy to the faster pools
			tr.SetWithCost(s.entryKey(up, ck), v, 1)
		}
		return v, level, nil
	}
	v, deps, err := s.compute(tr, q)
	if err != nil {
		return nil, -1, err
	}
	if len(v) > maxValueBytes {
		return v, -1, nil // too large to cache
	}
	old, err := s.readDeps(tr, ck)
	if err != nil {
		return nil, -1, err
	}
	s.record(tr, ck, old, deps)
	for level := range s.caches {
		tr.SetWithCost(s.entryKey(level, ck), v, cost(deps))
	}
	return v, -1, nil
}

// Writer changes data keys inside Write. Its methods are not safe for
// concurrent use.
type Writer struct {
	s       *Store
	tr      *distash.Tx
	policy  Policy
	changes []Change
}

// Tx is the transaction the writer works in.
func (w *Writer) Tx() *distash.Tx { return w.tr }

// Get reads data key k with a read conflict.
func (w *Writer) Get(k []byte) ([]byte, error) { return w.s.backend.GetTx(w.tr, k) }

// Set writes data key k.
func (w *Writer) Set(k, v []byte) error {
	if v == nil {
		v = []byte{}
	}
	return w.change(k, v)
}

// Delete removes data key k.
func (w *Writer) Delete(k []byte) error { return w.change(k, nil) }

func (w *Writer) change(k, v []byte) error {
	ch := Change{Key: append([]byte(nil), k...), New: v}
	if w.policy == ReadModifyWrite {
		old, err := w.s.backend.GetTx(w.tr, k)
		if err != nil {
			return err
		}
		ch.Old = old
	}
	var err error
	if v == nil {
		err = w.s.backend.DeleteTx(w.tr, k)
	} else {
		err = w.s.backend.PutTx(w.tr, k, v)
	}
	if err != nil {
		return err
	}
	w.changes = append(w.changes, ch)
	return nil
}

// Set writes data key k and maintains the dependent entries by policy p,
// in one transaction.
func (s *Store) Set(ctx context.Context, k, v []byte, p Policy) error {
	return s.Write(ctx, p, func(w *Writer) error { return w.Set(k, v) })
}

// Delete removes data key k and maintains the dependent entries by policy
// p, in one transaction.
func (s *Store) Delete(ctx context.Context, k []byte, p Policy) error {
	return s.Write(ctx, p, func(w *Writer) error { return w.Delete(k) })
}

// Update reads data key k, writes fn's result (nil deletes) and maintains
// the dependent entries by policy p, in one transaction. fn may run
// several times.
func (s *Store) Update(ctx context.Context, k []byte, fn func(old []byte) ([]byte, error), p Policy) error {
	return s.Write(ctx, p, func(w *Writer) error {
		old, err := w.Get(k)
		if err != nil {
			return err
		}
		v, err := fn(old)
		if err != nil {
			return err
		}
		if v == nil {
			return w.Delete(k)
		}
		return w.Set(k, v)
	})
}

// Write runs fn, which changes data keys through its Writer, then
// maintains every cached entry that depends on a changed key by policy p,
// all in one transaction (retried on conflicts; fn may run several times).
func (s *Store) Write(ctx context.Context, p Policy, fn func(w *Writer) error) error {
	var st writeStats
	err := s.db.Transact(ctx, func(tr *distash.Tx) error {
		var err error
		st, err = s.write(tr, p, fn)
		return err
	})
	if err == nil {
		s.invalidated.Add(st.invalidated)
		s.refreshed.Add(st.refreshed)
		s.applied.Add(st.applied)
	}
	return err
}

// WriteTx is Write inside the caller's transaction.
func (s *Store) WriteTx(tr *distash.Tx, p Policy, fn func(w *Writer) error) error {
	_, err := s.write(tr, p, fn)
	return err
}

type writeStats struct{ invalidated, refreshed, applied int64 }

// dependent is a cached entry some change touches.
type dependent struct {
	ck      []byte
	changes []int // indexes into the writer's changes, in order
}

func (s *Store) write(tr *distash.Tx, p Policy, fn func(w *Writer) error) (writeStats, error) {
	var st writeStats
	if p != WriteAround && p != WriteThrough && p != ReadModifyWrite {
		return st, fmt.Errorf("cacheaug: unknown write policy %v", p)
	}
	w := &Writer{s: s, tr: tr, policy: p}
	if err := fn(w); err != nil {
		return st, err
	}
	deps, err := s.dependents(tr, w.changes)
	if err != nil {
		return st, err
	}
	if len(deps) == 0 {
		return st, nil
	}
	if p == WriteAround {
		for _, d := range deps {
			if err := s.invalidate(tr, d.ck); err != nil {
				return st, err
			}
			st.invalidated++
		}
		return st, nil
	}
	// Which cache pools hold each dependent: one read round.
	var keys [][]byte
	for _, d := range deps {
		for level := range s.caches {
			keys = append(keys, s.entryKey(level, d.ck))
		}
	}
	vals, err := tr.GetMulti(keys)
	if err != nil {
		return st, err
	}
	for n, d := range deps {
		cached := vals[n*len(s.caches) : (n+1)*len(s.caches)]
		var cur []byte
		for _, v := range cached {
			if v != nil {
				cur = v
				break
			}
		}
		if cur == nil { // evicted everywhere: forget it
			if err := s.invalidate(tr, d.ck); err != nil {
				return st, err
			}
			st.invalidated++
			continue
		}
		q, err := parseCacheKey(d.ck)
		if err != nil {
			return st, err
		}
		f := s.families[q.Family]
		if f == nil {
			// Written by another Store that knows this family: drop it.
			if err := s.invalidate(tr, d.ck); err != nil {
				return st, err
			}
			st.invalidated++
			continue
		}
		var next []byte
		recompute := p == WriteThrough || f.Apply == nil
		if !recompute {
			next = cur
			for _, i := range d.changes {
				next, err = f.Apply(next, q.Args, w.changes[i])
				if errors.Is(err, ErrRecompute) {
					recompute = true
					break
				}
				if err != nil {
					return st, err
				}
			}
		}
		c := uint32(1)
		if recompute {
			v, newDeps, err := s.compute(tr, q)
			if err != nil {
				return st, err
			}
			if len(v) > maxValueBytes {
				if err := s.invalidate(tr, d.ck); err != nil {
					return st, err
				}
				st.invalidated++
				continue
			}
			old, err := s.readDeps(tr, d.ck)
			if err != nil {
				return st, err
			}
			s.record(tr, d.ck, old, newDeps)
			next, c = v, cost(newDeps)
			st.refreshed++
		} else {
			st.applied++
		}
		for level, v := range cached {
			if v != nil {
				tr.SetWithCost(s.entryKey(level, d.ck), next, c)
			}
		}
	}
	return st, nil
}

// dependents reads (with read conflicts) the entries that depend on the
// changed keys, each once, in a stable order.
func (s *Store) dependents(tr *distash.Tx, changes []Change) ([]*dependent, error) {
	byKey := map[string][]int{}
	var order []string
	for i, ch := range changes {
		k := string(ch.Key)
		if _, ok := byKey[k]; !ok {
			order = append(order, k)
		}
		byKey[k] = append(byKey[k], i)
	}
	found := map[string]*dependent{}
	var out []*dependent
	for _, k := range order {
		begin := s.depRangePrefix([]byte(k))
		kvs, err := tr.GetRange(begin, layout.PrefixEnd(begin), distash.RangeOptions{})
		if err != nil {
			return nil, err
		}
		for _, kvp := range kvs {
			ck := kvp.Key[len(begin):]
			d := found[string(ck)]
			if d == nil {
				d = &dependent{ck: append([]byte(nil), ck...)}
				found[string(ck)] = d
				out = append(out, d)
			}
			d.changes = append(d.changes, byKey[k]...)
		}
	}
	for _, d := range out {
		sort.Ints(d.changes)
	}
	return out, nil
}

// invalidate deletes ck from every cache pool with its dependency records.
func (s *Store) invalidate(tr *distash.Tx, ck []byte) error {
	deps, err := s.readDeps(tr, ck)
	if err != nil {
		return err
	}
	for _, d := range deps {
		tr.Clear(s.depKey(d, ck))
	}
	tr.Clear(s.depsKey(ck))
	for level := range s.caches {
		tr.Clear(s.entryKey(level, ck))
	}
	return nil
}

// Invalidate deletes q's cached result from every cache pool, in one
// transaction.
func (s *Store) Invalidate(ctx context.Context, q Query) error {
	return s.db.Transact(ctx, func(tr *distash.Tx) error { return s.invalidate(tr, cacheKey(q)) })
}

// Stats are counters of this Store value (not of other processes).
type Stats struct {
	// Hits counts gets answered by each cache pool.
	Hits []int64
	// Misses counts gets computed from the data.
	Misses int64
	// Invalidated counts entries deleted by writes.
	Invalidated int64
	// Refreshed counts entries recomputed by writes.
	Refreshed int64
	// Applied counts entries updated in place by ReadModifyWrite.
	Applied int64
}

// Stats returns the counters.
func (s *Store) Stats() Stats {
	st := Stats{Hits: make([]int64, len(s.hits)), Misses: s.misses.Load(), Invalidated: s.invalidated.Load(),
		Refreshed: s.refreshed.Load(), Applied: s.applied.Load()}
	for i := range s.hits {
		st.Hits[i] = s.hits[i].Load()
	}
	return st
}

// Mismatch is a cached entry that disagrees with its recomputation, or
// whose dependency records are missing.
type Mismatch struct {
	// Pool is the cache pool holding the entry.
	Pool string
	// Query is the entry's query.
	Query Query
	// Cached is the cached result; Computed what the data give.
	Cached, Computed []byte
	// Problem describes the disagreement.
	Problem string
}

// String describes the mismatch in one line.
func (m Mismatch) String() string {
	return fmt.Sprintf("%s: %s(%q): %s (cached %q, computed %q)", m.Pool, m.Query.Family, m.Query.Args, m.Problem, m.Cached, m.Computed)
}

// VerifyReport is the result of Verify.
type VerifyReport struct {
	// Entries counts the cached entries checked (over all cache pools).
	Entries int
	// Mismatches lists the entries that break the invariant.
	Mismatches []Mismatch
}

// Verify checks the store's invariant on one snapshot: every entry in
// every cache pool equals its recomputation from the data, and its
// dependency records exist and cover what the recomputation reads. It
// reads every entry of the namespace (scanning the cache pools), so it is
// meant for tests, examples and tools on small stores; the whole check
// must fit in the MVCC window. Families unknown to this Store are skipped.
func (s *Store) Verify(ctx context.Context) (VerifyReport, error) {
	var rep VerifyReport
	err := s.db.ReadTransact(ctx, func(tr *distash.Tx) error {
		rep = VerifyReport{}
		for level, pool := range s.caches {
			begin, end := pool.Range()
			kvs, err := tr.GetRange(begin, end, distash.RangeOptions{})
			if err != nil {
				return err
			}
			marker := s.ns + "e/"
			for _, kvp := range kvs {
				rest := kvp.Key[len(s.cachePfx[level]):]
				if len(rest) < 1+len(marker) || string(rest[1:1+len(marker)]) != marker {
					continue
				}
				ck := rest[1+len(marker):]
				q, err := parseCacheKey(ck)
				if err != nil || s.families[q.Family] == nil {
					continue
				}
				rep.Entries++
				bad := func(problem string, computed []byte) {
					rep.Mismatches = append(rep.Mismatches, Mismatch{Pool: pool.Name(), Query: q, Cached: kvp.Value, Computed: computed, Problem: problem})
				}
				v, deps, err := s.compute(tr, q)
				if err != nil {
					return err
				}
				if !bytes.Equal(v, kvp.Value) {
					bad("stale", v)
					continue
				}
				recorded, err := s.readDeps(tr, ck)
				if err != nil {
					return err
				}
				have := map[string]bool{}
				for _, d := range recorded {
					have[string(d)] = true
				}
				var missing []string
				for _, d := range deps {
					if !have[string(d)] {
						missing = append(missing, fmt.Sprintf("%q", d))
						continue
					}
					rec, err := tr.Get(s.depKey(d, ck))
					if err != nil {
						return err
					}
					if rec == nil {
						missing = append(missing, fmt.Sprintf("%q (record)", d))
					}
				}
				if len(missing) > 0 {
					bad("dependencies not recorded: "+strings.Join(missing, ", "), v)
				}
			}
		}
		return nil
	})
	return rep, err
}
