package distash

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/wire"
)

// RangeOptions shape a GetRange: at most Limit pairs (0: all), in reverse
// key order when Reverse is set.
type RangeOptions struct {
	Limit   int
	Reverse bool
}

// KeyValue is one pair returned by GetRange.
type KeyValue struct {
	Key, Value []byte
}

// localWrite is the transaction's own state of one key: a known base (set
// or cleared in this transaction) and atomic operations on top of it.
type localWrite struct {
	key       []byte
	baseKnown bool // the base is value/present below, not the database's
	value     []byte
	present   bool
	ops       []kv.Mutation // atomic ops after the base, in order
}

func lessLocal(a, b *localWrite) bool { return bytes.Compare(a.key, b.key) < 0 }

// resolve returns the key's value given the database's value (used only
// when the base is not known locally).
func (w *localWrite) resolve(dbValue []byte, dbPresent bool) ([]byte, bool) {
	v, ok := w.value, w.present
	if !w.baseKnown {
		v, ok = dbValue, dbPresent
	}
	for _, op := range w.ops {
		v, ok = kv.ApplyAtomic(op.Type, v, ok, op.Param), true
	}
	return v, ok
}

// Tx is a transaction. Reads see a consistent snapshot at the transaction's
// read version plus the transaction's own writes. A Tx is safe for
// concurrent use by the goroutines of one transaction function.
type Tx struct {
	ctx context.Context
	db  *DB

	mu          sync.Mutex
	readVersion kv.Version // 0 until fetched. Protected by mu.
	writes      writeSet
	cleared     []kv.KeyRange // ranges cleared in this transaction
	mutations   []kv.Mutation
	readConf    []kv.KeyRange
	writeConf   []kv.KeyRange
	size        int
	err         error // first error of a write (returned at Commit)
	committed   bool
	commitVer   kv.Version
	// readSystemKeys allows reads of the \xff system key space
	// (Options().SetReadSystemKeys). Protected by mu.
	readSystemKeys bool
	// recentOK: the transaction may read at a recent version the client
	// knows instead of asking for one (Options().SetRecentReadVersion),
	// unless freshOnly (DB.run's attempts after one that used it, and
	// read-only transactions). usedRecent: its read version is such a
	// version. snapshotRead: it read without conflicts. Protected by mu.
	recentOK, freshOnly, usedRecent, snapshotRead bool
}

// TransactionOptions sets options of one transaction: tr.Options().
type TransactionOptions struct{ tr *Tx }

// Options returns the transaction's options.
func (tr *Tx) Options() TransactionOptions { return TransactionOptions{tr} }

// SetReadSystemKeys lets the transaction read keys of the system key space
// (those starting with byte 0xff: the shard map, the recorded
// configuration), as FoundationDB's READ_SYSTEM_KEYS. Without it such
// reads fail with ErrKeyOutsidePools. System keys are never writable.
func (o TransactionOptions) SetReadSystemKeys() {
	o.tr.mu.Lock()
	o.tr.readSystemKeys = true
	o.tr.mu.Unlock()
}

// SetRecentReadVersion lets a transaction that will write read at the
// newest committed version this client already knows (from its other
// transactions' read versions and commits, at most
// RecentReadVersionAge old) instead of asking a GRV proxy for one: one
// round trip less before its first read. This keeps strict
// serializability: a commit checks every read against the writes
// committed since that version, so a transaction that commits writes is
// as if it ran at its commit version. Transact runs the function again
// with a fresh read version when the attempt cannot be checked that way:
// when it commits nothing, returns an error of its own, or reads a
// snapshot (reads without conflicts). So the function's results are never
// based on a version older than the transaction's start. Call it before
// the first read, inside DB.Transact; ReadTransact and transactions of
// CreateTransaction ignore it. (A
// read-modify-write of a key that others write often may conflict a
// little more often, as the version can be a few milliseconds old.)
func (o TransactionOptions) SetRecentReadVersion() {
	o.tr.mu.Lock()
	o.tr.recentOK = true
	o.tr.mu.Unlock()
}

