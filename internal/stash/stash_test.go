package stash

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/distash/distash/internal/clock"
	"github.com/distash/distash/internal/engine"
	"github.com/distash/distash/internal/engine/memory"
	pebbleengine "github.com/distash/distash/internal/engine/pebble"
	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/logentry"
	"github.com/distash/distash/internal/testutil/wait"
)

// fakeLog is an in-memory log for one tag that injects faults: Peek fails
// now and then (unless noFaults) and returns at most a few messages at a
// time.
type fakeLog struct {
	mu       sync.Mutex
	msgs     []logentry.Message
	end      kv.Version
	popped   kv.Version
	changed  chan struct{}
	rng      *rand.Rand
	noFaults bool // set before use: a stash on a manual clock waits for it after a failed Peek
}

func newFakeLog(seed uint64) *fakeLog {
	return &fakeLog{changed: make(chan struct{}), rng: rand.New(rand.NewPCG(seed, 1))}
}

func (l *fakeLog) push(m logentry.Message) {
	l.mu.Lock()
	l.msgs = append(l.msgs, m)
	l.end = m.Version
	close(l.changed)
	l.changed = make(chan struct{})
	l.mu.Unlock()
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

var errInjected = errors.New("injected peek failure")

func (l *fakeLog) Peek(ctx context.Context, tag kv.Tag, after kv.Version, maxBytes int) ([]logentry.Message, kv.Version, error) {
	for {
		l.mu.Lock()
		if l.rng.IntN(20) == 0 && !l.noFaults {
			l.mu.Unlock()
			return nil, 0, errInjected
		}
		if l.end > after {
			i := sort.Search(len(l.msgs), func(i int) bool { return l.msgs[i].Version > after })
			n := min(len(l.msgs)-i, 1+l.rng.IntN(4))
			out := append([]logentry.Message(nil), l.msgs[i:i+n]...)
			end := out[len(out)-1].Version
			l.mu.Unlock()
			return out, end, nil
		}
		ch := l.changed
		l.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		}
	}
}

func (l *fakeLog) Pop(tag kv.Tag, upTo kv.Version) {
	l.mu.Lock()
	if upTo > l.popped {
		l.popped = upTo
	}
	l.mu.Unlock()
}

// model replays mutations to answer reads at any version.
type model struct {
	msgs []logentry.Message
}

func (m *model) stateAt(v kv.Version) map[string][]byte {
	st := map[string][]byte{}
	for _, msg := range m.msgs {
		if msg.Version > v {
			break
		}
		for _, mut := range msg.Mutations {
			switch mut.Type {
			case kv.MutSet:
				st[string(mut.Key)] = mut.Param
			case kv.MutClear:
				delete(st, string(mut.Key))
			case kv.MutClearRange:
				for k := range st {
					if k >= string(mut.Key) && k < string(mut.Param) {
						delete(st, k)
					}
				}
			default:
				old, ok := st[string(mut.Key)]
				st[string(mut.Key)] = kv.ApplyAtomic(mut.Type, old, ok, mut.Param)
			}
		}
	}
	return st
}

func randomMutation(rng *rand.Rand) kv.Mutation {
	key := func() []byte { return []byte(fmt.Sprintf("k%02d", rng.IntN(40))) }
	switch r := rng.IntN(10); {
	case r < 5:
		return kv.Mutation{Type: kv.MutSet, Key: key(), Param: []byte(fmt.Sprintf("v%d", rng.IntN(1000)))}
	case r < 7:
		return kv.Mutation{Type: kv.MutClear, Key: key()}
	case r < 8:
		a, b := key(), key()
		if bytes.Compare(a, b) > 0 {
			a, b = b, a
		}
		return kv.Mutation{Type: kv.MutClearRange, Key: a, Param: append(b, 0)}
	default:
		return kv.Mutation{Type: kv.MutAdd, Key: key(), Param: kv.EncodeInt64(int64(rng.IntN(5)))}
	}
}

