package cacheaug

import (
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

// sumFamily sums the integers at the comma-separated data keys of args
// (absent keys count 0); its Apply adds the change's difference.
var sumFamily = Family{
	Name: "sum",
	Compute: func(r *Reader, args []byte) ([]byte, error) {
		var keys [][]byte
		for _, k := range strings.Split(string(args), ",") {
			keys = append(keys, []byte(k))
		}
		vals, err := r.GetMulti(keys)
		if err != nil {
			return nil, err
		}
		var sum int64
		for _, v := range vals {
			sum += num(v)
		}
		return []byte(strconv.FormatInt(sum, 10)), nil
	},
	Apply: func(cached, args []byte, ch Change) ([]byte, error) {
		n := int64(0)
		for _, k := range strings.Split(string(args), ",") {
			if k == string(ch.Key) {
				n++
			}
		}
		if n == 0 {
			return nil, ErrRecompute
		}
		return []byte(strconv.FormatInt(num(cached)+n*(num(ch.New)-num(ch.Old)), 10)), nil
	},
}

// ptrFamily follows the pointer key in args to a data key and returns
// "target=value": its dependencies change with the pointer. No Apply.
var ptrFamily = Family{
	Name: "ptr",
	Compute: func(r *Reader, args []byte) ([]byte, error) {
		target, err := r.Get(args)
		if err != nil || target == nil {
			return []byte("nil"), err
		}
		v, err := r.Get(target)
		if err != nil {
			return nil, err
		}
		return []byte(fmt.Sprintf("%s=%s", target, v)), nil
	},
}

func num(b []byte) int64 {
	if b == nil {
		return 0
	}
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		panic(fmt.Sprintf("not a number: %q", b))
	}
	return n
}

func TestBadInput(t *testing.T) {
	c := startCluster(t, cacheConfig)
	fams := []Family{sumFamily}
	cases := []struct {
		name string
		opts Options
		want string
		is   error
	}{
		{"unknown cache pool", Options{CachePools: []string{"memcache"}, DataPool: "data", Families: fams}, `cache pool 0: distash: unknown_pool`, distash.ErrUnknownPool},
		{"unknown data pool", Options{CachePools: []string{"cache"}, DataPool: "db", Families: fams}, `data pool: distash: unknown_pool`, distash.ErrUnknownPool},
		{"unknown index pool", Options{CachePools: []string{"cache"}, DataPool: "data", IndexPool: "idx", Families: fams}, `no pool named "idx"`, distash.ErrUnknownPool},
		{"ephemeral index", Options{CachePools: []string{"cache"}, DataPool: "data", IndexPool: "bigcache", Families: fams}, `needs a durable pool, but "bigcache" is ephemeral`, nil},
		{"slow cache first", Options{CachePools: []string{"results", "cache"}, DataPool: "data", Families: fams}, `fastest first`, nil},
		{"cache twice", Options{CachePools: []string{"cache", "cache"}, DataPool: "data", Families: fams}, `named twice`, nil},
		{"no cache", Options{DataPool: "data", Families: fams}, `no CachePools`, nil},
		{"no data", Options{CachePools: []string{"cache"}, Families: fams}, `no DataPool or Backend`, nil},
		{"backend without index", Options{CachePools: []string{"cache"}, Backend: &PoolBackend{}, Families: fams}, `IndexPool is required`, nil},
		{"family twice", Options{CachePools: []string{"cache"}, DataPool: "data", Families: []Family{sumFamily, sumFamily}}, `defined twice`, nil},
		{"family without compute", Options{CachePools: []string{"cache"}, DataPool: "data", Families: []Family{{Name: "x"}}}, `no Compute`, nil},
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
	s, err := New(c.DB, Options{CachePools: []string{"cache"}, DataPool: "data", Families: fams})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctxT(t, 5*time.Second), Query{Family: "nope"}); err == nil || !strings.Contains(err.Error(), `unknown family "nope"`) {
		t.Fatalf("Get of an unknown family: %v", err)
	}
}

