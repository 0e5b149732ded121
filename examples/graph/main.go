// Command graph is the hybrid of the DiStash paper's Figure 1 (§2.4): graph
// data kept durable on a pool of HDD stashes and staged into a pool of SSD
// stashes used as ephemeral storage, 1-hop sub-query results cached in a
// pool of DRAM stashes (ephemeral) and kept durable in a second pool of SSD
// stashes, and a query processor that follows the paper's lookup order:
//
//  1. look the 1-hop result up in DRAM;
//  2. else in the durable SSD result pool (and copy it back to DRAM);
//  3. else compute it on the graph in the SSD staging pool,
//  4. staging the vertices it needs from HDD when they are not there,
//     and store the result in DRAM and durable SSD.
//
// It is built from two patterns: an inclusive storage hierarchy
// (patterns/hierarchy) staging SSD > HDD holds the graph, and a
// cache-augmented store (patterns/cacheaug) with cache pools DRAM > SSD over
// that hierarchy holds the 1-hop results. Each sub-query is one DiStash
// transaction across all four pools, and so is each graph update, which
// refreshes the dependent results in DRAM and SSD (write-through).
//
// The paper writes DRAM entries to SSD as DRAM fills; DiStash has no hook
// for an ephemeral pool's evictions, so a computed result is written to
// both result pools at once.
//
//	go run ./examples/graph
package main

import (
	"context"
	"fmt"
	"log"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/distash/distash"
	"github.com/distash/distash/config"
	"github.com/distash/distash/internal/embedded"
	// The flash engine registers itself when imported; a binary offers it
	// by importing the package.
	_ "github.com/distash/distash/internal/engine/flash"
	"github.com/distash/distash/patterns/cacheaug"
	"github.com/distash/distash/patterns/hierarchy"
)

// clusterConfig has Figure 1's four pools. %s is the staging pool's
// medium and engine: an ephemeral pool needs an engine that can evict,
// memory (DRAM only) or flash (SSD).
const clusterConfig = `
[[pool]]
name = "qdram"          # 1-hop results, ephemeral
prefix = "q/"
medium = "dram"
mode = "ephemeral"
engine = "memory"
stashes = 2
replication = 2
capacity = "64MiB"

[[pool]]
name = "qssd"           # 1-hop results, durable (and the dependency index)
prefix = "p/"
medium = "ssd"
mode = "durable"
engine = "pebble"
stashes = 2
replication = 2

[[pool]]
name = "gstage"         # graph data, ephemeral staging
prefix = "s/"
%s
mode = "ephemeral"
stashes = 2
replication = 1
capacity = "64MiB"

[[pool]]
name = "ghdd"           # graph data, durable
prefix = "g/"
medium = "hdd"
mode = "durable"
engine = "pebble"
stashes = 2
replication = 2
`

const (
	stagingFlash  = "medium = \"ssd\"\nengine = \"flash\""
	stagingMemory = "medium = \"dram\"\nengine = \"memory\""
)

const vertices = 60

func adjKey(v int) []byte  { return []byte(fmt.Sprintf("adj/%d", v)) }
func nameKey(v int) []byte { return []byte(fmt.Sprintf("name/%d", v)) }

// oneHop is the 1-hop sub-query: the neighbors of a vertex with their
// names. It depends on the vertex's adjacency list and on each neighbor's
// name, so renaming a vertex reaches every result that lists it.
var oneHop = cacheaug.Family{
	Name: "1hop",
	Compute: func(r *cacheaug.Reader, args []byte) ([]byte, error) {
		v, err := strconv.Atoi(string(args))
		if err != nil {
			return nil, err
		}
		adj, err := r.Get(adjKey(v))
		if err != nil || len(adj) == 0 {
			return []byte{}, err
		}
		var keys [][]byte
		ids := strings.Split(string(adj), ",")
		for _, id := range ids {
			n, _ := strconv.Atoi(id)
			keys = append(keys, nameKey(n))
		}
		names, err := r.GetMulti(keys)
		if err != nil {
			return nil, err
		}
		out := make([]string, len(ids))
		for i, id := range ids {
			out[i] = id + ":" + string(names[i])
		}
		return []byte(strings.Join(out, ",")), nil
	},
}

// stagingCounter wraps the graph hierarchy as the results' data backend
// and counts where the computations found their graph data.
type stagingCounter struct {
	*hierarchy.Hierarchy
	fromStage, fromHDD int
}

