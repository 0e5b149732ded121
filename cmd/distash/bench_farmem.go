package main

import (
	"context"
	"os"
	"os/signal"
	"time"

	"github.com/spf13/cobra"

	"github.com/distash/distash/internal/bench/farmem"
)

func benchFarmemCmd() *cobra.Command {
	var o farmem.Options
	var latencies []time.Duration
	var noPrefetchSweep, noIOSweep, cluster bool
	var records, threads, keysPerRead int
	var cpuProfile string
	cmd := &cobra.Command{
		Use:   "farmem",
		Short: "Microsecond-latency memory: throughput vs emulated memory latency, with and without prefetching and IO, against the model",
		Long: `Reproduces the second paper's experiments (Bando et al., SIGMOD 2025):
(a) a pointer chase of M far-memory accesses per operation followed by one
4 KiB read, and (b) the flash engine under a YCSB read-mostly workload, with
its index in emulated far memory. Sweeps L_mem with prefetching on and off
and IO on and off, prints throughput normalised to L_mem = 0.1 µs next to
the model's prediction (with parameters measured from the run), and writes
farmem.png. See docs/flash.md.

--cluster measures the serving path end to end instead: point reads through
the public client of an embedded cluster whose flash pools keep their index
in far memory of each latency (far_memory), with and without prefetching,
next to the model of the engine alone and with the client's, gRPC's and the
log's CPU counted; writes farmem-cluster.png and farmem-cluster.csv. See
docs/benchmarks.md.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
			defer stop()
			if cpuProfile != "" {
				stop, err := startCPUProfile(cpuProfile)
				if err != nil {
					return err
				}
				defer stop()
			}
			if cluster {
				_, err := farmem.RunCluster(ctx, farmem.ClusterOptions{Latencies: latencies, Records: records, KeysPerRead: keysPerRead,
					Threads: threads, Duration: o.Duration, OutDir: o.OutDir}, os.Stdout)
				return err
			}
			o.Latencies = latencies
			if noPrefetchSweep {
				o.Prefetch = []bool{true}
			}
			if noIOSweep {
				o.IO = []bool{true}
			}
			return farmem.Run(ctx, o, os.Stdout)
		},
	}
	cmd.Flags().DurationSliceVar(&latencies, "latencies", nil, "L_mem values (default 0.1,0.5,1,2,3,5,10,20 µs)")
	cmd.Flags().StringSliceVar(&o.Workloads, "workloads", nil, "chase, ycsb (default both)")
	cmd.Flags().BoolVar(&o.Virtual, "virtual", false, "run the microbenchmark in virtual time (deterministic, no waiting)")
	cmd.Flags().BoolVar(&o.BusyWait, "busy-wait", false, "busy-wait through far-memory stalls in real time (default: the clock jumps over them; the code's own work is real either way)")
	cmd.Flags().DurationVar(&o.Duration, "duration", 0, "measured time per point, in 10 rounds over the sweep (default 2s)")
	cmd.Flags().IntVar(&o.Tasks, "tasks", 0, "user-level threads per core (default 128)")
	cmd.Flags().IntVar(&o.Prefetches, "prefetches", 0, "P, prefetches in flight per core (default 12)")
	cmd.Flags().IntVar(&o.M, "m", 0, "far-memory accesses per operation in the pointer chase (default 10)")
	cmd.Flags().BoolVar(&o.Durable, "durable", false, "run the flash engine durable (fsync per commit) instead of ephemeral")
	cmd.Flags().BoolVar(&noPrefetchSweep, "prefetch-only", false, "only with prefetching (skip the prefetch-off curves)")
	cmd.Flags().BoolVar(&noIOSweep, "io-only", false, "only with IO (skip the IO-off curves)")
	cmd.Flags().StringVar(&o.OutDir, "out", "bench-out", "directory for farmem.png (farmem-cluster.png and .csv with --cluster)")
	cmd.Flags().BoolVar(&cluster, "cluster", false, "end to end: point reads through the client on flash pools with far_memory at each latency (default 0.1,1,2,5,10,20 µs), with and without prefetch")
	cmd.Flags().IntVar(&records, "records", 0, "with --cluster: keys per pool (default 20000)")
	cmd.Flags().StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file")
	cmd.Flags().IntVar(&threads, "threads", 0, "with --cluster: client goroutines (default 64)")
	cmd.Flags().IntVar(&keysPerRead, "keys-per-read", 1, "with --cluster: keys per read transaction, read with one GetMulti (1: one Get); more keys make the stash's lookups, not the client and gRPC, the bottleneck, as the paper's engine was")
	return cmd
}
