package hierarchy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distash/distash"
)

func TestBadInput(t *testing.T) {
	c := startCluster(t, tiersConfig)
	cases := []struct {
		name string
		opts Options
		want string
		is   error
	}{
		{"unknown pool", Options{Tiers: []string{"nvm", "tape"}, Mode: Exclusive}, `no pool named "tape"`, distash.ErrUnknownPool},
		{"slow first", Options{Tiers: []string{"hdd", "ssd"}, Mode: Exclusive}, `ordered fastest first (dram < nvm < ssd < hdd): tier 0 "hdd" (hdd) is slower than tier 1 "ssd" (ssd)`, nil},
		{"slow in the middle", Options{Tiers: []string{"dram", "hdd", "ssd"}, Mode: Inclusive}, `tier 1 "hdd" (hdd) is slower than tier 2 "ssd"`, nil},
		{"exclusive over ephemeral", Options{Tiers: []string{"dram", "ssd"}, Mode: Exclusive}, `tier 0 "dram" is ephemeral`, nil},
		{"exclusive, ephemeral lower tier", Options{Tiers: []string{"nvm", "flashssd", "hdd"}, Mode: Exclusive}, `tier 1 "flashssd" is ephemeral`, nil},
		{"inclusive, ephemeral last", Options{Tiers: []string{"dram", "dram2"}, Mode: Inclusive}, `last tier, but tier 1 "dram2" is not durable`, nil},
		{"twice", Options{Tiers: []string{"ssd", "ssd"}, Mode: Exclusive}, `pool "ssd" is both tier 0 and tier 1`, nil},
		{"one tier", Options{Tiers: []string{"ssd"}, Mode: Exclusive}, `at least two tiers`, nil},
		{"no mode", Options{Tiers: []string{"ssd", "hdd"}}, `Mode must be Exclusive or Inclusive`, nil},
		{"bad water", Options{Tiers: []string{"ssd", "hdd"}, Mode: Exclusive, HighWater: 0.5, LowWater: 0.8}, `LowWater <= HighWater`, nil},
		{"capacity of non-tier", Options{Tiers: []string{"ssd", "hdd"}, Mode: Exclusive, CapacityBytes: map[string]int64{"nvm": 1}}, `not a tier`, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(c.DB, tc.opts)
			if err == nil {
				t.Fatalf("New accepted %+v", tc.opts)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Fatalf("error %v is not %v", err, tc.is)
			}
		})
	}
	// An inclusive hierarchy may have ephemeral upper tiers; equal media are allowed.
	for _, tiers := range [][]string{{"dram", "nvm", "hdd"}, {"dram", "flashssd", "ssd", "hdd"}} {
		if _, err := New(c.DB, Options{Tiers: tiers, Mode: Inclusive}); err != nil {
			t.Fatal(err)
		}
	}
}

func TestGetPromotesAndMigratorDemotes(t *testing.T) {
	c := startCluster(t, tiersConfig)
	ctx := ctxT(t, 30*time.Second)
	var clock atomic.Int64
	clock.Store(1_000_000)
	h, err := New(c.DB, Options{Tiers: []string{"nvm", "ssd", "hdd"}, Mode: Exclusive,
		CapacityBytes: map[string]int64{"nvm": 100, "ssd": 1000}, MigrateParallelism: 1,
		Now: func() time.Time { return time.Unix(0, clock.Add(int64(time.Second))) }})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		if err := h.Put(ctx, key(i), []byte("0123456789")); err != nil { // 14 bytes each
			t.Fatal(err)
		}
	}
	u, err := h.Usage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if u[0].Bytes != 140 {
		t.Fatalf("usage of S0 = %d, want 140", u[0].Bytes)
	}
	// Touch key 0 so that it is the most recent.
	if _, tier, err := h.Lookup(ctx, key(0)); err != nil || tier != 0 {
		t.Fatalf("Lookup = tier %d, %v", tier, err)
	}
	st, err := h.Migrate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// 140 > 0.9*100: move the coldest until <= 75: five keys, 1..5.
	if st.Moved[0] != 5 {
		t.Fatalf("moved %v, want 5 from S0", st.Moved)
	}
	for i := 0; i < 10; i++ {
		where, err := h.Where(ctx, key(i))
		if err != nil {
			t.Fatal(err)
		}
		want := 0
		if i >= 1 && i <= 5 {
			want = 1
		}
		if len(where) != 1 || where[0] != want {
			t.Fatalf("key %d in tiers %v, want [%d]", i, where, want)
		}
	}
	// A hit in S1 is promoted to S0 and leaves S1.
	v, tier, err := h.Lookup(ctx, key(3))
	if err != nil || tier != 1 || string(v) != "0123456789" {
		t.Fatalf("Lookup(3) = %q, tier %d, %v", v, tier, err)
	}
	if where, _ := h.Where(ctx, key(3)); len(where) != 1 || where[0] != 0 {
		t.Fatalf("key 3 in %v after promotion", where)
	}
	if v, tier, _ := h.Lookup(ctx, []byte("absent")); v != nil || tier != -1 {
		t.Fatalf("absent key: %q, tier %d", v, tier)
	}
	// PutCold loads into the last tier only, replacing the copy above.
	if err := h.PutCold(ctx, key(0), []byte("cold")); err != nil {
		t.Fatal(err)
	}
	if where, _ := h.Where(ctx, key(0)); len(where) != 1 || where[0] != 2 {
		t.Fatalf("cold key in %v, want [2]", where)
	}
	if v, tier, err := h.Lookup(ctx, key(0)); err != nil || tier != 2 || string(v) != "cold" {
		t.Fatalf("Lookup(cold) = %q, tier %d, %v", v, tier, err)
	}
	if err := h.Delete(ctx, key(4)); err != nil {
		t.Fatal(err)
	}
	if where, _ := h.Where(ctx, key(4)); len(where) != 0 {
		t.Fatalf("deleted key in %v", where)
	}
	checkAccounting(t, ctx, h, keys(10))
}