func (s *stagingCounter) GetTx(tr *distash.Tx, key []byte) ([]byte, error) {
	v, tier, err := s.LookupTx(tr, key)
	switch tier {
	case 0:
		s.fromStage++
	case 1:
		s.fromHDD++ // and staged into SSD by the same transaction
	}
	return v, err
}

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	db, stop := startCluster(ctx)
	defer stop()

	graph, err := hierarchy.New(db, hierarchy.Options{Tiers: []string{"gstage", "ghdd"}, Mode: hierarchy.Inclusive, Namespace: "graph/"})
	check(err)
	staging := &stagingCounter{Hierarchy: graph}
	results, err := cacheaug.New(db, cacheaug.Options{
		CachePools: []string{"qdram", "qssd"},
		Backend:    staging,
		IndexPool:  "qssd",
		Namespace:  "hop/",
		Families:   []cacheaug.Family{oneHop},
	})
	check(err)
	fmt.Printf("graph: %v; 1-hop results: cache pools qdram > qssd, dependency index in qssd\n", graph)

	// Load a random graph onto HDD only (cold): nothing is staged yet.
	r := rand.New(rand.NewPCG(1, 1))
	for v := 0; v < vertices; v++ {
		nbrs := map[int]bool{}
		for len(nbrs) < 4 {
			if u := r.IntN(vertices); u != v {
				nbrs[u] = true
			}
		}
		var ids []string
		for u := range nbrs {
			ids = append(ids, strconv.Itoa(u))
		}
		sort.Strings(ids)
		check(db.Transact(ctx, func(tr *distash.Tx) error {
			if err := graph.PutColdTx(tr, adjKey(v), []byte(strings.Join(ids, ","))); err != nil {
				return err
			}
			return graph.PutColdTx(tr, nameKey(v), []byte(fmt.Sprintf("user-%d", v)))
		}))
	}
	fmt.Printf("loaded %d vertices with 4 neighbors each onto ghdd (HDD)\n", vertices)

	// A 2-hop query is 1-hop sub-queries: one for the vertex, one per neighbor.
	twoHop := func(v int) {
		levels := map[int]int{}
		stage0, hdd0 := staging.fromStage, staging.fromHDD
		first, level, err := results.Lookup(ctx, cacheaug.Query{Family: "1hop", Args: []byte(strconv.Itoa(v))})
		check(err)
		levels[level]++
		reach := map[string]bool{}
		for _, e := range strings.Split(string(first), ",") {
			u := strings.SplitN(e, ":", 2)[0]
			sub, level, err := results.Lookup(ctx, cacheaug.Query{Family: "1hop", Args: []byte(u)})
			check(err)
			levels[level]++
			for _, e2 := range strings.Split(string(sub), ",") {
				reach[strings.SplitN(e2, ":", 2)[1]] = true
			}
		}
		fmt.Printf("  2-hop(%d): %d vertices within 2 hops; 5 sub-queries: %d from DRAM, %d from durable SSD, %d computed (graph reads: %d from the staging pool, %d staged from HDD)\n",
			v, len(reach), levels[0], levels[1], levels[-1], staging.fromStage-stage0, staging.fromHDD-hdd0)
	}

	fmt.Println("\nfirst query: nothing cached, nothing staged")
	twoHop(7)
	fmt.Println("same query again: every sub-query result is in DRAM")
	twoHop(7)
	fmt.Println("a query sharing vertices: some results cached, some graph data already staged")
	twoHop(8)

	// DRAM is volatile: a restart of its stashes loses every result. The
	// example empties the pool the way a restart would.
	qdram, err := db.Pool("qdram")
	check(err)
	check(db.Transact(ctx, func(tr *distash.Tx) error {
		b, e := qdram.Range()
		tr.ClearRange(b, e)
		return nil
	}))
	fmt.Println("\nafter losing the DRAM results (as on a restart of the DRAM stashes):")
	twoHop(7)
	fmt.Println("and again: the durable SSD hits were copied back to DRAM")
	twoHop(7)

	// An update in one transaction: the graph on HDD and its staged copy,
	// and every dependent 1-hop result in DRAM and SSD (write-through).
	fmt.Println("\nrename vertex 7's first neighbor, write-through: HDD, staged copy and dependent results in one transaction")
	first, err := results.Get(ctx, cacheaug.Query{Family: "1hop", Args: []byte("7")})
	check(err)
	u, _ := strconv.Atoi(strings.SplitN(string(first), ":", 2)[0])
	check(results.Set(ctx, nameKey(u), []byte("renamed"), cacheaug.WriteThrough))
	v, level, err := results.Lookup(ctx, cacheaug.Query{Family: "1hop", Args: []byte("7")})
	check(err)
	fmt.Printf("  1-hop(7) = %s (from cache level %d: refreshed in place, not recomputed on read)\n", v, level)
	vals, err := graph.TierValues(ctx, nameKey(u))
	check(err)
	fmt.Printf("  name/%d in gstage and ghdd: %q\n", u, vals)

	rep, err := results.Verify(ctx)
	check(err)
	fmt.Printf("\nverify: %d cached 1-hop results (DRAM + SSD), %d disagree with the graph\n", rep.Entries, len(rep.Mismatches))
	fmt.Printf("results stats: %+v\n", results.Stats())
}

// startCluster starts the embedded cluster with the staging pool on SSD
// stashes with the flash engine (imported above). Should the flash engine
// fail to open, it falls back to a DRAM staging pool (engine memory: the
// same role on a volatile medium) and says so.
func startCluster(ctx context.Context) (*distash.DB, func()) {
	for _, staging := range []string{stagingFlash, stagingMemory} {
		cfg, err := config.Parse([]byte(fmt.Sprintf(clusterConfig, staging)))
		check(err)
		c, err := embedded.Start(ctx, cfg, embedded.Options{TempPattern: "distash-example-"})
		if err != nil {
			if staging == stagingFlash {
				fmt.Printf("the flash engine did not start (%v):\nstaging the graph in a DRAM pool (engine memory) instead of an SSD one\n", err)
				continue
			}
			log.Fatal(err)
		}
		fmt.Printf("embedded cluster at %s in %s; staging pool: %s\n", c.Server.ClusterString(), c.Dir, strings.ReplaceAll(staging, "\n", ", "))
		return c.DB, c.Close
	}
	panic("unreachable")
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
