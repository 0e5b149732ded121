package stash

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/distash/distash/internal/engine"
	"github.com/distash/distash/internal/engine/memory"
	pebbleengine "github.com/distash/distash/internal/engine/pebble"
	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/logentry"
	"github.com/distash/distash/internal/shardmap"
	"github.com/distash/distash/internal/testutil/wait"
)

// stashFetcher reads from stashes of this test by tag, slowly, so that
// writes race with the copy.
type stashFetcher struct {
	stashes map[kv.Tag]*Stash
	delay   time.Duration
}

func (f *stashFetcher) FetchRange(ctx context.Context, from []kv.Tag, begin, end []byte, v kv.Version, byteLimit int64) ([]kv.KeyValue, bool, error) {
	time.Sleep(f.delay)
	var err error
	for _, t := range from {
		var kvs []kv.KeyValue
		var more bool
		kvs, more, err = f.stashes[t].GetRange(ctx, v, begin, end, 0, byteLimit, false)
		if err == nil {
			return kvs, more, nil
		}
	}
	return nil, false, err
}

// TestMoveUnderWrites moves a range from stash 1 to stash 2 while random
// writes (sets, clears, range clears, atomic adds) keep arriving, the way
// the commit proxy tags them: to the source until the move begins, to both
// while it runs, to the destination after. The destination must end with
// exactly the model's state; the source keeps serving reads below the
// version it dropped the range at and refuses reads from it on.
func TestMoveUnderWrites(t *testing.T) {
	old := fetchChunkBytes
	fetchChunkBytes = 64 // many chunks, read at different versions
	defer func() { fetchChunkBytes = old }()
	for _, engName := range []string{"memory", "pebble"} {
		t.Run(engName, func(t *testing.T) {
			open := func() engine.Engine {
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
				return eng
			}
			rng := rand.New(rand.NewPCG(3, 9))
			fetcher := &stashFetcher{stashes: map[kv.Tag]*Stash{}, delay: 2 * time.Millisecond}
			logs := map[kv.Tag]*fakeLog{1: newFakeLog(1), 2: newFakeLog(2)}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var stashes []*Stash
			for _, tag := range []kv.Tag{1, 2} {
				s := New(Options{Tag: tag, Engine: open(), Log: logs[tag], WindowVersions: 30, FlushInterval: time.Millisecond,
					TrackBytes: true, Logger: quiet, Fetcher: fetcher, Dir: t.TempDir(), SampleUnit: 1, FutureWait: 30 * time.Second})
				if tag == 1 {
					s.SetOwned([]kv.KeyRange{{Begin: []byte("k"), End: []byte("l")}})
				} else {
					s.SetOwned(nil)
				}
				fetcher.stashes[tag] = s
				stashes = append(stashes, s)
				done := make(chan struct{})
				go func() { s.Run(ctx); close(done) }()
				defer func() { cancel(); <-done; s.Close() }()
			}
			src, dst := stashes[0], stashes[1]
			m := &model{}
			v := kv.Version(0)
			push := func(tags []kv.Tag, muts ...kv.Mutation) {
				v++
				msg := logentry.Message{Version: v, Mutations: muts}
				m.msgs = append(m.msgs, logentry.Message{Version: v, Mutations: userOnly(muts)})
				for _, tg := range tags {
					logs[tg].push(msg)
				}
			}
			write := func(tags []kv.Tag, n int) {
				for i := 0; i < n; i++ {
					push(tags, randomMutation(rng), randomMutation(rng))
				}
			}
			shard := shardmap.Shard{Begin: []byte("k"), End: []byte("l"), Pool: "p"}
			write([]kv.Tag{1}, 200)
			moving := shard
			moving.Team, moving.Dest = []kv.Tag{1}, []kv.Tag{2}
			push([]kv.Tag{1, 2}, shardmap.AssignMutation(moving))
			// Writes while the copy runs.
			wait.Every(t, time.Millisecond, 20*time.Second, "the destination finished fetching", func() bool {
				write([]kv.Tag{1, 2}, 5)
				return dst.Metrics([]kv.KeyRange{{Begin: shard.Begin, End: shard.End}}, false)[0].State == "serving"
			})
			write([]kv.Tag{1, 2}, 50)
			moved := shard
			moved.Team = []kv.Tag{2}
			push([]kv.Tag{1, 2}, shardmap.AssignMutation(moved))
			dropAt := v
			write([]kv.Tag{2}, 50)

			want := m.stateAt(v)
			got, _, err := dst.GetRange(ctx, v, shard.Begin, shard.End, 0, 0, false)
			if err != nil {
				t.Fatal(err)
			}
			if msg := diff(got, want); msg != "" {
				t.Fatalf("destination at %d: %s", v, msg)
			}
			// The destination's byte count and sample follow its data.
			var live int64
			for k, val := range want {
				live += int64(len(k) + len(val))
			}
			if st := dst.Stats(); st.Bytes != live || st.Keys != int64(len(want)) {
				t.Errorf("destination counts %d keys, %d bytes; holds %d keys, %d bytes", st.Keys, st.Bytes, len(want), live)
			}
			if est := dst.Metrics([]kv.KeyRange{{Begin: shard.Begin, End: shard.End}}, false)[0].Bytes; est != live {
				t.Errorf("destination sample estimates %d bytes, holds %d (unit 1: exact)", est, live)
			}
			// The source refuses reads at and after the drop, serves them
			// before it while its window keeps them.
			if _, _, err := src.GetRange(ctx, dropAt, shard.Begin, shard.End, 0, 0, false); !errors.Is(err, kv.Errorf(kv.CodeWrongShardServer, "")) {
				t.Errorf("source read at the drop version: %v, want wrong_shard_server", err)
			}
			before := m.stateAt(dropAt - 1)
			got, _, err = src.GetRange(ctx, dropAt-1, shard.Begin, shard.End, 0, 0, false)
			if err == nil {
				if msg := diff(got, before); msg != "" {
					t.Errorf("source at %d: %s", dropAt-1, msg)
				}
			} else if !errors.Is(err, kv.Errorf(kv.CodeTransactionTooOld, "")) {
				t.Errorf("source read before the drop: %v", err)
			}
			if n := dst.dropped.Load() + src.dropped.Load(); n != 0 {
				t.Errorf("%d mutations dropped", n)
			}
		})
	}
}

