// Package frontcache is a front-end cache for load balancing over DiStash
// pools (paper §2.2; Fan et al., "Small Cache, Big Effect", SoCC 2011): a
// small, fast pool in front of a pool of n slow stashes. A skewed workload
// overloads the slow stashes that hold the hottest keys; a front cache of
// only O(n log n) entries absorbs the hottest keys, so the load left for
// the slow stashes is close to even whatever the skew.
//
//	fc, err := frontcache.New(db, frontcache.Options{
//		FrontPool: "front",            // DRAM
//		SlowPool:  "slow",             // n SSD stashes
//		AdmitProbability: 0.5,
//	})
//	v, err := fc.Get(ctx, key)       // front, else slow (admitted with probability p)
//	err = fc.Set(ctx, key, value)    // slow and front in one transaction
//
// # Consistency
//
// Every operation is one DiStash transaction. A get that misses reads the
// slow pool with a read conflict and admits the value in the same
// transaction, so a concurrent write of the key makes the admission abort
// and retry; a write updates the slow pool and invalidates (or updates)
// the front copy in one transaction. So at every committed version each
// front entry equals the slow pool's value of its key, and the front cache
// never serves a value older than the slow pool's (the race of the paper's
// Figure 7 cannot happen).
//
// # Size and replacement
//
// The front cache holds at most Options.Entries entries (default
// ⌈EntriesFactor · n · ln n⌉ for n slow stashes, at least Ways), enforced
// transactionally: the entries form Entries/Ways sets of Ways entries, a key
// belongs to one set (by hash), and an admission into a full set evicts a
// random member of the set, reading the set with a read conflict so that
// concurrent admissions cannot overfill it. A hit reads the key's own front
// entry only. Admission on a miss happens with probability
// AdmitProbability: below 1, a key must miss about 1/p times before it is
// admitted, which keeps one-off keys (a scan, a flash crowd's tail) from
// displacing the hot ones.
//
// An ephemeral front pool may also evict entries on its own when its
// stashes' capacity is too small for Entries; that only costs misses.
//
// # Layout
//
// With namespace ns (default "fc/"), a key k is stored at
//
//	slow pool    prefix | s(k) | ns | k
//	front pool   prefix | b(set) | ns | be32(set) | k
//
// where s(k) is a spread byte from a stable hash of k, so that the keys
// spread evenly over the slow pool's shards (DiStash's initial shard map
// splits a pool on that byte, one shard per stash), and b(set) spreads the
// sets over the front pool's shards.
package frontcache

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync/atomic"

	"github.com/distash/distash"
	"github.com/distash/distash/patterns/internal/layout"
)

// WritePolicy is what a write does to the front copy of the key.
type WritePolicy int

const (
	// Invalidate deletes the front copy (write-around); the next get
	// misses. The default.
	Invalidate WritePolicy = iota + 1
	// Update overwrites the front copy if there is one (write-through).
	Update
)

// String is "invalidate" or "update".
func (p WritePolicy) String() string {
	switch p {
	case Invalidate:
		return "invalidate"
	case Update:
		return "update"
	}
	return fmt.Sprintf("WritePolicy(%d)", int(p))
}

// Defaults of Options.
const (
	DefaultNamespace        = "fc/"
	DefaultAdmitProbability = 1.0
	DefaultEntriesFactor    = 2.0
	DefaultWays             = 8
)

// Options configure a Cache.
type Options struct {
	// FrontPool names the small fast pool. Required.
	FrontPool string
	// SlowPool names the pool of slow stashes. Required.
	SlowPool string
	// Namespace separates the cache's keys from other data in the pools.
	// Default "fc/".
	Namespace string
	// AdmitProbability is the probability that a miss admits the key into
	// the front pool, in (0, 1]. Default 1.
	AdmitProbability float64
	// Entries bounds the number of front entries. Default
	// EntriesFor(slow stashes, EntriesFactor).
	Entries int
	// EntriesFactor is the constant c of the default size c · n · ln n.
	// Default 2.
	EntriesFactor float64
	// Ways is the number of entries per set. Default 8.
	Ways int
	// WritePolicy is what writes do to front copies. Default Invalidate.
	WritePolicy WritePolicy
	// Float64 draws admission and replacement decisions, in [0, 1); it
	// must be safe for concurrent use. Default math/rand/v2's Float64.
	Float64 func() float64
}

