package memory

import (
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
)

// refs buffers the references (Get hits) that readers make under the
// engine's read lock, so that a read never takes the exclusive lock just to
// move its entry in the eviction order: 64 readers of a cache pool would
// otherwise serialise on one mutex. The buffered references are replayed
// into the policy, in the order they were made, by whoever next holds the
// exclusive lock (Apply, Coldest) or by a reader whose stripe fills up and
// finds the lock free. A reference made while its stripe is full and the
// lock busy is dropped: under that much read load the order is an
// approximation, as in every production cache (Caffeine's read buffers,
// memcached's once-a-minute bump); when readers are few the order is exact.
type refs struct {
	seq     atomic.Uint64 // order of references across stripes
	stripes []refStripe
}

// refStripeLen is the references a stripe holds before it asks for a drain.
const refStripeLen = 64

type refStripe struct {
	mu   sync.Mutex
	n    int
	ents [refStripeLen]ref
	_    [64]byte // keep neighbouring stripes' locks off one cache line
}

type ref struct {
	seq uint64
	e   *entry
}

func newRefs() *refs {
	return &refs{stripes: make([]refStripe, max(4, 2*runtime.GOMAXPROCS(0)))}
}

// record buffers a reference to e; it returns true when the stripe is full
// and the caller should try to drain.
func (r *refs) record(e *entry) (full bool) {
	s := &r.stripes[rand.Uint32()%uint32(len(r.stripes))]
	seq := r.seq.Add(1)
	s.mu.Lock()
	if s.n < refStripeLen {
		s.ents[s.n] = ref{seq: seq, e: e}
		s.n++
	}
	full = s.n == refStripeLen
	s.mu.Unlock()
	return full
}

// drain replays every buffered reference into pol in the order the
// references were made, skipping entries that left the engine meanwhile.
// The caller holds the engine's exclusive lock.
func (r *refs) drain(pol policy, scratch []ref) []ref {
	scratch = scratch[:0]
	for i := range r.stripes {
		s := &r.stripes[i]
		s.mu.Lock()
		scratch = append(scratch, s.ents[:s.n]...)
		clear(s.ents[:s.n]) // let dropped entries be collected
		s.n = 0
		s.mu.Unlock()
	}
	if len(scratch) == 0 {
		return scratch
	}
	slices.SortFunc(scratch, func(a, b ref) int {
		switch {
		case a.seq < b.seq:
			return -1
		case a.seq > b.seq:
			return 1
		}
		return 0
	})
	for _, rf := range scratch {
		if rf.e.tracked {
			pol.touch(rf.e)
		}
	}
	clear(scratch)
	return scratch
}
