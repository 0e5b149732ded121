// Command cacheaug shows a cache-augmented data store (package
// patterns/cacheaug): query results cached in a DRAM pool over data in an
// SSD pool, read-through and the three write policies, each one DiStash
// transaction, and the paper's Figure 7 race being prevented.
//
//	go run ./examples/cacheaug
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strconv"
	"strings"
	"time"

	"github.com/distash/distash"
	"github.com/distash/distash/internal/embedded"
	"github.com/distash/distash/patterns/cacheaug"
)

const clusterConfig = `
[[pool]]
name = "cache"
prefix = "c/"
medium = "dram"
mode = "ephemeral"
engine = "memory"
stashes = 2
replication = 2
capacity = "64MiB"

[[pool]]
name = "data"
prefix = "d/"
medium = "ssd"
mode = "durable"
engine = "pebble"
stashes = 2
replication = 2
`

// followerTotal is a query over several data keys: the total followers of
// a comma-separated list of users ("followers/<user>" keys).
var followerTotal = cacheaug.Family{
	Name: "follower-total",
	Compute: func(r *cacheaug.Reader, args []byte) ([]byte, error) {
		var keys [][]byte
		for _, u := range strings.Split(string(args), ",") {
			keys = append(keys, []byte("followers/"+u))
		}
		vals, err := r.GetMulti(keys)
		if err != nil {
			return nil, err
		}
		total := 0
		for _, v := range vals {
			n, _ := strconv.Atoi(string(v))
			total += n
		}
		return []byte(strconv.Itoa(total)), nil
	},
	// Apply patches a cached total for ReadModifyWrite.
	Apply: func(cached, args []byte, ch cacheaug.Change) ([]byte, error) {
		old, _ := strconv.Atoi(string(ch.Old))
		now, _ := strconv.Atoi(string(ch.New))
		total, _ := strconv.Atoi(string(cached))
		return []byte(strconv.Itoa(total + now - old)), nil
	},
}

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db, stop := startCluster(ctx)
	defer stop()

	store, err := cacheaug.New(db, cacheaug.Options{
		CachePools: []string{"cache"},
		DataPool:   "data",
		Families:   []cacheaug.Family{followerTotal},
	})
	check(err)
	fmt.Println("cache-augmented store: query results in pool \"cache\" (DRAM, ephemeral) over pool \"data\" (SSD, durable);")
	fmt.Println("the dependency index lives in \"data\" (durable)")

	err = store.Write(ctx, cacheaug.WriteAround, func(w *cacheaug.Writer) error {
		for u, n := range map[string]string{"alice": "10", "bob": "20", "carol": "30"} {
			if err := w.Set([]byte("followers/"+u), []byte(n)); err != nil {
				return err
			}
		}
		return nil
	})
	check(err)

	ab := cacheaug.Query{Family: "follower-total", Args: []byte("alice,bob")}
	bc := cacheaug.Query{Family: "follower-total", Args: []byte("bob,carol")}
	show := func(q cacheaug.Query) {
		v, level, err := store.Lookup(ctx, q)
		check(err)
		where := "miss: computed from the data and cached, in one transaction"
		if level >= 0 {
			where = "hit in " + store.CachePools()[level].Name()
		}
		fmt.Printf("  get %s(%s) = %s  (%s)\n", q.Family, q.Args, v, where)
	}
	fmt.Println("\nread-through (Figure 5a):")
	show(ab)
	show(ab)
	show(bc)

	fmt.Println("\nwrite-around (Figure 3): bob := 25 deletes both cached totals that read bob")
	check(store.Set(ctx, []byte("followers/bob"), []byte("25"), cacheaug.WriteAround))
	show(ab)
	show(bc)

	fmt.Println("\nwrite-through (Figure 4): alice := 11 recomputes alice,bob in the same transaction")
	check(store.Set(ctx, []byte("followers/alice"), []byte("11"), cacheaug.WriteThrough))
	show(ab)

	fmt.Println("\nread-modify-write: carol += 5 patches bob,carol with the family's Apply")
	check(store.Update(ctx, []byte("followers/carol"), func(old []byte) ([]byte, error) {
		n, _ := strconv.Atoi(string(old))
		return []byte(strconv.Itoa(n + 5)), nil
	}, cacheaug.ReadModifyWrite))
	show(bc)

	fmt.Println("\nFigure 7: a read-through fill races a write-through update")
	check(store.Invalidate(ctx, ab))
	fill, err := db.CreateTransaction(ctx)
	check(err)
	v, err := store.GetTx(fill, ab) // miss: reads the data, buffers the fill
	check(err)
	fmt.Printf("  client 2 (fill) computed alice,bob = %s from the data\n", v)
	check(store.Set(ctx, []byte("followers/bob"), []byte("100"), cacheaug.WriteThrough))
	fmt.Println("  client 1 (update) committed bob := 100")
	err = fill.Commit()
	fmt.Printf("  client 2 commits its fill: %v (not_committed is %v)\n", err, errors.Is(err, distash.ErrNotCommitted))
	fmt.Println("  with two separate stores the stale total would now sit in the cache; here the retry sees:")
	show(ab)

	rep, err := store.Verify(ctx)
	check(err)
	fmt.Printf("\nverify: %d cached entries, %d disagree with the data\n", rep.Entries, len(rep.Mismatches))
	fmt.Printf("stats: %+v\n", store.Stats())
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
