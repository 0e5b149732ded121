package server

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distash/distash"
	"github.com/distash/distash/internal/engine"
	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/testutil/wait"
	"github.com/distash/distash/internal/wire"
)

const superviseConfig = `
[cluster]
mvcc_window = "1s"

[[pool]]
name = "data"
prefix = "d/"
medium = "ssd"
mode = "durable"
engine = "pebble"
stashes = 2
replication = 2
`

// breakable fails Apply and Get once broken is set.
type breakable struct {
	engine.Engine
	broken *atomic.Bool
}

var errInjected = errors.New("injected engine failure")

func (b breakable) Apply(batch *engine.Batch) error {
	if b.broken.Load() {
		return errInjected
	}
	return b.Engine.Apply(batch)
}

func (b breakable) Get(key []byte) ([]byte, bool, error) {
	if b.broken.Load() {
		return nil, false, errInjected
	}
	return b.Engine.Get(key)
}

// withBrokenFirstEngine returns a Tuning.WrapEngine that makes the first
// engine opened for data stash 0 breakable through the returned flag;
// failReopen makes every later open of that stash fail.
func withBrokenFirstEngine(t *testing.T, failReopen bool) (*atomic.Bool, func(string, int, engine.Engine) engine.Engine) {
	broken := &atomic.Bool{}
	var opens atomic.Int32
	wrap := func(pool string, index int, e engine.Engine) engine.Engine {
		if pool != "data" || index != 0 {
			return e
		}
		if opens.Add(1) == 1 {
			return breakable{Engine: e, broken: broken}
		}
		if failReopen {
			alwaysBroken := &atomic.Bool{}
			alwaysBroken.Store(true)
			return breakable{Engine: e, broken: alwaysBroken}
		}
		return e
	}
	oldDelays := restartDelays
	restartDelays = []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 50 * time.Millisecond}
	t.Cleanup(func() { restartDelays = oldDelays })
	return broken, wrap
}

func startSupervised(t *testing.T, wrap func(string, int, engine.Engine) engine.Engine) (*Server, *distash.DB) {
	t.Helper()
	srv := startQuietTuned(t, superviseConfig, Tuning{WrapEngine: wrap})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := distash.Open(ctx, srv.ClusterString())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return srv, db
}

// writeKeys commits d/000 .. d/<n-1>, each set to its number, one
// transaction each.
func writeKeys(ctx context.Context, t *testing.T, db *distash.DB, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		if err := db.Transact(ctx, func(tr *distash.Tx) error {
			tr.Set([]byte(fmt.Sprintf("d/%03d", i)), []byte(fmt.Sprint(i)))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
}

// stashStatus returns the status of data stash 0 (tag 1).
func stashStatus(t *testing.T, srv *Server) *wire.StashStatus {
	resp, err := (&service{s: srv}).Status(context.Background(), &wire.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range resp.Stashes {
		if st.Id == 1 {
			return st
		}
	}
	t.Fatal("no stash 1 in status")
	return nil
}

// readAll reads every key in one read transaction and checks the values.
func readAll(ctx context.Context, db *distash.DB, n int) error {
	return db.ReadTransact(ctx, func(tr *distash.Tx) error {
		keys := make([][]byte, n)
		for i := range keys {
			keys[i] = []byte(fmt.Sprintf("d/%03d", i))
		}
		vals, err := tr.GetMulti(keys)
		if err != nil {
			return err
		}
		for i, v := range vals {
			if string(v) != fmt.Sprint(i) {
				return fmt.Errorf("d/%03d = %q, want %d", i, v, i)
			}
		}
		return nil
	})
}

// readers runs concurrent reads until stop is closed; done counts the read
// transactions so far, and wait reports the first error and how many read
// transactions took longer than a second.
func readers(ctx context.Context, db *distash.DB, n int, stop chan struct{}) (done func() int, wait func() (error, int)) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	slow, count := 0, 0
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				err := readAll(ctx, db, n)
				mu.Lock()
				if err != nil && first == nil {
					first = err
				}
				if time.Since(start) > time.Second {
					slow++
				}
				count++
				mu.Unlock()
			}
		}()
	}
	done = func() int {
		mu.Lock()
		defer mu.Unlock()
		return count
	}
	return done, func() (error, int) { wg.Wait(); return first, slow }
}