// TestDifferentialAgainstModel applies random mutations through a faulty
// log while concurrent readers check point and range reads at random
// versions against a replay model; a tiny window and frequent flushes make
// reads race with flushes to the engine.
func TestDifferentialAgainstModel(t *testing.T) {
	for _, engName := range []string{"memory", "pebble"} {
		t.Run(engName, func(t *testing.T) {
			var eng engine.Engine
			var err error
			if engName == "memory" {
				eng, err = memory.Open(engine.Options{})
			} else {
				eng, err = pebbleengine.Open(engine.Options{Dir: t.TempDir()})
			}
			if err != nil {
				t.Fatal(err)
			}
			log := newFakeLog(7)
			s := New(Options{Tag: 1, Engine: eng, Log: log, WindowVersions: 20, FlushInterval: time.Millisecond, TrackBytes: true, Logger: quiet})
			s.SetOwned([]kv.KeyRange{{Begin: []byte("k"), End: []byte("l")}})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { s.Run(ctx); close(done) }()
			defer func() { cancel(); <-done; s.Close() }()

			rng := rand.New(rand.NewPCG(42, 42))
			var mu sync.Mutex
			m := &model{}
			for v := kv.Version(1); v <= 400; v++ {
				msg := logentry.Message{Version: v}
				for i := 0; i < 1+rng.IntN(3); i++ {
					msg.Mutations = append(msg.Mutations, randomMutation(rng))
				}
				mu.Lock()
				m.msgs = append(m.msgs, msg)
				mu.Unlock()
				log.push(msg)
			}
			var wg sync.WaitGroup
			var checked, tooOld int
			var cmu sync.Mutex
			for r := 0; r < 4; r++ {
				wg.Add(1)
				go func(seed uint64) {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(seed, 3))
					for i := 0; i < 300; i++ {
						v := kv.Version(300 + rng.IntN(101))
						want := m.stateAt(v)
						if rng.IntN(2) == 0 {
							k := []byte(fmt.Sprintf("k%02d", rng.IntN(40)))
							vals, present, err := s.Get(ctx, v, [][]byte{k})
							if errors.Is(err, kv.Errorf(kv.CodeTransactionTooOld, "")) {
								cmu.Lock()
								tooOld++
								cmu.Unlock()
								continue
							}
							if err != nil {
								t.Error(err)
								return
							}
							w, ok := want[string(k)]
							if present[0] != ok || !bytes.Equal(vals[0], w) {
								t.Errorf("Get(%s) at %d = %q/%v, model %q/%v", k, v, vals[0], present[0], w, ok)
								return
							}
						} else {
							reverse := rng.IntN(2) == 0
							limit := rng.IntN(6)
							kvs, _, err := s.GetRange(ctx, v, []byte("k"), []byte("l"), limit, 0, reverse)
							if errors.Is(err, kv.Errorf(kv.CodeTransactionTooOld, "")) {
								continue
							}
							if err != nil {
								t.Error(err)
								return
							}
							var keys []string
							for k := range want {
								keys = append(keys, k)
							}
							sort.Strings(keys)
							if reverse {
								sort.Sort(sort.Reverse(sort.StringSlice(keys)))
							}
							if limit > 0 && len(keys) > limit {
								keys = keys[:limit]
							}
							if len(kvs) != len(keys) {
								t.Errorf("GetRange at %d (limit %d, reverse %v) = %d pairs, model %d", v, limit, reverse, len(kvs), len(keys))
								return
							}
							for j, p := range kvs {
								if string(p.Key) != keys[j] || !bytes.Equal(p.Value, want[keys[j]]) {
									t.Errorf("GetRange at %d: pair %d = %s=%q, model %s=%q", v, j, p.Key, p.Value, keys[j], want[keys[j]])
									return
								}
							}
						}
						cmu.Lock()
						checked++
						cmu.Unlock()
					}
				}(uint64(r))
			}
			wg.Wait()
			// Byte accounting matches the final state.
			wait.For(t, "applied 400", func() bool { return s.AppliedVersion() >= 400 })
			final := m.stateAt(400)
			var bytesWant int64
			for k, v := range final {
				bytesWant += int64(len(k) + len(v))
			}
			used, _ := s.Usage()
			if used != bytesWant {
				t.Errorf("live bytes %d, model %d", used, bytesWant)
			}
			t.Logf("%d reads checked, %d too old", checked, tooOld)
			if checked < 100 {
				t.Fatalf("only %d reads checked", checked)
			}
		})
	}
}