func key(i int) []byte { return []byte(fmt.Sprintf("k%03d", i)) }

func keys(n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = key(i)
	}
	return out
}

func val(k []byte, version int64) []byte {
	return []byte(fmt.Sprintf("%s#%08d#%s", k, version, strings.Repeat("x", int(version%7)*10)))
}

func versionOf(t testing.TB, v []byte) int64 {
	if v == nil {
		return 0
	}
	parts := strings.SplitN(string(v), "#", 3)
	n, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil {
		t.Fatalf("bad value %q", v)
	}
	return n
}

// runWorkload runs writers (one per key set), readers and a migrator
// against h for d, checking that no get returns a value older than the
// last put that finished before it began. check runs now and then during
// the run on a consistent snapshot. It returns the latest version of each key.
func runWorkload(t *testing.T, ctx context.Context, h *Hierarchy, nkeys int, d time.Duration, check func(snapshot map[string][][]byte)) []int64 {
	t.Helper()
	ks := keys(nkeys)
	committed := make([]atomic.Int64, nkeys)
	for i, k := range ks {
		if err := h.Put(ctx, k, val(k, 1)); err != nil {
			t.Fatal(err)
		}
		committed[i].Store(1)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var failed atomic.Bool
	fail := func(format string, args ...any) {
		if failed.CompareAndSwap(false, true) {
			t.Errorf(format, args...)
		}
	}
	const writers, readers = 3, 4
	var puts, gets, hitsBelow atomic.Int64
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for {
				select {
				case <-stop:
					return
				default:
				}
				i := w + writers*r.IntN((nkeys+writers-1-w)/writers)
				next := committed[i].Load() + 1
				if err := h.Put(ctx, ks[i], val(ks[i], next)); err != nil {
					fail("put: %v", err)
					return
				}
				committed[i].Store(next)
				puts.Add(1)
				time.Sleep(2 * time.Millisecond) // leave the migrator room to keep up
			}
		}(w)
	}
	for rd := 0; rd < readers; rd++ {
		wg.Add(1)
		go func(rd int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(rd), 2))
			for {
				select {
				case <-stop:
					return
				default:
				}
				// Skewed: a quarter of the keys take more than half of the reads.
				i := r.IntN(nkeys)
				if r.IntN(2) == 0 {
					i = r.IntN(max(1, nkeys/4))
				}
				before := committed[i].Load()
				v, tier, err := h.Lookup(ctx, ks[i])
				if err != nil {
					fail("get: %v", err)
					return
				}
				if got := versionOf(t, v); got < before {
					fail("get %s from tier %d = version %d, older than %d committed before the get", ks[i], tier, got, before)
					return
				}
				if v != nil && !bytes.HasPrefix(v, append(append([]byte{}, ks[i]...), '#')) {
					fail("get %s = %q: another key's value", ks[i], v)
				}
				gets.Add(1)
				if tier > 0 {
					hitsBelow.Add(1)
				}
			}
		}(rd)
	}
	wg.Add(1)
	var moved atomic.Int64
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			st, err := h.Migrate(ctx)
			if err != nil {
				fail("migrate: %v", err)
				return
			}
			for _, m := range st.Moved {
				moved.Add(int64(m))
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	deadline := time.After(d)
	checks := 0
loop:
	for {
		select {
		case <-deadline:
			break loop
		case <-time.After(300 * time.Millisecond):
			if check != nil {
				check(snapshot(t, ctx, h, ks))
				checks++
			}
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("%d puts, %d gets (%d hits below S0), %d keys moved down, %d snapshot checks; stats %+v",
		puts.Load(), gets.Load(), hitsBelow.Load(), moved.Load(), checks, h.Stats())
	if moved.Load() == 0 {
		t.Errorf("the migrator moved nothing: the workload does not exercise migration")
	}
	if hitsBelow.Load() == 0 {
		t.Errorf("no get hit below S0: the workload does not exercise promotion")
	}
	out := make([]int64, nkeys)
	for i := range out {
		out[i] = committed[i].Load()
	}
	return out
}

// snapshot reads every key in every tier at one read version.
func snapshot(t *testing.T, ctx context.Context, h *Hierarchy, ks [][]byte) map[string][][]byte {
	out := map[string][][]byte{}
	err := h.db.ReadTransact(ctx, func(tr *distash.Tx) error {
		var all [][]byte
		for _, k := range ks {
			for _, tr := range h.tiers {
				all = append(all, tr.valueKey(k))
			}
		}
		vals, err := tr.GetMulti(all)
		if err != nil {
			return err
		}
		for i, k := range ks {
			out[string(k)] = vals[i*len(h.tiers) : (i+1)*len(h.tiers)]
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestExclusiveUnderConcurrency(t *testing.T) {
	c := startCluster(t, tiersConfig)
	ctx := ctxT(t, 40*time.Second)
	h, err := New(c.DB, Options{Tiers: []string{"nvm", "ssd", "hdd"}, Mode: Exclusive,
		CapacityBytes:      map[string]int64{"nvm": 1500, "ssd": 3000},
		RecencyGranularity: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	const nkeys = 120
	exactlyOne := func(snap map[string][][]byte) {
		for k, vals := range snap {
			n := 0
			for _, v := range vals {
				if v != nil {
					n++
				}
			}
			if n != 1 {
				t.Errorf("snapshot: key %s in %d tiers (%q)", k, n, vals)
			}
		}
	}
	latest := runWorkload(t, ctx, h, nkeys, 4*time.Second, exactlyOne)
	// Quiescent: every key in exactly one tier, with its latest value.
	snap := snapshot(t, ctx, h, keys(nkeys))
	perTier := make([]int, len(h.tiers))
	for i, k := range keys(nkeys) {
		var where []int
		for j, v := range snap[string(k)] {
			if v != nil {
				where = append(where, j)
				perTier[j]++
				if got := versionOf(t, v); got != latest[i] {
					t.Errorf("key %s in tier %d has version %d, latest is %d", k, j, got, latest[i])
				}
			}
		}
		if len(where) != 1 {
			t.Errorf("key %s in tiers %v, want exactly one", k, where)
		}
	}
	t.Logf("keys per tier after quiescence: %v", perTier)
	checkAccounting(t, ctx, h, keys(nkeys))
}

func TestInclusiveNeverServesOlder(t *testing.T) {
	c := startCluster(t, tiersConfig)
	ctx := ctxT(t, 40*time.Second)
	h, err := New(c.DB, Options{Tiers: []string{"dram", "nvm", "hdd"}, Mode: Inclusive,
		CapacityBytes:      map[string]int64{"nvm": 800},
		RecencyGranularity: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	const nkeys = 120
	copiesEqual := func(snap map[string][][]byte) {
		for k, vals := range snap {
			last := vals[len(vals)-1]
			if last == nil {
				t.Errorf("snapshot: key %s missing from the last tier", k)
			}
			for j, v := range vals {
				if v != nil && !bytes.Equal(v, last) {
					t.Errorf("snapshot: key %s tier %d holds %q, last tier %q", k, j, v, last)
				}
			}
		}
	}
	// S0 is ephemeral: evict its copies now and then (as a full DRAM stash
	// would), so gets miss in S0, hit below, promote, and fill S1 past its
	// capacity for the migrator, whatever the machine's speed.
	evictDone := make(chan struct{})
	evictStop := make(chan struct{})
	go func() {
		defer close(evictDone)
		for {
			select {
			case <-evictStop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			h.db.Transact(ctx, func(tr *distash.Tx) error {
				for _, k := range keys(nkeys)[:nkeys/2] {
					tr.Clear(h.tiers[0].valueKey(k))
				}
				return nil
			})
		}
	}()
	latest := runWorkload(t, ctx, h, nkeys, 4*time.Second, copiesEqual)
	close(evictStop)
	<-evictDone
	snap := snapshot(t, ctx, h, keys(nkeys))
	copies := make([]int, len(h.tiers))
	for i, k := range keys(nkeys) {
		vals := snap[string(k)]
		if got := versionOf(t, vals[len(vals)-1]); got != latest[i] {
			t.Errorf("key %s: last tier has version %d, latest is %d", k, got, latest[i])
		}
		for j, v := range vals {
			if v != nil {
				copies[j]++
				if got := versionOf(t, v); got != latest[i] {
					t.Errorf("key %s: tier %d has version %d, latest is %d", k, j, got, latest[i])
				}
			}
		}
	}
	t.Logf("copies per tier after quiescence: %v", copies)
	checkAccounting(t, ctx, h, keys(nkeys))
}

// checkAccounting checks, on one snapshot, that each managed tier's usage
// counter is the sum of its entries and that every key in a managed tier
// has an index entry at its access time.
func checkAccounting(t *testing.T, ctx context.Context, h *Hierarchy, ks [][]byte) {
	t.Helper()
	err := h.db.ReadTransact(ctx, func(tr *distash.Tx) error {
		for i, tier := range h.tiers {
			if !tier.managed {
				continue
			}
			var sum int64
			for _, k := range ks {
				vals, err := tr.GetMulti([][]byte{tier.valueKey(k), tier.atimeKey(k)})
				if err != nil {
					return err
				}
				if vals[0] == nil {
					continue
				}
				sum += entrySize(k, vals[0])
				if vals[1] == nil {
					t.Errorf("tier %d: key %s has no access time", i, k)
					continue
				}
				if h.stashRecency {
					continue // no index: the stashes keep the order
				}
				idx, err := tr.Get(tier.indexKey(distash.Int64(vals[1]), k))
				if err != nil {
					return err
				}
				if idx == nil {
					var found []int64
					for b := 0; b < buckets; b++ {
						begin, end := tier.indexRange(b)
						kvs, err := tr.GetRange(begin, end, distash.RangeOptions{})
						if err != nil {
							return err
						}
						for _, kv := range kvs {
							if s, kk, ok := tier.decodeIndex(kv.Key); ok && bytes.Equal(kk, k) {
								found = append(found, s)
							}
						}
					}
					t.Errorf("tier %d: key %s has no index entry at its access time %d (entries at %v)", i, k, distash.Int64(vals[1]), found)
				}
			}
			u, err := h.usageOf(tr, tier)
			if err != nil {
				return err
			}
			if u != sum {
				t.Errorf("tier %d: usage counter %d, entries sum to %d", i, u, sum)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestExclusiveWithStashRecency is the exclusive test with the demotion
// order taken from the stashes (pools with recency = true, DB.ColdestKeys)
// instead of the hierarchy's own index: every key in exactly one tier with
// its latest value, and the migrator moved keys down.
func TestExclusiveWithStashRecency(t *testing.T) {
	cfg := strings.ReplaceAll(tiersConfig, "engine = \"pebble\"", "engine = \"pebble\"\nrecency = true")
	c := startCluster(t, cfg)
	ctx := ctxT(t, 40*time.Second)
	h, err := New(c.DB, Options{Tiers: []string{"nvm", "ssd", "hdd"}, Mode: Exclusive, StashRecency: true,
		CapacityBytes:      map[string]int64{"nvm": 1500, "ssd": 3000},
		RecencyGranularity: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(startCluster(t, tiersConfig).DB, Options{Tiers: []string{"nvm", "ssd", "hdd"}, Mode: Exclusive, StashRecency: true}); err == nil {
		t.Fatal("StashRecency accepted pools that keep no recency")
	}
	const nkeys = 120
	exactlyOne := func(snap map[string][][]byte) {
		for k, vals := range snap {
			n := 0
			for _, v := range vals {
				if v != nil {
					n++
				}
			}
			if n != 1 {
				t.Errorf("snapshot: key %s in %d tiers (%q)", k, n, vals)
			}
		}
	}
	latest := runWorkload(t, ctx, h, nkeys, 3*time.Second, exactlyOne)
	snap := snapshot(t, ctx, h, keys(nkeys))
	perTier := make([]int, len(h.tiers))
	for i, k := range keys(nkeys) {
		n := 0
		for j, v := range snap[string(k)] {
			if v != nil {
				n++
				perTier[j]++
				if got := versionOf(t, v); got != latest[i] {
					t.Errorf("key %s in tier %d has version %d, latest is %d", k, j, got, latest[i])
				}
			}
		}
		if n != 1 {
			t.Errorf("key %s in %d tiers, want exactly one", k, n)
		}
	}
	st := h.Stats()
	t.Logf("keys per tier after quiescence: %v; demotions %d", perTier, st.Demotions)
	if st.Demotions == 0 {
		t.Fatal("the migrator moved nothing with stash recency")
	}
	checkAccounting(t, ctx, h, keys(nkeys))
}