func userOnly(muts []kv.Mutation) []kv.Mutation {
	var out []kv.Mutation
	for _, m := range muts {
		if !shardmap.IsAssign(m.Key) {
			out = append(out, m)
		}
	}
	return out
}

func diff(got []kv.KeyValue, want map[string][]byte) string {
	if len(got) != len(want) {
		return fmt.Sprintf("%d pairs, want %d", len(got), len(want))
	}
	for _, p := range got {
		if w, ok := want[string(p.Key)]; !ok || !bytes.Equal(w, p.Value) {
			return fmt.Sprintf("%s = %q, want %q (present %v)", p.Key, p.Value, w, ok)
		}
	}
	return ""
}

// TestFetchSurvivesRestart stops a durable destination in the middle of
// its copy and opens it again on the same engine and directory: it takes
// its ownership back from its file (the range is still being fetched),
// clears what it had copied and copies again, and ends with exactly the
// model's state.
func TestFetchSurvivesRestart(t *testing.T) {
	old := fetchChunkBytes
	fetchChunkBytes = 64
	defer func() { fetchChunkBytes = old }()
	rng := rand.New(rand.NewPCG(5, 5))
	fetcher := &stashFetcher{stashes: map[kv.Tag]*Stash{}, delay: 5 * time.Millisecond}
	logs := map[kv.Tag]*fakeLog{1: newFakeLog(1), 2: newFakeLog(2)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srcEng, err := memory.Open(engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	src := New(Options{Tag: 1, Engine: srcEng, Log: logs[1], WindowVersions: 30, FlushInterval: time.Millisecond,
		TrackBytes: true, Logger: quiet, Fetcher: fetcher, SampleUnit: 1, FutureWait: 30 * time.Second})
	src.SetOwned([]kv.KeyRange{{Begin: []byte("k"), End: []byte("l")}})
	fetcher.stashes[1] = src
	srcDone := make(chan struct{})
	go func() { src.Run(ctx); close(srcDone) }()
	defer func() { cancel(); <-srcDone; src.Close() }()

	dir, engDir := t.TempDir(), t.TempDir()
	openDst := func() (*Stash, chan struct{}, context.CancelFunc) {
		eng, err := pebbleengine.Open(engine.Options{Dir: engDir})
		if err != nil {
			t.Fatal(err)
		}
		// A window of 300 versions: the engine's durable version lags well
		// behind the copy's end.
		s := New(Options{Tag: 2, Engine: eng, Log: logs[2], WindowVersions: 300, FlushInterval: time.Millisecond,
			TrackBytes: true, Logger: quiet, Fetcher: fetcher, Dir: dir, SampleUnit: 1, FutureWait: 30 * time.Second})
		s.SetOwned(nil)
		fetcher.stashes[2] = s
		dctx, dcancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { s.Run(dctx); close(done) }()
		return s, done, dcancel
	}
	dst, dstDone, stopDst := openDst()

	m := &model{}
	v := kv.Version(0)
	push := func(tags []kv.Tag, muts ...kv.Mutation) {
		v++
		m.msgs = append(m.msgs, logentry.Message{Version: v, Mutations: userOnly(muts)})
		for _, tg := range tags {
			logs[tg].push(logentry.Message{Version: v, Mutations: muts})
		}
	}
	for i := 0; i < 300; i++ {
		push([]kv.Tag{1}, randomMutation(rng), randomMutation(rng))
	}
	shard := shardmap.Shard{Begin: []byte("k"), End: []byte("l"), Pool: "p", Team: []kv.Tag{1}, Dest: []kv.Tag{2}}
	push([]kv.Tag{1, 2}, shardmap.AssignMutation(shard))
	// Let it copy some chunks, then stop it as a crash would (its window
	// is lost; its engine and ownership file stay).
	wait.Every(t, time.Millisecond, 10*time.Second, "the copy began", func() bool {
		if dst.Metrics([]kv.KeyRange{{Begin: shard.Begin, End: shard.End}}, false)[0].FetchedBytes > 0 {
			return true
		}
		push([]kv.Tag{1, 2}, randomMutation(rng))
		return false
	})
	stopDst()
	<-dstDone
	dst.Close()
	for i := 0; i < 20; i++ {
		push([]kv.Tag{1, 2}, randomMutation(rng))
	}
	dst, dstDone, stopDst = openDst()
	defer func() { stopDst(); <-dstDone; dst.Close() }()
	if st := dst.Metrics([]kv.KeyRange{{Begin: shard.Begin, End: shard.End}}, false)[0].State; st != "fetching" {
		t.Fatalf("after the restart the range is %q, want fetching", st)
	}
	wait.Every(t, time.Millisecond, 20*time.Second, "the copy finished after the restart", func() bool {
		if dst.Metrics([]kv.KeyRange{{Begin: shard.Begin, End: shard.End}}, false)[0].State == "serving" {
			return true
		}
		push([]kv.Tag{1, 2}, randomMutation(rng))
		return false
	})
	moved := shard
	moved.Team, moved.Dest = []kv.Tag{2}, nil
	push([]kv.Tag{1, 2}, shardmap.AssignMutation(moved))
	for i := 0; i < 20; i++ {
		push([]kv.Tag{2}, randomMutation(rng))
	}
	// A crash right after the move was finalized: the destination said
	// "serving" only once its copy was durable, so it comes back serving
	// the range (the source dropped it: a second copy could not be made).
	if _, _, err := dst.GetRange(ctx, v, shard.Begin, shard.End, 0, 0, false); err != nil {
		t.Fatal(err)
	}
	stopDst()
	<-dstDone
	dst.Close()
	dst, dstDone, stopDst = openDst()
	if st := dst.Metrics([]kv.KeyRange{{Begin: shard.Begin, End: shard.End}}, false)[0].State; st != "serving" {
		t.Fatalf("after a restart past the move's end the range is %q, want serving", st)
	}
	gctx, gcancel := context.WithTimeout(ctx, 10*time.Second)
	got, _, err := dst.GetRange(gctx, v, shard.Begin, shard.End, 0, 0, false)
	gcancel()
	if err != nil {
		t.Fatal(err)
	}
	want := m.stateAt(v)
	if msg := diff(got, want); msg != "" {
		t.Fatalf("destination after a restart mid-copy: %s", msg)
	}
	var live int64
	for k, val := range want {
		live += int64(len(k) + len(val))
	}
	if st := dst.Stats(); st.Bytes != live {
		t.Errorf("destination counts %d bytes, holds %d", st.Bytes, live)
	}
}
