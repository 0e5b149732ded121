package txlog

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distash/distash/internal/fsys"
	"github.com/distash/distash/internal/fsys/faultfs"
	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/logentry"
	"github.com/hashicorp/raft"
)

// spillingFSM returns a state machine that spills past at bytes of memory
// (down to three quarters of it: less than spillChunkBytes) to a store under dir on fs.
func spillingFSM(t *testing.T, fs fsys.FS, dir string, at int64) *fsm {
	t.Helper()
	cfg, err := newSpillConfig(fs, dir, at/SpillFactor)
	if err != nil {
		t.Fatal(err)
	}
	f := newFSM(0, discardLogger(), func() {})
	f.startSpill(cfg)
	t.Cleanup(f.closeSpill)
	return f
}

func applyTo(t *testing.T, f *fsm, raw []byte) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.applyRecordLocked(raw); err != nil {
		t.Fatal(err)
	}
}

// restoreFrom restores f from snap, as raft does.
func restoreFrom(t *testing.T, f *fsm, snap []byte) {
	t.Helper()
	if err := f.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
		t.Fatal(err)
	}
}

// comparable state: what spilling must not change (Memory and Spilled
// describe where the entries are).
func logicalState(f *fsm) fsmState {
	s := f.state()
	s.Memory, s.Spilled, s.SpilledEntries = 0, 0, 0
	return s
}

// TestSpillMatchesMemory: a state machine that spills its oldest entries
// answers every peek, reports every held figure and writes every snapshot
// byte for byte as one that keeps them all in memory, through random
// appends (mutations to random sets of tags), pops that trim, snapshots
// persisted after later trims, and restores, which spill again.
func TestSpillMatchesMemory(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(seed, 42))
			fs := faultfs.NewMem()
			mem := newFSM(0, discardLogger(), func() {})
			sp := spillingFSM(t, fs, "spill", 24<<10)
			const tags = 5
			popped := make([]kv.Version, tags)
			last := kv.Version(0)
			var held *fsmSnapshot // a snapshot persisted later
			var heldWant []byte
			spilledEver := false
			for step := 0; step < 400; step++ {
				switch r := rng.IntN(100); {
				case r < 80:
					e := &logentry.Entry{Version: last + 1 + kv.Version(rng.IntN(3)), PrevVersion: last}
					for range 1 + rng.IntN(4) {
						var ts []kv.Tag
						for tag := range kv.Tag(tags) {
							if rng.IntN(3) == 0 {
								ts = append(ts, tag)
							}
						}
						if rng.IntN(10) == 0 && len(ts) > 0 {
							ts = append(ts, ts[0]) // a tag listed twice counts once
						}
						e.Mutations = append(e.Mutations, logentry.TaggedMutation{
							Mutation: kv.Mutation{Type: kv.MutSet, Key: fmt.Appendf(nil, "k%d", rng.IntN(1000)), Param: make([]byte, rng.IntN(2<<10))},
							Tags:     ts,
						})
					}
					last = e.Version
					raw := encodeEntry(e)
					applyTo(t, mem, raw)
					applyTo(t, sp, raw)
				case r < 92:
					// Tag 4 stops popping for long stretches: the log holds.
					var pops []TagVersion
					for tag := range kv.Tag(tags) {
						if tag != 4 || rng.IntN(8) == 0 {
							popped[tag] = max(popped[tag], kv.Version(rng.Int64N(int64(last)+1)))
						}
						pops = append(pops, TagVersion{Tag: tag, Version: popped[tag]})
					}
					raw := encodePop(pops)
					applyTo(t, mem, raw)
					applyTo(t, sp, raw)
				case r < 96:
					if held != nil {
						checkPersist(t, held, heldWant)
					}
					s, err := sp.Snapshot()
					if err != nil {
						t.Fatal(err)
					}
					held, heldWant = s.(*fsmSnapshot), snapshotBytes(t, mem)
				default:
					snap := snapshotBytes(t, sp)
					if want := snapshotBytes(t, mem); !bytes.Equal(snap, want) {
						t.Fatalf("step %d: the spilling state machine's snapshot differs", step)
					}
					restoreFrom(t, sp, snap)
					restoreFrom(t, mem, snap)
				}
				spilledEver = spilledEver || sp.state().Spilled > 0
				compareFSMs(t, step, mem, sp, last, rng)
			}
			if held != nil {
				checkPersist(t, held, heldWant)
			}
			if !spilledEver {
				t.Fatal("nothing spilled")
			}
			if got := sp.state().Memory; got > sp.spillCfg.at+(64<<10) {
				t.Fatalf("the spilling state machine holds %d bytes of memory; it spills past %d", got, sp.spillCfg.at)
			}
		})
	}
}