func TestReadThroughAndPolicies(t *testing.T) {
	c := startCluster(t, cacheConfig)
	ctx := ctxT(t, 30*time.Second)
	s, err := New(c.DB, Options{CachePools: []string{"bigcache"}, DataPool: "data", Families: []Family{sumFamily, ptrFamily}})
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"a": "1", "b": "2", "c": "3", "p": "a"} {
		if err := s.Set(ctx, []byte(k), []byte(v), WriteAround); err != nil {
			t.Fatal(err)
		}
	}
	ab := Query{Family: "sum", Args: []byte("a,b")}
	bc := Query{Family: "sum", Args: []byte("b,c")}
	ptr := Query{Family: "ptr", Args: []byte("p")}
	expect := func(q Query, want string, wantLevel int) {
		t.Helper()
		v, level, err := s.Lookup(ctx, q)
		if err != nil || string(v) != want || level != wantLevel {
			t.Fatalf("Lookup(%s %s) = %q, level %d, %v; want %q, level %d", q.Family, q.Args, v, level, err, want, wantLevel)
		}
	}
	expect(ab, "3", -1) // miss: computed and filled
	expect(ab, "3", 0)  // hit
	expect(bc, "5", -1)
	expect(ptr, "a=1", -1)

	// Write-around on b deletes both sums, not the pointer query.
	if err := s.Set(ctx, []byte("b"), []byte("20"), WriteAround); err != nil {
		t.Fatal(err)
	}
	expect(ab, "21", -1)
	expect(bc, "23", -1)
	expect(ptr, "a=1", 0)
	// Write-through on a refreshes ab and the pointer query in place.
	if err := s.Set(ctx, []byte("a"), []byte("100"), WriteThrough); err != nil {
		t.Fatal(err)
	}
	expect(ab, "120", 0)
	expect(ptr, "a=100", 0)
	// Read-modify-write on c: the sum is patched by Apply; ptr not affected.
	if err := s.Update(ctx, []byte("c"), func(old []byte) ([]byte, error) {
		return []byte(strconv.FormatInt(num(old)+7, 10)), nil
	}, ReadModifyWrite); err != nil {
		t.Fatal(err)
	}
	expect(bc, "30", 0)
	// Moving the pointer changes the query's dependencies: after it, a
	// write of c must reach the pointer query, a write of a must not.
	if err := s.Set(ctx, []byte("p"), []byte("c"), ReadModifyWrite); err != nil { // ptr has no Apply: recomputed
		t.Fatal(err)
	}
	expect(ptr, "c=10", 0)
	if err := s.Set(ctx, []byte("c"), []byte("11"), WriteThrough); err != nil {
		t.Fatal(err)
	}
	expect(ptr, "c=11", 0)
	if err := s.Delete(ctx, []byte("a"), WriteAround); err != nil {
		t.Fatal(err)
	}
	expect(ptr, "c=11", 0)
	expect(ab, "20", -1)
	st := s.Stats()
	if st.Applied != 1 || st.Refreshed == 0 || st.Invalidated == 0 {
		t.Fatalf("stats %+v", st)
	}
	verify(t, ctx, s, "")
}

