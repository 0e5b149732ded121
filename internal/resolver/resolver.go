package resolver

import (
	"bytes"
	"fmt"
	"sync"

	"github.com/google/btree"

	"github.com/distash/distash/internal/kv"
)

// DefaultWindow is the MVCC window, in versions, of FoundationDB (5 s).
const DefaultWindow kv.Version = 5 * kv.VersionsPerSecond

// Txn is what the resolver needs of a transaction: the version it read at and
// the key ranges it read and wrote. The resolver copies the keys it keeps; the
// caller may reuse the slices once Resolve returns.
type Txn struct {
	ReadVersion kv.Version
	ReadRanges  []kv.KeyRange
	WriteRanges []kv.KeyRange
}

// Outcome is the resolver's verdict on one transaction.
type Outcome uint8

const (
	// Committed: no conflict; the transaction's writes are now in the
	// history at the batch's version.
	Committed Outcome = iota + 1
	// Conflict: a read range intersects a write committed after the
	// transaction's read version (FoundationDB's not_committed).
	Conflict
	// TooOld: the read version is older than the oldest version the resolver
	// remembers (FoundationDB's transaction_too_old).
	TooOld
)

func (o Outcome) String() string {
	switch o {
	case Committed:
		return "committed"
	case Conflict:
		return "conflict"
	case TooOld:
		return "too_old"
	}
	return fmt.Sprintf("outcome(%d)", uint8(o))
}

// Stats describes a resolver's state and counters.
type Stats struct {
	Boundaries int        // boundaries held in the step function
	Version    kv.Version // version of the last batch resolved
	Oldest     kv.Version // oldest version remembered (OldestVersion)
	Batches    uint64     // batches resolved
	Txns       uint64     // transactions resolved
	Committed  uint64     // transactions committed
	Conflicts  uint64     // transactions that conflicted
	TooOld     uint64     // transactions too old
	Sweeps     uint64     // complete pruning passes over the key space
	Pruned     uint64     // boundaries removed by pruning
}

// entry is one boundary of the step function: the segment starting at key
// (up to the next boundary) has version v. pre holds the key's first 32
// bytes inline (kv.KeyPrefix), so that most comparisons in the tree read
// only the entry itself and not the key bytes it points to.
type entry struct {
	pre kv.KeyPrefix
	key []byte
	v   kv.Version
}

// mk returns the entry of key k at version v.
func mk(k []byte, v kv.Version) entry { return entry{pre: kv.PrefixOf(k), key: k, v: v} }

// lessEntry orders entries as bytes.Compare orders their keys.
func lessEntry(a, b entry) bool { return kv.LessKeys(&a.pre, a.key, &b.pre, b.key) }

const (
	btreeDegree = 32
	// sweepBase, sweepFactor and sweepPasses set the pruning budget of one
	// batch: sweepBase + sweepFactor*(boundaries the batch added) +
	// sweepPasses*(boundaries held when the pass began)*(versions since the
	// last batch)/window. The last term completes a pass over the whole map
	// within window/sweepPasses versions whatever the batches hold, so
	// writes are forgotten within about three windows: without it, after a
	// burst of writes, the idle batches' sweepBase took hours to forget the
	// burst's millions of boundaries.
	sweepBase   = 128
	sweepFactor = 4
	sweepPasses = 1
)

// Resolver detects conflicts between transactions over an MVCC window.
type Resolver struct {
	mu     sync.Mutex
	window kv.Version
	last   kv.Version // version of the last batch (or the start version)
	oldest kv.Version // reads older than this are too old
	tree   *btree.BTreeG[entry]

	// pruning sweep
	cursor      []byte // next boundary to visit; nil: start of the key space
	passSize    int    // boundaries held when the current pass began
	sweepBase   int
	sweepFactor int
	sweepPasses int

	stats Stats

	// Scratch state of the tree iterators, bound once in newResolver so the
	// hot paths do not allocate closures.
	hits      [2]entry
	pivot     []byte // k+0x00 of a point write, reused
	nhits     int
	take1     func(entry) bool
	take2     func(entry) bool
	checkRV   kv.Version
	conflict  bool
	checkFn   func(entry) bool
	scratch   []entry
	collectFn func(entry) bool
	sweepLeft int
	sweepPrev kv.Version
	sweepStop bool
	upd       []entry
	sweepFn   func(entry) bool
}