// checkPersist writes a snapshot taken earlier and compares it with want.
func checkPersist(t *testing.T, s *fsmSnapshot, want []byte) {
	t.Helper()
	var buf bytes.Buffer
	if err := s.write(&buf); err != nil {
		t.Fatalf("persisting a snapshot after later trims: %v", err)
	}
	s.Release()
	if !bytes.Equal(buf.Bytes(), want) {
		t.Fatal("a snapshot persisted after later trims differs from the state it was taken of")
	}
}

// compareFSMs checks that sp answers as mem does.
func compareFSMs(t *testing.T, step int, mem, sp *fsm, last kv.Version, rng *rand.Rand) {
	t.Helper()
	if a, b := logicalState(mem), logicalState(sp); !reflect.DeepEqual(a, b) {
		t.Fatalf("step %d: state\n in memory %+v\n spilling  %+v", step, a, b)
	}
	if a, b := mem.held(), sp.held(); !reflect.DeepEqual(a, b) {
		t.Fatalf("step %d: held\n in memory %+v\n spilling  %+v", step, a, b)
	}
	for tag := range kv.Tag(5) {
		after := kv.Version(rng.Int64N(int64(last) + 1))
		// Every message, from both.
		m1, e1, err1 := mem.peek(tag, after, 0)
		m2, e2, err2 := sp.peek(tag, after, 0)
		if (err1 == nil) != (err2 == nil) || e1 != e2 || !reflect.DeepEqual(m1, m2) {
			t.Fatalf("step %d: peek(%d, %d)\n in memory %d messages to %d, %v\n spilling  %d messages to %d, %v",
				step, tag, after, len(m1), e1, err1, len(m2), e2, err2)
		}
		if err1 != nil {
			continue
		}
		// Bounded: each may cut elsewhere (the spilling one counts the
		// spilled entries' whole size), but returns exactly the messages
		// up to where it says it ends, and at least one if there is one.
		maxBytes := []int{1, 700, 4000, 20000}[rng.IntN(4)]
		for name, f := range map[string]*fsm{"in memory": mem, "spilling": sp} {
			msgs, end, err := f.peek(tag, after, maxBytes)
			want := m1
			for len(want) > 0 && want[len(want)-1].Version > end {
				want = want[:len(want)-1]
			}
			if err != nil || end > e1 || !reflect.DeepEqual(msgs, want) || (len(m1) > 0 && len(msgs) == 0) {
				t.Fatalf("step %d: %s: peek(%d, %d, %d) = %d messages to %d, %v; of %d messages to %d",
					step, name, tag, after, maxBytes, len(msgs), end, err, len(m1), e1)
			}
		}
	}
}