// TestFigure7RaceIsPrevented interleaves a read-through fill with a
// concurrent update by hand, as in the paper's Figure 7: the fill read the
// old data, the update commits first, and the fill must not commit.
func TestFigure7RaceIsPrevented(t *testing.T) {
	c := startCluster(t, cacheConfig)
	ctx := ctxT(t, 30*time.Second)
	s, err := New(c.DB, Options{CachePools: []string{"bigcache"}, DataPool: "data", Families: []Family{sumFamily}})
	if err != nil {
		t.Fatal(err)
	}
	q := Query{Family: "sum", Args: []byte("x")}
	for _, p := range []Policy{WriteAround, WriteThrough, ReadModifyWrite} {
		if err := s.Set(ctx, []byte("x"), []byte("1"), WriteAround); err != nil {
			t.Fatal(err)
		}
		if err := s.Invalidate(ctx, q); err != nil {
			t.Fatal(err)
		}
		fill, err := c.DB.CreateTransaction(ctx)
		if err != nil {
			t.Fatal(err)
		}
		v, err := s.GetTx(fill, q) // miss: computes 1 from the data, fill buffered
		if err != nil || string(v) != "1" {
			t.Fatalf("%v: GetTx = %q, %v", p, v, err)
		}
		if err := s.Set(ctx, []byte("x"), []byte("2"), p); err != nil {
			t.Fatal(err)
		}
		if err := fill.Commit(); !errors.Is(err, distash.ErrNotCommitted) {
			t.Fatalf("%v: the stale fill committed (err %v)", p, err)
		}
		if v, err := s.Get(ctx, q); err != nil || string(v) != "2" {
			t.Fatalf("%v: after the race, Get = %q, %v", p, v, err)
		}
	}
}

// workload runs readers and writers on data keys tagged tag for d, with
// the policies writers choose from, verifying snapshots during the run
// and the quiescent state after it.
func workload(t *testing.T, ctx context.Context, s *Store, tag string, policies []Policy, d time.Duration) {
	t.Helper()
	const ndata, nptr = 10, 3
	dk := func(i int) string { return fmt.Sprintf("%sa%02d", tag, i) }
	pk := func(i int) string { return fmt.Sprintf("%sp%d", tag, i) }
	r0 := rand.New(rand.NewPCG(7, 7))
	var queries []Query
	for i := 0; i < 12; i++ {
		perm := r0.Perm(ndata)[:3]
		args := []string{dk(perm[0]), dk(perm[1]), dk(perm[2])}
		queries = append(queries, Query{Family: "sum", Args: []byte(strings.Join(args, ","))})
	}
	for i := 0; i < nptr; i++ {
		queries = append(queries, Query{Family: "ptr", Args: []byte(pk(i))})
	}
	err := s.Write(ctx, WriteAround, func(w *Writer) error {
		for i := 0; i < ndata; i++ {
			if err := w.Set([]byte(dk(i)), []byte(strconv.Itoa(i))); err != nil {
				return err
			}
		}
		for i := 0; i < nptr; i++ {
			if err := w.Set([]byte(pk(i)), []byte(dk(i))); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var failed atomic.Bool
	fail := func(format string, args ...any) {
		if failed.CompareAndSwap(false, true) {
			t.Errorf(format, args...)
		}
	}
	var gets, writes atomic.Int64
	for r := 0; r < 3; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(r), 1))
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := s.Get(ctx, queries[rng.IntN(len(queries))]); err != nil {
					fail("get: %v", err)
					return
				}
				gets.Add(1)
			}
		}(r)
	}
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 2))
			for {
				select {
				case <-stop:
					return
				default:
				}
				p := policies[rng.IntN(len(policies))]
				var err error
				switch rng.IntN(6) {
				case 0: // move a pointer
					err = s.Set(ctx, []byte(pk(rng.IntN(nptr))), []byte(dk(rng.IntN(ndata))), p)
				case 1: // a transaction changing two keys
					a, b := dk(rng.IntN(ndata)), dk(rng.IntN(ndata))
					err = s.Write(ctx, p, func(w *Writer) error {
						if err := w.Set([]byte(a), []byte(strconv.Itoa(rng.IntN(1000)))); err != nil {
							return err
						}
						return w.Set([]byte(b), []byte(strconv.Itoa(rng.IntN(1000))))
					})
				case 2: // read-modify-write of the data
					delta := int64(rng.IntN(10))
					err = s.Update(ctx, []byte(dk(rng.IntN(ndata))), func(old []byte) ([]byte, error) {
						return []byte(strconv.FormatInt(num(old)+delta, 10)), nil
					}, p)
				case 3:
					err = s.Delete(ctx, []byte(dk(rng.IntN(ndata))), p)
				default:
					err = s.Set(ctx, []byte(dk(rng.IntN(ndata))), []byte(strconv.Itoa(rng.IntN(1000))), p)
				}
				if err != nil {
					fail("write (%v): %v", p, err)
					return
				}
				writes.Add(1)
			}
		}(w)
	}
	deadline := time.After(d)
	checks, checked := 0, 0
