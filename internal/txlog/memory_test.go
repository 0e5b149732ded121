package txlog

import (
	"bytes"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/logentry"
	"github.com/distash/distash/internal/testutil/wait"
)

// TestLogCacheBounds stores records past both bounds and checks what the
// cache keeps, that every record still reads back (from the store when
// not cached), and that a gap or a DeleteRange empties the cache.
func TestLogCacheBounds(t *testing.T) {
	store := raft.NewInmemStore()
	c := newLogCache(store, 4, 3*(1000+logRecordOverhead))
	record := func(i uint64) *raft.Log {
		return &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: bytes.Repeat([]byte{byte(i)}, 1000)}
	}
	for i := uint64(1); i <= 10; i++ {
		if err := c.StoreLog(record(i)); err != nil {
			t.Fatal(err)
		}
		if len(c.recent) > 3 || c.bytes > c.maxBytes {
			t.Fatalf("after record %d: %d records, %d bytes cached", i, len(c.recent), c.bytes)
		}
	}
	if len(c.recent) != 3 || c.recent[0].Index != 8 {
		t.Fatalf("cached %d records from %d; want 8..10", len(c.recent), c.recent[0].Index)
	}
	for i := uint64(1); i <= 10; i++ {
		var l raft.Log
		if err := c.GetLog(i, &l); err != nil || l.Index != i || !bytes.Equal(l.Data, record(i).Data) {
			t.Fatalf("GetLog(%d) = index %d, %v", i, l.Index, err)
		}
	}
	c.maxBytes = 1 << 20 // now the count bounds it
	for i := uint64(11); i <= 20; i++ {
		c.StoreLog(record(i))
	}
	if len(c.recent) != 4 || c.recent[0].Index != 17 {
		t.Fatalf("cached %d records; want 4 (17..20)", len(c.recent))
	}
	c.StoreLog(record(30)) // a gap
	if len(c.recent) != 1 || c.bytes != recordBytes(record(30)) {
		t.Fatalf("after a gap: %d records, %d bytes cached; want just 30", len(c.recent), c.bytes)
	}
	if err := c.DeleteRange(30, 30); err != nil {
		t.Fatal(err)
	}
	if len(c.recent) != 0 || c.bytes != 0 {
		t.Fatalf("after DeleteRange: %d records, %d bytes cached", len(c.recent), c.bytes)
	}
	var l raft.Log
	if err := c.GetLog(30, &l); err != raft.ErrLogNotFound {
		t.Fatalf("GetLog of a deleted record = %v", err)
	}
}

// TestPoppedEntriesLeaveMemory appends 24 MB of entries, pops them all and
// checks that the log no longer holds them: with raft.LogCache, which
// bounds only the number of records (1024), every one stayed in memory.
func TestPoppedEntriesLeaveMemory(t *testing.T) {
	opts := testOptions(t.TempDir(), 1, 1)
	opts.RaftCacheBytes = 2 << 20
	l := openLog(t, opts)
	defer l.Close()
	a := newAppender(t, l)
	heap := func() int64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return int64(ms.HeapAlloc)
	}
	before := heap()
	const entries, perEntry = 24, 1 << 20
	for i := 1; i <= entries; i++ {
		var muts []logentry.TaggedMutation
		for j := 0; j < 8; j++ {
			muts = append(muts, logentry.TaggedMutation{Mutation: kv.Mutation{Type: kv.MutSet, Key: fmt.Appendf(nil, "k%d-%d", i, j), Param: make([]byte, perEntry/8)}, Tags: []kv.Tag{1}})
		}
		a.mustAppend(kv.Version(i), muts...)
	}
	l.Pop(1, entries)
	if err := l.SyncPops(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	wait.For(t, "no entries held after popping them all", func() bool { return l.Stats().Entries == 0 })
	// The heap settles a moment after the trim (raft's own caches and
	// background work): take the least seen within a few seconds.
	held := heap() - before
	wait.Until(3*time.Second, func() bool {
		held = min(held, heap()-before)
		return held <= entries*perEntry/3
	})
	t.Logf("%d MB appended and popped; the log holds %.1f MB more than before", entries*perEntry>>20, float64(held)/(1<<20))
	if held > entries*perEntry/3 {
		t.Fatalf("the log holds %d bytes after popping %d", held, entries*perEntry)
	}
}

// TestMemoryBudget checks the memory counted for unpopped entries, that
// tags getting every mutation of an entry share one index slice, and that
// OverMemoryBudget follows appends and pops.
func TestMemoryBudget(t *testing.T) {
	opts := testOptions(t.TempDir(), 1, 1, 2, 3)
	// Over budget after the second append, but not past twice it, where
	// entries would spill (TestSpill).
	opts.MemoryBytes = 120 << 10
	l := openLog(t, opts)
	defer l.Close()
	a := newAppender(t, l)
	entry := func(tags func(i int) []kv.Tag) []logentry.TaggedMutation {
		muts := make([]logentry.TaggedMutation, 1000)
		for i := range muts {
			muts[i] = mut(fmt.Sprintf("k%04d", i), tags(i)...)
		}
		return muts
	}
	// Every mutation to tags 1 and 2: one shared slice of 1000 mutations.
	a.mustAppend(10, entry(func(int) []kv.Tag { return []kv.Tag{1, 2} })...)
	st := l.Stats()
	if want := st.Bytes + 2*tagMsgBytes + 1000*mutationBytes; st.Memory != want {
		t.Fatalf("Memory = %d for a shared index; want %d", st.Memory, want)
	}
	if l.OverMemoryBudget() {
		t.Fatalf("over a budget of %d with %d bytes", opts.MemoryBytes, st.Memory)
	}
	msgs1, _ := mustPeek(t, l, 1, 0, 0)
	msgs2, _ := mustPeek(t, l, 2, 0, 0)
	if !eq(keysOf(msgs1), keysOf(msgs2)) || len(keysOf(msgs1)) != 1000 {
		t.Fatalf("tags 1 and 2 see %d and %d mutations; want the same 1000", len(keysOf(msgs1)), len(keysOf(msgs2)))
	}
	// Mutations split between tags 1 and 3, and all to 2: 2 shares, 1 and 3
	// get their own.
	before := l.Stats()
	a.mustAppend(20, entry(func(i int) []kv.Tag { return []kv.Tag{kv.Tag(1 + 2*(i%2)), 2} })...)
	st = l.Stats()
	if want := before.Memory + (st.Bytes - before.Bytes) + 3*tagMsgBytes + 2000*mutationBytes; st.Memory != want {
		t.Fatalf("Memory = %d; want %d", st.Memory, want)
	}
	if !l.OverMemoryBudget() {
		t.Fatalf("not over a budget of %d with %d bytes", opts.MemoryBytes, st.Memory)
	}
	for _, tag := range []kv.Tag{1, 2, 3} {
		l.Pop(tag, 20)
	}
	if err := l.SyncPops(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if st := l.Stats(); st.Memory != 0 || st.Entries != 0 || l.OverMemoryBudget() {
		t.Fatalf("after popping everything: %+v, over budget %v", st, l.OverMemoryBudget())
	}
}
