package stash

import (
	"bytes"
	"sort"

	"github.com/google/btree"

	"github.com/distash/distash/internal/kv"
)

// version of one key in the MVCC window. present=false is a clear.
type versioned struct {
	version kv.Version
	value   []byte
	present bool
	cost    uint32
}

// windowKey is a key's history inside the window, oldest first.
type windowKey struct {
	key  []byte
	hist []versioned
}

func lessWindowKey(a, b *windowKey) bool { return bytes.Compare(a.key, b.key) < 0 }

// rangeClear is a clear of [begin, end) at version.
type rangeClear struct {
	version    kv.Version
	begin, end []byte
}

// versionKeys lists the keys a version touched, each once, so a flush
// visits only them, without looking them up in the tree.
type versionKeys struct {
	version kv.Version
	keys    []*windowKey
	bytes   int64
}

// window is the in-memory MVCC window of a stash: every mutation with a
// version in (durable, applied]. It is not safe for concurrent use; the
// stash guards it.
type window struct {
	keys        *btree.BTreeG[*windowKey]
	rangeClears []rangeClear // oldest first
	clears      clearIndex   // the same clears, by key
	queue       []versionKeys
	// bytes is the memory the window holds: key and value bytes plus the
	// overheads below, so that the stash's WindowBytes bounds memory and not
	// just payload.
	bytes int64
}

func newWindow() *window {
	return &window{keys: btree.NewG(16, lessWindowKey), clears: newClearIndex()}
}

// What the window's structures cost besides key and value bytes. For small
// pairs they are most of the window's memory: counting 48 bytes a mutation,
// as the window once did, 200k one-version puts of 10-byte keys and 8-byte
// values were counted as 13 MB and held 41 MB. The figures are measured
// with 10-byte keys on amd64 and include the slack of append's growth;
// TestWindowBytesBoundMemory checks them against the heap. (Values alias
// the log's memory: the window counts their length as if it held them.)
const (
	// putOverhead is what every mutation adds: a history slot (versioned,
	// 40 bytes) and a slot in its version's key list (8 bytes).
	putOverhead = 96
	// keyOverhead is what a key new to the window adds: its windowKey (48
	// bytes), its B-tree slot and the rounding of its copied bytes.
	keyOverhead = 64
	// versionOverhead is what a version adds: its queue element
	// (versionKeys, 40 bytes).
	versionOverhead = 48
	// rangeClearOverhead is what a range clear adds: its rangeClear
	// (56 bytes) and the rounding of its copied bounds.
	rangeClearOverhead = 80
)

// latest returns the newest version of key in the window at or below v,
// taking range clears into account. found=false means the window says
// nothing and the engine's value stands.
func (w *window) at(key []byte, v kv.Version) (value []byte, present, found bool) {
	var best kv.Version = -1
	// An empty window (reads of data at rest) needs no probe key.
	if w.keys.Len() > 0 {
		if wk, ok := w.keys.Get(&windowKey{key: key}); ok {
			for i := len(wk.hist) - 1; i >= 0; i-- {
				if h := wk.hist[i]; h.version <= v {
					best, value, present, found = h.version, h.value, h.present, true
					break
				}
			}
		}
	}
	if w.clears.clearedIn(key, best, v) {
		return nil, false, true
	}
	return value, present, found
}

// clearedAt reports whether a range clear newer than floor and at or below v
// covers key.
func (w *window) clearedAt(key []byte, v kv.Version) bool { return w.clears.clearedIn(key, -1, v) }

// put records a new version of key. Versions arrive in increasing order.
func (w *window) put(v kv.Version, key []byte, value []byte, present bool, cost uint32) {
	if present && value == nil {
		value = []byte{} // an empty value, not a clear (the wire turns empty into nil)
	}
	n := int64(len(value) + putOverhead)
	wk, ok := w.keys.Get(&windowKey{key: key})
	if !ok {
		wk = &windowKey{key: append([]byte(nil), key...)}
		w.keys.ReplaceOrInsert(wk)
		n += int64(len(key) + keyOverhead)
	}
	again := len(wk.hist) > 0 && wk.hist[len(wk.hist)-1].version == v // a second mutation of key at v
	wk.hist = append(wk.hist, versioned{version: v, value: value, present: present, cost: cost})
	w.bytes += n
	q := w.versionKeys(v)
	if !again {
		q.keys = append(q.keys, wk)
	}
	q.bytes += n
}

// versionKeys returns the queue element of v, the newest version, adding
// it if v is new.
func (w *window) versionKeys(v kv.Version) *versionKeys {
	if len(w.queue) == 0 || w.queue[len(w.queue)-1].version != v {
		w.queue = append(w.queue, versionKeys{version: v, bytes: versionOverhead})
		w.bytes += versionOverhead
	}
	return &w.queue[len(w.queue)-1]
}