// RecentReadVersionAge bounds how old a version SetRecentReadVersion may
// use is: older than this, the transaction asks for a read version.
const RecentReadVersionAge = 5 * time.Millisecond

// recentReadVersionAge is RecentReadVersionAge (tests lengthen it).
var recentReadVersionAge atomic.Int64

func init() { recentReadVersionAge.Store(int64(RecentReadVersionAge)) }

// errRecentUnchecked is Commit's error for a transaction that read at a
// recent version (SetRecentReadVersion) but cannot have its reads checked
// by a commit: it wrote nothing, or read a snapshot. Transact runs it
// again with a fresh read version.
var errRecentUnchecked = errorf(kv.CodeNotCommitted, "the transaction read at a recent version and writes nothing (or read a snapshot): run again with a fresh read version")

// checkReadKey is checkKey for reads: system keys are readable with
// SetReadSystemKeys. Called with mu held.
func (tr *Tx) checkReadKey(key []byte) error {
	if bytes.HasPrefix(key, kv.SystemPrefix) {
		if len(key) > kv.MaxKeyBytes {
			return errorf(kv.CodeKeyTooLarge, "key of %d bytes (limit %d)", len(key), kv.MaxKeyBytes)
		}
		if !tr.readSystemKeys {
			return errorf(kv.CodeKeyOutsidePools, "key %.60q is in the system key space; call tr.Options().SetReadSystemKeys() to read it", key)
		}
		return nil
	}
	return tr.checkKey(key)
}

func newTx(ctx context.Context, db *DB) *Tx {
	return &Tx{ctx: ctx, db: db}
}

// Snapshot returns a view of the transaction whose reads add no read
// conflict ranges: they cannot make the transaction fail, and they may miss
// a concurrent write.
func (tr *Tx) Snapshot() *Snapshot { return &Snapshot{tr: tr} }

// Snapshot is a transaction's snapshot-read view.
type Snapshot struct{ tr *Tx }

// Get reads key without a read conflict.
func (s *Snapshot) Get(key []byte) ([]byte, error) { return s.tr.get(key, true) }

// GetMulti reads keys without read conflicts.
func (s *Snapshot) GetMulti(keys [][]byte) ([][]byte, error) { return s.tr.getMulti(keys, true) }

// GetRange reads a range without a read conflict.
func (s *Snapshot) GetRange(begin, end []byte, opts RangeOptions) ([]KeyValue, error) {
	return s.tr.getRange(begin, end, opts, true)
}

// ReadVersion returns the transaction's read version, fetching it if needed.
func (tr *Tx) ReadVersion() (int64, error) {
	v, err := tr.getReadVersion()
	return int64(v), err
}

// SetReadVersion fixes the read version (e.g. to read at an older version).
func (tr *Tx) SetReadVersion(v int64) {
	tr.mu.Lock()
	tr.readVersion = kv.Version(v)
	tr.mu.Unlock()
}

// CommittedVersion is the version a successful Commit committed at.
func (tr *Tx) CommittedVersion() int64 {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return int64(tr.commitVer)
}

