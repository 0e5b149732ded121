// Command frontcache shows a front-end cache for load balancing (package
// patterns/frontcache; Fan et al., SoCC 2011): a DRAM pool of c · n · ln n
// entries in front of n = 8 SSD stashes evens out the load a Zipf workload
// puts on the stashes, and writes never leave a stale front copy.
//
//	go run ./examples/frontcache
package main

import (
	"context"
	"fmt"
	"log"
	"math/rand/v2"
	"sort"
	"time"

	"github.com/distash/distash"
	"github.com/distash/distash/internal/embedded"
	"github.com/distash/distash/patterns/frontcache"
)

const slowStashes = 8

var clusterConfig = fmt.Sprintf(`
[[pool]]
name = "front"
prefix = "f/"
medium = "dram"
mode = "ephemeral"
engine = "memory"
stashes = 1
replication = 1
capacity = "16MiB"

[[pool]]
name = "slow"
prefix = "s/"
medium = "ssd"
mode = "durable"
engine = "pebble"
stashes = %d
replication = 1
`, slowStashes)

const nkeys = 5000

func key(i uint64) []byte { return []byte(fmt.Sprintf("item%05d", i)) }

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db, stop := startCluster(ctx)
	defer stop()

	fc, err := frontcache.New(db, frontcache.Options{FrontPool: "front", SlowPool: "slow", AdmitProbability: 0.2})
	check(err)
	fmt.Printf("front cache: pool \"front\" (DRAM) over pool \"slow\" (%d SSD stashes), %d entries (2 · n · ln n), admission probability 0.2\n",
		slowStashes, fc.Entries())

	value := make([]byte, 64)
	for i := 0; i < nkeys; i += 500 {
		check(db.Transact(ctx, func(tr *distash.Tx) error {
			for j := i; j < min(i+500, nkeys); j++ {
				tr.Set(fc.SlowKey(key(uint64(j))), value)
			}
			return nil
		}))
	}
	fmt.Printf("loaded %d keys into the slow pool\n", nkeys)

	// Which slow stash serves a key: DiStash's initial shard map splits a
	// pool into one shard per stash on the byte after the pool prefix, the
	// spread byte of SlowKey. (The client API has no per-stash counters,
	// so the example counts reads per stash on the client side.)
	prefix := len(fc.SlowPool().Prefix())
	stashOf := func(k []byte) int { return int(fc.SlowKey(k)[prefix]) * slowStashes / 256 }

	run := func(name string, get func(k []byte) (slowRead bool, err error)) {
		r := rand.New(rand.NewPCG(1, 2))
		z := rand.NewZipf(r, 1.01, 1, nkeys-1)
		load := make([]int, slowStashes)
		const gets = 4000
		start := time.Now()
		for i := 0; i < gets; i++ {
			k := key(z.Uint64())
			slow, err := get(k)
			check(err)
			if slow {
				load[stashOf(k)]++
			}
		}
		elapsed := time.Since(start)
		total, maxv := 0, 0
		for _, n := range load {
			total += n
			maxv = max(maxv, n)
		}
		sorted := append([]int(nil), load...)
		sort.Sort(sort.Reverse(sort.IntSlice(sorted)))
		fmt.Printf("  %-20s %4d gets/s; slow-stash reads %v, max/mean %.2f\n",
			name, int(float64(gets)/elapsed.Seconds()), sorted, float64(maxv)/(float64(total)/slowStashes))
	}
	fmt.Println("\nZipf(1.01) reads, one client:")
	run("without front cache", func(k []byte) (bool, error) {
		return true, db.ReadTransact(ctx, func(tr *distash.Tx) error {
			_, err := tr.Get(fc.SlowKey(k))
			return err
		})
	})
	run("with front cache", func(k []byte) (bool, error) {
		_, hit, err := fc.Lookup(ctx, k)
		return !hit, err
	})
	st := fc.Stats()
	fmt.Printf("  front: %d hits, %d misses, %d admissions, %d replacements\n", st.Hits, st.Misses, st.Admissions, st.Evictions)

	fmt.Println("\na write goes to the slow pool and invalidates the front copy in one transaction:")
	hot := key(0)
	v, hit, err := fc.Lookup(ctx, hot)
	check(err)
	fmt.Printf("  get %s: %d bytes, front hit %v\n", hot, len(v), hit)
	check(fc.Set(ctx, hot, []byte("new value")))
	v, hit, err = fc.Lookup(ctx, hot)
	check(err)
	fmt.Printf("  set %s = \"new value\"; get: %q, front hit %v\n", hot, v, hit)

	rep, err := fc.Verify(ctx)
	check(err)
	fmt.Printf("\nverify: %d front entries (at most %d), %d stale, %d overfull sets\n", rep.Entries, fc.Entries(), len(rep.Stale), rep.OverfullSets)
}

func startCluster(ctx context.Context) (*distash.DB, func()) {
	c, err := embedded.StartTOML(ctx, clusterConfig, embedded.Options{TempPattern: "distash-example-"})
	check(err)
	fmt.Printf("embedded cluster at %s in %s\n", c.Server.ClusterString(), c.Dir)
	return c.DB, c.Close
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