// New returns a resolver with an MVCC window of windowVersions versions
// (DefaultWindow is FoundationDB's 5 s). It has seen every version up to 0:
// the first batch must have a version > 0.
func New(windowVersions kv.Version) *Resolver { return NewAt(windowVersions, 0) }

// NewAt returns a resolver that starts at version start, as one recruited by
// a recovery: it has not seen the writes of versions <= start, so reads at
// versions older than start are TooOld, and the first batch must have a
// version > start.
func NewAt(windowVersions, start kv.Version) *Resolver {
	if windowVersions <= 0 {
		panic(fmt.Sprintf("resolver: window %d must be positive", windowVersions))
	}
	if start < 0 {
		panic(fmt.Sprintf("resolver: start version %d must not be negative", start))
	}
	r := &Resolver{
		window:      windowVersions,
		last:        start,
		oldest:      start,
		tree:        btree.NewG[entry](btreeDegree, lessEntry),
		sweepBase:   sweepBase,
		sweepFactor: sweepFactor,
		sweepPasses: sweepPasses,
	}
	r.tree.ReplaceOrInsert(mk([]byte{}, 0))
	r.take1 = func(e entry) bool {
		r.hits[0] = e
		r.nhits = 1
		return false
	}
	r.take2 = func(e entry) bool {
		r.hits[r.nhits] = e
		r.nhits++
		return r.nhits < 2
	}
	r.checkFn = func(e entry) bool {
		if e.v > r.checkRV {
			r.conflict = true
			return false
		}
		return true
	}
	r.collectFn = func(e entry) bool {
		r.scratch = append(r.scratch, e)
		return true
	}
	r.sweepFn = r.sweepVisit
	return r
}

// OldestVersion returns the oldest version the resolver remembers: a
// transaction with reads whose read version is older is TooOld.
func (r *Resolver) OldestVersion() kv.Version {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.oldest
}

// Stats returns the resolver's state and counters.
func (r *Resolver) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.stats
	s.Boundaries = r.tree.Len()
	s.Version = r.last
	s.Oldest = r.oldest
	return s
}

// Resolve decides the transactions of one commit batch at commit version
// version, in order, and returns one outcome per transaction. Batches must
// arrive in strictly increasing version order; Resolve panics otherwise.
func (r *Resolver) Resolve(version kv.Version, txns []Txn) []Outcome {
	r.mu.Lock()
	defer r.mu.Unlock()
	if version <= r.last {
		panic(fmt.Sprintf("resolver: batch version %d is not after the previous batch version %d", version, r.last))
	}
	elapsed := version - r.last
	r.last = version
	if o := version - r.window; o > r.oldest {
		r.oldest = o
	}
	before := r.tree.Len()
	out := make([]Outcome, len(txns))
	for i := range txns {
		o := r.resolveTxn(version, &txns[i])
		out[i] = o
		switch o {
		case Committed:
			r.stats.Committed++
		case Conflict:
			r.stats.Conflicts++
		case TooOld:
			r.stats.TooOld++
		}
	}
	r.stats.Batches++
	r.stats.Txns += uint64(len(txns))
	budget := r.sweepBase
	if grown := r.tree.Len() - before; grown > 0 {
		budget += r.sweepFactor * grown
	}
	if r.cursor == nil {
		r.passSize = r.tree.Len()
	}
	if r.sweepPasses > 0 {
		n := int64(r.passSize)
		budget += int(min(n, int64(r.sweepPasses)*n*int64(min(elapsed, r.window))/int64(r.window)))
	}
	r.sweep(budget)
	return out
}

