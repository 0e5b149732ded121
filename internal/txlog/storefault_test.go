package txlog

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/distash/distash/internal/fsys"
	"github.com/distash/distash/internal/fsys/faultfs"
	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/logentry"
	"github.com/distash/distash/internal/testutil/wait"
)

// failRecorder is an OnFail that records its calls.
type failRecorder struct {
	mu   sync.Mutex
	errs []error
}

func (r *failRecorder) onFail(err error) {
	r.mu.Lock()
	r.errs = append(r.errs, err)
	r.mu.Unlock()
}

func (r *failRecorder) get() []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]error(nil), r.errs...)
}

func isEIO(err error) bool { return errors.Is(err, syscall.EIO) }

// logFixture is an embedded log on a faultfs, with the versions it
// acknowledged.
type logFixture struct {
	t     *testing.T
	fs    *faultfs.FS
	opts  Options
	l     *Log
	fails *failRecorder
	a     *appender
	acked kv.Version // every version up to acked was acknowledged
}

func newLogFixture(t *testing.T, fs *faultfs.FS, replicas int) *logFixture {
	// raft's snapshot store writes to the OS's files: the same path exists
	// on both.
	dir := t.TempDir()
	// The data directory's parents exist, durably, as they do on a disk.
	if err := fs.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	for d := filepath.Dir(dir); ; d = filepath.Dir(d) {
		if err := fsys.SyncDir(fs, d); err != nil {
			t.Fatal(err)
		}
		if d == "/" {
			break
		}
	}
	f := &logFixture{t: t, fs: fs, opts: testOptions(dir, replicas, 1)}
	f.opts.FS = fs
	f.opts.LeaderTimeout = time.Second
	f.reopen()
	t.Cleanup(func() { f.l.Close() })
	return f
}

func (f *logFixture) reopen() {
	f.t.Helper()
	f.fails = &failRecorder{}
	f.opts.OnFail = f.fails.onFail
	f.l = openLog(f.t, f.opts)
	f.a = newAppender(f.t, f.l)
	if f.a.last < f.acked {
		f.t.Fatalf("reopened log ends at %d; %d was acknowledged", f.a.last, f.acked)
	}
	f.acked = f.a.last
}

// appendN appends n entries pipelined and returns the first error; no
// entry is acknowledged after one failed.
func (f *logFixture) appendN(n int) error {
	f.t.Helper()
	var fs []*logentry.Future
	for range n {
		v := f.a.last + 1
		fs = append(fs, f.a.append(v, logentry.TaggedMutation{Mutation: kv.Mutation{Type: kv.MutSet, Key: []byte(fmt.Sprint(v)), Param: make([]byte, 512)}, Tags: []kv.Tag{1}}))
	}
	var first error
	for _, fu := range fs {
		err := fu.Wait(ctxT(f.t))
		switch {
		case err == nil && first != nil:
			f.t.Fatalf("append %d acknowledged after append failed: %v", fu.Version(), first)
		case err == nil:
			if fu.Version() != f.acked+1 {
				f.t.Fatalf("append %d acknowledged after %d", fu.Version(), f.acked)
			}
			f.acked = fu.Version()
		case first == nil:
			first = err
		}
	}
	return first
}

// checkAcked checks that the log holds every acknowledged version.
func (f *logFixture) checkAcked() {
	f.t.Helper()
	msgs, _ := mustPeek(f.t, f.l, 1, 0, 0)
	if len(msgs) < int(f.acked) {
		f.t.Fatalf("log holds %d entries of tag 1; %d were acknowledged", len(msgs), f.acked)
	}
	for i, m := range msgs {
		if m.Version != kv.Version(i+1) {
			f.t.Fatalf("entry %d of the log is version %d", i, m.Version)
		}
	}
}

