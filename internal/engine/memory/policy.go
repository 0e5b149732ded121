package memory

import "github.com/google/btree"

// policy orders the entries of an engine for eviction. The engine calls it
// with its mutex held.
type policy interface {
	// add starts tracking e as just used (a new entry or a rewritten one).
	add(e *entry)
	// touch records a reference to the tracked entry e (a Get hit).
	touch(e *entry)
	// remove stops tracking e.
	remove(e *entry)
	// evict stops tracking the coldest entry and returns it, nil when empty.
	evict() *entry
	// coldest calls fn for the tracked entries, coldest first, until fn
	// returns false.
	coldest(fn func(e *entry) bool)
}

// lru is a least-recently-used order kept in an intrusive circular list:
// head.next is the most recently used entry, head.prev the least.
type lru struct {
	head entry
}

func newLRU() *lru {
	l := &lru{}
	l.head.next = &l.head
	l.head.prev = &l.head
	return l
}

func (l *lru) add(e *entry) {
	e.tracked = true
	e.prev = &l.head
	e.next = l.head.next
	e.next.prev = e
	l.head.next = e
}

func (l *lru) touch(e *entry) {
	if l.head.next == e {
		return
	}
	l.remove(e)
	l.add(e)
}

func (l *lru) remove(e *entry) {
	e.prev.next = e.next
	e.next.prev = e.prev
	e.prev, e.next = nil, nil
	e.tracked = false
}

func (l *lru) evict() *entry {
	e := l.head.prev
	if e == &l.head {
		return nil
	}
	l.remove(e)
	return e
}

func (l *lru) coldest(fn func(e *entry) bool) {
	for e := l.head.prev; e != &l.head; e = e.prev {
		if !fn(e) {
			return
		}
	}
}

// camp is cost-aware eviction in the GreedyDual-Size style: an entry's
// priority is H = L + cost/size, the entry with the smallest H is evicted
// and L rises to its H, so entries that are not referenced age relative to
// newer ones while expensive-to-recompute entries stay longer than cheap
// ones of the same size. A reference refreshes H to L + cost/size. Entries
// are kept in a B-tree ordered by (H, seq); seq breaks ties in least
// recently used order.
type camp struct {
	l    float64
	seq  uint64
	tree *btree.BTreeG[*entry]
}

func newCAMP() *camp {
	return &camp{tree: btree.NewG(32, func(a, b *entry) bool {
		if a.h != b.h {
			return a.h < b.h
		}
		return a.seq < b.seq
	})}
}

func (c *camp) add(e *entry) {
	cost := float64(e.cost)
	if cost == 0 {
		cost = 1
	}
	size := float64(e.size)
	if size < 1 {
		size = 1
	}
	c.seq++
	e.tracked = true
	e.h = c.l + cost/size
	e.seq = c.seq
	c.tree.ReplaceOrInsert(e)
}

func (c *camp) touch(e *entry) {
	c.tree.Delete(e)
	c.add(e)
}

func (c *camp) remove(e *entry) {
	c.tree.Delete(e)
	e.tracked = false
}

func (c *camp) evict() *entry {
	e, ok := c.tree.DeleteMin()
	if !ok {
		return nil
	}
	e.tracked = false
	if e.h > c.l {
		c.l = e.h
	}
	return e
}

func (c *camp) coldest(fn func(e *entry) bool) { c.tree.Ascend(fn) }