func (r *Resolver) resolveTxn(version kv.Version, t *Txn) Outcome {
	if len(t.ReadRanges) > 0 {
		if t.ReadVersion < r.oldest {
			return TooOld
		}
		rv := t.ReadVersion
		if rv >= version {
			rv = version - 1
		}
		for _, rr := range t.ReadRanges {
			if r.readConflicts(rr.Begin, rr.End, rv) {
				return Conflict
			}
		}
	}
	for _, w := range t.WriteRanges {
		r.write(w.Begin, w.End, version)
	}
	return Committed
}

// isPoint reports whether [b, e) is the point range [b, b+0x00).
func isPoint(b, e []byte) bool {
	return len(e) == len(b)+1 && e[len(b)] == 0 && bytes.Equal(e[:len(b)], b)
}

// isEmpty reports whether [b, e) holds no key (a nil e is the end of the key
// space).
func isEmpty(b, e []byte) bool { return e != nil && bytes.Compare(b, e) >= 0 }

// floor returns the boundary of the segment holding k.
func (r *Resolver) floor(k []byte) entry {
	r.tree.DescendLessOrEqual(mk(k, 0), r.take1)
	e := r.hits[0]
	r.hits[0] = entry{}
	return e
}

// readConflicts reports whether some key of [b, e) has a version > rv.
func (r *Resolver) readConflicts(b, e []byte, rv kv.Version) bool {
	if isEmpty(b, e) {
		return false
	}
	if r.floor(b).v > rv {
		return true
	}
	if isPoint(b, e) {
		return false // a point intersects its floor segment only
	}
	r.checkRV, r.conflict = rv, false
	if e == nil {
		r.tree.AscendGreaterOrEqual(mk(b, 0), r.checkFn)
	} else {
		r.tree.AscendRange(mk(b, 0), mk(e, 0), r.checkFn)
	}
	return r.conflict
}

// write sets the version of every key of [b, e) to v, the newest version.
func (r *Resolver) write(b, e []byte, v kv.Version) {
	if isEmpty(b, e) {
		return
	}
	if isPoint(b, e) {
		r.writePoint(b, v)
		return
	}
	// The version of the keys from e on, to restore at e.
	var endV kv.Version
	endExists := false
	if e != nil {
		f := r.floor(e)
		endV, endExists = f.v, bytes.Equal(f.key, e)
	}
	// Boundaries in [b, e): the one at b (if any) is reused, the others go.
	r.scratch = r.scratch[:0]
	if e == nil {
		r.tree.AscendGreaterOrEqual(mk(b, 0), r.collectFn)
	} else {
		r.tree.AscendRange(mk(b, 0), mk(e, 0), r.collectFn)
	}
	var bEntry entry
	bExists := false
	for i, x := range r.scratch {
		if i == 0 && bytes.Equal(x.key, b) {
			bEntry, bExists = x, true
			continue
		}
		r.tree.Delete(x)
	}
	clear(r.scratch)
	r.scratch = r.scratch[:0]
	if e != nil && !endExists && endV != v {
		r.tree.ReplaceOrInsert(mk(bytes.Clone(e), endV))
	}
	if !bExists {
		k := bytes.Clone(b)
		if k == nil {
			k = []byte{}
		}
		bEntry = mk(k, 0)
	}
	bEntry.v = v
	r.tree.ReplaceOrInsert(bEntry)
}