// TestFailedStashRestartsAndReadsGoElsewhere: the engine of one replica
// fails (a flush and its reads return errors). The stash reports itself
// restarting, its reads fail fast so clients read the other replica, it is
// reopened from its files, catches up from the log and serves every value
// again, and status counts the restart and keeps the error.
func TestFailedStashRestartsAndReadsGoElsewhere(t *testing.T) {
	broken, wrap := withBrokenFirstEngine(t, false)
	srv, db := startSupervised(t, wrap)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const n = 100
	writeKeys(ctx, t, db, n)
	stop := make(chan struct{})
	reads, readersEnd := readers(ctx, db, n, stop)
	broken.Store(true)
	var st *wire.StashStatus
	wait.Within(t, 20*time.Second, "stash 1 restarted and healthy", func() bool {
		st = stashStatus(t, srv)
		return st.Restarts >= 1 && st.Health == HealthHealthy
	})
	if st.LastError == "" {
		t.Error("status lost the error that stopped the stash")
	}
	t.Logf("stash 1: health %s, restarts %d, last error %q", st.Health, st.Restarts, st.LastError)
	// Writes keep flowing to both replicas after the restart.
	if err := db.Transact(ctx, func(tr *distash.Tx) error { tr.Set([]byte("d/after"), []byte("x")); return nil }); err != nil {
		t.Fatal(err)
	}
	// ... and reads go on: every reader reads the restarted stash's
	// replica set a few times more.
	before := reads()
	wait.For(t, "20 read transactions after the restart", func() bool { return reads() >= before+20 })
	close(stop)
	if err, slow := readersEnd(); err != nil || slow > 0 {
		t.Fatalf("reads during the failure: error %v, %d read transactions over 1s", err, slow)
	}
	// The restarted stash itself serves every value.
	v := &service{s: srv}
	keys := make([][]byte, n)
	for i := range keys {
		keys[i] = []byte(fmt.Sprintf("d/%03d", i))
	}
	var resp *wire.ReadResponse
	if !wait.Until(10*time.Second, func() bool {
		rv, err := srv.tx.Load().grv.GetReadVersion(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if resp, err = v.Read(ctx, &wire.ReadRequest{Stash: 1, Version: int64(rv), Keys: keys}); err != nil {
			t.Fatal(err)
		}
		return resp.Error == nil
	}) {
		t.Fatalf("restarted stash does not serve: %v", resp.Error)
	}
	for i, val := range resp.Values {
		if string(val.Value) != fmt.Sprint(i) {
			t.Fatalf("restarted stash: d/%03d = %q", i, val.Value)
		}
	}
}

// TestStashThatKeepsFailingIsMarkedFailed: a stash whose engine fails
// after every reopen ends up failed; its reads fail at once with
// stash_unavailable, and clients are served by the other replica.
func TestStashThatKeepsFailingIsMarkedFailed(t *testing.T) {
	broken, wrap := withBrokenFirstEngine(t, true)
	srv, db := startSupervised(t, wrap)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const n = 20
	writeKeys(ctx, t, db, n)
	broken.Store(true)
	// Keep versions moving so the reopened stashes flush, and fail, too.
	wait.Every(t, 50*time.Millisecond, 30*time.Second, "stash 1 marked failed", func() bool {
		if stashStatus(t, srv).Health == HealthFailed {
			return true
		}
		if err := db.Transact(ctx, func(tr *distash.Tx) error { tr.Set([]byte("d/tick"), []byte("x")); return nil }); err != nil {
			t.Fatal(err)
		}
		return false
	})
	st := stashStatus(t, srv)
	t.Logf("stash 1: health %s, restarts %d, last error %q", st.Health, st.Restarts, st.LastError)
	rv, err := srv.tx.Load().grv.GetReadVersion(ctx)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	resp, err := (&service{s: srv}).Read(ctx, &wire.ReadRequest{Stash: 1, Version: int64(rv), Keys: [][]byte{[]byte("d/000")}})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Error == nil || kv.Code(resp.Error.Code) != kv.CodeStashUnavailable {
		t.Fatalf("read of a failed stash: %v, want stash_unavailable", resp.Error)
	}
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Fatalf("read of a failed stash took %v", d)
	}
	for i := 0; i < 5; i++ {
		if err := readAll(ctx, db, n); err != nil {
			t.Fatalf("reads with one failed replica: %v", err)
		}
	}
}