// EntriesFor is the front cache size Fan et al. show suffices for n slow
// stashes: ⌈c · n · ln n⌉ (at least c · n, for small n).
func EntriesFor(n int, c float64) int {
	f := float64(n)
	return int(math.Ceil(c * f * math.Max(1, math.Log(f))))
}

// Cache is a front-end cache. It is safe for concurrent use; Caches in
// several processes over the same pools and namespace cooperate through
// their transactions.
type Cache struct {
	db       *distash.DB
	front    *distash.Pool
	slow     *distash.Pool
	frontPfx []byte
	slowPfx  []byte
	ns       string
	admit    float64
	ways     int
	sets     int
	policy   WritePolicy
	float64  func() float64

	hits       atomic.Int64
	misses     atomic.Int64
	admissions atomic.Int64
	evictions  atomic.Int64
	writes     atomic.Int64
}

// New checks opts against the cluster's pools and returns a Cache. It fails
// with a descriptive error for an unknown pool (wrapping
// distash.ErrUnknownPool), the same pool twice, a front pool on a slower
// medium than the slow pool, and bad numbers.
func New(db *distash.DB, opts Options) (*Cache, error) {
	if db == nil {
		return nil, errors.New("frontcache: nil DB")
	}
	if opts.FrontPool == "" || opts.SlowPool == "" {
		return nil, errors.New("frontcache: FrontPool and SlowPool are required")
	}
	if opts.FrontPool == opts.SlowPool {
		return nil, fmt.Errorf("frontcache: front and slow pool are both %q", opts.FrontPool)
	}
	front, err := db.Pool(opts.FrontPool)
	if err != nil {
		return nil, fmt.Errorf("frontcache: front pool: %w", err)
	}
	slow, err := db.Pool(opts.SlowPool)
	if err != nil {
		return nil, fmt.Errorf("frontcache: slow pool: %w", err)
	}
	rf, okf := layout.MediumRank(front.Medium())
	rs, oks := layout.MediumRank(slow.Medium())
	if !okf || !oks || rf > rs {
		return nil, fmt.Errorf("frontcache: the front pool must be at least as fast as the slow pool (%s), but %q is %s and %q is %s",
			layout.MediaOrder, front.Name(), front.Medium(), slow.Name(), slow.Medium())
	}
	c := &Cache{
		db: db, front: front, slow: slow, frontPfx: front.Prefix(), slowPfx: slow.Prefix(),
		ns: opts.Namespace, admit: opts.AdmitProbability, ways: opts.Ways,
		policy: opts.WritePolicy, float64: opts.Float64,
	}
	if c.ns == "" {
		c.ns = DefaultNamespace
	}
	if c.admit == 0 {
		c.admit = DefaultAdmitProbability
	}
	if !(c.admit > 0 && c.admit <= 1) {
		return nil, fmt.Errorf("frontcache: AdmitProbability %v is not in (0, 1]", c.admit)
	}
	if c.ways == 0 {
		c.ways = DefaultWays
	}
	if c.ways < 1 {
		return nil, fmt.Errorf("frontcache: Ways %d is not positive", c.ways)
	}
	factor := opts.EntriesFactor
	if factor == 0 {
		factor = DefaultEntriesFactor
	}
	if factor < 0 {
		return nil, fmt.Errorf("frontcache: negative EntriesFactor %v", factor)
	}
	entries := opts.Entries
	if entries == 0 {
		entries = EntriesFor(slow.Stashes(), factor)
	}
	if entries < 0 {
		return nil, fmt.Errorf("frontcache: negative Entries %d", entries)
	}
	c.sets = max(1, (entries+c.ways-1)/c.ways)
	if c.policy == 0 {
		c.policy = Invalidate
	}
	if c.policy != Invalidate && c.policy != Update {
		return nil, fmt.Errorf("frontcache: unknown WritePolicy %v", c.policy)
	}
	if c.float64 == nil {
		c.float64 = rand.Float64
	}
	return c, nil
}

