// Command hierarchy shows a storage hierarchy (package patterns/hierarchy):
// an exclusive NVM > SSD > HDD hierarchy whose migrator demotes the coldest
// keys as the fast tiers fill and whose gets promote what they find below,
// and an inclusive DRAM > HDD hierarchy, Flashstore's shape. Every get,
// put and single move is one DiStash transaction.
//
//	go run ./examples/hierarchy
package main

import (
	"context"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/distash/distash"
	"github.com/distash/distash/internal/embedded"
	"github.com/distash/distash/patterns/hierarchy"
)

const clusterConfig = `
[[pool]]
name = "dram"
prefix = "r/"
medium = "dram"
mode = "ephemeral"
engine = "memory"
stashes = 1
replication = 1
capacity = "1MiB"

[[pool]]
name = "nvm"
prefix = "n/"
medium = "nvm"
mode = "durable"
engine = "pebble"
stashes = 1
replication = 1

[[pool]]
name = "ssd"
prefix = "s/"
medium = "ssd"
mode = "durable"
engine = "pebble"
stashes = 2
replication = 1

[[pool]]
name = "hdd"
prefix = "h/"
medium = "hdd"
mode = "durable"
engine = "pebble"
stashes = 2
replication = 1
`

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db, stop := startCluster(ctx)
	defer stop()

	fmt.Println("\nbad orders and modes are refused at construction:")
	for _, o := range []hierarchy.Options{
		{Tiers: []string{"hdd", "ssd"}, Mode: hierarchy.Exclusive},
		{Tiers: []string{"dram", "hdd"}, Mode: hierarchy.Exclusive},
		{Tiers: []string{"nvm", "tape"}, Mode: hierarchy.Exclusive},
	} {
		_, err := hierarchy.New(db, o)
		fmt.Printf("  %v %v: %v\n", o.Mode, o.Tiers, err)
	}

	// Small capacities (bytes of keys and values) so that 100 keys of
	// 100 bytes overflow the fast tiers.
	h, err := hierarchy.New(db, hierarchy.Options{
		Tiers:         []string{"nvm", "ssd", "hdd"},
		Mode:          hierarchy.Exclusive,
		CapacityBytes: map[string]int64{"nvm": 2000, "ssd": 5000},
	})
	check(err)
	fmt.Printf("\n%v\n", h)
	value := []byte(strings.Repeat("v", 96))
	for i := 0; i < 100; i++ {
		check(h.Put(ctx, key(i), value))
	}
	printUsage(ctx, h, "after 100 puts into S0")
	for pass := 1; ; pass++ {
		st, err := h.Migrate(ctx)
		check(err)
		fmt.Printf("migration pass %d: moved %v keys down from each tier (one transaction per key), %d stale index entries\n", pass, st.Moved, st.Stale)
		if sum(st.Moved) == 0 {
			break
		}
	}
	printUsage(ctx, h, "after migration")

	fmt.Println("\nkeys 0..4 were written first and never read: the coldest, now at the bottom;")
	fmt.Println("a get searches top-down and promotes what it finds below S0:")
	for _, i := range []int{0, 99} {
		where, err := h.Where(ctx, key(i))
		check(err)
		_, tier, err := h.Lookup(ctx, key(i))
		check(err)
		after, err := h.Where(ctx, key(i))
		check(err)
		fmt.Printf("  %s: in tiers %v, found in S%d, now in tiers %v\n", key(i), where, tier, after)
	}
	fmt.Printf("stats: %+v\n", h.Stats())

	inc, err := hierarchy.New(db, hierarchy.Options{Tiers: []string{"dram", "hdd"}, Mode: hierarchy.Inclusive, Namespace: "inc/"})
	check(err)
	fmt.Printf("\n%v (every key on HDD, copies in DRAM)\n", inc)
	check(inc.Put(ctx, []byte("page"), []byte("v1")))
	where, _ := inc.Where(ctx, []byte("page"))
	fmt.Printf("  put page=v1: in tiers %v\n", where)
	check(inc.Put(ctx, []byte("page"), []byte("v2")))
	vals, err := inc.TierValues(ctx, []byte("page"))
	check(err)
	fmt.Printf("  put page=v2 updates every copy in one transaction: %q\n", vals)
}

func key(i int) []byte { return []byte(fmt.Sprintf("key%03d", i)) }

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}

func printUsage(ctx context.Context, h *hierarchy.Hierarchy, when string) {
	u, err := h.Usage(ctx)
	check(err)
	fmt.Printf("usage %s:", when)
	for i, t := range u {
		if t.Managed {
			fmt.Printf("  S%d %s %d/%d bytes", i, t.Pool, t.Bytes, t.CapacityBytes)
		} else {
			fmt.Printf("  S%d %s (last tier, unmanaged)", i, t.Pool)
		}
	}
	fmt.Println()
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