// TestSpilledEntryDamaged: a spilled entry that does not read back as
// written fails the peek with ErrCorrupt; it is never served.
func TestSpilledEntryDamaged(t *testing.T) {
	fs := faultfs.NewMem()
	f := spillingFSM(t, fs, "spill", 16<<10)
	for v := kv.Version(1); v <= 20; v++ {
		applyTo(t, f, encodeEntry(&logentry.Entry{Version: v, PrevVersion: v - 1, Mutations: []logentry.TaggedMutation{
			{Mutation: kv.Mutation{Type: kv.MutSet, Key: []byte(fmt.Sprint(v)), Param: bytes.Repeat([]byte{'x'}, 2<<10)}, Tags: []kv.Tag{1}},
		}}))
	}
	if f.state().Spilled == 0 {
		t.Fatal("nothing spilled")
	}
	seg := f.spilled[0].seg.path
	file, err := fs.OpenReadWrite(seg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := file.WriteAt([]byte{'y'}, 100); err != nil {
		t.Fatal(err)
	}
	file.Close()
	if msgs, _, err := f.peek(1, 0, 0); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("peek over a damaged spilled entry: %d messages, %v; want ErrCorrupt", len(msgs), err)
	}
	if _, err := f.Snapshot(); err != nil {
		t.Fatal(err)
	}
	s, _ := f.Snapshot()
	if err := s.(*fsmSnapshot).write(io.Discard); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("snapshot over a damaged spilled entry: %v; want ErrCorrupt", err)
	}
	s.Release()
}

// TestSpillDiskFull: when the spill store cannot write (a failing disk)
// or the disk has too little free space to spill, the entries stay in
// memory and every peek still answers in full; once the disk has room,
// spilling goes on.
func TestSpillDiskFull(t *testing.T) {
	for _, tc := range []struct {
		name   string
		inject func(fs *faultfs.FS)
		heals  bool
	}{
		{"eio", func(fs *faultfs.FS) { fs.Fail(faultfs.Rule{Ops: faultfs.OpWrite, Path: "*.spill", Skip: 4}) }, false},
		{"low-space", func(fs *faultfs.FS) { fs.SetSpace(100 << 20) }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := faultfs.NewMem()
			f := spillingFSM(t, fs, "spill", 16<<10)
			tc.inject(fs)
			mem := newFSM(0, discardLogger(), func() {})
			v := kv.Version(0)
			apply := func(n int) {
				for range n {
					v++
					raw := encodeEntry(&logentry.Entry{Version: v, PrevVersion: v - 1, Mutations: []logentry.TaggedMutation{
						{Mutation: kv.Mutation{Type: kv.MutSet, Key: []byte(fmt.Sprint(v)), Param: bytes.Repeat([]byte{'x'}, 2<<10)}, Tags: []kv.Tag{1, 2}},
					}})
					applyTo(t, f, raw)
					applyTo(t, mem, raw)
				}
			}
			apply(40)
			st := f.state()
			if !f.spillBlocked() || st.Memory < 60<<10 {
				t.Fatalf("spilled %d bytes, %d in memory, blocked %v: want it blocked, the rest in memory", st.Spilled, st.Memory, f.spillBlocked())
			}
			for _, tag := range []kv.Tag{1, 2} {
				m1, e1, _ := mem.peek(tag, 0, 0)
				m2, e2, err := f.peek(tag, 0, 0)
				if err != nil || e1 != e2 || !reflect.DeepEqual(m1, m2) {
					t.Fatalf("tag %d peeks %d messages to %d (%v); want %d to %d", tag, len(m2), e2, err, len(m1), e1)
				}
			}
			if !tc.heals {
				return
			}
			fs.SetSpace(-1)
			apply(5)
			if st := f.state(); f.spillBlocked() || st.Spilled == 0 || st.Memory > 16<<10 {
				t.Fatalf("with room again: spilled %d, %d in memory, blocked %v", st.Spilled, st.Memory, f.spillBlocked())
			}
			m1, _, _ := mem.peek(2, 0, 0)
			if m2, _, err := f.peek(2, 0, 0); err != nil || !reflect.DeepEqual(m1, m2) {
				t.Fatalf("tag 2 peeks %d messages (%v); want %d", len(m2), err, len(m1))
			}
		})
	}
}

