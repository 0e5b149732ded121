package main

import (
	"context"
	"os"
	"os/signal"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/distash/distash/internal/bench/failure"
)

func benchFailureCmd() *cobra.Command {
	o := failure.Options{}
	lo := failure.LayoutOptions{}
	cmd := &cobra.Command{
		Use:   "failure",
		Short: "Paper Fig. 12: 8 DRAM stashes in two DCs, R=3, uniform reads; one stash killed and restarted",
		Long: `Starts a cluster of real processes from this binary: 3 transaction nodes
(the coordinators, 3 log replicas) in dc3 and 8 stash nodes of one DRAM pool
(replication 3, across_dcs) in dc1 and dc2, 4 each, every node in its own
zone, with the transport delaying traffic between DCs by --dc-delay. It
loads --keys keys, waits until the data distributor has spread them, and
runs uniform single-key read transactions from --clients clients (each its
own distash.Open, half WithDC("dc1"), half WithDC("dc2")). After --warmup it
kills -9 one stash node (--victim) and restarts it --down later (a DRAM
stash comes back empty, as a new stash), then runs until the pool is
balanced and for --tail more.

Every --interval it samples each stash node's reads/s, data size and CPU,
the clients' reads/s and the data distributor's status; it writes
failure-qps.png, failure-bytes.png, failure-cpu.png, failure-throughput.png
and failure.csv to --out, and prints the time from the kill to full
re-replication, from the restart to balance, and the read throughput dip.

With --layouts 1stash,2stash it runs instead the paper's Figures 13-16: a
cache-augmented workload (read-through lookups of cached query results,
write-around updates) on an SSD pool alone (1stash) or with the results in
a DRAM pool (2stash), a stash of the results' pool killed and restarted;
per layout the cache-hit latency, hit rate and stash CPU over time, and a
summary comparing them. --local-log gives the DRAM pool local_log = true
(with --layouts: each layout with a DRAM pool runs without and with it).
See docs/benchmarks.md.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
			defer stop()
			layoutDefaults(cmd.Flags(), &o, &lo)
			if len(lo.Layouts) > 0 {
				_, err := failure.RunLayouts(ctx, o, lo, cmd.OutOrStdout())
				return err
			}
			o.LocalLog = lo.LocalLog
			o.Progress = isTerminal(cmd.OutOrStdout())
			_, err := failure.Run(ctx, o, cmd.OutOrStdout())
			return err
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Keys, "keys", 100_000, "keys to load")
	f.IntVar(&o.ValueSize, "value-size", 100, "bytes per value")
	f.IntVar(&o.Clients, "clients", 10, "concurrent reading clients (each its own connection)")
	f.StringVar(&o.Victim, "victim", "s1", "the stash node to kill and restart (s1..s4 in dc1, s5..s8 in dc2)")
	f.DurationVar(&o.FailureWait, "failure-wait", 5*time.Second, "[cluster] failure_wait: how long the distributor waits before re-replicating")
	f.StringVar(&o.ShardBytes, "shard-bytes", "1MiB", "[cluster] shard_bytes: the distributor splits shards past it")
	f.DurationVar(&o.DCDelay, "dc-delay", time.Millisecond, "[cluster] dc_delay: one-way delay between data centers")
	f.DurationVar(&o.Warmup, "warmup", 10*time.Second, "read load before the kill")
	f.DurationVar(&o.Down, "down", 20*time.Second, "time from the kill to the restart")
	f.DurationVar(&o.BalanceTimeout, "balance-timeout", 60*time.Second, "longest wait for balance after the restart")
	f.DurationVar(&o.Tail, "tail", 5*time.Second, "read load after balance")
	f.DurationVar(&o.Interval, "interval", 500*time.Millisecond, "sampling interval")
	f.StringVar(&o.Out, "out", "bench-out", "directory for the PNGs and failure.csv")
	f.StringVar(&o.Dir, "dir", "", "directory for the nodes' data and logs (default: temporary)")
	f.BoolVar(&o.Keep, "keep", false, "keep the nodes' directory (their logs) at the end")
	f.BoolVar(&o.Verbose, "verbose-nodes", false, "nodes log at info level (DIR/<node>.log)")
	f.StringVar(&o.Binary, "binary", "", "distash binary to run the nodes (default: this executable)")
	_ = f.MarkHidden("binary")
	addLayoutFlags(f, &lo)
	return cmd
}

// addLayoutFlags registers the flags of the layouts bench on f.
func addLayoutFlags(f *pflag.FlagSet, lo *failure.LayoutOptions) {
	f.StringSliceVar(&lo.Layouts, "layouts", nil, "run the cache-augmented failure bench (paper Figs. 13-16) on these layouts: 1stash (data and results in the SSD pool), 2stash (results in a DRAM pool)")
	f.BoolVar(&lo.LocalLog, "local-log", false, "the DRAM pool gets local_log = true; with --layouts, each layout with a DRAM pool runs without and with it")
	f.IntVar(&lo.TxNodes, "tx-nodes", 3, "--layouts: transaction nodes (the coordinators and log replicas)")
	f.IntVar(&lo.SSDStashes, "ssd-stashes", 4, "--layouts: stash nodes of the SSD pool (Pebble, durable)")
	f.IntVar(&lo.DRAMStashes, "dram-stashes", 3, "--layouts: stash nodes of the DRAM pool of 2stash (memory engine, ephemeral)")
	f.IntVar(&lo.SSDReplication, "ssd-replication", 3, "--layouts: replication of the SSD pool (the paper's R = 3)")
	f.IntVar(&lo.ResultsReplication, "results-replication", 0, "--layouts: replication of the DRAM results pool (default 1 with --local-log: a cache, so the hit rate shows what the restarted stash kept; else min(3, dram-stashes - 1))")
	f.StringVar(&lo.DeviceProfile, "device-profile", "none", "--layouts: emulated device of the SSD pool ([pool.device] profile: none, ssd, hdd, nvm)")
	f.IntVar(&lo.Queries, "queries", 5_000, "--layouts: distinct queries whose results are cached")
	f.IntVar(&lo.QueryReads, "query-reads", 4, "--layouts: data keys each query reads")
	f.IntVar(&lo.ResultSize, "result-size", 200, "--layouts: bytes of a cached result")
	f.Float64Var(&lo.WriteFraction, "write-fraction", 0.01, "--layouts: fraction of operations that update a data key (write-around: its results are deleted)")
	f.DurationVar(&lo.LookupTimeout, "lookup-timeout", time.Second, "--layouts: a lookup not answered by then counts as failed")
	f.DurationVar(&lo.HitWindow, "hit-window", 10*time.Second, "--layouts: the window after the restart whose hit rate is reported (the run lasts at least this long after it)")
}

// layoutDefaults are the bench's defaults that differ from Figure 12's when
// --layouts or --local-log is given and the flag was not.
func layoutDefaults(f *pflag.FlagSet, o *failure.Options, lo *failure.LayoutOptions) {
	set := func(name string, apply func()) {
		if !f.Changed(name) {
			apply()
		}
	}
	if len(lo.Layouts) > 0 {
		set("keys", func() { o.Keys = 20_000 })
	}
	if lo.LocalLog {
		// The local log matters only for a restart within failure_wait.
		set("failure-wait", func() { o.FailureWait = 30 * time.Second })
		set("down", func() { o.Down = 5 * time.Second })
	}
}