func (tr *Tx) getReadVersion() (kv.Version, error) {
	tr.mu.Lock()
	v, recentOK := tr.readVersion, tr.recentOK && !tr.freshOnly
	tr.mu.Unlock()
	if v != 0 {
		return v, nil
	}
	var rv kv.Version
	recent := false
	if recentOK {
		rv, recent = tr.db.recentVersion()
	}
	if !recent {
		p := tr.db.proxy.Load()
		var err error
		if rv, err = p.grv.get(tr.ctx); err != nil {
			tr.db.proxyFailed(p, err)
			return 0, err
		}
		tr.db.learnVersion(rv)
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.readVersion == 0 {
		tr.readVersion, tr.usedRecent = rv, recent
	}
	return tr.readVersion, nil
}

func (tr *Tx) checkKey(key []byte) error {
	if len(key) > kv.MaxKeyBytes {
		return errorf(kv.CodeKeyTooLarge, "key of %d bytes (limit %d)", len(key), kv.MaxKeyBytes)
	}
	if _, ok := tr.db.poolFor(key); !ok {
		return errorf(kv.CodeKeyOutsidePools, "key %.60q is in no pool", key)
	}
	return nil
}

func (tr *Tx) usable() error {
	if tr.committed {
		return ErrUsedDuringCommit
	}
	return tr.err
}

// Get returns the value of key, or nil if it is absent (or evicted from an
// ephemeral pool), and adds key to the transaction's read conflicts.
func (tr *Tx) Get(key []byte) ([]byte, error) { return tr.get(key, false) }

func (tr *Tx) get(key []byte, snapshot bool) ([]byte, error) {
	vals, err := tr.getMulti([][]byte{key}, snapshot)
	if err != nil {
		return nil, err
	}
	return vals[0], nil
}

// GetMulti reads several keys, with one request per stash, in parallel.
// Values come back in the order of keys; absent keys give nil.
func (tr *Tx) GetMulti(keys [][]byte) ([][]byte, error) { return tr.getMulti(keys, false) }

func (tr *Tx) getMulti(keys [][]byte, snapshot bool) ([][]byte, error) {
	tr.mu.Lock()
	if err := tr.usable(); err != nil {
		tr.mu.Unlock()
		return nil, err
	}
	tr.snapshotRead = tr.snapshotRead || snapshot
	out := make([][]byte, len(keys))
	var need []int
	var local []*localWrite // writes of this transaction to keys read (nil: none)
	for i, k := range keys {
		if err := tr.checkReadKey(k); err != nil {
			tr.mu.Unlock()
			return nil, err
		}
		w, ok := tr.writes.get(k)
		if !ok && tr.inCleared(k) {
			continue // cleared in this transaction: absent
		}
		if ok && w.baseKnown {
			v, present := w.resolve(nil, false)
			if present {
				out[i] = v
			}
			continue
		}
		if ok {
			if local == nil {
				local = make([]*localWrite, len(keys))
			}
			local[i] = w
		}
		if need == nil {
			need = make([]int, 0, len(keys)-i)
		}
		need = append(need, i)
	}
	tr.mu.Unlock()
	if len(need) == 0 {
		return out, nil
	}
	dbKeys := keys
	if len(need) < len(keys) {
		dbKeys = make([][]byte, len(need))
		for j, i := range need {
			dbKeys[j] = keys[i]
		}
	}
	tr.mu.Lock()
	system := tr.readSystemKeys
	tr.mu.Unlock()
	vals, present, raced, err := tr.readRacingVersion(dbKeys, system)
	if err != nil {
		return nil, err
	}
	if !raced {
		rv, err := tr.getReadVersion()
		if err != nil {
			return nil, err
		}
		if vals, present, err = tr.db.readKeys(tr.ctx, rv, dbKeys, system); err != nil {
			return nil, err
		}
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for j, i := range need {
		v, ok := vals[j], present[j]
		if local != nil && local[i] != nil {
			v, ok = local[i].resolve(v, ok)
		}
		if ok {
			out[i] = v
			if out[i] == nil {
				out[i] = []byte{}
			}
		}
		if !snapshot {
			tr.addReadConflict(kv.PointRange(keys[i]))
		}
	}
	return out, nil
}

// readRacingVersion is getMulti's read of keys when it may race the
// transaction's read version (raceReadVersion): one stash serves them all.
// raced false: the caller is to read as usual, at the read version.
func (tr *Tx) readRacingVersion(keys [][]byte, system bool) (vals [][]byte, present []bool, raced bool, err error) {
	var groups []stashKeys
	raced, err = tr.raceReadVersion(func() bool {
		var gerr error // a failed grouping is the usual read's to report
		groups, gerr = tr.db.groupByStash(keys)
		return gerr == nil && len(groups) == 1
	}, func() (kv.Version, error) {
		vals, present = make([][]byte, len(keys)), make([]bool, len(keys))
		req := &wire.ReadRequest{Stash: groups[0].stash, Keys: keys, ReadSystemKeys: system, AtLatest: true}
		return tr.db.readFromAt(tr.ctx, req, groups[0], vals, present)
	})
	if !raced {
		return nil, nil, false, err
	}
	return vals, present, true, nil
}

// raceReadVersion makes the first read of a transaction that needs a
// fresh read version while that version is on its way, instead of after
// it. read asks one stash at the newest version it has applied and
// returns that version, v; the transaction takes v as its read version if
// v is at least the read version the proxy answers. Every applied version
// is committed, and one at least as new as the read version sees every
// commit acknowledged before the transaction began, so the transaction
// stays strictly serializable; otherwise (the stash is behind) the read's
// results are dropped, the read version is set and raced is false: the
// caller reads as usual. One round trip instead of two in a row, which at
// low load is most of a read's latency, and in a cluster of processes two
// wakeups of idle processes at once rather than one after the other.
//
// It races only when the read version would go on the wire alone (no
// other request in flight: the client is not busy, so the second read it
// may cost is cheap, and a busy client's read versions are shared by many
// transactions anyway) and oneStash says a single stash serves the read
// (asked only then, so a busy client does no work for it). raced is false
// and nothing is read when the transaction has a read version or may
// take a recent one.
func (tr *Tx) raceReadVersion(oneStash func() bool, read func() (kv.Version, error)) (raced bool, err error) {
	tr.mu.Lock()
	unset, recentOK := tr.readVersion == 0, tr.recentOK && !tr.freshOnly
	tr.mu.Unlock()
	if !unset {
		return false, nil
	}
	if recentOK {
		if _, recent := tr.db.recentVersion(); recent {
			return false, nil // no read version to wait for
		}
	}
	if tr.db.raceLosses.Load() >= raceLossLimit && tr.db.raceSkips.Add(1)%raceProbeEvery != 0 {
		return false, nil
	}
	p := tr.db.proxy.Load()
	ch, alone := p.grv.start()
	race := alone && oneStash()
	var at kv.Version
	var rerr error
	if race {
		at, rerr = read()
	}
	rv, err := p.grv.wait(tr.ctx, ch)
	if err != nil {
		tr.db.proxyFailed(p, err)
		return false, err
	}
	tr.db.learnVersion(rv)
	if !race {
		tr.setReadVersion(rv)
		return false, nil
	}
	if rerr == nil && at >= rv {
		if raced = tr.setReadVersion(at) == at; raced {
			tr.db.learnVersion(at)
			tr.db.racesWon.Add(1)
			tr.db.raceLosses.Store(0)
			return true, nil
		}
	}
	tr.db.racesLost.Add(1)
	tr.db.raceLosses.Add(1)
	tr.setReadVersion(rv)
	return false, nil
}

// A client whose stashes answer from behind its read versions (replicas
// in another data center, say) loses every race and reads twice. After
// raceLossLimit races lost in a row, only one first read in
// raceProbeEvery races, until one wins.
const (
	raceLossLimit  = 8
	raceProbeEvery = 16
)

// setReadVersion sets the read version to a fresh one, rv, unless a
// concurrent read of the transaction set one first, and returns the read
// version set.
func (tr *Tx) setReadVersion(rv kv.Version) kv.Version {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.readVersion == 0 {
		tr.readVersion = rv
	}
	return tr.readVersion
}

func (tr *Tx) inCleared(k []byte) bool {
	for _, r := range tr.cleared {
		if r.Contains(k) {
			return true
		}
	}
	return false
}

func (tr *Tx) addReadConflict(r kv.KeyRange) {
	tr.readConf = append(tr.readConf, r)
	tr.size += len(r.Begin) + len(r.End)
}

// readKeys reads keys at version rv, one request per stash, in parallel.
func (db *DB) readKeys(ctx context.Context, rv kv.Version, keys [][]byte, readSystemKeys bool) ([][]byte, []bool, error) {
	vals := make([][]byte, len(keys))
	present := make([]bool, len(keys))
	for attempt := 0; ; attempt++ {
		groups, err := db.groupByStash(keys)
		if err != nil {
			return nil, nil, err
		}
		var first error
		if len(groups) == 1 {
			// The common case, one stash: no goroutine.
			first = db.readFrom(ctx, rv, keys, groups[0], readSystemKeys, vals, present)
		} else {
			var wg sync.WaitGroup
			errs := make(chan error, len(groups))
			for _, g := range groups {
				wg.Add(1)
				go func(g stashKeys) {
					defer wg.Done()
					if err := db.readFrom(ctx, rv, keys, g, readSystemKeys, vals, present); err != nil {
						errs <- err
					}
				}(g)
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if first == nil {
					first = err
				}
			}
		}
		if first != nil && errors.Is(first, ErrWrongShardServer) && attempt < 3 {
			if err := db.refreshShards(ctx); err != nil {
				return nil, nil, err
			}
			continue
		}
		if first != nil && readRetryable(ctx, first) && attempt < 3 {
			// The failed stash is marked down: another replica serves,
			// from a reloaded map if the team named a replaced stash (a
			// failed reload leaves the retry to the old map).
			if db.shardsStale.Load() {
				_ = db.refreshShards(ctx)
			}
			continue
		}
		return vals, present, first
	}
}

// stashKeys are the indexes of the keys one stash is asked for (nil: all
// of them, in order).
type stashKeys struct {
	stash uint32
	idx   []int
}

// groupByStash picks a replica for each key and groups the keys by it.
func (db *DB) groupByStash(keys [][]byte) ([]stashKeys, error) {
	shards := db.shards.Load()
	var groups []stashKeys
	for i, k := range keys {
		s, ok := shards.Lookup(k)
		if !ok {
			return nil, errorf(kv.CodeKeyOutsidePools, "key %.60q is in no shard", k)
		}
		id, err := db.pickFor(s)
		if err != nil {
			return nil, err
		}
		if i == 0 {
			groups = []stashKeys{{stash: id}}
			continue
		}
		if len(groups) == 1 && groups[0].idx == nil && groups[0].stash == id {
			continue // still one stash for every key so far
		}
		if groups[0].idx == nil {
			groups[0].idx = make([]int, i) // the keys before this one
			for j := range i {
				groups[0].idx[j] = j
			}
		}
		g := slices.IndexFunc(groups, func(g stashKeys) bool { return g.stash == id })
		if g < 0 {
			groups = append(groups, stashKeys{stash: id})
			g = len(groups) - 1
		}
		groups[g].idx = append(groups[g].idx, i)
	}
	return groups, nil
}

// readFrom reads g's keys of keys from stash g.stash into vals and present.
func (db *DB) readFrom(ctx context.Context, rv kv.Version, keys [][]byte, g stashKeys, readSystemKeys bool, vals [][]byte, present []bool) error {
	_, err := db.readFromAt(ctx, &wire.ReadRequest{Stash: g.stash, Version: int64(rv), Keys: keys, ReadSystemKeys: readSystemKeys}, g, vals, present)
	return err
}

// readFromAt is readFrom of req (its Keys all of the keys; g says which of
// them this stash is asked for), returning the version the stash answers
// (an at_latest request's).
func (db *DB) readFromAt(ctx context.Context, req *wire.ReadRequest, g stashKeys, vals [][]byte, present []bool) (kv.Version, error) {
	keys := req.Keys
	n := len(keys)
	if g.idx != nil {
		n = len(g.idx)
		req.Keys = make([][]byte, n)
		for j, i := range g.idx {
			req.Keys[j] = keys[i]
		}
	}
	conn, err := db.stashNode(g.stash)
	if err != nil {
		return 0, db.readFailed(ctx, g.stash, err)
	}
	var resp *wire.ReadResponse
	err = db.readStash(ctx, g.stash, func(ctx context.Context, timeout time.Duration) (err error) {
		resp, err = conn.read(ctx, timeout, req)
		return err
	})
	if err == nil {
		err = fromWire(resp.Error)
	}
	if err != nil {
		return 0, db.readFailed(ctx, g.stash, err)
	}
	if len(resp.Values) != n {
		return 0, errorf(kv.CodeInternal, "stash %d answered %d values for %d keys", g.stash, len(resp.Values), n)
	}
	for j, v := range resp.Values {
		i := j
		if g.idx != nil {
			i = g.idx[j]
		}
		vals[i], present[i] = v.Value, v.Present
	}
	return kv.Version(resp.Version), nil
}

// Set writes value to key.
func (tr *Tx) Set(key, value []byte) { tr.SetWithCost(key, value, 0) }

// SetWithCost writes value to key with the cost of recomputing it, which
// an ephemeral pool with camp eviction uses to keep costly entries longer.
func (tr *Tx) SetWithCost(key, value []byte, cost uint32) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.usable() != nil {
		return
	}
	if err := tr.checkKey(key); err != nil {
		tr.err = err
		return
	}
	if len(value) > kv.MaxValueBytes {
		tr.err = errorf(kv.CodeValueTooLarge, "value of %d bytes for key %.40q (limit %d)", len(value), key, kv.MaxValueBytes)
		return
	}
	key, value = clone(key), clone(value)
	if value == nil {
		value = []byte{}
	}
	tr.writes.put(&localWrite{key: key, baseKnown: true, value: value, present: true})
	tr.addMutation(kv.Mutation{Type: kv.MutSet, Key: key, Param: value, Cost: cost}, kv.PointRange(key))
}

// Clear removes key.
func (tr *Tx) Clear(key []byte) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.usable() != nil {
		return
	}
	if err := tr.checkKey(key); err != nil {
		tr.err = err
		return
	}
	key = clone(key)
	tr.writes.put(&localWrite{key: key, baseKnown: true})
	tr.addMutation(kv.Mutation{Type: kv.MutClear, Key: key}, kv.PointRange(key))
}