// TestReadsBeyondAppliedWaitThenFail: a read at a version the stash has not
// reached waits, and fails with future_version after FutureWait (of the
// stash's clock, here a manual one).
func TestReadsBeyondAppliedWaitThenFail(t *testing.T) {
	eng, _ := memory.Open(engine.Options{})
	log := newFakeLog(1)
	log.noFaults = true
	clk := clock.NewManual(time.Unix(0, 0))
	const futureWait = 50 * time.Millisecond
	s := New(Options{Tag: 1, Engine: eng, Log: log, FutureWait: futureWait, Logger: quiet, Clock: clk})
	s.SetOwned([]kv.KeyRange{{Begin: []byte("a"), End: []byte("z")}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go s.Run(ctx)
	// At rest the stash waits on its flush ticker and its fetch loop's
	// timer; a read that waits adds its deadline.
	const atRest = 2
	log.push(logentry.Message{Version: 5, Mutations: []kv.Mutation{{Type: kv.MutSet, Key: []byte("k"), Param: []byte("v")}}})
	read := func() chan error {
		errc := make(chan error, 1)
		go func() {
			vals, present, err := s.Get(ctx, 10, [][]byte{[]byte("k")})
			if err == nil && (!present[0] || string(vals[0]) != "v") {
				err = fmt.Errorf("read %q %v", vals, present)
			}
			errc <- err
		}()
		if err := clk.BlockUntil(ctx, atRest+1); err != nil {
			t.Fatal(err)
		}
		return errc
	}
	errc := read()
	clk.Advance(futureWait - time.Nanosecond)
	select {
	case err := <-errc:
		t.Fatalf("read ahead returned before FutureWait: %v", err)
	default:
	}
	clk.Advance(time.Nanosecond)
	if err := <-errc; !errors.Is(err, kv.Errorf(kv.CodeFutureVersion, "")) {
		t.Fatalf("read ahead = %v", err)
	}
	errc = read() // waiting
	log.push(logentry.Message{Version: 10})
	if err := <-errc; err != nil {
		t.Fatalf("read after catch-up: %v", err)
	}
	if _, _, err := s.Get(ctx, 10, [][]byte{[]byte("zz")}); !errors.Is(err, kv.Errorf(kv.CodeWrongShardServer, "")) {
		t.Fatalf("read outside owned ranges = %v", err)
	}
}

// TestStatsDoNotReorderEviction: Stats of an ephemeral stash looks up the
// keys of its window in the engine; that is not a reference, so a status
// call leaves the eviction order as the clients' reads made it.
func TestStatsDoNotReorderEviction(t *testing.T) {
	eng, _ := memory.Open(engine.Options{Ephemeral: true, Eviction: "lru", CapacityBytes: 1 << 20})
	log := newFakeLog(1)
	s := New(Options{Tag: 1, Engine: eng, Log: log, Ephemeral: true, WindowVersions: 10, FlushInterval: 5 * time.Millisecond, Logger: quiet})
	s.SetOwned([]kv.KeyRange{{Begin: []byte("a"), End: []byte("z")}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Run(ctx)
	set := func(v kv.Version, k string) {
		log.push(logentry.Message{Version: v, Mutations: []kv.Mutation{{Type: kv.MutSet, Key: []byte(k), Param: []byte("v")}}})
	}
	set(1, "b")
	set(2, "c")
	set(3, "d")
	log.push(logentry.Message{Version: 100}) // b, c, d leave the window for the engine
	wait.For(t, "flushed", func() bool { return eng.Stats().Keys >= 3 })
	// b is written again: in the window, and the oldest in the engine.
	set(101, "b")
	wait.For(t, "applied 101", func() bool { return s.AppliedVersion() >= 101 })
	for i := 0; i < 3; i++ {
		if st := s.Stats(); st.Keys != 3 {
			t.Fatalf("Stats().Keys = %d, want 3", st.Keys)
		}
	}
	if got, _ := s.Coldest(1); len(got) != 1 || string(got[0]) != "b" {
		t.Fatalf("coldest after status calls = %q, want b", got)
	}
}

// TestStatsCountAWindowOfManyChunks: an ephemeral stash's Keys and Bytes
// add the window's newest state to the engine's counts, visiting the window
// a chunk at a time; a window of several chunks, with keys new, rewritten
// (also in the engine) and cleared, counts exactly when the stash is quiet.
func TestStatsCountAWindowOfManyChunks(t *testing.T) {
	eng, _ := memory.Open(engine.Options{Ephemeral: true, Eviction: "lru", CapacityBytes: 1 << 30})
	log := newFakeLog(1)
	log.noFaults = true
	s := New(Options{Tag: 1, Engine: eng, Log: log, Ephemeral: true, WindowVersions: 1 << 40, FlushInterval: time.Hour, Logger: quiet})
	s.SetOwned([]kv.KeyRange{{Begin: []byte("a"), End: []byte("z")}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Run(ctx)
	key := func(i int) []byte { return []byte(fmt.Sprintf("k%06d", i)) }
	// 1,000 keys in the engine (a batch at version 1, flushed by hand).
	base := &engine.Batch{Version: 1}
	for i := range 1000 {
		base.Writes = append(base.Writes, engine.Write{Key: key(i), Value: []byte("engine")})
	}
	if err := eng.Apply(base); err != nil {
		t.Fatal(err)
	}
	// The window: 2.5 chunks of keys from 500 on (500 of them rewrite
	// engine keys with longer values), then a clear of 100 window keys.
	n := statsScanChunk*5/2 + 500
	v := kv.Version(2)
	for i := 500; i < n; i += 100 {
		m := logentry.Message{Version: v}
		for j := i; j < min(i+100, n); j++ {
			m.Mutations = append(m.Mutations, kv.Mutation{Type: kv.MutSet, Key: key(j), Param: []byte("window value")})
		}
		log.push(m)
		v++
	}
	log.push(logentry.Message{Version: v, Mutations: []kv.Mutation{{Type: kv.MutClear, Key: key(2000)}, {Type: kv.MutClear, Key: key(2001)}}})
	wait.For(t, "applied", func() bool { return s.AppliedVersion() >= v })
	// Live: keys 0..499 with "engine", 500..n-1 but two with "window value".
	klen := int64(len(key(0)))
	wantKeys := int64(500 + (n - 500) - 2)
	wantBytes := 500*(klen+int64(len("engine"))) + int64(n-500-2)*(klen+int64(len("window value")))
	if st := s.Stats(); st.Keys != wantKeys || st.Bytes != wantBytes {
		t.Fatalf("Stats() = %d keys, %d bytes; want %d, %d", st.Keys, st.Bytes, wantKeys, wantBytes)
	}
}

// TestReportsUsage: a stash tracking bytes pushes its live bytes and
// applied version when it starts (what its engine holds) and as it applies.
func TestReportsUsage(t *testing.T) {
	eng, _ := memory.Open(engine.Options{})
	if err := eng.Apply(&engine.Batch{Version: 3, Writes: []engine.Write{{Key: []byte("a"), Value: []byte("12345")}}}); err != nil {
		t.Fatal(err)
	}
	type report struct {
		used    int64
		applied kv.Version
	}
	reports := make(chan report, 100)
	log := newFakeLog(1)
	s := New(Options{Tag: 1, Engine: eng, Log: log, TrackBytes: true, Logger: quiet,
		ReportUsage: func(tag kv.Tag, used int64, applied kv.Version) { reports <- report{used, applied} }})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Run(ctx)
	if r := <-reports; r != (report{6, 3}) {
		t.Fatalf("first report %+v, want 6 bytes at version 3", r)
	}
	log.push(logentry.Message{Version: 7, Mutations: []kv.Mutation{{Type: kv.MutSet, Key: []byte("b"), Param: []byte("xyz")}}})
	deadline := time.After(5 * time.Second)
	for {
		select {
		case r := <-reports:
			if r == (report{10, 7}) {
				return
			}
		case <-deadline:
			t.Fatal("no report of 10 bytes at version 7")
		}
	}
}
