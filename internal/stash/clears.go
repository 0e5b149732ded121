package stash

import (
	"bytes"
	"sort"

	"github.com/google/btree"

	"github.com/distash/distash/internal/kv"
)

// clearIndex answers "which range clears of the window cover this key" in
// O(log n): the window's clears cut into disjoint fragments, each with the
// versions of the clears that cover it. A read consults it for every key
// (and a range read for its range), so a window holding many clears — a
// load that replaces records with ClearRange+Set, say — must not make
// every read walk all of them, as a flat list did.
type clearIndex struct {
	frags *btree.BTreeG[*clearFrag]
}

// clearFrag is [begin, end), cleared at versions (ascending).
type clearFrag struct {
	begin, end []byte
	versions   []kv.Version
}

func lessClearFrag(a, b *clearFrag) bool { return bytes.Compare(a.begin, b.begin) < 0 }

func newClearIndex() clearIndex { return clearIndex{frags: btree.NewG(16, lessClearFrag)} }

// containing returns the fragment holding key, if any.
func (c clearIndex) containing(key []byte) *clearFrag {
	if c.frags.Len() == 0 {
		return nil // the usual case: no range clear in the window, no probe to allocate
	}
	var f *clearFrag
	c.frags.DescendLessOrEqual(&clearFrag{begin: key}, func(x *clearFrag) bool {
		f = x
		return false
	})
	if f == nil || bytes.Compare(key, f.end) >= 0 {
		return nil
	}
	return f
}

// overlapping returns the fragments meeting [begin, end) in key order.
func (c clearIndex) overlapping(begin, end []byte) []*clearFrag {
	var out []*clearFrag
	if f := c.containing(begin); f != nil {
		out = append(out, f)
	}
	visit := func(f *clearFrag) bool {
		if end != nil && bytes.Compare(f.begin, end) >= 0 {
			return false
		}
		if len(out) == 0 || out[len(out)-1] != f {
			out = append(out, f)
		}
		return true
	}
	c.frags.AscendGreaterOrEqual(&clearFrag{begin: begin}, visit)
	return out
}

// clearedIn reports whether a clear with a version in (after, upTo]
// covers key.
func (c clearIndex) clearedIn(key []byte, after, upTo kv.Version) bool {
	f := c.containing(key)
	if f == nil {
		return false
	}
	// The newest version at or below upTo is above after?
	i := sort.Search(len(f.versions), func(i int) bool { return f.versions[i] > upTo })
	return i > 0 && f.versions[i-1] > after
}

// add records a clear of [begin, end) at v, newer than every clear in the
// index.
func (c clearIndex) add(begin, end []byte, v kv.Version) {
	if bytes.Compare(begin, end) >= 0 {
		return
	}
	olds := c.overlapping(begin, end)
	var news []*clearFrag
	with := func(vs []kv.Version) []kv.Version { return append(append(make([]kv.Version, 0, len(vs)+1), vs...), v) }
	cur := begin // [begin, cur) is done
	for _, f := range olds {
		c.frags.Delete(f)
		if bytes.Compare(f.begin, begin) < 0 { // the part before the clear keeps its versions
			news = append(news, &clearFrag{begin: f.begin, end: begin, versions: f.versions})
		}
		lo := maxBytes(f.begin, begin)
		if bytes.Compare(cur, lo) < 0 { // a gap before f: only this clear
			news = append(news, &clearFrag{begin: cur, end: lo, versions: []kv.Version{v}})
		}
		hi := minBytes(f.end, end)
		news = append(news, &clearFrag{begin: lo, end: hi, versions: with(f.versions)})
		cur = hi
		if bytes.Compare(f.end, end) > 0 { // the part after the clear
			news = append(news, &clearFrag{begin: end, end: f.end, versions: f.versions})
		}
	}
	if bytes.Compare(cur, end) < 0 {
		news = append(news, &clearFrag{begin: cur, end: end, versions: []kv.Version{v}})
	}
	for _, f := range news {
		c.frags.ReplaceOrInsert(f)
	}
}

// drop forgets the versions <= target of the fragments meeting [begin,
// end) (the range of a clear that left the window).
func (c clearIndex) drop(begin, end []byte, target kv.Version) {
	for _, f := range c.overlapping(begin, end) {
		i := sort.Search(len(f.versions), func(i int) bool { return f.versions[i] > target })
		if i == len(f.versions) {
			c.frags.Delete(f)
		} else if i > 0 {
			f.versions = append([]kv.Version(nil), f.versions[i:]...)
		}
	}
}

func maxBytes(a, b []byte) []byte {
	if bytes.Compare(a, b) >= 0 {
		return a
	}
	return b
}

func minBytes(a, b []byte) []byte {
	if bytes.Compare(a, b) <= 0 {
		return a
	}
	return b
}