// Entries is the most entries the front pool holds: sets × ways.
func (c *Cache) Entries() int { return c.sets * c.ways }

// FrontPool is the front pool.
func (c *Cache) FrontPool() *distash.Pool { return c.front }

// SlowPool is the slow pool.
func (c *Cache) SlowPool() *distash.Pool { return c.slow }

// SlowKey is where key is stored in the slow pool.
func (c *Cache) SlowKey(key []byte) []byte {
	return layout.Key(c.slowPfx, layout.SpreadByte(key), c.ns, key)
}

func (c *Cache) setOf(key []byte) uint32 { return uint32(layout.Hash(key) % uint64(c.sets)) }

func (c *Cache) setPrefix(set uint32) []byte {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], set)
	return layout.Key(c.frontPfx, byte(uint64(set)*256/uint64(c.sets)), c.ns, b[:])
}

// FrontKey is where key's front copy is stored.
func (c *Cache) FrontKey(key []byte) []byte { return append(c.setPrefix(c.setOf(key)), key...) }

type getResult struct {
	hit, admitted, evicted bool
}

// Get returns the value of key: the front copy, else the slow pool's
// (admitted to the front with probability AdmitProbability), nil if absent.
func (c *Cache) Get(ctx context.Context, key []byte) ([]byte, error) {
	v, _, err := c.Lookup(ctx, key)
	return v, err
}

// Lookup is Get that also reports whether the front pool answered.
func (c *Cache) Lookup(ctx context.Context, key []byte) ([]byte, bool, error) {
	var v []byte
	var res getResult
	err := c.db.Transact(ctx, func(tr *distash.Tx) error {
		var err error
		v, res, err = c.get(tr, key)
		return err
	})
	if err != nil {
		return nil, false, err
	}
	if res.hit {
		c.hits.Add(1)
	} else {
		c.misses.Add(1)
	}
	if res.admitted {
		c.admissions.Add(1)
	}
	if res.evicted {
		c.evictions.Add(1)
	}
	return v, res.hit, nil
}

// GetTx is Get inside the caller's transaction (its reads conflict).
func (c *Cache) GetTx(tr *distash.Tx, key []byte) ([]byte, error) {
	v, _, err := c.get(tr, key)
	return v, err
}

func (c *Cache) get(tr *distash.Tx, key []byte) ([]byte, getResult, error) {
	var res getResult
	fk := c.FrontKey(key)
	v, err := tr.Get(fk)
	if err != nil || v != nil {
		res.hit = v != nil
		return v, res, err
	}
	v, err = tr.Get(c.SlowKey(key))
	if err != nil || v == nil {
		return v, res, err
	}
	if c.admit < 1 && c.float64() >= c.admit {
		return v, res, nil
	}
	// Admit into the key's set, evicting a random member of a full set.
	begin := c.setPrefix(c.setOf(key))
	members, err := tr.GetRange(begin, layout.PrefixEnd(begin), distash.RangeOptions{Limit: c.ways + 1})
	if err != nil {
		return nil, res, err
	}
	for len(members) >= c.ways {
		i := int(c.float64() * float64(len(members)))
		if i >= len(members) {
			i = len(members) - 1
		}
		if !bytes.Equal(members[i].Key, fk) {
			tr.Clear(members[i].Key)
			res.evicted = true
		}
		members = append(members[:i], members[i+1:]...)
	}
	tr.Set(fk, v)
	res.admitted = true
	return v, res, nil
}

