package distash

import (
	"bytes"
	"slices"

	"github.com/google/btree"
)

// smallWrites is how many keys a transaction's writeSet holds in a sorted
// slice before it moves them into a B-tree.
const smallWrites = 16

// writeSet is a transaction's own writes by key. Most transactions write a
// few keys: a sorted slice serves them with one allocation where a B-tree
// costs a tree, a node and its item slices before the first key (2-3% of
// a single-key commit's CPU). Past smallWrites keys it is a B-tree, so a
// transaction of many writes keeps logarithmic lookups.
type writeSet struct {
	small []*localWrite // sorted by key, unused once tree is set
	tree  *btree.BTreeG[*localWrite]
}

// empty reports whether the set holds no key.
func (s *writeSet) empty() bool {
	if s.tree != nil {
		return s.tree.Len() == 0
	}
	return len(s.small) == 0
}

// search returns the index of the first small entry whose key is >= k, and
// whether its key is k.
func (s *writeSet) search(k []byte) (int, bool) {
	return slices.BinarySearchFunc(s.small, k, func(w *localWrite, k []byte) int { return bytes.Compare(w.key, k) })
}

// get returns the write of key k.
func (s *writeSet) get(k []byte) (*localWrite, bool) {
	if s.tree != nil {
		return s.tree.Get(&localWrite{key: k})
	}
	if i, ok := s.search(k); ok {
		return s.small[i], true
	}
	return nil, false
}

// put stores w, replacing the write of the same key.
func (s *writeSet) put(w *localWrite) {
	if s.tree != nil {
		s.tree.ReplaceOrInsert(w)
		return
	}
	i, ok := s.search(w.key)
	if ok {
		s.small[i] = w
		return
	}
	if len(s.small) < smallWrites {
		s.small = slices.Insert(s.small, i, w)
		return
	}
	s.tree = btree.NewG(8, lessLocal)
	for _, x := range s.small {
		s.tree.ReplaceOrInsert(x)
	}
	s.tree.ReplaceOrInsert(w)
	s.small = nil
}

// ascendRange calls fn on the writes of keys in [begin, end) in key order
// until fn returns false.
func (s *writeSet) ascendRange(begin, end []byte, fn func(*localWrite) bool) {
	if s.tree != nil {
		s.tree.AscendRange(&localWrite{key: begin}, &localWrite{key: end}, fn)
		return
	}
	i, _ := s.search(begin)
	for _, w := range s.small[i:] {
		if bytes.Compare(w.key, end) >= 0 || !fn(w) {
			return
		}
	}
}

// deleteRange removes the writes of keys in [begin, end).
func (s *writeSet) deleteRange(begin, end []byte) {
	if s.tree != nil {
		var inside []*localWrite
		s.tree.AscendRange(&localWrite{key: begin}, &localWrite{key: end}, func(w *localWrite) bool {
			inside = append(inside, w)
			return true
		})
		for _, w := range inside {
			s.tree.Delete(w)
		}
		return
	}
	i, _ := s.search(begin)
	j := i
	for j < len(s.small) && bytes.Compare(s.small[j].key, end) < 0 {
		j++
	}
	s.small = slices.Delete(s.small, i, j)
}