// TestHoldBoundWhenSpillBlocked: while the log's entries cannot spill,
// the hold bound is the memory one (MemoryHoldFactor × MemoryBytes), not
// HoldBytes: a tag that does not pop is force-popped there.
func TestHoldBoundWhenSpillBlocked(t *testing.T) {
	fs := faultfs.NewMem()
	fs.Fail(faultfs.Rule{Ops: faultfs.OpOpen, Path: "*.spill"})
	opts := testOptions("log", 1, systemTag, 1, 2)
	opts.FS = fs
	opts.MemoryBytes = 32 << 10
	opts.HoldBytes = 64 << 20
	l := openLog(t, opts)
	defer l.Close()
	a := newAppender(t, l)
	for v := kv.Version(1); v <= 60; v++ {
		a.mustAppend(v, logentry.TaggedMutation{Mutation: kv.Mutation{Type: kv.MutSet, Key: []byte(fmt.Sprint(v)), Param: make([]byte, 4<<10)}, Tags: []kv.Tag{systemTag, 1, 2}})
		l.Pop(systemTag, v)
		l.Pop(1, v)
	}
	if err := l.SyncPops(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	s := l.Stats()
	if s.Spilled != 0 || s.Dropped[2] == 0 || s.Memory > MemoryHoldFactor*opts.MemoryBytes {
		t.Fatalf("a log that cannot spill, past %d bytes of memory: %+v", MemoryHoldFactor*opts.MemoryBytes, s)
	}
}

// TestSpillAcrossRestart: a log whose tag stops popping spills to its
// replica's directory; after a restart (snapshot and raft log replayed)
// the tag still peeks every message, and what the old run spilled is gone.
func TestSpillAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(dir, 1, 1, 2)
	opts.MemoryBytes = 32 << 10
	opts.HoldBytes = 64 << 20
	opts.TrailingLogs = 8
	l := openLog(t, opts)
	a := newAppender(t, l)
	const n = 200
	for v := kv.Version(1); v <= n; v++ {
		a.mustAppend(v, logentry.TaggedMutation{Mutation: kv.Mutation{Type: kv.MutSet, Key: []byte(fmt.Sprint(v)), Param: make([]byte, 1<<10)}, Tags: []kv.Tag{1, 2}})
		l.Pop(1, v)
	}
	if err := l.SyncPops(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if s := l.Stats(); s.Spilled == 0 || s.Memory > 3*opts.MemoryBytes {
		t.Fatalf("a log holding %d bytes for a tag that does not pop spilled %d bytes and holds %d in memory", s.Bytes, s.Spilled, s.Memory)
	}
	check := func(l *Log) {
		t.Helper()
		msgs, _ := mustPeek(t, l, 2, 0, 0)
		if len(msgs) != n {
			t.Fatalf("tag 2 peeks %d messages; want %d", len(msgs), n)
		}
		for i, m := range msgs {
			if m.Version != kv.Version(i+1) || string(m.Mutations[0].Key) != fmt.Sprint(i+1) {
				t.Fatalf("message %d is version %d, key %q", i, m.Version, m.Mutations[0].Key)
			}
		}
	}
	check(l)
	// A snapshot writes the spilled entries too.
	if err := l.Snapshot(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	left, _ := filepath.Glob(filepath.Join(dir, "*", "spill", "*", "*"))
	if len(left) != 0 {
		t.Fatalf("a closed log left spill files: %v", left)
	}
	l = openLog(t, opts)
	defer l.Close()
	check(l)
	// Restored from its snapshot one entry at a time, spilling as it went.
	if s := l.Stats(); s.Spilled == 0 || s.Memory > 3*opts.MemoryBytes {
		t.Fatalf("a restarted log holding %d bytes spilled %d and holds %d in memory", s.Bytes, s.Spilled, s.Memory)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*", "spill", "*", "*.spill"))
	if len(files) == 0 || !strings.HasSuffix(files[0], ".spill") {
		t.Fatalf("spill files: %v", files)
	}
}

// TestSpilledPeeksRaceTrims: peeks that read spilled entries outside the
// state machine's lock, while applies spill more, pops trim (deleting
// segments), snapshots persist and restores replace the store, get each
// message they return whole and in order, or ErrTrimmed.
func TestSpilledPeeksRaceTrims(t *testing.T) {
	fs := faultfs.NewMem()
	f := spillingFSM(t, fs, "spill", 16<<10)
	entry := func(v kv.Version) []byte {
		return encodeEntry(&logentry.Entry{Version: v, PrevVersion: v - 1, Mutations: []logentry.TaggedMutation{
			{Mutation: kv.Mutation{Type: kv.MutSet, Key: []byte(fmt.Sprint(v)), Param: make([]byte, 1<<10)}, Tags: []kv.Tag{1}},
		}})
	}
	const last = 3000
	var applied atomic.Int64
	done := make(chan struct{})
	errs := make(chan error, 4)
	for g := range 3 {
		go func() {
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for {
				select {
				case <-done:
					errs <- nil
					return
				default:
				}
				after := kv.Version(rng.Int64N(applied.Load() + 1))
				msgs, end, err := f.peek(1, after, []int{0, 3000, 30000}[rng.IntN(3)])
				if errors.Is(err, logentry.ErrTrimmed) {
					continue
				}
				if err != nil {
					errs <- err
					return
				}
				prev := after
				for _, m := range msgs {
					if m.Version <= prev || m.Version > end || string(m.Mutations[0].Key) != fmt.Sprint(m.Version) || len(m.Mutations[0].Param) != 1<<10 {
						errs <- fmt.Errorf("peek after %d to %d: message %d with key %q after %d", after, end, m.Version, m.Mutations[0].Key, prev)
						return
					}
					prev = m.Version
				}
			}
		}()
	}
	var snaps []raft.FSMSnapshot
	for v := kv.Version(1); v <= last; v++ {
		applyTo(t, f, entry(v))
		applied.Store(int64(v))
		switch {
		case v%97 == 0:
			applyTo(t, f, encodePop([]TagVersion{{Tag: 1, Version: v - 60}}))
		case v%500 == 0:
			restoreFrom(t, f, snapshotBytes(t, f))
		case v%211 == 0:
			s, err := f.Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			snaps = append(snaps, s)
		}
		if len(snaps) > 2 {
			if err := snaps[0].(*fsmSnapshot).write(io.Discard); err != nil {
				t.Fatalf("persisting a snapshot after trims: %v", err)
			}
			snaps[0].Release()
			snaps = snaps[1:]
		}
	}
	close(done)
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range snaps {
		s.Release()
	}
	f.closeSpill()
	if left, _ := fs.List("spill"); len(left) != 0 {
		t.Fatalf("closed spill stores left %v", left)
	}
}

// TestDamagedSpillIsRebuilt: a spill file damaged under a running log
// (a flipped byte) fails the peek that meets it with ErrCorrupt, never
// serving the bytes; the replica then rebuilds its state from its raft
// snapshot and log, and the same peek returns every message.
func TestDamagedSpillIsRebuilt(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(dir, 1, 1, 2)
	opts.MemoryBytes = 32 << 10
	opts.HoldBytes = 64 << 20
	l := openLog(t, opts)
	defer l.Close()
	a := newAppender(t, l)
	const n = 200
	for v := kv.Version(1); v <= n; v++ {
		a.mustAppend(v, logentry.TaggedMutation{Mutation: kv.Mutation{Type: kv.MutSet, Key: []byte(fmt.Sprint(v)), Param: make([]byte, 1<<10)}, Tags: []kv.Tag{1, 2}})
		l.Pop(1, v)
		if v == n/2 {
			// The rebuild starts from this snapshot and replays the rest.
			if err := l.SyncPops(ctxT(t)); err != nil {
				t.Fatal(err)
			}
			if err := l.Snapshot(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := l.SyncPops(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*", "spill", "*", "*.spill"))
	if len(files) == 0 {
		t.Fatal("nothing spilled")
	}
	file, err := os.OpenFile(files[0], os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := file.WriteAt([]byte("damage"), 100); err != nil {
		t.Fatal(err)
	}
	file.Close()
	if _, _, err := l.Peek(ctxT(t), 2, 0, 0); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("peek over a damaged spill file: %v; want ErrCorrupt", err)
	}
	var msgs []logentry.Message
	for deadline := time.Now().Add(10 * time.Second); ; {
		msgs, _, err = l.Peek(ctxT(t), 2, 0, 0)
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("peek after the rebuild: %v", err)
	}
	if len(msgs) != n {
		t.Fatalf("tag 2 peeks %d messages after the rebuild; want %d", len(msgs), n)
	}
	for i, m := range msgs {
		if m.Version != kv.Version(i+1) || string(m.Mutations[0].Key) != fmt.Sprint(i+1) {
			t.Fatalf("message %d is version %d, key %q", i, m.Version, m.Mutations[0].Key)
		}
	}
	if s := l.Stats(); s.Spilled == 0 {
		t.Fatalf("the rebuilt state spilled nothing: %+v", s)
	}
	// The log goes on: appends, and peeks of what comes next.
	a.mustAppend(n+1, mut("after", 2))
	if msgs, _ := mustPeek(t, l, 2, n, 0); len(msgs) != 1 {
		t.Fatalf("after the rebuild tag 2 peeks %d new messages; want 1", len(msgs))
	}
}

// TestRebuildChecksTheState: rebuild replaces the state only with one
// that reaches the same last version, trim point, popped versions and
// epoch; a raft log that does not (a record missing) leaves it as it was.
func TestRebuildChecksTheState(t *testing.T) {
	f := spillingFSM(t, faultfs.NewMem(), "spill", 16<<10)
	var recs []raft.Log
	for v := kv.Version(1); v <= 30; v++ {
		data := encodeEntry(&logentry.Entry{Version: v, PrevVersion: v - 1, Mutations: []logentry.TaggedMutation{
			{Mutation: kv.Mutation{Type: kv.MutSet, Key: []byte(fmt.Sprint(v)), Param: make([]byte, 2<<10)}, Tags: []kv.Tag{1, 2}},
		}})
		if v == 20 {
			data = encodePop([]TagVersion{{Tag: 1, Version: 10}, {Tag: 2, Version: 5}})
		}
		recs = append(recs, raft.Log{Index: uint64(len(recs) + 1), Type: raft.LogCommand, Data: data})
		f.ApplyBatch([]*raft.Log{&recs[len(recs)-1]})
	}
	before := logicalState(f)
	get := func(skip uint64) func(uint64, *raft.Log) error {
		return func(i uint64, l *raft.Log) error {
			*l = recs[i-1]
			if i == skip {
				*l = raft.Log{Index: i, Type: raft.LogNoop}
			}
			return nil
		}
	}
	if err := f.rebuild(nil, 0, get(20)); err == nil {
		t.Fatal("a rebuild missing the pop replaced the state")
	}
	if got := logicalState(f); !reflect.DeepEqual(got, before) {
		t.Fatalf("a refused rebuild changed the state:\n%+v\n%+v", got, before)
	}
	if err := f.rebuild(nil, 0, get(0)); err != nil {
		t.Fatal(err)
	}
	if got := logicalState(f); !reflect.DeepEqual(got, before) || f.state().Spilled == 0 {
		t.Fatalf("rebuilt state:\n%+v\nwant\n%+v (spilled %d)", got, before, f.state().Spilled)
	}
}
