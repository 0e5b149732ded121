package distash_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/distash/distash"
	"github.com/distash/distash/internal/testutil/wait"
)

func TestSetGetAcrossPools(t *testing.T) {
	c := startCluster(t, twoPools)
	ctx := ctxT(t, 20*time.Second)
	err := c.DB.Transact(ctx, func(tr *distash.Tx) error {
		tr.Set([]byte("d/k"), []byte("data"))
		tr.Set([]byte("c/k"), []byte("cache"))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = c.DB.ReadTransact(ctx, func(tr *distash.Tx) error {
		vals, err := tr.GetMulti([][]byte{[]byte("d/k"), []byte("c/k"), []byte("d/absent")})
		if err != nil {
			return err
		}
		if string(vals[0]) != "data" || string(vals[1]) != "cache" || vals[2] != nil {
			t.Fatalf("GetMulti = %q", vals)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestReadYourWritesAndRanges(t *testing.T) {
	c := startCluster(t, twoPools)
	ctx := ctxT(t, 20*time.Second)
	err := c.DB.Transact(ctx, func(tr *distash.Tx) error {
		for i := 0; i < 10; i++ {
			tr.Set([]byte(fmt.Sprintf("d/r%02d", i)), []byte{byte('0' + i)})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = c.DB.Transact(ctx, func(tr *distash.Tx) error {
		tr.Set([]byte("d/r03x"), []byte("new"))
		tr.Clear([]byte("d/r05"))
		tr.ClearRange([]byte("d/r07"), []byte("d/r09"))
		tr.Add([]byte("d/r08"), 5) // on a key cleared in this transaction: starts from absent
		v, err := tr.Get([]byte("d/r03x"))
		if err != nil || string(v) != "new" {
			t.Fatalf("read own set = %q, %v", v, err)
		}
		if v, _ := tr.Get([]byte("d/r05")); v != nil {
			t.Fatalf("read own clear = %q", v)
		}
		kvs, err := tr.GetRange([]byte("d/r"), []byte("d/s"), distash.RangeOptions{})
		if err != nil {
			return err
		}
		var keys []string
		for _, p := range kvs {
			keys = append(keys, string(p.Key))
		}
		want := "[d/r00 d/r01 d/r02 d/r03 d/r03x d/r04 d/r06 d/r08 d/r09]"
		if fmt.Sprint(keys) != want {
			t.Fatalf("range = %v, want %v", keys, want)
		}
		if distash.Int64(kvs[7].Value) != 5 {
			t.Fatalf("d/r08 = %v", kvs[7].Value)
		}
		rev, err := tr.GetRange([]byte("d/r"), []byte("d/s"), distash.RangeOptions{Limit: 3, Reverse: true})
		if err != nil {
			return err
		}
		if len(rev) != 3 || string(rev[0].Key) != "d/r09" || string(rev[2].Key) != "d/r06" {
			t.Fatalf("reverse limit 3 = %v", rev)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Committed state matches what the transaction saw.
	err = c.DB.ReadTransact(ctx, func(tr *distash.Tx) error {
		kvs, err := tr.GetRange([]byte("d/r"), []byte("d/s"), distash.RangeOptions{Limit: 5})
		if err != nil {
			return err
		}
		if len(kvs) != 5 || string(kvs[4].Key) != "d/r03x" || string(kvs[4].Value) != "new" {
			t.Fatalf("limit 5 = %q", kvs)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestAtomicOpsDoNotConflict(t *testing.T) {
	c := startCluster(t, twoPools)
	ctx := ctxT(t, 30*time.Second)
	key := []byte("d/counter")
	t1, _ := c.DB.CreateTransaction(ctx)
	t2, _ := c.DB.CreateTransaction(ctx)
	// Both read something so they have read versions, then add.
	t1.Get([]byte("d/x"))
	t2.Get([]byte("d/x"))
	t1.Add(key, 3)
	t2.Add(key, 4)
	t1.Max([]byte("d/max"), 10)
	t2.Max([]byte("d/max"), 7)
	t2.Min([]byte("d/min"), -2)
	if err := t1.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := t2.Commit(); err != nil {
		t.Fatalf("concurrent adds conflicted: %v", err)
	}
	c.DB.ReadTransact(ctx, func(tr *distash.Tx) error {
		vals, err := tr.GetMulti([][]byte{key, []byte("d/max"), []byte("d/min")})
		if err != nil {
			t.Fatal(err)
		}
		if distash.Int64(vals[0]) != 7 || distash.Int64(vals[1]) != 10 || distash.Int64(vals[2]) != -2 {
			t.Fatalf("atomics = %d %d %d", distash.Int64(vals[0]), distash.Int64(vals[1]), distash.Int64(vals[2]))
		}
		return nil
	})
}

func TestConflictAndManualCommit(t *testing.T) {
	c := startCluster(t, twoPools)
	ctx := ctxT(t, 20*time.Second)
	k := []byte("d/x")
	t1, _ := c.DB.CreateTransaction(ctx)
	if _, err := t1.Get(k); err != nil {
		t.Fatal(err)
	}
	t2, _ := c.DB.CreateTransaction(ctx)
	t2.Set(k, []byte("t2"))
	if err := t2.Commit(); err != nil {
		t.Fatal(err)
	}
	t1.Set(k, []byte("t1"))
	err := t1.Commit()
	if !errors.Is(err, distash.ErrNotCommitted) {
		t.Fatalf("t1 commit = %v, want ErrNotCommitted", err)
	}
	var de *distash.Error
	if !errors.As(err, &de) || de.Code != 1020 || !de.Retryable() {
		t.Fatalf("error %v has no code 1020", err)
	}
	// Snapshot reads add no conflict.
	t3, _ := c.DB.CreateTransaction(ctx)
	t3.Snapshot().Get(k)
	t4, _ := c.DB.CreateTransaction(ctx)
	t4.Set(k, []byte("t4"))
	if err := t4.Commit(); err != nil {
		t.Fatal(err)
	}
	t3.Set([]byte("d/y"), []byte("t3"))
	if err := t3.Commit(); err != nil {
		t.Fatalf("snapshot read conflicted: %v", err)
	}
	if err := t3.Commit(); !errors.Is(err, distash.ErrUsedDuringCommit) {
		t.Fatalf("second commit = %v", err)
	}
}

func TestTransactHonoursContext(t *testing.T) {
	c := startCluster(t, twoPools)
	ctx := ctxT(t, 300*time.Millisecond)
	calls := 0
	err := c.DB.Transact(ctx, func(tr *distash.Tx) error {
		calls++
		return distash.ErrNotCommitted // always retryable
	})
	if err == nil || !errors.Is(err, ctx.Err()) && ctx.Err() == nil {
		t.Fatalf("Transact = %v after %d calls", err, calls)
	}
	if calls < 2 {
		t.Fatalf("Transact did not retry: %d calls", calls)
	}
}

func TestBadInputLeavesDatabaseUnchanged(t *testing.T) {
	c := startCluster(t, twoPools)
	ctx := ctxT(t, 20*time.Second)
	if err := c.DB.Transact(ctx, func(tr *distash.Tx) error { tr.Set([]byte("d/keep"), []byte("v")); return nil }); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		fn   func(tr *distash.Tx)
		want error
	}{
		{"key too large", func(tr *distash.Tx) { tr.Set(append([]byte("d/"), make([]byte, 10_001)...), []byte("v")) }, distash.ErrKeyTooLarge},
		{"value too large", func(tr *distash.Tx) { tr.Set([]byte("d/big"), make([]byte, 100_001)) }, distash.ErrValueTooLarge},
		{"transaction too large", func(tr *distash.Tx) {
			for i := 0; i < 120; i++ {
				tr.Set([]byte(fmt.Sprintf("d/t%03d", i)), make([]byte, 90_000))
			}
		}, distash.ErrTransactionTooLarge},
		{"key outside pools", func(tr *distash.Tx) { tr.Set([]byte("x/nowhere"), []byte("v")) }, distash.ErrKeyOutsidePools},
		{"system key", func(tr *distash.Tx) { tr.Set([]byte("\xff/keyServers/d/"), []byte("v")) }, distash.ErrKeyOutsidePools},
		{"clear range leaving the pool", func(tr *distash.Tx) { tr.ClearRange([]byte("d/a"), []byte("e")) }, distash.ErrKeyOutsidePools},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := c.DB.Transact(ctx, func(tr *distash.Tx) error {
				tr.Set([]byte("d/keep"), []byte("changed")) // must not land
				tc.fn(tr)
				return nil
			})
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
	if _, err := c.DB.Pool("nope"); !errors.Is(err, distash.ErrUnknownPool) {
		t.Fatalf("Pool(nope) = %v", err)
	}
	c.DB.ReadTransact(ctx, func(tr *distash.Tx) error {
		v, err := tr.Get([]byte("d/keep"))
		if err != nil || !bytes.Equal(v, []byte("v")) {
			t.Fatalf("d/keep = %q, %v: bad input changed the database", v, err)
		}
		if _, err := tr.Get([]byte("x/1")); !errors.Is(err, distash.ErrKeyOutsidePools) {
			t.Fatalf("Get outside pools = %v", err)
		}
		return nil
	})
}

func TestPoolHandles(t *testing.T) {
	c := startCluster(t, twoPools)
	p, err := c.DB.Pool("cache")
	if err != nil {
		t.Fatal(err)
	}
	if p.Name() != "cache" || string(p.Prefix()) != "c/" || string(p.Key([]byte("k"))) != "c/k" || !p.Ephemeral() || p.Medium() != "dram" {
		t.Fatalf("pool = %s %q %v %s", p.Name(), p.Prefix(), p.Ephemeral(), p.Medium())
	}
}

func TestColdestKeysFollowEvictionOrder(t *testing.T) {
	c := startCluster(t, `
[cluster]
mvcc_window = "1s"

[[pool]]
name = "cache"
prefix = "c/"
medium = "dram"
mode = "ephemeral"
engine = "memory"
capacity = "1MiB"

[[pool]]
name = "data"
prefix = "d/"
medium = "ssd"
mode = "durable"
engine = "pebble"
`)
	ctx := ctxT(t, 30*time.Second)
	for i := 0; i < 10; i++ {
		if err := c.DB.Transact(ctx, func(tr *distash.Tx) error { tr.Set([]byte(fmt.Sprintf("c/k%d", i)), []byte("v")); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	cache, _ := c.DB.Pool("cache")
	// Wait until the writes left the MVCC window for the engine.
	var keys [][]byte
	wait.Until(10*time.Second, func() bool {
		var err error
		if keys, err = c.DB.ColdestKeys(ctx, cache, 3); err != nil {
			t.Fatal(err)
		}
		return len(keys) == 3
	})
	if len(keys) != 3 || string(keys[0]) != "c/k0" {
		t.Fatalf("coldest = %q", keys)
	}
	data, _ := c.DB.Pool("data")
	if _, err := c.DB.ColdestKeys(ctx, data, 3); !errors.Is(err, distash.ErrUnsupported) {
		t.Fatalf("coldest of a durable pool = %v", err)
	}
}

// TestEmptyValueSurvivesFlush: a key set to an empty value stays present
// after it leaves the MVCC window for the engine (it is not a clear).
func TestEmptyValueSurvivesFlush(t *testing.T) {
	c := startCluster(t, `
[cluster]
mvcc_window = "1s"

[[pool]]
name = "cache"
prefix = "c/"
medium = "dram"
mode = "ephemeral"
engine = "memory"

[[pool]]
name = "data"
prefix = "d/"
medium = "ssd"
mode = "durable"
engine = "sqlite"
`)
	ctx := ctxT(t, 30*time.Second)
	if err := c.DB.Transact(ctx, func(tr *distash.Tx) error {
		tr.Set([]byte("d/empty"), nil)
		tr.Set([]byte("c/empty"), []byte{})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	c.WaitFlushed(t) // past the window: now in the engines
	c.DB.ReadTransact(ctx, func(tr *distash.Tx) error {
		vals, err := tr.GetMulti([][]byte{[]byte("d/empty"), []byte("c/empty")})
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range vals {
			if v == nil || len(v) != 0 {
				t.Fatalf("key %d: empty value read as %v (absent)", i, v)
			}
		}
		return nil
	})
}

// TestFlashEnginePools: the flash engine serves an ephemeral SSD pool and a
// durable SSD pool of a cluster, across a restart.
func TestFlashEnginePools(t *testing.T) {
	const cfg = `
[[pool]]
name = "stage"
prefix = "s/"
medium = "ssd"
mode = "ephemeral"
engine = "flash"
capacity = "1MiB"

[[pool]]
name = "data"
prefix = "d/"
medium = "ssd"
mode = "durable"
engine = "flash"
`
	c := startCluster(t, cfg)
	ctx := ctxT(t, 60*time.Second)
	for i := 0; i < 50; i++ {
		if err := c.DB.Transact(ctx, func(tr *distash.Tx) error {
			tr.Set([]byte(fmt.Sprintf("d/%03d", i)), []byte(fmt.Sprint(i)))
			tr.Set([]byte(fmt.Sprintf("s/%03d", i)), []byte(fmt.Sprint(i)))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	check := func(stageWanted bool) {
		c.DB.ReadTransact(ctx, func(tr *distash.Tx) error {
			kvs, err := tr.GetRange([]byte("d/"), []byte("d0"), distash.RangeOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(kvs) != 50 || string(kvs[49].Value) != "49" {
				t.Fatalf("durable flash pool holds %d pairs", len(kvs))
			}
			v, err := tr.Get([]byte("s/007"))
			if err != nil {
				t.Fatal(err)
			}
			if stageWanted && string(v) != "7" {
				t.Fatalf("ephemeral flash pool: s/007 = %q", v)
			}
			return nil
		})
	}
	check(true)
	c.Stop()
	c.Restart(t)
	check(false)
}

// TestReadVersionOlderThanWindowIsTooOld: a transaction whose read version
// fell out of the MVCC window gets ErrTransactionTooOld on reads and on
// commit; Transact retries it with a new read version.
func TestReadVersionOlderThanWindowIsTooOld(t *testing.T) {
	c := startCluster(t, `
[cluster]
mvcc_window = "1s"

[[pool]]
name = "data"
prefix = "d/"
medium = "ssd"
mode = "durable"
engine = "pebble"
`)
	ctx := ctxT(t, 30*time.Second)
	if err := c.DB.Transact(ctx, func(tr *distash.Tx) error { tr.Set([]byte("d/k"), []byte("v")); return nil }); err != nil {
		t.Fatal(err)
	}
	old, _ := c.DB.CreateTransaction(ctx)
	if _, err := old.Get([]byte("d/k")); err != nil {
		t.Fatal(err)
	}
	wait.For(t, "the read version expires", func() bool {
		_, err := old.Get([]byte("d/other"))
		if err != nil && !errors.Is(err, distash.ErrTransactionTooOld) {
			t.Fatalf("read at an expiring version = %v", err)
		}
		return err != nil
	})
	old.Set([]byte("d/k"), []byte("late"))
	if err := old.Commit(); !errors.Is(err, distash.ErrTransactionTooOld) {
		t.Fatalf("commit at an expired version = %v", err)
	}
	attempts := 0
	err := c.DB.Transact(ctx, func(tr *distash.Tx) error {
		attempts++
		if attempts == 1 {
			tr.SetReadVersion(1) // long gone
		}
		v, err := tr.Get([]byte("d/k"))
		if err != nil {
			return err
		}
		tr.Set([]byte("d/k2"), v)
		return nil
	})
	if err != nil || attempts != 2 {
		t.Fatalf("Transact after too-old: %v after %d attempts", err, attempts)
	}
}

// TestDurablePoolRecency: a durable pool with recency = true keeps its keys
// in access order at the stashes (reads and writes), and after a restart
// every key starts cold, in key order.
func TestDurablePoolRecency(t *testing.T) {
	c := startCluster(t, `
[cluster]
mvcc_window = "1s"

[[pool]]
name = "data"
prefix = "d/"
medium = "ssd"
mode = "durable"
engine = "pebble"
recency = true
`)
	ctx := ctxT(t, 30*time.Second)
	for _, k := range []string{"d/b", "d/a", "d/c"} {
		if err := c.DB.Transact(ctx, func(tr *distash.Tx) error { tr.Set([]byte(k), []byte("v")); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	c.DB.ReadTransact(ctx, func(tr *distash.Tx) error { _, err := tr.Get([]byte("d/b")); return err })
	data, _ := c.DB.Pool("data")
	keys, err := c.DB.ColdestKeys(ctx, data, 10)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprintf("%s", keys); got != "[d/a d/c d/b]" {
		t.Fatalf("coldest = %s, want [d/a d/c d/b]", got)
	}
	c.WaitFlushed(t) // past the window: the engine holds every key
	c.Stop()
	c.Restart(t)
	if keys, err = c.DB.ColdestKeys(ctx, data, 10); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprintf("%s", keys); got != "[d/a d/b d/c]" {
		t.Fatalf("coldest after restart = %s, want key order", got)
	}
}

// TestGetMultiMatchesGets reads random lists of keys (both pools, several
// stashes, repeats, absent keys, keys this transaction wrote or cleared)
// with GetMulti and checks each value against a Get of the same key in the
// same transaction.
func TestGetMultiMatchesGets(t *testing.T) {
	c := startCluster(t, twoPools)
	ctx := ctxT(t, 60*time.Second)
	key := func(i int) []byte { return []byte(fmt.Sprintf("%c/%03d", "cd"[i%2], i)) }
	err := c.DB.Transact(ctx, func(tr *distash.Tx) error {
		for i := 0; i < 200; i += 3 { // every third key stays absent
			tr.Set(key(i), []byte(fmt.Sprint("v", i)))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 50; round++ {
		err := c.DB.Transact(ctx, func(tr *distash.Tx) error {
			if round%3 == 1 { // some reads see this transaction's own writes
				tr.Set(key(rng.IntN(200)), []byte("mine"))
				tr.Clear(key(rng.IntN(200)))
			}
			keys := make([][]byte, 1+rng.IntN(12))
			for j := range keys {
				keys[j] = key(rng.IntN(200))
			}
			vals, err := tr.GetMulti(keys)
			if err != nil {
				return err
			}
			for j, k := range keys {
				want, err := tr.Get(k)
				if err != nil {
					return err
				}
				if !bytes.Equal(vals[j], want) || (vals[j] == nil) != (want == nil) {
					t.Errorf("round %d: GetMulti(%q)[%d] = %q; Get(%s) = %q", round, keys, j, vals[j], k, want)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
