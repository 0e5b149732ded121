package txlog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/distash/distash/internal/clock"
	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/logentry"
	"github.com/distash/distash/internal/testutil/wait"
)

// discardLogger drops logs, unless TXLOG_TEST_LOG is set.
func discardLogger() *slog.Logger {
	if os.Getenv("TXLOG_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func testOptions(dir string, replicas int, tags ...kv.Tag) Options {
	return Options{Dir: dir, Replicas: replicas, Tags: tags, Logger: discardLogger(), PopInterval: 20 * time.Millisecond}
}

func openLog(t testing.TB, opts Options) *Log {
	t.Helper()
	l, err := Open(opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return l
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// mut builds a set mutation of key k tagged with tags.
func mut(k string, tags ...kv.Tag) logentry.TaggedMutation {
	return logentry.TaggedMutation{Mutation: kv.Mutation{Type: kv.MutSet, Key: []byte(k), Param: []byte("v-" + k)}, Tags: tags}
}

// appender appends entries chained from the log's last version.
type appender struct {
	t    testing.TB
	l    *Log
	last kv.Version
}

func newAppender(t testing.TB, l *Log) *appender {
	return &appender{t: t, l: l, last: l.LastVersion()}
}

func (a *appender) append(v kv.Version, muts ...logentry.TaggedMutation) *logentry.Future {
	f := a.l.Append(&logentry.Entry{Version: v, PrevVersion: a.last, Mutations: muts})
	a.last = v
	return f
}

func (a *appender) mustAppend(v kv.Version, muts ...logentry.TaggedMutation) {
	a.t.Helper()
	if err := a.append(v, muts...).Wait(ctxT(a.t)); err != nil {
		a.t.Fatalf("append %d: %v", v, err)
	}
}

func keysOf(msgs []logentry.Message) []string {
	var out []string
	for _, m := range msgs {
		for _, mu := range m.Mutations {
			out = append(out, fmt.Sprintf("%d:%s", m.Version, mu.Key))
		}
	}
	return out
}

func mustPeek(t testing.TB, l *Log, tag kv.Tag, after kv.Version, maxBytes int) ([]logentry.Message, kv.Version) {
	t.Helper()
	msgs, end, err := l.Peek(ctxT(t), tag, after, maxBytes)
	if err != nil {
		t.Fatalf("Peek(%d, %d): %v", tag, after, err)
	}
	return msgs, end
}

func eq(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestAppendPeekTags(t *testing.T) {
	l := openLog(t, testOptions(t.TempDir(), 1, 1, 2, 3))
	defer l.Close()
	if v := l.LastVersion(); v != 0 {
		t.Fatalf("new log LastVersion %d", v)
	}
	a := newAppender(t, l)
	a.mustAppend(10, mut("a", 1), mut("b", 1, 1)) // duplicate tag counts once
	a.mustAppend(20, mut("c", 2))
	a.mustAppend(30, mut("d", 1, 2), mut("e", 2))
	a.mustAppend(40) // empty batch: versions advance anyway
	if v := l.LastVersion(); v != 40 {
		t.Fatalf("LastVersion %d", v)
	}
	cases := []struct {
		tag   kv.Tag
		after kv.Version
		want  []string
	}{
		{1, 0, []string{"10:a", "10:b", "30:d"}},
		{2, 0, []string{"20:c", "30:d", "30:e"}},
		{2, 20, []string{"30:d", "30:e"}},
		{1, 30, nil},
		{3, 0, nil},  // tag without mutations: no messages, end advances
		{99, 5, nil}, // unknown tag likewise
	}
	for _, c := range cases {
		msgs, end := mustPeek(t, l, c.tag, c.after, 0)
		if got := keysOf(msgs); !eq(got, c.want) || end != 40 {
			t.Errorf("Peek(%d, %d) = %v, %d; want %v, 40", c.tag, c.after, got, end, c.want)
		}
	}
	// maxBytes stops early; end is then the last returned message's version
	msgs, end := mustPeek(t, l, 1, 0, 1)
	if got := keysOf(msgs); !eq(got, []string{"10:a", "10:b"}) || end != 10 {
		t.Fatalf("Peek with maxBytes: %v, %d", got, end)
	}
	msgs, end = mustPeek(t, l, 1, end, 1)
	if got := keysOf(msgs); !eq(got, []string{"30:d"}) || end != 40 {
		t.Fatalf("second Peek with maxBytes: %v, %d", got, end)
	}
	if string(msgs[0].Mutations[0].Param) != "v-d" || msgs[0].Mutations[0].Type != kv.MutSet {
		t.Fatalf("mutation content: %+v", msgs[0].Mutations[0])
	}
}

func TestAppendRejectsOutOfOrder(t *testing.T) {
	l := openLog(t, testOptions(t.TempDir(), 1, 1))
	defer l.Close()
	ctx := ctxT(t)
	if err := l.Append(&logentry.Entry{Version: 10, PrevVersion: 0}).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	for _, e := range []*logentry.Entry{
		{Version: 10, PrevVersion: 10}, // not increasing
		{Version: 5, PrevVersion: 10},  // going back
		{Version: 20, PrevVersion: 7},  // prev mismatch
	} {
		if err := l.Append(e).Wait(ctx); !errors.Is(err, ErrOutOfOrder) {
			t.Errorf("Append(%+v) = %v, want ErrOutOfOrder", e, err)
		}
	}
	if err := l.Append(&logentry.Entry{Version: 20, PrevVersion: 10}).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if v := l.LastVersion(); v != 20 {
		t.Fatalf("LastVersion %d", v)
	}
}

func TestPeekBlocksUntilAppend(t *testing.T) {
	l := openLog(t, testOptions(t.TempDir(), 1, 1, 2))
	defer l.Close()
	a := newAppender(t, l)
	a.mustAppend(10, mut("x", 1))

	type result struct {
		msgs []logentry.Message
		end  kv.Version
		err  error
		at   time.Time
	}
	res := make(chan result, 1)
	go func() {
		msgs, end, err := l.Peek(context.Background(), 1, 10, 0)
		res <- result{msgs, end, err, time.Now()}
	}()
	select {
	case r := <-res:
		t.Fatalf("Peek returned before any new entry: %+v", r)
	case <-time.After(100 * time.Millisecond):
	}
	// An entry for another tag wakes the peek too: its end version advances.
	start := time.Now()
	a.mustAppend(20, mut("y", 2))
	r := <-res
	if r.err != nil || len(r.msgs) != 0 || r.end != 20 {
		t.Fatalf("woken Peek = %+v", r)
	}
	if d := r.at.Sub(start); d > time.Second {
		t.Fatalf("Peek woke %v after the append", d)
	}

	// A cancelled context ends a waiting peek.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, _, err := l.Peek(ctx, 1, 20, 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Peek with expired ctx: %v", err)
	}

	// Close ends waiting peeks.
	go func() {
		_, _, err := l.Peek(context.Background(), 1, 20, 0)
		res <- result{err: err}
	}()
	time.Sleep(20 * time.Millisecond)
	l.Close()
	if r := <-res; !errors.Is(r.err, ErrClosed) {
		t.Fatalf("Peek after Close: %v", r.err)
	}
}

func TestConcurrentPeekAndAppend(t *testing.T) {
	l := openLog(t, testOptions(t.TempDir(), 1, 1, 2, 3))
	defer l.Close()
	const n = 300
	errc := make(chan error, 3)
	for tag := kv.Tag(1); tag <= 3; tag++ {
		go func() {
			after, got := kv.Version(0), 0
			for after < n {
				msgs, end, err := l.Peek(ctxT(t), tag, after, 64)
				if err != nil {
					errc <- err
					return
				}
				for _, m := range msgs {
					if m.Version <= after || m.Version > end {
						errc <- fmt.Errorf("tag %d: message %d outside (%d, %d]", tag, m.Version, after, end)
						return
					}
					got++
				}
				l.Pop(tag, end)
				after = end
			}
			if want := n / 3; got != want {
				errc <- fmt.Errorf("tag %d: %d messages, want %d", tag, got, want)
				return
			}
			errc <- nil
		}()
	}
	a := newAppender(t, l)
	var fs []*logentry.Future
	for v := kv.Version(1); v <= n; v++ {
		fs = append(fs, a.append(v, mut(fmt.Sprint(v), kv.Tag(v%3+1))))
	}
	for _, f := range fs {
		if err := f.Wait(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 3; i++ {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
}

func TestPopTrimsAtMinimumOverTags(t *testing.T) {
	// Pops are replicated by SyncPops, or by the periodic flush when the
	// manual clock says so.
	clk := clock.NewManual(time.Unix(0, 0))
	opts := testOptions(t.TempDir(), 1, 1, 2)
	opts.Clock = clk
	l := openLog(t, opts)
	defer l.Close()
	ctx := ctxT(t)
	a := newAppender(t, l)
	var fs []*logentry.Future
	for v := kv.Version(1); v <= 100; v++ {
		fs = append(fs, a.append(v, mut(fmt.Sprint(v), 1, 2)))
	}
	for _, f := range fs {
		if err := f.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	l.Pop(1, 50)
	if err := l.SyncPops(ctx); err != nil {
		t.Fatal(err)
	}
	if s := l.Stats(); s.Entries != 100 || s.MinPopped != 0 || s.Popped[1] != 50 {
		t.Fatalf("after pop of tag 1 only: %+v", s)
	}
	l.Pop(2, 30)
	l.Pop(2, 20) // popped versions never go down
	if err := l.SyncPops(ctx); err != nil {
		t.Fatal(err)
	}
	if s := l.Stats(); s.Entries != 70 || s.MinPopped != 30 || s.Trimmed != 30 {
		t.Fatalf("after pops 50/30: %+v", s)
	}
	if l.Popped(1) != 50 || l.Popped(2) != 30 {
		t.Fatalf("Popped = %d, %d", l.Popped(1), l.Popped(2))
	}
	if _, _, err := l.Peek(ctx, 2, 10, 0); !errors.Is(err, logentry.ErrTrimmed) {
		t.Fatalf("Peek below the trim point: %v", err)
	}
	msgs, end := mustPeek(t, l, 2, 30, 0)
	if len(msgs) != 70 || msgs[0].Version != 31 || end != 100 {
		t.Fatalf("Peek(2, 30): %d msgs from %d, end %d", len(msgs), msgs[0].Version, end)
	}
	// Dropping tag 2 from the set leaves tag 1's 50 as the minimum.
	l.SetTags([]kv.Tag{1})
	if err := l.SyncPops(ctx); err != nil {
		t.Fatal(err)
	}
	if s := l.Stats(); s.Entries != 50 || s.MinPopped != 50 || len(s.Popped) != 1 {
		t.Fatalf("after SetTags([1]): %+v", s)
	}
	// A new tag holds trimming back until it pops.
	l.SetTags([]kv.Tag{1, 7})
	l.Pop(1, 80)
	if err := l.SyncPops(ctx); err != nil {
		t.Fatal(err)
	}
	if s := l.Stats(); s.Entries != 50 || s.MinPopped != 0 {
		t.Fatalf("after adding tag 7: %+v", s)
	}
	l.Pop(7, 90)
	// the periodic flush replicates it without SyncPops, on its tick
	if err := clk.BlockUntil(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if s := l.Stats(); s.Entries != 50 {
		t.Fatalf("trimmed before the pop flush: %+v", s)
	}
	clk.Advance(opts.PopInterval)
	wait.For(t, "the periodic pop flush trims", func() bool { return l.Stats().Entries == 20 })
	if s := l.Stats(); s.Bytes <= 0 || s.LastVersion != 100 {
		t.Fatalf("stats %+v", s)
	}
}

// entryVersions returns the versions of the entries the log holds in memory
// (on its most advanced replica).
func entryVersions(l *Log) []kv.Version {
	f := l.bestFSM()
	f.mu.RLock()
	defer f.mu.RUnlock()
	var out []kv.Version
	for _, e := range f.entries {
		out = append(out, e.version)
	}
	return out
}

func TestRestartRecovers(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, testOptions(dir, 1, 1, 2))
	a := newAppender(t, l)
	for v := kv.Version(100); v <= 1000; v += 100 {
		a.mustAppend(v, mut(fmt.Sprint(v), kv.Tag(v/100%2+1)))
	}
	l.Pop(1, 300)
	l.Pop(2, 500) // not synced explicitly: Close flushes it
	before1, _ := mustPeek(t, l, 1, 300, 0)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil { // idempotent
		t.Fatal(err)
	}
	if err := l.Append(&logentry.Entry{Version: 2000, PrevVersion: 1000}).Wait(ctxT(t)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Append after Close: %v", err)
	}

	l = openLog(t, testOptions(dir, 1, 1, 2))
	defer l.Close()
	if v := l.LastVersion(); v != 1000 {
		t.Fatalf("recovered LastVersion %d", v)
	}
	if l.Popped(1) != 300 || l.Popped(2) != 500 {
		t.Fatalf("recovered popped %d %d", l.Popped(1), l.Popped(2))
	}
	if got := entryVersions(l); len(got) != 7 || got[0] != 400 {
		t.Fatalf("recovered entries %v", got)
	}
	after1, end := mustPeek(t, l, 1, 300, 0)
	if !eq(keysOf(after1), keysOf(before1)) || end != 1000 {
		t.Fatalf("recovered peek %v (end %d), want %v", keysOf(after1), end, keysOf(before1))
	}
	a = newAppender(t, l)
	a.mustAppend(1100, mut("z", 2))
	if msgs, _ := mustPeek(t, l, 2, 1000, 0); !eq(keysOf(msgs), []string{"1100:z"}) {
		t.Fatalf("append after restart: %v", keysOf(msgs))
	}

	// A different replica count is refused.
	if _, err := Open(Options{Dir: dir, Replicas: 3, Logger: discardLogger()}); err == nil {
		t.Fatal("Open with another replica count succeeded")
	}
}

func TestSnapshotBoundsLogAndRestart(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(dir, 1, 1, 2)
	opts.TrailingLogs = 50
	opts.SnapshotThreshold = 1 << 30 // only explicit snapshots
	opts.SnapshotInterval = time.Hour
	l := openLog(t, opts)
	a := newAppender(t, l)
	const n = 3000
	var fs []*logentry.Future
	for v := kv.Version(1); v <= n; v++ {
		fs = append(fs, a.append(v*10, mut(fmt.Sprint(v), kv.Tag(v%2+1)), mut(fmt.Sprint("all", v), 1, 2)))
		if v%500 == 0 {
			for _, f := range fs {
				if err := f.Wait(ctxT(t)); err != nil {
					t.Fatal(err)
				}
			}
			fs = fs[:0]
			l.Pop(1, (v-100)*10)
			l.Pop(2, (v-200)*10)
			if err := l.SyncPops(ctxT(t)); err != nil {
				t.Fatal(err)
			}
		}
	}
	// tag 2 popped up to 28000, tag 1 up to 29000: entries 28010..30000 remain
	if err := l.Snapshot(); err != nil {
		t.Fatal(err)
	}
	s := l.Stats()
	if s.Entries != 200 || s.MinPopped != 28000 {
		t.Fatalf("stats before restart: %+v", s)
	}
	if s.RaftFirstIndex < s.RaftLastIndex-100 {
		t.Fatalf("raft log not compacted: first %d last %d", s.RaftFirstIndex, s.RaftLastIndex)
	}
	want1, _ := mustPeek(t, l, 1, 29000, 0)
	want2, _ := mustPeek(t, l, 2, 28000, 0)
	// a few more entries after the snapshot: replayed from the raft log
	for v := kv.Version(n + 1); v <= n+10; v++ {
		a.mustAppend(v*10, mut(fmt.Sprint(v), 1))
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	l = openLog(t, opts)
	defer l.Close()
	if v := l.LastVersion(); v != (n+10)*10 {
		t.Fatalf("recovered LastVersion %d", v)
	}
	got := entryVersions(l)
	if len(got) != 210 || got[0] != 28010 || got[len(got)-1] != (n+10)*10 {
		t.Fatalf("recovered %d entries %v..%v", len(got), got[0], got[len(got)-1])
	}
	for i := 1; i < len(got); i++ {
		if got[i] != got[i-1]+10 {
			t.Fatalf("recovered entries not contiguous at %d: %d after %d", i, got[i], got[i-1])
		}
	}
	got1, _ := mustPeek(t, l, 1, 29000, 0)
	got2, end := mustPeek(t, l, 2, 28000, 0)
	if k := keysOf(got1); len(k) != len(keysOf(want1))+10 || !eq(k[:len(keysOf(want1))], keysOf(want1)) {
		t.Fatalf("tag 1 after restart: %d keys, want %d+10", len(k), len(keysOf(want1)))
	}
	if !eq(keysOf(got2), keysOf(want2)) || end != (n+10)*10 {
		t.Fatalf("tag 2 after restart differs")
	}
	if l.Popped(1) != 29000 || l.Popped(2) != 28000 {
		t.Fatalf("popped after restart: %d %d", l.Popped(1), l.Popped(2))
	}
}

// TestHeld: what the log holds for each tag is the entries after its
// popped version, with their encoded size.
func TestHeld(t *testing.T) {
	l := openLog(t, testOptions(t.TempDir(), 1, 1, 2))
	defer l.Close()
	ctx := ctxT(t)
	a := newAppender(t, l)
	var fs []*logentry.Future
	for v := kv.Version(1); v <= 10; v++ {
		fs = append(fs, a.append(v, mut(fmt.Sprint(v), 1, 2)))
	}
	for _, f := range fs {
		if err := f.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	l.Pop(1, 4)
	if err := l.SyncPops(ctx); err != nil {
		t.Fatal(err)
	}
	h := l.Held()
	all := l.Stats().Bytes
	if h[2].Entries != 10 || h[2].Bytes != all || h[1].Entries != 6 || h[1].Bytes <= 0 || h[1].Bytes >= all {
		t.Fatalf("Held after popping tag 1 to 4: %+v (log bytes %d)", h, all)
	}
}

// TestSnapshotsWaitForTheirSizeInAppends: a snapshot writes every unpopped
// entry, so the log takes one only once the records appended since the
// last one add up to twice that much. While a tag holds many entries (its
// stash down), a few small appends take none, where raft's own count of
// records would have taken one at every check; once the tags pop, the
// next check snapshots and compacts the raft log.
func TestSnapshotsWaitForTheirSizeInAppends(t *testing.T) {
	opts := testOptions(t.TempDir(), 1, 1, 2)
	opts.SnapshotThreshold = 10
	opts.SnapshotInterval = 10 * time.Millisecond
	opts.TrailingLogs = 5
	l := openLog(t, opts)
	defer l.Close()
	a := newAppender(t, l)
	big := func(i int) logentry.TaggedMutation {
		return logentry.TaggedMutation{Mutation: kv.Mutation{Type: kv.MutSet, Key: []byte(fmt.Sprint("big", i)), Param: bytes.Repeat([]byte{'x'}, 4<<10)}, Tags: []kv.Tag{1, 2}}
	}
	v := kv.Version(0)
	for i := 0; i < 100; i++ {
		v += 10
		a.mustAppend(v, big(i))
	}
	// Tag 2 pops the first 60 entries only: the log holds 40, and what was
	// appended is more than twice as much.
	l.Pop(1, v)
	l.Pop(2, 600)
	if err := l.SyncPops(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	wait.For(t, "a first snapshot", func() bool { return l.Stats().RaftFirstIndex > 1 })
	l.mu.RLock()
	f := l.reps[0].fsm
	l.mu.RUnlock()
	first := l.Stats().RaftFirstIndex
	for i := 0; i < 30; i++ {
		v += 10
		a.mustAppend(v, mut(fmt.Sprint("small", i), 1, 2))
	}
	// Past SnapshotThreshold records, which alone took one before, but
	// far from the held entries' size.
	if got := l.Stats().RaftFirstIndex; got != first || f.snapshotDue(int64(opts.SnapshotThreshold)) {
		t.Fatalf("small records after the snapshot of %d held bytes: raft log from %d (was %d), another due %v",
			l.Stats().Bytes, got, first, f.snapshotDue(int64(opts.SnapshotThreshold)))
	}
	l.Pop(1, v)
	l.Pop(2, v)
	if err := l.SyncPops(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	wait.For(t, "a snapshot once the tags popped", func() bool { return l.Stats().RaftFirstIndex > first })
}
