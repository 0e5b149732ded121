package server_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/distash/distash"
	"github.com/distash/distash/config"
	"github.com/distash/distash/internal/clustertest"
	"github.com/distash/distash/server"
)

const skewedTOML = `
[cluster]
mvcc_window = "1s"
shard_bytes = "8KiB"

[[pool]]
name = "data"
prefix = "d/"
medium = "ssd"
mode = "durable"
engine = "pebble"
stashes = 4
replication = 1
`

// poolShares returns each stash's share of the pool's bytes.
func poolShares(srv *server.Server, pool string) (shares map[uint32]float64, total int64) {
	shares = map[uint32]float64{}
	for _, st := range srv.Stashes() {
		if st.Pool == pool {
			total += st.Bytes
		}
	}
	for _, st := range srv.Stashes() {
		if st.Pool == pool && total > 0 {
			shares[st.Tag] = float64(st.Bytes) / float64(total)
		}
	}
	return shares, total
}

// waitSpread waits until no stash of pool holds more than 35% of its bytes.
func waitSpread(t *testing.T, srv *server.Server, pool string, timeout time.Duration) {
	t.Helper()
	var state string
	clustertest.WaitUntil(t, timeout, "no stash over 35% of the pool's bytes", func() (bool, string) {
		shares, total := poolShares(srv, pool)
		worst := 0.0
		for _, s := range shares {
			worst = max(worst, s)
		}
		state = fmt.Sprintf("shares %v of %d bytes", shares, total)
		return worst <= 0.35 && total > 0, state
	})
	t.Logf("spread: %s", state)
}

// TestSkewedKeysSpreadOverThePool writes 2,000 keys that the first shard
// map puts on one stash of four (they share their first byte after the
// prefix): the data distributor splits the shard as it grows and moves
// pieces until no stash holds more than 35% of the pool's bytes, while
// readers check that every key written reads back with its value.
func TestSkewedKeysSpreadOverThePool(t *testing.T) {
	t.Parallel() // its server's settings are its own (Tuning)
	tuning := server.Tuning{DistributionInterval: 20 * time.Millisecond}
	cfg, err := config.Parse([]byte(skewedTOML))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	srv, db := startTuned(t, dir, cfg, tuning)
	defer func() { srv.Stop() }()
	defer func() { db.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	value := func(i int) []byte { return []byte(fmt.Sprintf("value-%06d-%s", i, make([]byte, 80))) }
	var mu sync.Mutex
	written := 0
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var readErr error
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				mu.Lock()
				n := written
				mu.Unlock()
				if n == 0 {
					time.Sleep(time.Millisecond)
					continue
				}
				k := (i*7919 + r) % n
				err := db.ReadTransact(ctx, func(tr *distash.Tx) error {
					v, err := tr.Get([]byte(fmt.Sprintf("d/user:%d", k)))
					if err != nil {
						return err
					}
					if string(v) != string(value(k)) {
						return fmt.Errorf("d/user:%d = %.20q, want %.20q", k, v, value(k))
					}
					return nil
				})
				if err != nil && !errors.Is(err, context.Canceled) {
					mu.Lock()
					readErr = err
					mu.Unlock()
					return
				}
			}
		}(r)
	}
	for i := 0; i < 2000; i += 50 {
		err := db.Transact(ctx, func(tr *distash.Tx) error {
			for j := i; j < i+50; j++ {
				tr.Set([]byte(fmt.Sprintf("d/user:%d", j)), value(j))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		written = i + 50
		mu.Unlock()
	}
	waitSpread(t, srv, "data", 90*time.Second)
	close(stop)
	wg.Wait()
	if readErr != nil {
		t.Fatal(readErr)
	}
	// Every key reads back after the moves.
	readAll := func(when string) {
		t.Helper()
		err := db.ReadTransact(ctx, func(tr *distash.Tx) error {
			kvs, err := tr.GetRange([]byte("d/"), []byte("d0"), distash.RangeOptions{})
			if err != nil {
				return err
			}
			if len(kvs) != 2000 {
				return fmt.Errorf("%d keys, want 2000", len(kvs))
			}
			for _, p := range kvs {
				var i int
				fmt.Sscanf(string(p.Key), "d/user:%d", &i)
				if string(p.Value) != string(value(i)) {
					return fmt.Errorf("%s = %.20q", p.Key, p.Value)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
	}
	readAll("after the moves")
	// A restart: every stash comes back with what it owned (its own
	// record of the moves), not the first shard map's ranges.
	db.Close()
	srv.Stop()
	srv, db = startTuned(t, dir, cfg, tuning)
	readAll("after a restart")
	shares, _ := poolShares(srv, "data")
	t.Logf("after the restart: shares %v", shares)
}

// TestOtherSkewedKeySetsSpread loads other skewed key sets into a
// four-stash R=1 pool: one long common prefix with sequential numbers,
// and values of very different sizes (a few large ones among many small).
// After the data distributor runs, no stash holds more than 35% of the
// pool's bytes.
func TestOtherSkewedKeySetsSpread(t *testing.T) {
	t.Parallel() // its server's settings are its own (Tuning)
	tuning := server.Tuning{DistributionInterval: 20 * time.Millisecond}
	sets := map[string]func(i int) (key, value string){
		"sequential": func(i int) (string, string) {
			return fmt.Sprintf("d/tenant-0042/orders/%08d", i), fmt.Sprintf("%0100d", i)
		},
		"sizes": func(i int) (string, string) {
			n := 20
			if i%100 == 0 {
				n = 4000 // one pair in a hundred is 200 times larger
			}
			return fmt.Sprintf("d/z/%06d", (i*7919)%2000), string(make([]byte, n))
		},
	}
	for name, gen := range sets {
		t.Run(name, func(t *testing.T) {
			cfg, err := config.Parse([]byte(skewedTOML))
			if err != nil {
				t.Fatal(err)
			}
			srv, db := startTuned(t, t.TempDir(), cfg, tuning)
			defer srv.Stop()
			defer db.Close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			for i := 0; i < 2000; i += 100 {
				err := db.Transact(ctx, func(tr *distash.Tx) error {
					for j := i; j < i+100; j++ {
						k, v := gen(j)
						tr.Set([]byte(k), []byte(v))
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
			}
			waitSpread(t, srv, "data", 45*time.Second)
		})
	}
}
