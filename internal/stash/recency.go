package stash

import (
	"bytes"
	"container/list"
	"sync"
)

// recency keeps a durable stash's keys in access order (reads that found
// the key, and writes), coldest first, for pools configured with
// recency = true. A restart rebuilds it from the engine with every key
// cold, in key order. Safe for concurrent use.
type recency struct {
	mu    sync.Mutex
	order *list.List               // of string keys, coldest at the front. Protected by mu.
	elems map[string]*list.Element // Protected by mu.
}

func newRecency() *recency {
	return &recency{order: list.New(), elems: map[string]*list.Element{}}
}

// touch makes key the most recently used.
func (r *recency) touch(key []byte) {
	r.mu.Lock()
	if e, ok := r.elems[string(key)]; ok {
		r.order.MoveToBack(e)
	} else {
		k := string(key)
		r.elems[k] = r.order.PushBack(k)
	}
	r.mu.Unlock()
}

// addCold records key as the coldest unless it is known.
func (r *recency) addCold(key []byte) {
	r.mu.Lock()
	if _, ok := r.elems[string(key)]; !ok {
		k := string(key)
		r.elems[k] = r.order.PushBack(k)
	}
	r.mu.Unlock()
}

// remove forgets key.
func (r *recency) remove(key []byte) {
	r.mu.Lock()
	if e, ok := r.elems[string(key)]; ok {
		r.order.Remove(e)
		delete(r.elems, string(key))
	}
	r.mu.Unlock()
}

// removeRange forgets every key in [begin, end).
func (r *recency) removeRange(begin, end []byte) {
	r.mu.Lock()
	for k, e := range r.elems {
		if bytes.Compare([]byte(k), begin) >= 0 && bytes.Compare([]byte(k), end) < 0 {
			r.order.Remove(e)
			delete(r.elems, k)
		}
	}
	r.mu.Unlock()
}

// coldest returns up to n keys, coldest first.
func (r *recency) coldest(n int) [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := [][]byte{}
	for e := r.order.Front(); e != nil && len(out) < n; e = e.Next() {
		out = append(out, []byte(e.Value.(string)))
	}
	return out
}