// TestLogReplicaDiskFails: a log whose replica's disk fails an fsync,
// returns EIO on a write or fills never acknowledges an append after
// that (the append returns an error naming the cause), calls OnFail once
// with it, closes without hanging on its frozen raft, and once the disk
// works again (reopened after a restart or a crash) holds every
// acknowledged entry and takes appends.
func TestLogReplicaDiskFails(t *testing.T) {
	for _, tc := range []struct {
		name   string
		inject func(fs *faultfs.FS)
		cause  func(error) bool
	}{
		{"fsync", func(fs *faultfs.FS) { fs.Fail(faultfs.Rule{Ops: faultfs.OpSync}) }, isEIO},
		{"write", func(fs *faultfs.FS) { fs.Fail(faultfs.Rule{Ops: faultfs.OpWrite}) }, isEIO},
		{"no-space", func(fs *faultfs.FS) { fs.SetSpace(64 << 10) }, fsys.IsNoSpace},
	} {
		t.Run(tc.name, func(t *testing.T) {
			crash := tc.name != "write"
			f := newLogFixture(t, faultfs.NewMem(), 1)
			if err := f.appendN(20); err != nil {
				t.Fatal(err)
			}
			tc.inject(f.fs)
			var err error
			for i := 0; i < 100 && err == nil; i++ {
				err = f.appendN(8)
			}
			if err == nil {
				t.Fatal("no append failed")
			}
			if !tc.cause(err) {
				t.Fatalf("append: %v; the error does not name the cause", err)
			}
			// The disk works again: nothing is acknowledged anyway.
			f.fs.Heal()
			if err := f.appendN(3); err == nil {
				t.Fatal("append acknowledged by a failed replica")
			}
			fails := f.fails.get()
			if len(fails) != 1 || !tc.cause(fails[0]) || !strings.Contains(fails[0].Error(), "replica-0") {
				t.Fatalf("OnFail calls: %v; want one naming the replica and the cause", fails)
			}
			t0 := time.Now()
			f.l.Close()
			if d := time.Since(t0); d > 4*time.Second {
				t.Fatalf("Close took %v", d)
			}
			if crash {
				f.fs.Crash()
			} else {
				f.fs.Kill()
			}
			f.reopen()
			f.checkAcked()
			if err := f.appendN(5); err != nil {
				t.Fatalf("append after reopening on a healthy disk: %v", err)
			}
		})
	}
}

// TestLogCrash: a crash with appends in flight, dropping exactly the
// unsynced writes, loses no acknowledged entry.
func TestLogCrash(t *testing.T) {
	f := newLogFixture(t, faultfs.NewMem(), 1)
	for range 2 {
		if err := f.appendN(30); err != nil {
			t.Fatal(err)
		}
		var fs []*logentry.Future
		for range 30 {
			fs = append(fs, f.a.append(f.a.last+1, mut(fmt.Sprint(f.a.last+1), 1)))
		}
		for _, fu := range fs[:5] {
			if fu.Wait(ctxT(t)) == nil {
				f.acked = fu.Version()
			}
		}
		f.fs.Crash()
		for _, fu := range fs[5:] {
			if fu.Wait(ctxT(t)) == nil {
				f.acked = fu.Version()
			}
		}
		f.l.Close()
		f.reopen()
		f.checkAcked()
	}
}

