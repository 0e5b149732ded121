package hierarchy

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
	"time"

	"github.com/distash/distash"
	"github.com/distash/distash/patterns/internal/layout"
)

// Mode says whether a key lives in one tier or has copies.
type Mode int

const (
	// Exclusive keeps one copy of each key, in exactly one tier (tiered).
	Exclusive Mode = iota + 1
	// Inclusive keeps every key in the last tier and copies in faster
	// tiers (replicated).
	Inclusive
)

// String is "exclusive" or "inclusive".
func (m Mode) String() string {
	switch m {
	case Exclusive:
		return "exclusive"
	case Inclusive:
		return "inclusive"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Defaults of Options.
const (
	DefaultNamespace          = "h/"
	DefaultHighWater          = 0.9
	DefaultLowWater           = 0.75
	DefaultRecencyGranularity = 10 * time.Millisecond
	DefaultMigrateBatch       = 32
	DefaultMigrateParallelism = 4
)

// buckets is the number of index and usage buckets per tier.
const buckets = 16

// Options configure a Hierarchy.
type Options struct {
	// Tiers names the pools S0..Sh-1, fastest first. At least two.
	Tiers []string
	// Mode is Exclusive or Inclusive. Required.
	Mode Mode
	// Namespace separates this hierarchy's keys from other data in the
	// same pools. Default "h/". Two hierarchies sharing a pool need
	// namespaces neither of which is a prefix of the other.
	Namespace string
	// CapacityBytes overrides the capacity (bytes of keys plus values) of
	// the named tiers. Default: the pool's per-stash capacity × stashes /
	// replication; 0 there means unlimited (never demote).
	CapacityBytes map[string]int64
	// HighWater and LowWater are fractions of capacity: a tier above
	// HighWater is migrated down to LowWater. Defaults 0.9 and 0.75.
	HighWater, LowWater float64
	// Now is the clock for access times. Default time.Now.
	Now func() time.Time
	// RecencyGranularity is the unit of access times: a key's access time
	// is written at most once per unit. Default 10ms.
	RecencyGranularity time.Duration
	// MigrateBatch is how many index entries the migrator reads at a time.
	// Default 32.
	MigrateBatch int
	// MigrateParallelism is how many moves (each its own transaction) the
	// migrator runs at once. Default 4. Moves in flight when the tier
	// reaches LowWater still finish, so a pass may move up to
	// MigrateParallelism-1 keys more than needed.
	MigrateParallelism int
	// StashRecency takes the order of demotion from the stashes: the
	// migrator asks DB.ColdestKeys for a tier's coldest keys (the pools of
	// managed tiers need recency = true in the cluster configuration), and
	// the hierarchy keeps no access-time index of its own, only each key's
	// access time, which a move checks so that a key touched meanwhile
	// stays. Without it the hierarchy orders keys by its own transactional
	// access-time index.
	StashRecency bool
}

// Hierarchy is a storage hierarchy over DiStash pools. It is safe for
// concurrent use; several Hierarchy values (in several processes) over the
// same pools and namespace cooperate through their transactions.
type Hierarchy struct {
	db    *distash.DB
	tiers []*tier
	mode  Mode
	ns    string
	high  float64
	low   float64
	now   func() time.Time
	gran  time.Duration
	batch int
	par   int
	// stashRecency: demotion order from DB.ColdestKeys, no index (Options.StashRecency).
	stashRecency bool

	hits          []atomic.Int64 // per tier
	misses        atomic.Int64
	promotions    atomic.Int64
	demotions     atomic.Int64
	staleIndex    atomic.Int64
	recencyWrites atomic.Int64
}

type tier struct {
	pool          *distash.Pool
	prefix        []byte
	managed       bool
	capacityBytes int64
	ns            string
}

// New checks opts against the cluster's pools and returns a Hierarchy. It
// fails with a descriptive error for an unknown pool (wrapping
// distash.ErrUnknownPool), a pool named twice, tiers not ordered fastest
// first by medium, an exclusive hierarchy with an ephemeral tier, an
// inclusive hierarchy whose last tier is ephemeral, or bad numbers.
func New(db *distash.DB, opts Options) (*Hierarchy, error) {
	if db == nil {
		return nil, errors.New("hierarchy: nil DB")
	}
	if len(opts.Tiers) < 2 {
		return nil, fmt.Errorf("hierarchy: need at least two tiers, got %d", len(opts.Tiers))
	}
	if opts.Mode != Exclusive && opts.Mode != Inclusive {
		return nil, fmt.Errorf("hierarchy: Mode must be Exclusive or Inclusive, got %v", opts.Mode)
	}
	if opts.StashRecency {
		for _, name := range opts.Tiers {
			if p, err := db.Pool(name); err == nil && p.Durable() && !p.KeepsRecency() {
				return nil, fmt.Errorf("hierarchy: StashRecency needs the stashes of tier %q to keep recency: set recency = true for that pool", name)
			}
		}
	}
	h := &Hierarchy{
		db: db, mode: opts.Mode, ns: opts.Namespace,
		high: opts.HighWater, low: opts.LowWater,
		now: opts.Now, gran: opts.RecencyGranularity, batch: opts.MigrateBatch,
		stashRecency: opts.StashRecency,
	}
	if h.ns == "" {
		h.ns = DefaultNamespace
	}
	if h.high == 0 {
		h.high = DefaultHighWater
	}
	if h.low == 0 {
		h.low = DefaultLowWater
	}
	if !(h.low > 0 && h.low <= h.high && h.high <= 1) {
		return nil, fmt.Errorf("hierarchy: need 0 < LowWater <= HighWater <= 1, got LowWater %v, HighWater %v", h.low, h.high)
	}
	if h.now == nil {
		h.now = time.Now
	}
	if h.gran == 0 {
		h.gran = DefaultRecencyGranularity
	}
	if h.gran < 0 {
		return nil, fmt.Errorf("hierarchy: negative RecencyGranularity %v", h.gran)
	}
	if h.batch == 0 {
		h.batch = DefaultMigrateBatch
	}
	if h.batch < 0 {
		return nil, fmt.Errorf("hierarchy: negative MigrateBatch %d", h.batch)
	}
	h.par = opts.MigrateParallelism
	if h.par == 0 {
		h.par = DefaultMigrateParallelism
	}
	if h.par < 0 {
		return nil, fmt.Errorf("hierarchy: negative MigrateParallelism %d", h.par)
	}
	seen := map[string]int{}
	for i, name := range opts.Tiers {
		if j, ok := seen[name]; ok {
			return nil, fmt.Errorf("hierarchy: pool %q is both tier %d and tier %d", name, j, i)
		}
		seen[name] = i
		p, err := db.Pool(name)
		if err != nil {
			return nil, fmt.Errorf("hierarchy: tier %d: %w", i, err)
		}
		if _, ok := layout.MediumRank(p.Medium()); !ok {
			return nil, fmt.Errorf("hierarchy: tier %d %q has unknown medium %q", i, name, p.Medium())
		}
		h.tiers = append(h.tiers, &tier{pool: p, prefix: p.Prefix(), ns: h.ns})
	}
	for i := 1; i < len(h.tiers); i++ {
		a, b := h.tiers[i-1].pool, h.tiers[i].pool
		ra, _ := layout.MediumRank(a.Medium())
		rb, _ := layout.MediumRank(b.Medium())
		if rb < ra {
			return nil, fmt.Errorf("hierarchy: tiers must be ordered fastest first (%s): tier %d %q (%s) is slower than tier %d %q (%s)",
				layout.MediaOrder, i-1, a.Name(), a.Medium(), i, b.Name(), b.Medium())
		}
	}
	last := len(h.tiers) - 1
	for i, t := range h.tiers {
		if h.mode == Exclusive && t.pool.Ephemeral() {
			return nil, fmt.Errorf("hierarchy: an exclusive hierarchy keeps the only copy of each key, but tier %d %q is ephemeral (it may evict, and a dram pool forgets on restart): keys would be lost; make every tier durable or use Inclusive mode",
				i, t.pool.Name())
		}
		if h.mode == Inclusive && i == last && !t.pool.Durable() {
			return nil, fmt.Errorf("hierarchy: an inclusive hierarchy keeps every key in its last tier, but tier %d %q is not durable: keys would be lost",
				i, t.pool.Name())
		}
		t.managed = i < last && t.pool.Durable()
		t.capacityBytes = t.pool.CapacityBytes() * int64(t.pool.Stashes()) / int64(max(1, t.pool.Replication()))
	}
	for name, c := range opts.CapacityBytes {
		i, ok := seen[name]
		if !ok {
			return nil, fmt.Errorf("hierarchy: CapacityBytes names %q, which is not a tier", name)
		}
		if c < 0 {
			return nil, fmt.Errorf("hierarchy: negative capacity %d for tier %q", c, name)
		}
		h.tiers[i].capacityBytes = c
	}
	h.hits = make([]atomic.Int64, len(h.tiers))
	return h, nil
}

// Tier describes one tier of a Hierarchy.
type Tier struct {
	// Pool is the tier's pool.
	Pool *distash.Pool
	// Managed tiers (durable, not last) keep usage and recency and are
	// migrated down when full.
	Managed bool
	// CapacityBytes is the capacity the migrator works against (0: none).
	CapacityBytes int64
}

// Tiers describes the tiers, S0 first.
func (h *Hierarchy) Tiers() []Tier {
	out := make([]Tier, len(h.tiers))
	for i, t := range h.tiers {
		out[i] = Tier{Pool: t.pool, Managed: t.managed, CapacityBytes: t.capacityBytes}
	}
	return out
}

// Mode is the hierarchy's mode.
func (h *Hierarchy) Mode() Mode { return h.mode }

// Keys of a tier.

func (t *tier) valueKey(key []byte) []byte {
	return layout.Key(t.prefix, layout.SpreadByte(key), t.ns, []byte("v/"), key)
}

func (t *tier) atimeKey(key []byte) []byte {
	return layout.Key(t.prefix, layout.SpreadByte(key), t.ns, []byte("t/"), key)
}

func bucketByte(key []byte) byte { return layout.SpreadByte(key) & 0xf0 }

func (t *tier) indexKey(stamp int64, key []byte) []byte {
	var ts [8]byte
	binary.BigEndian.PutUint64(ts[:], uint64(stamp))
	return layout.Key(t.prefix, bucketByte(key), t.ns, []byte("i/"), ts[:], key)
}

func (t *tier) indexRange(b int) ([]byte, []byte) {
	begin := layout.Key(t.prefix, byte(b<<4), t.ns, []byte("i/"))
	return begin, layout.PrefixEnd(begin)
}

// decodeIndex returns the stamp and key of an index key of bucket range.
func (t *tier) decodeIndex(k []byte) (int64, []byte, bool) {
	n := len(t.prefix) + 1 + len(t.ns) + 2
	if len(k) < n+8 {
		return 0, nil, false
	}
	return int64(binary.BigEndian.Uint64(k[n : n+8])), k[n+8:], true
}

func (t *tier) usageKey(b int) []byte {
	return layout.Key(t.prefix, byte(b<<4), t.ns, []byte("u"))
}

func (t *tier) usageKeyOf(key []byte) []byte {
	return layout.Key(t.prefix, bucketByte(key), t.ns, []byte("u"))
}

// indexMark is the value of an index entry. Not empty: a stash flushes an
// empty value to its engine as a clear (a server bug), losing the entry.
var indexMark = []byte{1}

func entrySize(key, value []byte) int64 { return int64(len(key) + len(value)) }

func pointConflict(tr *distash.Tx, k []byte) { tr.AddReadConflictRange(k, layout.KeyAfter(k)) }

// stamp is the current access time in units of the granularity.
func (h *Hierarchy) stamp() int64 {
	s := h.now().UnixNano() / int64(h.gran)
	if s < 1 {
		s = 1
	}
	return s
}

// touch stamps key in managed tier t with stamp, given its old atime read
// by snapshot. Conflict-free: atomic Max, a blind index set and clear.
func (h *Hierarchy) touch(tr *distash.Tx, t *tier, key []byte, old []byte, stamp int64) bool {
	if old != nil && distash.Int64(old) >= stamp {
		return false
	}
	tr.Max(t.atimeKey(key), stamp)
	if h.stashRecency {
		return true // the stashes keep the order; the access time alone guards moves
	}
	tr.Set(t.indexKey(stamp, key), indexMark)
	if old != nil {
		tr.Clear(t.indexKey(distash.Int64(old), key))
	}
	return true
}

// keyOfValueKey returns the hierarchy key of one of tier t's value keys
// (prefix | spread byte | namespace | "v/" | key); ok is false for its
// other keys (access times, index, usage) and other data in the pool.
func (t *tier) keyOfValueKey(raw []byte) ([]byte, bool) {
	head := len(t.prefix) + 1
	if len(raw) < head || !bytes.HasPrefix(raw, t.prefix) {
		return nil, false
	}
	rest := raw[head:]
	if !bytes.HasPrefix(rest, []byte(t.ns)) || !bytes.HasPrefix(rest[len(t.ns):], []byte("v/")) {
		return nil, false
	}
	key := rest[len(t.ns)+2:]
	if layout.SpreadByte(key) != raw[len(t.prefix)] {
		return nil, false
	}
	return append([]byte(nil), key...), true
}

// coldestFromStashes returns up to batch of tier t's coldest keys as its
// stashes order them, each with its access time (0 when none).
func (h *Hierarchy) coldestFromStashes(ctx context.Context, t *tier) ([]indexEntry, error) {
	raw, err := h.db.ColdestKeys(ctx, t.pool, 4*h.batch)
	if err != nil {
		return nil, fmt.Errorf("hierarchy: coldest keys of tier %q: %w", t.pool.Name(), err)
	}
	var keys [][]byte
	for _, r := range raw {
		if k, ok := t.keyOfValueKey(r); ok && len(keys) < h.batch {
			keys = append(keys, k)
		}
	}
	var out []indexEntry
	err = h.db.ReadTransact(ctx, func(tr *distash.Tx) error {
		out = out[:0]
		atimes := make([][]byte, len(keys))
		for i, k := range keys {
			atimes[i] = t.atimeKey(k)
		}
		vals, err := tr.Snapshot().GetMulti(atimes)
		if err != nil {
			return err
		}
		for i, k := range keys {
			out = append(out, indexEntry{stamp: distash.Int64(vals[i]), key: k})
		}
		return nil
	})
	return out, err
}

// forget removes the recency of key from managed tier t (atime read by snapshot).
func (h *Hierarchy) forget(tr *distash.Tx, t *tier, key []byte, old []byte) {
	tr.Clear(t.atimeKey(key))
	if old != nil {
		tr.Clear(t.indexKey(distash.Int64(old), key))
	}
}

// tierRead is what a transaction read of one key in one tier.
type tierRead struct {
	value []byte // nil: absent
	atime []byte // managed tiers only; nil: absent
}

// readTiers reads key in the tiers idx with one snapshot round (the value
// and, in managed tiers, the atime), then adds read conflicts on the
// values: a conflicting read of the values, a snapshot read of the atimes.
func (h *Hierarchy) readTiers(tr *distash.Tx, key []byte, idx []int, conflict bool) ([]tierRead, error) {
	var keys [][]byte
	for _, i := range idx {
		t := h.tiers[i]
		keys = append(keys, t.valueKey(key))
		if t.managed {
			keys = append(keys, t.atimeKey(key))
		}
	}
	vals, err := tr.Snapshot().GetMulti(keys)
	if err != nil {
		return nil, err
	}
	out := make([]tierRead, len(idx))
	j := 0
	for n, i := range idx {
		out[n].value = vals[j]
		if conflict {
			pointConflict(tr, keys[j])
		}
		j++
		if h.tiers[i].managed {
			out[n].atime = vals[j]
			j++
		}
	}
	return out, nil
}

// addUsage adds delta to the usage of managed tier t (bucket of key).
func addUsage(tr *distash.Tx, t *tier, key []byte, delta int64) {
	if delta != 0 {
		tr.Add(t.usageKeyOf(key), delta)
	}
}

// getResult says what a get did.
type getResult struct {
	tier     int // -1: miss
	promoted bool
	touched  bool
}

// Get returns the value of key, searching the tiers top-down, or nil if no
// tier holds it. A hit below S0 is promoted to S0 in the same transaction.
func (h *Hierarchy) Get(ctx context.Context, key []byte) ([]byte, error) {
	v, _, err := h.Lookup(ctx, key)
	return v, err
}

// Lookup is Get that also reports the tier the key was found in (-1: in
// none). The key is in S0 after a hit.
func (h *Hierarchy) Lookup(ctx context.Context, key []byte) ([]byte, int, error) {
	var value []byte
	var res getResult
	err := h.db.Transact(ctx, func(tr *distash.Tx) error {
		var err error
		value, res, err = h.get(tr, key, false)
		return err
	})
	if err != nil {
		return nil, -1, err
	}
	h.count(res)
	return value, res.tier, nil
}

// GetTx is Get inside the caller's transaction tr. Every tier key it reads
// is a read conflict of tr, so tr aborts if a concurrent transaction changes
// what it saw; the promotion and recency writes commit with tr. Statistics
// do not count GetTx.
func (h *Hierarchy) GetTx(tr *distash.Tx, key []byte) ([]byte, error) {
	v, _, err := h.get(tr, key, true)
	return v, err
}

// LookupTx is GetTx that also reports the tier the key was found in (-1:
// in none).
func (h *Hierarchy) LookupTx(tr *distash.Tx, key []byte) ([]byte, int, error) {
	v, res, err := h.get(tr, key, true)
	return v, res.tier, err
}

func (h *Hierarchy) count(res getResult) {
	if res.tier < 0 {
		h.misses.Add(1)
	} else {
		h.hits[res.tier].Add(1)
	}
	if res.promoted {
		h.promotions.Add(1)
	}
	if res.touched {
		h.recencyWrites.Add(1)
	}
}

func (h *Hierarchy) get(tr *distash.Tx, key []byte, conflict bool) ([]byte, getResult, error) {
	var reads []tierRead
	hit := -1
	for i := range h.tiers {
		r, err := h.readTiers(tr, key, []int{i}, false)
		if err != nil {
			return nil, getResult{}, err
		}
		reads = append(reads, r[0])
		if r[0].value != nil {
			hit = i
			break
		}
	}
	res := getResult{tier: hit}
	// A promotion writes from what it read: all reads conflict. A plain
	// hit or miss conflicts only inside the caller's transaction.
	if conflict || hit > 0 {
		for i := range reads {
			pointConflict(tr, h.tiers[i].valueKey(key))
		}
	}
	if hit < 0 {
		return nil, res, nil
	}
	value := reads[hit].value
	stamp := h.stamp()
	if hit == 0 {
		if t := h.tiers[0]; t.managed {
			res.touched = h.touch(tr, t, key, reads[0].atime, stamp)
		}
		return value, res, nil
	}
	// Promote to S0 (exclusive) or to every tier above the hit
	// (inclusive); the reads showed them empty.
	res.promoted = true
	size := entrySize(key, value)
	upto := hit
	if h.mode == Exclusive {
		upto = 1
	}
	for j := 0; j < upto; j++ {
		tj := h.tiers[j]
		tr.Set(tj.valueKey(key), value)
		if tj.managed {
			addUsage(tr, tj, key, size)
			h.touch(tr, tj, key, reads[j].atime, stamp)
		}
	}
	if h.mode == Exclusive {
		ti := h.tiers[hit]
		tr.Clear(ti.valueKey(key))
		if ti.managed {
			addUsage(tr, ti, key, -size)
			h.forget(tr, ti, key, reads[hit].atime)
		}
	}
	return value, res, nil
}

// Put writes key into S0 in one transaction. In exclusive mode it removes
// the key from every other tier; in inclusive mode it also writes the last
// tier and updates or removes the copies in between.
func (h *Hierarchy) Put(ctx context.Context, key, value []byte) error {
	if value == nil {
		value = []byte{}
	}
	return h.db.Transact(ctx, func(tr *distash.Tx) error { return h.PutTx(tr, key, value) })
}

// PutTx is Put inside the caller's transaction.
func (h *Hierarchy) PutTx(tr *distash.Tx, key, value []byte) error {
	if value == nil {
		value = []byte{}
	}
	return h.write(tr, key, value, 0)
}

// PutCold writes key into the last tier only, in one transaction, removing
// it (or its copies) from the tiers above: a bulk load of cold data, such
// as importing a data set onto the slowest, densest tier. Later gets
// promote it as usual.
func (h *Hierarchy) PutCold(ctx context.Context, key, value []byte) error {
	return h.db.Transact(ctx, func(tr *distash.Tx) error { return h.PutColdTx(tr, key, value) })
}

// PutColdTx is PutCold inside the caller's transaction.
func (h *Hierarchy) PutColdTx(tr *distash.Tx, key, value []byte) error {
	if value == nil {
		value = []byte{}
	}
	return h.write(tr, key, value, len(h.tiers)-1)
}

// Delete removes key from every tier in one transaction.
func (h *Hierarchy) Delete(ctx context.Context, key []byte) error {
	return h.db.Transact(ctx, func(tr *distash.Tx) error { return h.DeleteTx(tr, key) })
}

// DeleteTx is Delete inside the caller's transaction.
func (h *Hierarchy) DeleteTx(tr *distash.Tx, key []byte) error { return h.write(tr, key, nil, 0) }

// write puts value (nil: deletes) under key into tier top.
func (h *Hierarchy) write(tr *distash.Tx, key, value []byte, top int) error {
	var managed []int
	for i, t := range h.tiers {
		if t.managed {
			managed = append(managed, i)
		}
	}
	reads := make([]tierRead, len(h.tiers))
	if len(managed) > 0 {
		r, err := h.readTiers(tr, key, managed, true)
		if err != nil {
			return err
		}
		for n, i := range managed {
			reads[i] = r[n]
		}
	}
	size := entrySize(key, value)
	stamp := h.stamp()
	last := len(h.tiers) - 1
	for i, t := range h.tiers {
		old := reads[i]
		var oldSize int64
		if old.value != nil {
			oldSize = entrySize(key, old.value)
		}
		// What this tier should hold afterwards.
		var keep bool
		switch {
		case value == nil:
			keep = false
		case i == top:
			keep = true
		case h.mode == Exclusive || i < top:
			keep = false
		case i == last:
			keep = true
		default: // inclusive, below top: keep a durable copy fresh, drop an ephemeral one
			keep = t.managed && old.value != nil
		}
		if keep {
			tr.Set(t.valueKey(key), value)
			if t.managed {
				addUsage(tr, t, key, size-oldSize)
				if i == top || old.atime == nil {
					h.touch(tr, t, key, old.atime, stamp)
				}
			}
			continue
		}
		if t.managed {
			if old.value == nil {
				continue
			}
			tr.Clear(t.valueKey(key))
			addUsage(tr, t, key, -oldSize)
			h.forget(tr, t, key, old.atime)
			continue
		}
		tr.Clear(t.valueKey(key))
	}
	return nil
}

// Where reports which tiers hold key, read in one transaction.
func (h *Hierarchy) Where(ctx context.Context, key []byte) ([]int, error) {
	var out []int
	err := h.db.ReadTransact(ctx, func(tr *distash.Tx) error {
		out = out[:0]
		keys := make([][]byte, len(h.tiers))
		for i, t := range h.tiers {
			keys[i] = t.valueKey(key)
		}
		vals, err := tr.GetMulti(keys)
		if err != nil {
			return err
		}
		for i, v := range vals {
			if v != nil {
				out = append(out, i)
			}
		}
		return nil
	})
	return out, err
}

// TierValues reads key in every tier in one transaction: the value each
// tier holds, nil where absent. Meant for checks and tools.
func (h *Hierarchy) TierValues(ctx context.Context, key []byte) ([][]byte, error) {
	var out [][]byte
	err := h.db.ReadTransact(ctx, func(tr *distash.Tx) error {
		keys := make([][]byte, len(h.tiers))
		for i, t := range h.tiers {
			keys[i] = t.valueKey(key)
		}
		var err error
		out, err = tr.GetMulti(keys)
		return err
	})
	return out, err
}

// TierUsage is the usage of one tier.
type TierUsage struct {
	// Pool is the tier's pool name.
	Pool string
	// Managed tells whether the tier keeps usage; Bytes is 0 otherwise.
	Managed bool
	// Bytes is the sum of len(key)+len(value) of the tier's entries.
	Bytes int64
	// CapacityBytes is the capacity the migrator works against.
	CapacityBytes int64
}

// Usage reads the usage of every tier in one transaction.
func (h *Hierarchy) Usage(ctx context.Context) ([]TierUsage, error) {
	out := make([]TierUsage, len(h.tiers))
	err := h.db.ReadTransact(ctx, func(tr *distash.Tx) error {
		for i, t := range h.tiers {
			out[i] = TierUsage{Pool: t.pool.Name(), Managed: t.managed, CapacityBytes: t.capacityBytes}
			if !t.managed {
				continue
			}
			b, err := h.usageOf(tr, t)
			if err != nil {
				return err
			}
			out[i].Bytes = b
		}
		return nil
	})
	return out, err
}

func (h *Hierarchy) usageOf(tr *distash.Tx, t *tier) (int64, error) {
	keys := make([][]byte, buckets)
	for b := range keys {
		keys[b] = t.usageKey(b)
	}
	vals, err := tr.Snapshot().GetMulti(keys)
	if err != nil {
		return 0, err
	}
	var sum int64
	for _, v := range vals {
		sum += distash.Int64(v)
	}
	return sum, nil
}

// MigrateStats says what one migration pass did.
type MigrateStats struct {
	// Moved counts keys demoted, per source tier.
	Moved []int
	// Stale counts stale index entries cleared.
	Stale int
}

// Migrate makes one migration pass: every managed tier above its high-water
// mark has its coldest keys moved to the next tier, one transaction per
// key, until it is at its low-water mark. Keys touched since the scan stay.
func (h *Hierarchy) Migrate(ctx context.Context) (MigrateStats, error) {
	st := MigrateStats{Moved: make([]int, len(h.tiers))}
	for i, t := range h.tiers {
		if !t.managed || t.capacityBytes <= 0 {
			continue
		}
		if err := h.migrateTier(ctx, i, &st); err != nil {
			return st, err
		}
	}
	return st, nil
}

func (h *Hierarchy) readUsage(ctx context.Context, t *tier) (int64, error) {
	var u int64
	err := h.db.ReadTransact(ctx, func(tr *distash.Tx) error {
		var err error
		u, err = h.usageOf(tr, t)
		return err
	})
	return u, err
}

func (h *Hierarchy) migrateTier(ctx context.Context, i int, st *MigrateStats) error {
	t := h.tiers[i]
	usage, err := h.readUsage(ctx, t)
	if err != nil {
		return err
	}
	if float64(usage) <= h.high*float64(t.capacityBytes) {
		return nil
	}
	target := int64(h.low * float64(t.capacityBytes))
	for usage > target {
		coldest := h.coldest
		if h.stashRecency {
			coldest = h.coldestFromStashes
		}
		entries, err := coldest(ctx, t)
		if err != nil {
			return err
		}
		if len(entries) == 0 {
			return nil
		}
		// Move the batch, coldest first, h.par moves at a time, each its
		// own transaction; stop handing out moves at the low-water mark.
		var (
			mu      sync.Mutex
			left    = usage // Protected by mu.
			next    int     // Protected by mu.
			firstEr error   // Protected by mu.
			wg      sync.WaitGroup
		)
		for w := 0; w < h.par; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					mu.Lock()
					if next >= len(entries) || left <= target || firstEr != nil {
						mu.Unlock()
						return
					}
					e := entries[next]
					next++
					mu.Unlock()
					moved, size, err := h.moveOne(ctx, i, e.stamp, e.key)
					mu.Lock()
					switch {
					case err != nil:
						if firstEr == nil {
							firstEr = err
						}
					case moved:
						st.Moved[i]++
						h.demotions.Add(1)
						left -= size
					default:
						st.Stale++
						h.staleIndex.Add(1)
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if firstEr != nil {
			return firstEr
		}
		if usage, err = h.readUsage(ctx, t); err != nil {
			return err
		}
	}
	return nil
}

type indexEntry struct {
	stamp int64
	key   []byte
}

// coldest returns up to batch index entries of tier t, oldest first,
// merging the heads of the buckets (one snapshot read transaction).
func (h *Hierarchy) coldest(ctx context.Context, t *tier) ([]indexEntry, error) {
	var out []indexEntry
	err := h.db.ReadTransact(ctx, func(tr *distash.Tx) error {
		out = out[:0]
		results := make([][]distash.KeyValue, buckets)
		errs := make([]error, buckets)
		done := make(chan int, buckets)
		for b := 0; b < buckets; b++ {
			go func(b int) {
				begin, end := t.indexRange(b)
				results[b], errs[b] = tr.Snapshot().GetRange(begin, end, distash.RangeOptions{Limit: h.batch})
				done <- b
			}(b)
		}
		for range buckets {
			<-done
		}
		for b := 0; b < buckets; b++ {
			if errs[b] != nil {
				return errs[b]
			}
			for _, kvp := range results[b] {
				if s, k, ok := t.decodeIndex(kvp.Key); ok {
					out = append(out, indexEntry{stamp: s, key: append([]byte(nil), k...)})
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(out, func(a, b int) bool {
		if out[a].stamp != out[b].stamp {
			return out[a].stamp < out[b].stamp
		}
		return bytes.Compare(out[a].key, out[b].key) < 0
	})
	if len(out) > h.batch {
		out = out[:h.batch]
	}
	return out, nil
}

// moveOne demotes key from tier i to tier i+1 in one transaction, if the
// index entry (stamp, key) is current; otherwise it clears the entry.
func (h *Hierarchy) moveOne(ctx context.Context, i int, stamp int64, key []byte) (moved bool, size int64, err error) {
	t, n := h.tiers[i], h.tiers[i+1]
	last := i+1 == len(h.tiers)-1
	err = h.db.Transact(ctx, func(tr *distash.Tx) error {
		moved, size = false, 0
		vals, err := tr.GetMulti([][]byte{t.valueKey(key), t.atimeKey(key)})
		if err != nil {
			return err
		}
		v, a := vals[0], vals[1]
		if v == nil {
			tr.Clear(t.indexKey(stamp, key))
			if a != nil && distash.Int64(a) <= stamp {
				tr.Clear(t.atimeKey(key))
			}
			return nil
		}
		if a != nil && distash.Int64(a) != stamp {
			tr.Clear(t.indexKey(stamp, key))
			return nil
		}
		size = entrySize(key, v)
		if n.managed {
			r, err := h.readTiers(tr, key, []int{i + 1}, true)
			if err != nil {
				return err
			}
			old := r[0]
			if h.mode == Exclusive || old.value == nil {
				var oldSize int64
				if old.value != nil {
					oldSize = entrySize(key, old.value)
				}
				tr.Set(n.valueKey(key), v)
				addUsage(tr, n, key, size-oldSize)
			}
			h.touch(tr, n, key, old.atime, stamp) // keeps its access time
		} else if h.mode == Exclusive || !last {
			// Exclusive: the next tier cannot hold it. Inclusive: an
			// ephemeral intermediate tier gets the (equal) copy; the last
			// tier already has it.
			tr.Set(n.valueKey(key), v)
		}
		tr.Clear(t.valueKey(key))
		addUsage(tr, t, key, -size)
		tr.Clear(t.atimeKey(key))
		tr.Clear(t.indexKey(stamp, key))
		moved = true
		return nil
	})
	return moved, size, err
}

// RunMigrator runs Migrate every interval until ctx ends, and returns nil
// then; it returns the first error of a pass otherwise.
func (h *Hierarchy) RunMigrator(ctx context.Context, interval time.Duration) error {
	if interval <= 0 {
		return fmt.Errorf("hierarchy: migrator interval %v must be positive", interval)
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		if _, err := h.Migrate(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// Stats are counters of this Hierarchy value (not of other processes).
type Stats struct {
	// Hits counts gets answered by each tier.
	Hits []int64
	// Misses counts gets no tier answered.
	Misses int64
	// Promotions counts hits below S0 moved or copied to S0.
	Promotions int64
	// Demotions counts keys the migrator moved down.
	Demotions int64
	// StaleIndex counts stale recency entries the migrator cleared.
	StaleIndex int64
	// RecencyWrites counts gets that wrote a new access time.
	RecencyWrites int64
}

// Stats returns the counters.
func (h *Hierarchy) Stats() Stats {
	s := Stats{
		Hits: make([]int64, len(h.hits)), Misses: h.misses.Load(), Promotions: h.promotions.Load(),
		Demotions: h.demotions.Load(), StaleIndex: h.staleIndex.Load(), RecencyWrites: h.recencyWrites.Load(),
	}
	for i := range h.hits {
		s.Hits[i] = h.hits[i].Load()
	}
	return s
}

// String describes the hierarchy, e.g. "exclusive: nvm(nvm) > ssd(ssd) > hdd(hdd)".
func (h *Hierarchy) String() string {
	parts := make([]string, len(h.tiers))
	for i, t := range h.tiers {
		parts[i] = fmt.Sprintf("%s(%s)", t.pool.Name(), t.pool.Medium())
	}
	return h.mode.String() + ": " + strings.Join(parts, " > ")
}