// ClearRange removes every key in [begin, end). The range must lie in one pool.
func (tr *Tx) ClearRange(begin, end []byte) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.usable() != nil {
		return
	}
	if err := tr.checkKey(begin); err != nil {
		tr.err = err
		return
	}
	if bytes.Compare(end, begin) <= 0 {
		return // empty range
	}
	p, _ := tr.db.poolFor(begin)
	if pe := kv.PrefixEnd(p.prefix); pe != nil && bytes.Compare(end, pe) > 0 {
		tr.err = errorf(kv.CodeKeyOutsidePools, "clear range [%.60q, %.60q) leaves pool %q", begin, end, p.name)
		return
	}
	begin, end = clone(begin), clone(end)
	tr.writes.deleteRange(begin, end)
	r := kv.KeyRange{Begin: begin, End: end}
	tr.cleared = append(tr.cleared, r)
	tr.addMutation(kv.Mutation{Type: kv.MutClearRange, Key: begin, Param: end}, r)
}

// Add adds delta to the little-endian int64 at key (absent counts as 0),
// without a read conflict: concurrent Adds never conflict.
func (tr *Tx) Add(key []byte, delta int64) { tr.atomic(kv.MutAdd, key, delta) }

// Max stores the larger of the int64 at key and v.
func (tr *Tx) Max(key []byte, v int64) { tr.atomic(kv.MutMax, key, v) }