// writePoint sets the version of key k to v, the newest version.
func (r *Resolver) writePoint(k []byte, v kv.Version) {
	n := len(k)
	// One descent from k+0x00 yields the boundary at k+0x00 (if any) and the
	// floor of k: nothing lies strictly between k and k+0x00.
	r.pivot = append(append(r.pivot[:0], k...), 0)
	r.nhits = 0
	r.tree.DescendLessOrEqual(mk(r.pivot, 0), r.take2)
	h0, h1, nh := r.hits[0], r.hits[1], r.nhits
	r.hits = [2]entry{}
	var fk entry // floor of k
	endExists := len(h0.key) == n+1 && h0.key[n] == 0 && bytes.Equal(h0.key[:n], k)
	if endExists {
		if nh < 2 {
			panic("resolver: no boundary at the empty key") // invariant 1
		}
		fk = h1
	} else {
		fk = h0
	}
	if fk.v == v {
		return // the segment holding k, which extends past k, is at v already
	}
	kExists := bytes.Equal(fk.key, k)
	var buf []byte
	switch {
	case !endExists:
		buf = make([]byte, n+1) // k and k+0x00 share one allocation
		copy(buf, k)
		r.tree.ReplaceOrInsert(mk(buf, fk.v))
	case !kExists:
		buf = make([]byte, n)
		copy(buf, k)
	}
	if kExists {
		fk.v = v
		r.tree.ReplaceOrInsert(fk)
	} else {
		r.tree.ReplaceOrInsert(mk(buf[:n:n], v))
	}
}

// sweep advances the pruning sweep by up to budget boundaries: versions
// <= r.oldest become 0 and boundaries equal to their predecessor go.
func (r *Resolver) sweep(budget int) {
	if budget <= 0 {
		return
	}
	r.sweepLeft, r.sweepStop = budget, false
	r.scratch, r.upd = r.scratch[:0], r.upd[:0]
	if r.cursor == nil {
		r.sweepPrev = -1 // the empty key has no predecessor
		r.tree.Ascend(r.sweepFn)
	} else {
		// The predecessor's version (already swept, or not: merging with an
		// unswept one is just as correct).
		r.nhits = 0
		r.tree.DescendLessOrEqual(mk(r.cursor, 0), r.take2)
		p := r.hits[0]
		if bytes.Equal(p.key, r.cursor) {
			p = r.hits[1]
		}
		r.hits = [2]entry{}
		r.sweepPrev = p.v
		if p.v <= r.oldest {
			r.sweepPrev = 0
		}
		r.tree.AscendGreaterOrEqual(mk(r.cursor, 0), r.sweepFn)
	}
	if !r.sweepStop {
		r.cursor = nil
		r.stats.Sweeps++
	}
	for _, x := range r.scratch {
		r.tree.Delete(x)
	}
	for _, x := range r.upd {
		r.tree.ReplaceOrInsert(x)
	}
	r.stats.Pruned += uint64(len(r.scratch))
	clear(r.scratch)
	clear(r.upd)
	r.scratch, r.upd = r.scratch[:0], r.upd[:0]
	// Keep the scratch arrays for the next sweep unless a large one (after
	// a burst of writes) made them large: they would hold their peak size,
	// tens of megabytes, for good.
	if cap(r.scratch) > maxScratch {
		r.scratch = nil
	}
	if cap(r.upd) > maxScratch {
		r.upd = nil
	}
}

// maxScratch is the capacity of the sweep's scratch arrays kept between
// sweeps.
const maxScratch = 1 << 14

func (r *Resolver) sweepVisit(x entry) bool {
	if r.sweepLeft <= 0 {
		r.cursor, r.sweepStop = x.key, true
		return false
	}
	r.sweepLeft--
	nv := x.v
	if nv <= r.oldest {
		nv = 0
	}
	if len(x.key) > 0 && nv == r.sweepPrev {
		r.scratch = append(r.scratch, x) // merges into its predecessor
		return true
	}
	if nv != x.v {
		x.v = nv
		r.upd = append(r.upd, x)
	}
	r.sweepPrev = nv
	return true
}

// compact runs a full pruning pass from the start of the key space (tests).
func (r *Resolver) compact() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cursor = nil
	r.sweep(r.tree.Len() + 1)
}
