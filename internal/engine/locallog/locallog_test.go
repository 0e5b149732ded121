package locallog_test

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/distash/distash/internal/engine"
	"github.com/distash/distash/internal/engine/enginetest"
	"github.com/distash/distash/internal/engine/locallog"
	"github.com/distash/distash/internal/fsys"
	"github.com/distash/distash/internal/fsys/faultfs"
	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/testutil/wait"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func openWith(t testing.TB, opts engine.Options, snapBytes int64) *locallog.Engine {
	t.Helper()
	if opts.FS == nil {
		opts.FS = faultfs.New(nil)
	}
	e, err := locallog.Open(opts, locallog.Config{SnapshotBytes: snapBytes, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// kill leaves e as a kill -9 would: its files keep what was written (the
// page cache), and nothing more of e's reaches the disk, its background
// snapshot included.
func kill(e engine.Engine, fs *faultfs.FS) {
	fs.Kill()
	fs.Fail(faultfs.Rule{})
}

// TestConformance runs the engine suite: with no eviction the engine
// keeps exactly its data across Close and across a kill, with snapshots
// rare (the logs replayed) and constant (every few KiB, taken while the
// suite writes, and cut short by kills).
func TestConformance(t *testing.T) {
	for _, snap := range []int64{locallog.DefaultSnapshotBytes, 4 << 10} {
		t.Run(fmt.Sprintf("snapshot%d", snap), func(t *testing.T) {
			open := func(t *testing.T, opts engine.Options) engine.Engine {
				opts.FS = faultfs.New(nil) // one per engine: a kill ends only its own
				return openWith(t, opts, snap)
			}
			crash := func(t *testing.T, e engine.Engine, opts engine.Options) engine.Options {
				kill(e, e.(*locallog.Engine).FS().(*faultfs.FS))
				return opts
			}
			enginetest.Run(t, open, open, crash)
		})
	}
}

// model is what the engine must hold: values by key, and the version.
type model struct {
	m map[string]string
	v kv.Version
}

func (m *model) apply(b *engine.Batch) {
	for _, w := range b.Writes {
		switch {
		case w.IsClearRange():
			for k := range m.m {
				if k >= string(w.Key) && k < string(w.End) {
					delete(m.m, k)
				}
			}
		case w.IsClear():
			delete(m.m, string(w.Key))
		default:
			m.m[string(w.Key)] = string(w.Value)
		}
	}
	m.v = b.Version
}

func (m *model) clone() *model {
	c := &model{m: map[string]string{}, v: m.v}
	for k, v := range m.m {
		c.m[k] = v
	}
	return c
}

// check fails unless e holds exactly m (exact: false allows keys of m to
// be missing, as after evictions, but never a value m does not hold).
func (m *model) check(t *testing.T, e engine.Engine, exact bool) {
	t.Helper()
	if e.Version() != m.v {
		t.Fatalf("version %d, want %d", e.Version(), m.v)
	}
	n := 0
	err := e.Scan(nil, nil, false, func(k, v []byte) bool {
		n++
		want, ok := m.m[string(k)]
		if !ok || want != string(v) {
			t.Fatalf("key %q = %q; want %q (present %v)", k, v, want, ok)
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	if exact && n != len(m.m) {
		t.Fatalf("%d keys, want %d", n, len(m.m))
	}
}

// randomBatch returns a batch of version v over a small key space: sets,
// clears and now and then a clear range.
func randomBatch(rng *rand.Rand, v kv.Version) *engine.Batch {
	b := &engine.Batch{Version: v}
	for range 1 + rng.IntN(20) {
		k := []byte(fmt.Sprintf("k%04d", rng.IntN(500)))
		switch r := rng.IntN(20); {
		case r == 0:
			end := []byte(fmt.Sprintf("k%04d", rng.IntN(500)))
			if bytes.Compare(k, end) > 0 {
				k, end = end, k
			}
			b.Writes = append(b.Writes, engine.Write{Key: k, End: end})
		case r < 4:
			b.Writes = append(b.Writes, engine.Write{Key: k})
		default:
			b.Writes = append(b.Writes, engine.Write{Key: k, Value: bytes.Repeat([]byte{byte('a' + rng.IntN(26))}, rng.IntN(300)), Cost: uint32(rng.IntN(9))})
		}
	}
	return b
}

// files returns the local log's file names.
func files(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(locallog.Dir(dir))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return out
}

func waitSnapshots(t *testing.T, e *locallog.Engine, n int64) {
	t.Helper()
	wait.For(t, fmt.Sprintf("%d snapshots", n), func() bool { return e.Status().Snapshots >= n })
}

// TestRecoverAfterCleanClose: every Apply is recovered, with the snapshot
// and the log after it; a second run goes on from the first's state.
func TestRecoverAfterCleanClose(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(1, 2))
	m := &model{m: map[string]string{}}
	e := openWith(t, engine.Options{Dir: dir}, 32<<10)
	for i := 1; i <= 300; i++ {
		b := randomBatch(rng, kv.Version(i*10))
		if err := e.Apply(b); err != nil {
			t.Fatal(err)
		}
		m.apply(b)
	}
	waitSnapshots(t, e, 1)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	for round := range 2 {
		e = openWith(t, engine.Options{Dir: dir}, 32<<10)
		rec := e.Recovered()
		if rec.Discarded != "" || rec.Cut != "" || rec.SnapshotVersion == 0 || rec.Records == 0 {
			t.Fatalf("round %d: recovery %+v: want a snapshot and log records, nothing cut", round, rec)
		}
		if rec.Version != m.v || rec.Keys != int64(len(m.m)) {
			t.Fatalf("round %d: recovered version %d with %d keys, want %d with %d", round, rec.Version, rec.Keys, m.v, len(m.m))
		}
		m.check(t, e, true)
		for i := range 50 {
			b := randomBatch(rng, m.v+kv.Version(i+1))
			if err := e.Apply(b); err != nil {
				t.Fatal(err)
			}
			m.apply(b)
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRecoverAfterKillWithTornTail: a kill while a record was being
// written leaves a torn tail: recovery cuts it, and the engine holds the
// state of the last whole record; the next run's file follows the cut
// and is replayed after it.
func TestRecoverAfterKillWithTornTail(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(3, 4))
	m := &model{m: map[string]string{}}
	fs := faultfs.New(nil)
	e := openWith(t, engine.Options{Dir: dir, FS: fs}, 1<<30)
	var before *model
	for i := 1; i <= 200; i++ {
		b := randomBatch(rng, kv.Version(i))
		if i == 200 {
			before = m.clone()
			// The last record reaches the disk only in part.
			fs.Fail(faultfs.Rule{Ops: faultfs.OpWrite, Path: "log-*", Partial: true, Times: 1})
			if err := e.Apply(b); err == nil {
				t.Fatal("Apply with a torn write succeeded")
			}
			break
		}
		if err := e.Apply(b); err != nil {
			t.Fatal(err)
		}
		m.apply(b)
	}
	kill(e, fs)
	e = openWith(t, engine.Options{Dir: dir}, 1<<30)
	rec := e.Recovered()
	if !strings.Contains(rec.Cut, "offset") {
		t.Fatalf("recovery %+v: want the torn tail cut", rec)
	}
	before.check(t, e, true)
	// The next run's records follow the cut record.
	for i := range 20 {
		b := randomBatch(rng, before.v+kv.Version(i+1))
		if err := e.Apply(b); err != nil {
			t.Fatal(err)
		}
		before.apply(b)
	}
	fs2 := e.FS().(*faultfs.FS)
	kill(e, fs2)
	e = openWith(t, engine.Options{Dir: dir}, 1<<30)
	defer e.Close()
	before.check(t, e, true)
}

// TestFailedWriteStartsNewFile: after a failed write the engine goes on in
// a new file, and recovery replays the chain across it (the failed batch,
// never applied, is not recovered).
func TestFailedWriteStartsNewFile(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(5, 6))
	m := &model{m: map[string]string{}}
	fs := faultfs.New(nil)
	e := openWith(t, engine.Options{Dir: dir, FS: fs}, 1<<30)
	for i := 1; i <= 100; i++ {
		b := randomBatch(rng, kv.Version(i))
		if i%30 == 0 {
			fs.Fail(faultfs.Rule{Ops: faultfs.OpWrite, Path: "log-*", Partial: true, Times: 1})
			if err := e.Apply(b); err == nil {
				t.Fatal("Apply with a failed write succeeded")
			}
			if e.Version() != m.v {
				t.Fatalf("a failed Apply changed the version to %d", e.Version())
			}
			continue
		}
		if err := e.Apply(b); err != nil {
			t.Fatal(err)
		}
		m.apply(b)
	}
	if e.Status().Failed == "" {
		t.Fatal("status does not report the failed write")
	}
	kill(e, fs)
	e = openWith(t, engine.Options{Dir: dir}, 1<<30)
	defer e.Close()
	m.check(t, e, true)
	if n := len(files(t, dir)); n != 5 { // 4 replayed files and the new one
		t.Fatalf("files %v, want 5", files(t, dir))
	}
}

// TestDamageMidLogCutsThere: a damaged record in the middle of a log ends
// recovery there (the files after it do not follow); the engine holds the
// state at the record before, never a mixture.
func TestDamageMidLogCutsThere(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(7, 8))
	m := &model{m: map[string]string{}}
	e := openWith(t, engine.Options{Dir: dir}, 1<<30)
	var states []*model
	for i := 1; i <= 100; i++ {
		b := randomBatch(rng, kv.Version(i))
		if err := e.Apply(b); err != nil {
			t.Fatal(err)
		}
		m.apply(b)
		states = append(states, m.clone())
	}
	e.Close()
	// A second run's file follows the first.
	e = openWith(t, engine.Options{Dir: dir}, 1<<30)
	for i := range 10 {
		b := randomBatch(rng, m.v+kv.Version(i+1))
		if err := e.Apply(b); err != nil {
			t.Fatal(err)
		}
	}
	e.Close()
	names := files(t, dir)
	path := filepath.Join(locallog.Dir(dir), names[0])
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	raw[len(raw)/2] ^= 0x40
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	e = openWith(t, engine.Options{Dir: dir}, 1<<30)
	defer e.Close()
	rec := e.Recovered()
	if rec.Cut == "" || rec.Version <= 0 || rec.Version >= 100 {
		t.Fatalf("recovery %+v: want a cut in the middle of the first run", rec)
	}
	states[rec.Version-1].check(t, e, true)
	if got := files(t, dir); len(got) != 2 || got[0] != names[0] {
		t.Fatalf("files %v after the cut, want %s and a new one (the second run's dropped)", got, names[0])
	}
}

// TestDamagedSnapshotStartsEmpty: a snapshot that fails its checksum is
// not used, nor the logs after it: the engine starts empty and says why,
// and its files are gone.
func TestDamagedSnapshotStartsEmpty(t *testing.T) {
	for _, how := range []string{"flip", "truncate"} {
		t.Run(how, func(t *testing.T) {
			dir := t.TempDir()
			rng := rand.New(rand.NewPCG(9, 10))
			e := openWith(t, engine.Options{Dir: dir}, 16<<10)
			for i := 1; i <= 200; i++ {
				if err := e.Apply(randomBatch(rng, kv.Version(i))); err != nil {
					t.Fatal(err)
				}
			}
			waitSnapshots(t, e, 1)
			e.Close()
			var snap string
			for _, n := range files(t, dir) {
				if strings.HasPrefix(n, "snap-") {
					snap = filepath.Join(locallog.Dir(dir), n)
				}
			}
			raw, err := os.ReadFile(snap)
			if err != nil {
				t.Fatal(err)
			}
			if how == "flip" {
				raw[len(raw)/3] ^= 1
			} else {
				raw = raw[:len(raw)-20]
			}
			if err := os.WriteFile(snap, raw, 0o644); err != nil {
				t.Fatal(err)
			}
			e = openWith(t, engine.Options{Dir: dir}, 16<<10)
			defer e.Close()
			rec := e.Recovered()
			if rec.Discarded == "" || !strings.Contains(rec.Discarded, "snap-") {
				t.Fatalf("recovery %+v: want the damaged snapshot named", rec)
			}
			if e.Version() != 0 || e.Stats().Keys != 0 {
				t.Fatalf("version %d, %d keys after a damaged snapshot; want an empty engine", e.Version(), e.Stats().Keys)
			}
			if got := files(t, dir); len(got) != 1 || !strings.HasPrefix(got[0], "log-") {
				t.Fatalf("files %v, want only the new log", got)
			}
		})
	}
}

// TestPowerLossKeepsSnapshot: a crash that drops every unsynced write (a
// power loss: the logs are never synced) recovers the last snapshot,
// which was synced, exactly.
func TestPowerLossKeepsSnapshot(t *testing.T) {
	fs := faultfs.NewMem()
	dir := "/stash"
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := fsys.SyncDir(fs, "/"); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(11, 12))
	m := &model{m: map[string]string{}}
	e := openWith(t, engine.Options{Dir: dir, FS: fs}, 64<<10)
	states := map[kv.Version]*model{}
	for i := 1; i <= 300; i++ {
		b := randomBatch(rng, kv.Version(i))
		if err := e.Apply(b); err != nil {
			t.Fatal(err)
		}
		m.apply(b)
		states[m.v] = m.clone()
	}
	waitSnapshots(t, e, 1)
	fs.Crash()
	fs.Fail(faultfs.Rule{}) // the old engine writes nothing more
	fs2 := faultfs.New(fs.Base())
	e2 := openWith(t, engine.Options{Dir: dir, FS: fs2}, 64<<10)
	defer e2.Close()
	rec := e2.Recovered()
	if rec.SnapshotVersion == 0 || rec.Version != rec.SnapshotVersion {
		t.Fatalf("recovery %+v: want exactly a synced snapshot", rec)
	}
	states[rec.Version].check(t, e2, true)
}

// TestEvictionsNeedNoRecord: an ephemeral engine with a capacity evicts
// without logging it; recovery may bring an evicted key back, but only
// with its latest value, and stays within capacity.
func TestEvictionsNeedNoRecord(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(13, 14))
	m := &model{m: map[string]string{}}
	opts := engine.Options{Dir: dir, Ephemeral: true, CapacityBytes: 64 << 10, Eviction: "lru"}
	e := openWith(t, opts, 32<<10)
	for i := 1; i <= 500; i++ {
		b := &engine.Batch{Version: kv.Version(i)}
		for range 5 {
			k := fmt.Sprintf("k%04d", rng.IntN(1000))
			if rng.IntN(10) == 0 {
				b.Writes = append(b.Writes, enginetest.Clear(k))
			} else {
				b.Writes = append(b.Writes, enginetest.Set(k, fmt.Sprint(i)))
			}
		}
		if err := e.Apply(b); err != nil {
			t.Fatal(err)
		}
		m.apply(b)
	}
	if e.Stats().Evictions == 0 {
		t.Fatal("no evictions: the test needs some")
	}
	m.check(t, e, false)
	fs := e.FS().(*faultfs.FS)
	kill(e, fs)
	e = openWith(t, opts, 32<<10)
	defer e.Close()
	m.check(t, e, false)
	if e.Stats().Keys == 0 {
		t.Fatal("nothing recovered")
	}
	for _, c := range e.Counters() {
		if c.Name == "resident_bytes" && c.Value > opts.CapacityBytes {
			t.Fatalf("resident %d bytes over capacity %d", c.Value, opts.CapacityBytes)
		}
	}
}

// TestRemove drops the local log: the next Open starts empty.
func TestRemove(t *testing.T) {
	dir := t.TempDir()
	e := openWith(t, engine.Options{Dir: dir}, 0)
	enginetestApply(t, e, 5, "a", "1")
	e.Close()
	if !locallog.Exists(nil, dir) {
		t.Fatal("Exists is false after a run")
	}
	if err := locallog.Remove(nil, dir); err != nil {
		t.Fatal(err)
	}
	if locallog.Exists(nil, dir) {
		t.Fatal("Exists is true after Remove")
	}
	e = openWith(t, engine.Options{Dir: dir}, 0)
	defer e.Close()
	if e.Version() != 0 || e.Stats().Keys != 0 {
		t.Fatal("not empty after Remove")
	}
}

func enginetestApply(t *testing.T, e engine.Engine, v kv.Version, k, val string) {
	t.Helper()
	if err := e.Apply(&engine.Batch{Version: v, Writes: []engine.Write{enginetest.Set(k, val)}}); err != nil {
		t.Fatal(err)
	}
}