loop:
	for {
		select {
		case <-deadline:
			break loop
		case <-time.After(400 * time.Millisecond):
			checked += verify(t, ctx, s, "during the run: ").Entries
			checks++
		}
	}
	close(stop)
	wg.Wait()
	rep := verify(t, ctx, s, "after quiescence: ")
	checked += rep.Entries
	t.Logf("%v: %d gets, %d writes; %d snapshot checks during the run and one after quiescence, %d entries checked, %d at the end; stats %+v",
		policies, gets.Load(), writes.Load(), checks, checked, rep.Entries, s.Stats())
	if checked == 0 {
		t.Errorf("no cached entry in any snapshot: nothing was checked")
	}
}

func verify(t *testing.T, ctx context.Context, s *Store, when string) VerifyReport {
	t.Helper()
	rep, err := s.Verify(ctx)
	if err != nil {
		t.Fatalf("%sverify: %v", when, err)
	}
	for _, m := range rep.Mismatches {
		t.Errorf("%s%v", when, m)
	}
	return rep
}

func TestConcurrentPolicies(t *testing.T) {
	c := startCluster(t, cacheConfig)
	ctx := ctxT(t, 60*time.Second)
	for _, tc := range []struct {
		name, tag string
		policies  []Policy
	}{
		{"write-around", "wa/", []Policy{WriteAround}},
		{"write-through", "wt/", []Policy{WriteThrough}},
		{"read-modify-write", "rmw/", []Policy{ReadModifyWrite}},
		{"all-three-mixed", "mix/", []Policy{WriteAround, WriteThrough, ReadModifyWrite}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(c.DB, Options{CachePools: []string{"bigcache"}, DataPool: "data", Namespace: tc.tag,
				Families: []Family{sumFamily, ptrFamily}})
			if err != nil {
				t.Fatal(err)
			}
			workload(t, ctx, s, tc.tag, tc.policies, 2500*time.Millisecond)
		})
	}
}

// TestTwoLevelsWithEviction caches in a tiny, evicting DRAM pool over a
// durable SSD results pool (Figure 1's DRAM and SSD result stores).
func TestTwoLevelsWithEviction(t *testing.T) {
	c := startCluster(t, cacheConfig)
	ctx := ctxT(t, 30*time.Second)
	s, err := New(c.DB, Options{CachePools: []string{"cache", "results"}, DataPool: "data", Families: []Family{sumFamily, ptrFamily}})
	if err != nil {
		t.Fatal(err)
	}
	workload(t, ctx, s, "two/", []Policy{WriteAround, WriteThrough, ReadModifyWrite}, 3*time.Second)
	// Fill more entries than DRAM holds; once their versions leave the
	// MVCC window the DRAM stashes evict, and reads find them in SSD.
	qs := make([]Query, 30)
	for i := range qs {
		qs[i] = Query{Family: "sum", Args: []byte(fmt.Sprintf("two/a00,two/y%02d", i))}
		if _, err := s.Get(ctx, qs[i]); err != nil {
			t.Fatal(err)
		}
	}
	c.WaitFlushed(t) // > mvcc_window: the versions reach the engines
	before := s.Stats()
	for _, q := range qs {
		if _, err := s.Get(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	after := s.Stats()
	if after.Misses != before.Misses || after.Hits[1] == before.Hits[1] {
		t.Errorf("re-reading 30 entries: %d hits in SSD, %d misses; want some SSD hits and no miss",
			after.Hits[1]-before.Hits[1], after.Misses-before.Misses)
	}
	verify(t, ctx, s, "after the SSD hits: ")
}
