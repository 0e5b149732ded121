package dd

import (
	"bytes"
	"container/heap"
	"slices"

	"github.com/distash/distash/internal/kv"
)

// Priority orders relocations: higher first.
type Priority int

// Priorities, as the issue orders them: shards missing replicas (the fewer
// live, the sooner: see UnhealthyPriority), then shards on excluded
// stashes, then splits, then rebalancing by bytes.
const (
	PriorityRebalance Priority = 100
	PrioritySplit     Priority = 200
	PriorityExcluded  Priority = 300
	PriorityUnhealthy Priority = 400
)

// UnhealthyPriority is the priority of re-replicating a shard that has
// live of its want replicas: above every other reason, and the higher the
// fewer are live.
func UnhealthyPriority(live, want int) Priority {
	return PriorityUnhealthy + Priority(max(want-live, 1))*10
}

// Relocation is a key range of a pool to move (to a new team, or onto a
// healthy stash).
type Relocation struct {
	Begin, End []byte
	Pool       string
	Priority   Priority
	Reason     string
	// From is the shard's team now, To its team after the move.
	From, To []kv.Tag
	Bytes    int64 // estimated bytes of the shard
	// Split: the key a split cuts the shard at (To is nil).
	Split []byte

	seq uint64 // arrival order, for FIFO among equal priorities
}

func (r *Relocation) overlaps(o *Relocation) bool {
	return r.Pool == o.Pool && bytes.Compare(r.Begin, o.End) < 0 && bytes.Compare(o.Begin, r.End) < 0
}

// Queue is the relocation queue: at most one queued relocation covers a
// key, the one of highest priority. Not safe for concurrent use.
type Queue struct {
	h   relHeap
	seq uint64
}

// Push queues r, unless a queued relocation overlapping it has a higher
// priority; queued ones it overlaps with a lower or equal priority are
// dropped (r supersedes them). It reports whether r was queued.
func (q *Queue) Push(r Relocation) bool {
	for _, o := range q.h {
		if o.overlaps(&r) && o.Priority > r.Priority {
			return false
		}
	}
	kept := q.h[:0]
	for _, o := range q.h {
		if !o.overlaps(&r) {
			kept = append(kept, o)
		}
	}
	clear(q.h[len(kept):])
	q.h = kept
	heap.Init(&q.h)
	q.seq++
	r.seq = q.seq
	heap.Push(&q.h, &r)
	return true
}

// Pop returns the relocation to do next: the highest priority, the oldest
// among equals.
func (q *Queue) Pop() (Relocation, bool) {
	if len(q.h) == 0 {
		return Relocation{}, false
	}
	return *heap.Pop(&q.h).(*Relocation), true
}

// Len is the number of queued relocations.
func (q *Queue) Len() int { return len(q.h) }

// Items returns the queued relocations in the order Pop would return them.
func (q *Queue) Items() []Relocation {
	out := make([]Relocation, len(q.h))
	for i, r := range q.h {
		out[i] = *r
	}
	slices.SortFunc(out, func(a, b Relocation) int {
		if a.Priority != b.Priority {
			return int(b.Priority - a.Priority)
		}
		return int(a.seq) - int(b.seq)
	})
	return out
}

type relHeap []*Relocation

func (h relHeap) Len() int { return len(h) }
func (h relHeap) Less(i, j int) bool {
	if h[i].Priority != h[j].Priority {
		return h[i].Priority > h[j].Priority
	}
	return h[i].seq < h[j].seq
}
func (h relHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *relHeap) Push(x any)   { *h = append(*h, x.(*Relocation)) }
func (h *relHeap) Pop() any {
	old := *h
	r := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return r
}