// Set writes key in the slow pool and, in the same transaction,
// invalidates or updates its front copy (Options.WritePolicy).
func (c *Cache) Set(ctx context.Context, key, value []byte) error {
	err := c.db.Transact(ctx, func(tr *distash.Tx) error { return c.SetTx(tr, key, value) })
	if err == nil {
		c.writes.Add(1)
	}
	return err
}

// SetTx is Set inside the caller's transaction.
func (c *Cache) SetTx(tr *distash.Tx, key, value []byte) error {
	if value == nil {
		value = []byte{}
	}
	tr.Set(c.SlowKey(key), value)
	fk := c.FrontKey(key)
	if c.policy == Invalidate {
		tr.Clear(fk)
		return nil
	}
	// Update: a conflicting read, so a concurrent admission of the old
	// value cannot slip in between.
	old, err := tr.Get(fk)
	if err != nil {
		return err
	}
	if old != nil {
		tr.Set(fk, value)
	}
	return nil
}

// Delete removes key from the slow pool and its front copy, in one
// transaction.
func (c *Cache) Delete(ctx context.Context, key []byte) error {
	err := c.db.Transact(ctx, func(tr *distash.Tx) error { return c.DeleteTx(tr, key) })
	if err == nil {
		c.writes.Add(1)
	}
	return err
}

// DeleteTx is Delete inside the caller's transaction.
func (c *Cache) DeleteTx(tr *distash.Tx, key []byte) error {
	tr.Clear(c.SlowKey(key))
	tr.Clear(c.FrontKey(key))
	return nil
}

// Stats are counters of this Cache value (not of other processes).
type Stats struct {
	// Hits counts gets the front pool answered.
	Hits int64
	// Misses counts gets that read the slow pool.
	Misses int64
	// Admissions counts keys admitted to the front pool.
	Admissions int64
	// Evictions counts front entries replaced by admissions.
	Evictions int64
	// Writes counts sets and deletes.
	Writes int64
}

// Stats returns the counters.
func (c *Cache) Stats() Stats {
	return Stats{Hits: c.hits.Load(), Misses: c.misses.Load(), Admissions: c.admissions.Load(),
		Evictions: c.evictions.Load(), Writes: c.writes.Load()}
}

// VerifyReport is the result of Verify.
type VerifyReport struct {
	// Entries counts the front entries checked.
	Entries int
	// Stale lists the keys whose front copy differs from the slow pool's.
	Stale []string
	// OverfullSets counts sets holding more than Ways entries.
	OverfullSets int
}

// Verify checks on one snapshot that every front entry equals the slow
// pool's value and that no set holds more than Ways entries. It scans the
// front pool: meant for tests, examples and tools.
func (c *Cache) Verify(ctx context.Context) (VerifyReport, error) {
	var rep VerifyReport
	err := c.db.ReadTransact(ctx, func(tr *distash.Tx) error {
		rep = VerifyReport{}
		begin, end := c.front.Range()
		kvs, err := tr.GetRange(begin, end, distash.RangeOptions{})
		if err != nil {
			return err
		}
		perSet := map[uint32]int{}
		var keys [][]byte
		var front [][]byte
		for _, kvp := range kvs {
			rest := kvp.Key[len(c.frontPfx):]
			if len(rest) < 1+len(c.ns)+4 || string(rest[1:1+len(c.ns)]) != c.ns {
				continue
			}
			set := binary.BigEndian.Uint32(rest[1+len(c.ns):])
			perSet[set]++
			keys = append(keys, c.SlowKey(rest[1+len(c.ns)+4:]))
			front = append(front, kvp.Value)
		}
		slow, err := tr.GetMulti(keys)
		if err != nil {
			return err
		}
		rep.Entries = len(keys)
		for i := range keys {
			if !bytes.Equal(slow[i], front[i]) {
				rep.Stale = append(rep.Stale, fmt.Sprintf("%q: front %q, slow %q", keys[i], front[i], slow[i]))
			}
		}
		for _, n := range perSet {
			if n > c.ways {
				rep.OverfullSets++
			}
		}
		return nil
	})
	return rep, err
}
