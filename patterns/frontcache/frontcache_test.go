package frontcache

import (
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
	c := startCluster(t, frontConfig)
	cases := []struct {
		name string
		opts Options
		want string
		is   error
	}{
		{"unknown front", Options{FrontPool: "memcache", SlowPool: "slow"}, `front pool: distash: unknown_pool`, distash.ErrUnknownPool},
		{"unknown slow", Options{FrontPool: "front", SlowPool: "ssds"}, `no pool named "ssds"`, distash.ErrUnknownPool},
		{"same pool", Options{FrontPool: "slow", SlowPool: "slow"}, `both "slow"`, nil},
		{"slower front", Options{FrontPool: "hdd", SlowPool: "slow"}, `front pool must be at least as fast as the slow pool (dram < nvm < ssd < hdd), but "hdd" is hdd and "slow" is ssd`, nil},
		{"missing", Options{FrontPool: "front"}, `required`, nil},
		{"probability", Options{FrontPool: "front", SlowPool: "slow", AdmitProbability: 1.5}, `not in (0, 1]`, nil},
		{"ways", Options{FrontPool: "front", SlowPool: "slow", Ways: -1}, `Ways -1`, nil},
		{"policy", Options{FrontPool: "front", SlowPool: "slow", WritePolicy: 7}, `unknown WritePolicy`, nil},
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
}

func TestSizeIsBounded(t *testing.T) {
	if got := EntriesFor(16, 2); got != 89 { // 2 · 16 · ln 16 = 88.7
		t.Fatalf("EntriesFor(16, 2) = %d", got)
	}
	if got := EntriesFor(1, 2); got != 2 {
		t.Fatalf("EntriesFor(1, 2) = %d", got)
	}
	c := startCluster(t, frontConfig)
	ctx := ctxT(t, 30*time.Second)
	fc, err := New(c.DB, Options{FrontPool: "front", SlowPool: "slow", Ways: 4})
	if err != nil {
		t.Fatal(err)
	}
	// 4 stashes: 2 · 4 · ln 4 = 11.1 -> 12 entries in 3 sets of 4.
	if fc.Entries() != 12 {
		t.Fatalf("Entries() = %d, want 12", fc.Entries())
	}
	for i := 0; i < 60; i++ {
		k := []byte(fmt.Sprintf("k%02d", i))
		if err := fc.Set(ctx, k, []byte("v")); err != nil {
			t.Fatal(err)
		}
		if v, hit, err := fc.Lookup(ctx, k); err != nil || hit || string(v) != "v" {
			t.Fatalf("first Lookup = %q, hit %v, %v", v, hit, err)
		}
		if v, hit, err := fc.Lookup(ctx, k); err != nil || !hit || string(v) != "v" {
			t.Fatalf("second Lookup = %q, hit %v, %v", v, hit, err)
		}
	}
	rep, err := fc.Verify(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Entries != 12 || rep.OverfullSets != 0 || len(rep.Stale) != 0 {
		t.Fatalf("after 60 admissions: %+v, want 12 entries", rep)
	}
	if st := fc.Stats(); st.Evictions != 48 {
		t.Fatalf("stats %+v, want 48 evictions", st)
	}
	if v, err := fc.Get(ctx, []byte("absent")); err != nil || v != nil {
		t.Fatalf("Get(absent) = %q, %v", v, err)
	}
	if err := fc.Delete(ctx, []byte("k59")); err != nil {
		t.Fatal(err)
	}
	if v, err := fc.Get(ctx, []byte("k59")); err != nil || v != nil {
		t.Fatalf("Get(deleted) = %q, %v", v, err)
	}
}

func TestNeverOlderThanSlowPool(t *testing.T) {
	c := startCluster(t, frontConfig)
	for _, policy := range []WritePolicy{Invalidate, Update} {
		t.Run(policy.String(), func(t *testing.T) {
			ctx := ctxT(t, 30*time.Second)
			fc, err := New(c.DB, Options{FrontPool: "front", SlowPool: "slow", Namespace: policy.String() + "/",
				AdmitProbability: 0.7, Entries: 16, Ways: 4, WritePolicy: policy})
			if err != nil {
				t.Fatal(err)
			}
			const nkeys, writers, readers = 40, 2, 4
			key := func(i int) []byte { return []byte(fmt.Sprintf("k%02d", i)) }
			committed := make([]atomic.Int64, nkeys)
			for i := 0; i < nkeys; i++ {
				if err := fc.Set(ctx, key(i), []byte("1")); err != nil {
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
						i := w + writers*r.IntN(nkeys/writers) // each key has one writer
						next := committed[i].Load() + 1
						if err := fc.Set(ctx, key(i), []byte(strconv.FormatInt(next, 10))); err != nil {
							fail("set: %v", err)
							return
						}
						committed[i].Store(next)
					}
				}(w)
			}
			var gets, hits atomic.Int64
			for rd := 0; rd < readers; rd++ {
				wg.Add(1)
				go func(rd int) {
					defer wg.Done()
					r := rand.New(rand.NewPCG(uint64(rd), 2))
					z := rand.NewZipf(r, 1.2, 1, nkeys-1)
					for {
						select {
						case <-stop:
							return
						default:
						}
						i := int(z.Uint64())
						before := committed[i].Load()
						v, hit, err := fc.Lookup(ctx, key(i))
						if err != nil {
							fail("get: %v", err)
							return
						}
						got, _ := strconv.ParseInt(string(v), 10, 64)
						if got < before {
							fail("get %s (front hit %v) = %d, older than %d written before the get", key(i), hit, got, before)
							return
						}
						gets.Add(1)
						if hit {
							hits.Add(1)
						}
					}
				}(rd)
			}
			checks := 0
			for end := time.Now().Add(3 * time.Second); time.Now().Before(end); {
				time.Sleep(300 * time.Millisecond)
				rep, err := fc.Verify(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if len(rep.Stale) > 0 || rep.OverfullSets > 0 || rep.Entries > fc.Entries() {
					t.Errorf("during the run: %+v", rep)
				}
				checks++
			}
			close(stop)
			wg.Wait()
			rep, err := fc.Verify(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Stale) > 0 || rep.OverfullSets > 0 || rep.Entries > fc.Entries() {
				t.Errorf("after quiescence: %+v", rep)
			}
			t.Logf("%d gets (%d front hits), %d snapshot checks, %d front entries at the end; stats %+v",
				gets.Load(), hits.Load(), checks, rep.Entries, fc.Stats())
			if hits.Load() == 0 {
				t.Errorf("no front hit: the test does not exercise the front cache")
			}
		})
	}
}
