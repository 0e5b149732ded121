package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	_ "net/http/pprof" // --pprof-addr
	"os"
	"os/signal"

	"github.com/spf13/cobra"

	"github.com/distash/distash/internal/bench/graph"
)

func benchGraphCmd() *cobra.Command {
	var o graph.Options
	var pebbleCache, cpuProfile, pprofAddr string
	verify := true
	cmd := &cobra.Command{
		Use:   "graph",
		Short: "The paper's Table 1: a social-graph query mix with cached query results, 1Stash (SSD only) against 2Stash (DRAM cache over SSD)",
		Long: `Builds a synthetic social graph (--vertices vertices with power-law
degrees, each a profile and an adjacency list) in an embedded cluster and
runs the paper's §5.3 mix from --clients clients: five query templates,
three of them (about 45% of the queries) answered from cached query
results kept consistent with the graph by the cacheaug pattern's
dependencies, plus --write-fraction profile updates (write-around: the
update and the deletion of every result that read the profile, in one
transaction). Two layouts, each on a fresh cluster with the same graph:

  1stash  --ssd-stashes Pebble stashes hold the graph and the results
  2stash  the same for the graph, --dram-stashes DRAM stashes the results

After a --warmup it measures for --duration and prints p50/p95/p99 of every
query (the paper's Table 1), of cache hits, misses and the uncached
queries, and throughput; checks that every cached result equals its
recomputation; writes graph.png and graph.csv to --out. With
--device-profile the SSD pool's stashes run on emulated devices, and it
also writes their utilisation per second of each layout (the paper's
Figure 11: graph-fig11-utilisation.png and .csv). See docs/benchmarks.md.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
			defer stop()
			o.Progress = isTerminal(cmd.OutOrStdout())
			if o.WriteFraction == 0 {
				o.WriteFraction = -1 // read only (0 is "the default" in graph.Options)
			}
			if o.Warmup == 0 {
				o.Warmup = -1 // none
			}
			if pebbleCache != "" {
				if err := o.PebbleCache.UnmarshalText([]byte(pebbleCache)); err != nil {
					return fmt.Errorf("--pebble-cache: %w", err)
				}
			}
			o.NoVerify = !verify
			if cpuProfile != "" {
				stop, err := startCPUProfile(cpuProfile)
				if err != nil {
					return err
				}
				defer stop()
			}
			if pprofAddr != "" {
				// Goroutine dumps and profiles of a phase while it runs
				// (/debug/pprof/ on this address).
				ln, err := net.Listen("tcp", pprofAddr)
				if err != nil {
					return fmt.Errorf("--pprof-addr: %w", err)
				}
				defer ln.Close()
				go func() { _ = http.Serve(ln, http.DefaultServeMux) }()
				fmt.Fprintf(cmd.OutOrStdout(), "pprof on http://%s/debug/pprof/\n", ln.Addr())
			}
			_, err := graph.Run(ctx, o, cmd.OutOrStdout())
			return err
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Vertices, "vertices", 20000, "vertices of the graph")
	f.IntVar(&o.AvgDegree, "degree", 16, "mean number of friends per vertex (power-law distributed)")
	f.IntVar(&o.ProfileBytes, "profile-bytes", 200, "bytes per vertex profile")
	f.IntVar(&o.Clients, "clients", 64, "concurrent clients")
	f.Float64Var(&o.Rate, "rate", 0, "offered load in queries/s, open loop (Poisson arrivals; latency counted from each query's arrival): the paper's light and moderate workloads; 0: closed loop, each client issuing its next query as soon as the last returns")
	f.DurationVar(&o.Warmup, "warmup", 5e9, "warm-up before each layout's measurement")
	f.DurationVar(&o.Duration, "duration", 20e9, "measured run per layout")
	f.IntVar(&o.Rounds, "rounds", 1, "measure the layouts in this many alternating rounds of --duration/rounds each, both clusters started at once, so that other work on the machine falls on both alike (1: one layout after the other)")
	f.Float64Var(&o.WriteFraction, "write-fraction", 0.01, "fraction of operations that update a profile (0: read only)")
	f.IntVar(&o.Prefill, "prefill", 0, "cache the results of this many most popular vertices after the load and let them come to rest with the graph before the warm-up: the steady state of the paper's hour-long runs (hit rate near 100%, results on the SSDs in 1stash); 0: the cache fills during the run")
	f.Float64Var(&o.Zipf, "zipf", 1.1, "zipf exponent of vertex popularity (> 1)")
	f.IntVar(&o.SSDStashes, "ssd-stashes", 4, "stashes of the SSD (Pebble) pool")
	f.IntVar(&o.DRAMStashes, "dram-stashes", 1, "stashes of the DRAM pool (2stash)")
	f.StringSliceVar(&o.Layouts, "layouts", []string{graph.OneStash, graph.TwoStash}, "layouts to run: 1stash, 2stash")
	f.StringVar(&o.Dir, "dir", "", "embedded clusters' directory (default: temporary)")
	f.StringVar(&o.OutDir, "out", "bench-out", "directory for graph.png and graph.csv")
	f.Uint64Var(&o.Seed, "seed", 1, "seed of the graph and the query sequence")
	f.StringVar(&o.DeviceProfile, "device-profile", "none", "emulated device of the SSD pool's stashes: none, ssd, hdd, nvm (Pebble stashes; the DRAM pool has none)")
	f.Float64Var(&o.DeviceScale, "device-scale", 1, "slow the device profile down by this factor (latencies ×, IOPS and bandwidth ÷) so that it, not the two cores, is the bottleneck; printed with the resulting figures")
	f.StringVar(&pebbleCache, "pebble-cache", "", "block cache of each SSD stash ([pool.pebble] cache, e.g. 1MiB; default the engine's 64MiB): small, so that reads reach the device")
	f.BoolVar(&verify, "verify", true, "check every cached result against its recomputation after each layout (and run with a 30 s MVCC window for it); on a slow emulated device the check takes minutes")
	f.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run (benchmark, embedded cluster and client) to this file")
	f.StringVar(&pprofAddr, "pprof-addr", "", "serve Go's /debug/pprof/ on this address (e.g. localhost:6060) during the run, for goroutine dumps and profiles of one phase")
	return cmd
}