// TestNetworkReplicaDiskFails: in a network log of three replicas, one
// replica whose disk fails (the leader or a follower) never acknowledges
// an append and calls OnFail, and commits go on on the other two; the
// failed replica, reopened on a healthy disk, catches up.
func TestNetworkReplicaDiskFails(t *testing.T) {
	for _, failLeader := range []bool{true, false} {
		t.Run(fmt.Sprintf("leader=%v", failLeader), func(t *testing.T) {
			c := &netCluster{t: t}
			base := t.TempDir()
			var (
				fss   []*faultfs.FS
				fails []*failRecorder
			)
			for i := range 3 {
				tr := newTCPTransport(t, "127.0.0.1:0")
				c.trs = append(c.trs, tr)
				c.peers = append(c.peers, Peer{ID: fmt.Sprintf("node-%d", i), Addr: string(tr.LocalAddr())})
				c.dirs = append(c.dirs, filepath.Join(base, fmt.Sprint(i)))
				fss = append(fss, faultfs.New(nil))
				fails = append(fails, &failRecorder{})
			}
			options := func(i int) Options {
				opts := c.options(i, c.trs[i], []kv.Tag{1})
				opts.FS, opts.OnFail = fss[i], fails[i].onFail
				return opts
			}
			c.logs = make([]*Log, 3)
			for i := range 3 {
				c.logs[i] = openLog(t, options(i))
			}
			t.Cleanup(func() {
				for _, l := range c.logs {
					if l != nil {
						l.Close()
					}
				}
			})
			lead := c.waitLeader()
			v, err := c.logs[lead].BeginGeneration(ctxT(t), 1)
			if err != nil {
				t.Fatal(err)
			}
			a := &appender{t: t, l: c.logs[lead], last: v}
			appendN := func(epoch uint64, n int) []*logentry.Future {
				var fs []*logentry.Future
				for range n {
					v := a.last + 1
					fs = append(fs, a.l.Append(&logentry.Entry{Version: v, PrevVersion: a.last, Epoch: epoch, Mutations: []logentry.TaggedMutation{mut(fmt.Sprint(v), 1)}}))
					a.last = v
				}
				return fs
			}
			waitAll(t, appendN(1, 20))

			bad := lead
			if !failLeader {
				bad = (lead + 1) % 3
			}
			fss[bad].Fail(faultfs.Rule{Ops: faultfs.OpSync})
			t0 := time.Now()
			if failLeader {
				// Nothing appended on the failed leader is acknowledged.
				for _, fu := range appendN(1, 20) {
					if err := fu.Wait(ctxT(t)); err == nil {
						t.Fatalf("append %d acknowledged by a leader whose disk fails", fu.Version())
					}
				}
				// The failed leader may go on believing it leads until the
				// others elect a new one (its raft is frozen, not gone):
				// wait for a leader that is not it.
				wait.For(t, "a leader other than the replica whose disk fails", func() bool {
					lead = c.waitLeader()
					return lead != bad
				})
				if v, err = c.logs[lead].BeginGeneration(ctxT(t), 2); err != nil || v < 20 {
					t.Fatalf("BeginGeneration(2) on the new leader = %d, %v", v, err)
				}
				a = &appender{t: t, l: c.logs[lead], last: v}
				t.Logf("new leader after %v", time.Since(t0))
			}
			// Commits go on on the two healthy replicas.
			waitAll(t, appendN(2, 30))
			for i := range 3 {
				if i != bad {
					if vs := c.waitPeek(i, 1, a.last); len(vs) != int(a.last) {
						t.Fatalf("replica %d holds %d entries, want %d", i, len(vs), a.last)
					}
				}
			}
			wait.For(t, "OnFail called on the replica whose disk fails", func() bool { return len(fails[bad].get()) > 0 })
			if f := fails[bad].get(); len(f) != 1 || !isEIO(f[0]) || !strings.Contains(f[0].Error(), c.peers[bad].ID) {
				t.Fatalf("OnFail calls %v; want one naming the replica and EIO", f)
			}
			for i := range 3 {
				if f := fails[i].get(); i != bad && len(f) != 0 {
					t.Fatalf("OnFail called on healthy replica %d: %v", i, f)
				}
			}
			t.Logf("%d appends after the failure in %v", a.last-20, time.Since(t0))

			// The failed replica's process ends; restarted on a healthy
			// disk it catches up.
			t0 = time.Now()
			c.logs[bad].Close()
			if d := time.Since(t0); d > 5*time.Second {
				t.Fatalf("closing the failed replica took %v", d)
			}
			fss[bad].Heal()
			fss[bad].Kill()
			c.trs[bad] = newTCPTransport(t, c.peers[bad].Addr)
			c.logs[bad] = openLog(t, options(bad))
			waitAll(t, appendN(2, 10))
			if vs := c.waitPeek(bad, 1, a.last); len(vs) != int(a.last) {
				t.Fatalf("restarted replica holds %d entries, want %d", len(vs), a.last)
			}
		})
	}
}
