package distash_test

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distash/distash"
)

// TestRecentReadVersionFallsBackWhenUnchecked: a transaction that read at
// a recent version runs again with a fresh one when nothing can check its
// reads: it writes nothing, reads a snapshot, or fails with its own error.
// One that writes commits in one attempt.
func TestRecentReadVersionFallsBackWhenUnchecked(t *testing.T) {
	defer distash.SetRecentReadVersionAge(time.Hour)()
	c := startCluster(t, twoPools)
	ctx := ctxT(t, 30*time.Second)
	db := c.DB
	if err := db.Transact(ctx, func(tr *distash.Tx) error { tr.Set([]byte("d/k"), []byte("v")); return nil }); err != nil {
		t.Fatal(err)
	}
	errOwn := errors.New("the function's own error")
	cases := []struct {
		name     string
		fn       func(tr *distash.Tx) error
		attempts int
		err      error
	}{
		{"writes", func(tr *distash.Tx) error {
			v, err := tr.Get([]byte("d/k"))
			tr.Set([]byte("d/k2"), v)
			return err
		}, 1, nil},
		{"reads only", func(tr *distash.Tx) error { _, err := tr.Get([]byte("d/k")); return err }, 2, nil},
		{"reads a snapshot", func(tr *distash.Tx) error {
			v, err := tr.Snapshot().Get([]byte("d/k"))
			tr.Set([]byte("d/k3"), v)
			return err
		}, 2, nil},
		{"range snapshot", func(tr *distash.Tx) error {
			_, err := tr.Snapshot().GetRange([]byte("d/"), []byte("d0"), distash.RangeOptions{})
			tr.Set([]byte("d/k4"), []byte("x"))
			return err
		}, 2, nil},
		{"own error", func(tr *distash.Tx) error {
			if _, err := tr.Get([]byte("d/k")); err != nil {
				return err
			}
			return errOwn
		}, 2, errOwn},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var attempts int
			err := db.Transact(ctx, func(tr *distash.Tx) error {
				attempts++
				tr.Options().SetRecentReadVersion()
				return tc.fn(tr)
			})
			if !errors.Is(err, tc.err) {
				t.Fatalf("Transact: %v, want %v", err, tc.err)
			}
			if attempts != tc.attempts {
				t.Fatalf("%d attempts, want %d", attempts, tc.attempts)
			}
		})
	}
	// ReadTransact never reads at a recent version: one attempt.
	attempts := 0
	if err := db.ReadTransact(ctx, func(tr *distash.Tx) error {
		attempts++
		tr.Options().SetRecentReadVersion()
		_, err := tr.Get([]byte("d/k"))
		return err
	}); err != nil || attempts != 1 {
		t.Fatalf("ReadTransact: %v after %d attempts", err, attempts)
	}
}

// TestRecentReadVersionSeesEarlierCommits: client B keeps its recent
// version fresh with transactions of its own while client A commits
// values of a key; after each of A's commits is acknowledged, B copies the
// key into another in a transaction reading at a recent version. B's
// recent version is usually older than A's commit, and the copy must
// still be the value A committed (the commit's check of B's read sends it
// back for a fresh read version), never an older one.
func TestRecentReadVersionSeesEarlierCommits(t *testing.T) {
	defer distash.SetRecentReadVersionAge(time.Hour)()
	c := startCluster(t, twoPools)
	ctx := ctxT(t, 60*time.Second)
	dbA := c.DB
	dbB, err := distash.Open(ctx, c.Server.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer dbB.Close()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // B's own traffic: its known version moves, but lags A's commits
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			dbB.Transact(ctx, func(tr *distash.Tx) error { tr.Set([]byte("d/b-noise"), []byte(fmt.Sprint(i))); return nil })
		}
	}()
	var retried atomic.Int64
	for i := 0; i < 200; i++ {
		want := fmt.Sprintf("value-%03d", i)
		if err := dbA.Transact(ctx, func(tr *distash.Tx) error { tr.Set([]byte("d/src"), []byte(want)); return nil }); err != nil {
			t.Fatal(err)
		}
		attempts := 0
		err := dbB.Transact(ctx, func(tr *distash.Tx) error {
			attempts++
			tr.Options().SetRecentReadVersion()
			v, err := tr.Get([]byte("d/src"))
			if err != nil {
				return err
			}
			tr.Set([]byte("d/dst"), v)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if attempts > 1 {
			retried.Add(1)
		}
		var got []byte
		if err := dbA.ReadTransact(ctx, func(tr *distash.Tx) error {
			var err error
			got, err = tr.Get([]byte("d/dst"))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Fatalf("round %d: B copied %q after A's commit of %q was acknowledged", i, got, want)
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("B's copy needed a second attempt in %d of 200 rounds", retried.Load())
}

// TestRecentReadVersionCountersAddUp: concurrent read-modify-write
// increments reading at recent versions lose no update.
func TestRecentReadVersionCountersAddUp(t *testing.T) {
	c := startCluster(t, twoPools)
	ctx := ctxT(t, 60*time.Second)
	const goroutines, each = 16, 40
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				k := []byte(fmt.Sprintf("d/counter-%d", i%3))
				err := c.DB.Transact(ctx, func(tr *distash.Tx) error {
					tr.Options().SetRecentReadVersion()
					v, err := tr.Get(k)
					if err != nil {
						return err
					}
					tr.Set(k, distash.EncodeInt64(distash.Int64(v)+1))
					return nil
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		}(g)
	}
	wg.Wait()
	var total int64
	if err := c.DB.ReadTransact(ctx, func(tr *distash.Tx) error {
		total = 0
		for i := 0; i < 3; i++ {
			v, err := tr.Get([]byte(fmt.Sprintf("d/counter-%d", i)))
			if err != nil {
				return err
			}
			total += distash.Int64(v)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if total != goroutines*each {
		t.Fatalf("counters add up to %d, want %d: an update was lost", total, goroutines*each)
	}
}

// TestRecentReadVersionIgnoredOutsideTransact: a transaction under manual
// control (CreateTransaction) has nothing to run it again, so the option
// does not apply: a read-only commit succeeds at once.
func TestRecentReadVersionIgnoredOutsideTransact(t *testing.T) {
	defer distash.SetRecentReadVersionAge(time.Hour)()
	c := startCluster(t, twoPools)
	ctx := ctxT(t, 30*time.Second)
	if err := c.DB.Transact(ctx, func(tr *distash.Tx) error { tr.Set([]byte("d/k"), []byte("v")); return nil }); err != nil {
		t.Fatal(err)
	}
	tr, err := c.DB.CreateTransaction(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tr.Options().SetRecentReadVersion()
	if v, err := tr.Get([]byte("d/k")); err != nil || string(v) != "v" {
		t.Fatalf("Get: %q, %v", v, err)
	}
	if err := tr.Commit(); err != nil {
		t.Fatalf("read-only commit of a manual transaction: %v", err)
	}
}
