package dd

import "testing"

func TestQueueOrderAndOverlap(t *testing.T) {
	var q Queue
	rel := func(b, e string, p Priority, why string) Relocation {
		return Relocation{Begin: []byte(b), End: []byte(e), Pool: "data", Priority: p, Reason: why}
	}
	q.Push(rel("d/a", "d/b", PriorityRebalance, "rebalance 1"))
	q.Push(rel("d/c", "d/d", PrioritySplit, "split"))
	q.Push(rel("d/e", "d/f", PriorityExcluded, "excluded"))
	q.Push(rel("d/g", "d/h", UnhealthyPriority(1, 2), "one of two live"))
	q.Push(rel("d/i", "d/j", UnhealthyPriority(1, 3), "one of three live"))
	q.Push(rel("d/k", "d/l", PriorityRebalance, "rebalance 2"))
	// Overlaps: a lower priority over a queued higher one is dropped; a
	// higher one replaces the lower it overlaps.
	if q.Push(rel("d/c", "d/cc", PriorityRebalance, "rebalance inside the split")) {
		t.Error("a rebalance over a queued split was queued")
	}
	if !q.Push(rel("d/a", "d/a5", PrioritySplit, "split replacing rebalance 1")) {
		t.Error("a split over a queued rebalance was not queued")
	}
	// Another pool's range never overlaps.
	q.Push(Relocation{Begin: []byte("d/c"), End: []byte("d/d"), Pool: "other", Priority: PriorityRebalance, Reason: "other pool"})

	want := []string{"one of three live", "one of two live", "excluded", "split", "split replacing rebalance 1", "rebalance 2", "other pool"}
	items := q.Items()
	for i, w := range want {
		if i >= len(items) || items[i].Reason != w {
			t.Fatalf("Items()[%d] = %+v, want %q (all: %+v)", i, items[min(i, len(items)-1)], w, items)
		}
	}
	for i, w := range want {
		r, ok := q.Pop()
		if !ok || r.Reason != w {
			t.Fatalf("Pop %d: %q, %v; want %q", i, r.Reason, ok, w)
		}
	}
	if _, ok := q.Pop(); ok || q.Len() != 0 {
		t.Error("queue not empty at the end")
	}
}
