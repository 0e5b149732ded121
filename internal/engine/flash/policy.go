package flash

import "github.com/google/btree"

// Eviction order of an ephemeral engine, over the keys it holds. The
// policies are the engine package's two: "lru" and "camp" (GreedyDual-Size
// with a cost per key). Both count a Get hit and a write as a reference.
// The order is kept in DRAM next to the key tree; evicting drops the key
// from the index, and its bytes in the log become garbage for the cleaner.

// pnode is a key's place in the eviction order. Protected by Engine.pmu.
type pnode struct {
	key        []byte
	size       int64
	cost       uint32
	prev, next *pnode
	h          float64
	seq        uint64
}

type policy interface {
	add(n *pnode)    // a new or rewritten key: just used
	touch(n *pnode)  // a reference
	remove(n *pnode) // the key left
	evict() *pnode   // the coldest key, removed from the order
	// coldest calls fn for the keys, coldest first, until fn returns false.
	coldest(fn func(n *pnode) bool)
}

func newPolicy(name string) policy {
	if name == "camp" {
		return &camp{tree: btree.NewG(32, func(a, b *pnode) bool {
			if a.h != b.h {
				return a.h < b.h
			}
			return a.seq < b.seq
		})}
	}
	l := &lru{}
	l.head.next, l.head.prev = &l.head, &l.head
	return l
}

// lru is a circular list, most recently used first.
type lru struct{ head pnode }

func (l *lru) add(n *pnode) {
	n.prev = &l.head
	n.next = l.head.next
	n.next.prev = n
	l.head.next = n
}

func (l *lru) touch(n *pnode) {
	if n.prev == nil || l.head.next == n {
		return
	}
	l.remove(n)
	l.add(n)
}

func (l *lru) remove(n *pnode) {
	if n.prev == nil {
		return
	}
	n.prev.next = n.next
	n.next.prev = n.prev
	n.prev, n.next = nil, nil
}

func (l *lru) evict() *pnode {
	n := l.head.prev
	if n == &l.head {
		return nil
	}
	l.remove(n)
	return n
}

func (l *lru) coldest(fn func(n *pnode) bool) {
	for n := l.head.prev; n != &l.head; n = n.prev {
		if !fn(n) {
			return
		}
	}
}

// camp keeps priorities H = L + cost/size and evicts the smallest, raising
// L to it; ties go to the least recently used.
type camp struct {
	l    float64
	seq  uint64
	tree *btree.BTreeG[*pnode]
}

func (c *camp) add(n *pnode) {
	cost := float64(n.cost)
	if cost == 0 {
		cost = 1
	}
	size := float64(n.size)
	if size < 1 {
		size = 1
	}
	c.seq++
	n.h = c.l + cost/size
	n.seq = c.seq
	c.tree.ReplaceOrInsert(n)
}

func (c *camp) touch(n *pnode) {
	if _, ok := c.tree.Delete(n); ok {
		c.add(n)
	}
}

func (c *camp) remove(n *pnode) { c.tree.Delete(n) }

func (c *camp) evict() *pnode {
	n, ok := c.tree.DeleteMin()
	if !ok {
		return nil
	}
	if n.h > c.l {
		c.l = n.h
	}
	return n
}

func (c *camp) coldest(fn func(n *pnode) bool) { c.tree.Ascend(fn) }