// clearRange records a clear of [begin, end) at v: a tombstone for every
// window key inside, and a range clear for keys only the engine holds.
func (w *window) clearRange(v kv.Version, begin, end []byte) {
	var inside [][]byte
	w.keys.AscendRange(&windowKey{key: begin}, &windowKey{key: end}, func(wk *windowKey) bool {
		inside = append(inside, wk.key)
		return true
	})
	for _, k := range inside {
		w.put(v, k, nil, false, 0)
	}
	rc := rangeClear{version: v, begin: append([]byte(nil), begin...), end: append([]byte(nil), end...)}
	w.rangeClears = append(w.rangeClears, rc)
	w.clears.add(rc.begin, rc.end, v)
	n := int64(len(begin) + len(end) + rangeClearOverhead)
	w.bytes += n
	w.versionKeys(v).bytes += n
}

// flushPlan is what moving versions <= target into the engine writes: range
// clears first, then the newest state of every point key.
type flushPlan struct {
	target      kv.Version
	rangeClears []rangeClear
	keys        []*windowKey
	latest      []versioned
}

// plan collects the writes of versions <= target without changing the window.
func (w *window) plan(target kv.Version) flushPlan {
	p := flushPlan{target: target}
	for _, rc := range w.rangeClears {
		if rc.version > target {
			break
		}
		p.rangeClears = append(p.rangeClears, rc)
	}
	for _, q := range w.queue {
		if q.version > target {
			break
		}
		for _, wk := range q.keys {
			// The queue lists a key once per version, oldest first, and its
			// history starts at its oldest version in the window: visit the
			// key at that one.
			if len(wk.hist) == 0 || wk.hist[0].version != q.version {
				continue
			}
			var last *versioned
			for i := range wk.hist {
				if wk.hist[i].version <= target {
					last = &wk.hist[i]
				}
			}
			if last != nil {
				p.keys = append(p.keys, wk)
				p.latest = append(p.latest, *last)
			}
		}
	}
	return p
}

// drop removes versions <= target from the window after they reached the
// engine. What remains is copied to new arrays from nil: a slice made with
// s[:0:0] still points at, and keeps alive, the whole old array (a queue
// of the keys of every version dropped, and through them their values,
// which alias the log's entries).
func (w *window) drop(target kv.Version) {
	n := 0
	for n < len(w.rangeClears) && w.rangeClears[n].version <= target {
		rc := w.rangeClears[n]
		w.bytes -= int64(len(rc.begin) + len(rc.end) + rangeClearOverhead)
		w.clears.drop(rc.begin, rc.end, target)
		n++
	}
	w.rangeClears = append([]rangeClear(nil), w.rangeClears[n:]...)
	q := 0
	for q < len(w.queue) && w.queue[q].version <= target {
		for _, wk := range w.queue[q].keys {
			if len(wk.hist) == 0 {
				continue // left the tree at an earlier version of this drop
			}
			i := 0
			for i < len(wk.hist) && wk.hist[i].version <= target {
				w.bytes -= int64(len(wk.hist[i].value) + putOverhead)
				i++
			}
			if i == len(wk.hist) {
				w.keys.Delete(wk)
				wk.hist = nil
				w.bytes -= int64(len(wk.key) + keyOverhead)
			} else if i > 0 {
				wk.hist = append([]versioned(nil), wk.hist[i:]...)
			}
		}
		w.bytes -= versionOverhead
		q++
	}
	w.queue = append([]versionKeys(nil), w.queue[q:]...)
}

// targetForBytes returns the smallest version whose flush leaves at most
// limit bytes in the window.
func (w *window) targetForBytes(limit int64) kv.Version {
	remaining := w.bytes
	var target kv.Version
	for _, q := range w.queue {
		if remaining <= limit {
			break
		}
		remaining -= q.bytes
		target = q.version
	}
	return target
}

// overlay is a window's view of a key range at a version, for merging with
// an engine scan.
type overlay struct {
	keys        [][]byte
	values      [][]byte
	present     []bool
	rangeClears []rangeClear // disjoint, in key order; no versions
}

func (w *window) overlay(begin, end []byte, v kv.Version) overlay {
	var o overlay
	visit := func(wk *windowKey) bool {
		for i := len(wk.hist) - 1; i >= 0; i-- {
			if h := wk.hist[i]; h.version <= v {
				present := h.present && !w.clearedAfter(wk.key, h.version, v)
				o.keys = append(o.keys, wk.key)
				o.values = append(o.values, h.value)
				o.present = append(o.present, present)
				break
			}
		}
		return true
	}
	if end == nil {
		w.keys.AscendGreaterOrEqual(&windowKey{key: begin}, visit)
	} else {
		w.keys.AscendRange(&windowKey{key: begin}, &windowKey{key: end}, visit)
	}
	// The cleared parts of the range at v, disjoint and in key order.
	for _, f := range w.clears.overlapping(begin, end) {
		if f.versions[0] <= v {
			o.rangeClears = append(o.rangeClears, rangeClear{begin: f.begin, end: f.end})
		}
	}
	return o
}

func (w *window) clearedAfter(key []byte, after, v kv.Version) bool {
	return w.clears.clearedIn(key, after, v)
}

// cleared reports whether a clear of the window at the overlay's version
// covers key.
func (o *overlay) cleared(key []byte) bool {
	rcs := o.rangeClears
	i := sort.Search(len(rcs), func(i int) bool { return bytes.Compare(rcs[i].end, key) > 0 })
	return i < len(rcs) && bytes.Compare(key, rcs[i].begin) >= 0
}