// Min stores the smaller of the int64 at key and v (absent keys take v).
func (tr *Tx) Min(key []byte, v int64) { tr.atomic(kv.MutMin, key, v) }

func (tr *Tx) atomic(t kv.MutationType, key []byte, operand int64) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.usable() != nil {
		return
	}
	if err := tr.checkKey(key); err != nil {
		tr.err = err
		return
	}
	key = clone(key)
	m := kv.Mutation{Type: t, Key: key, Param: kv.EncodeInt64(operand)}
	w, ok := tr.writes.get(key)
	if !ok {
		w = &localWrite{key: key}
		if tr.inCleared(key) {
			w.baseKnown = true
		}
		tr.writes.put(w)
	}
	w.ops = append(w.ops, m)
	tr.addMutation(m, kv.PointRange(key))
}

func (tr *Tx) addMutation(m kv.Mutation, conflict kv.KeyRange) {
	tr.mutations = append(tr.mutations, m)
	tr.writeConf = append(tr.writeConf, conflict)
	tr.size += m.Bytes() + len(conflict.Begin) + len(conflict.End)
	if tr.size > kv.MaxTransactionBytes && tr.err == nil {
		tr.err = errorf(kv.CodeTransactionTooLarge, "transaction of %d bytes (limit %d)", tr.size, kv.MaxTransactionBytes)
	}
}

func clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte{}, b...)
}

// Commit commits the transaction's writes. A transaction without writes
// commits without contacting the cluster. On ErrNotCommitted nothing was
// written; retry with a new transaction (Transact does this for you).
func (tr *Tx) Commit() error {
	tr.mu.Lock()
	if err := tr.usable(); err != nil {
		tr.mu.Unlock()
		return err
	}
	tr.committed = true
	readOnly := len(tr.mutations) == 0 && len(tr.writeConf) == 0
	if tr.usedRecent && (readOnly || tr.snapshotRead) {
		tr.mu.Unlock()
		return errRecentUnchecked
	}
	if readOnly {
		tr.mu.Unlock()
		return nil
	}
	blind := len(tr.readConf) == 0 && tr.readVersion == 0
	tr.mu.Unlock()
	var rv kv.Version
	if !blind {
		// A transaction that read nothing conflicts with nothing: it needs
		// no read version and serializes at its commit version.
		var err error
		if rv, err = tr.getReadVersion(); err != nil {
			return err
		}
	}
	tr.mu.Lock()
	req := &wire.CommitRequest{ReadVersion: int64(rv), UnthrottledReadVersion: tr.usedRecent}
	for _, r := range tr.readConf {
		req.ReadConflicts = append(req.ReadConflicts, &wire.KeyRange{Begin: r.Begin, End: r.End})
	}
	for _, r := range tr.writeConf {
		req.WriteConflicts = append(req.WriteConflicts, &wire.KeyRange{Begin: r.Begin, End: r.End})
	}
	for _, m := range tr.mutations {
		req.Mutations = append(req.Mutations, &wire.Mutation{Type: uint32(m.Type), Key: m.Key, Param: m.Param, Cost: m.Cost})
	}
	tr.mu.Unlock()
	p := tr.db.proxy.Load()
	resp, err := commitOver(tr.ctx, commitTimeout, p.commits, p.stalled, req)
	if err != nil {
		// Sent, or maybe sent: it may have committed. Never a false success,
		// never a false failure.
		if tr.ctx.Err() != nil {
			return errorf(kv.CodeCommitUnknownResult, "%v", err)
		}
		tr.db.refreshView(p) // the stateless node may have failed or moved
		return errorf(kv.CodeCommitUnknownResult, "commit request failed: %v", err)
	}
	if err := fromWire(resp.Error); err != nil {
		tr.db.proxyFailed(p, err)
		return err
	}
	tr.mu.Lock()
	tr.commitVer = kv.Version(resp.Version)
	tr.mu.Unlock()
	tr.db.learnVersion(kv.Version(resp.Version))
	return nil
}

// AddReadConflictRange makes the transaction conflict with any commit that
// writes into [begin, end) after its read version.
func (tr *Tx) AddReadConflictRange(begin, end []byte) {
	tr.mu.Lock()
	tr.addReadConflict(kv.KeyRange{Begin: clone(begin), End: clone(end)})
	tr.mu.Unlock()
}

// AddWriteConflictRange makes concurrent readers of [begin, end) conflict
// with this transaction as if it had written there.
func (tr *Tx) AddWriteConflictRange(begin, end []byte) {
	tr.mu.Lock()
	r := kv.KeyRange{Begin: clone(begin), End: clone(end)}
	tr.writeConf = append(tr.writeConf, r)
	tr.size += len(r.Begin) + len(r.End)
	tr.mu.Unlock()
}
