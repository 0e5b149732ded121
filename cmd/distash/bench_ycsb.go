package main

import (
	"context"
	"os"
	"os/signal"

	"github.com/spf13/cobra"

	"github.com/distash/distash/internal/bench/ycsb"
)

func benchYCSBCmd() *cobra.Command {
	var o ycsb.Options
	var configPath, cpuProfile string
	cmd := &cobra.Command{
		Use:   "ycsb",
		Short: "go-ycsb's core workloads A–F on DiStash through the public client, and on private Redis, PostgreSQL and etcd servers",
		Long: `Runs go-ycsb's core workloads (github.com/pingcap/go-ycsb, in-process) through
the public client and the driver of package github.com/distash/distash/ycsb:
a load of --records records, then each of --workloads for --operations
operations from --threads threads, on an embedded cluster (a DRAM pool and a
Pebble pool, one stash each) or on --cluster, in each pool of --pool.
--peers starts private servers (Debian packages redis-server, postgresql,
etcd-server, installed with apt-get when missing and running as root) and
runs the same workloads on them. A workload may repeat: --workloads c,a,c
reads data at rest right after the load (every read served by a stash's
engine), then after workload A (many keys in the stashes' MVCC window);
the repeat is labelled c#2 in the table and the chart. The stores take turns phase by phase
(every store's load, then every store's first workload, ...), so that the
figures a ratio compares are measured close together. Prints ops/s, p50 and p99 per operation
type and each store's ratio to DiStash (the first --pool), and writes
ycsb.png. See docs/benchmarks.md.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
			defer stop()
			o.Progress = isTerminal(cmd.OutOrStdout())
			toml, err := embeddedConfig(configPath, o.Cluster)
			if err != nil {
				return err
			}
			if toml != "" {
				o.ConfigTOML = toml
			}
			if cpuProfile != "" {
				stop, err := startCPUProfile(cpuProfile)
				if err != nil {
					return err
				}
				defer stop()
			}
			_, err = ycsb.Run(ctx, o, cmd.OutOrStdout())
			return err
		},
	}
	cmd.Flags().StringSliceVar(&o.Workloads, "workloads", []string{"a", "b", "c", "d", "e", "f"}, "YCSB core workloads to run after the load, in order (a–f); one may repeat: c,a,c runs C on data at rest right after the load, then A, then C again, labelled c#2")
	cmd.Flags().IntVar(&o.Records, "records", 20000, "records loaded (YCSB recordcount)")
	cmd.Flags().IntVar(&o.Operations, "operations", 100000, "operations per workload (YCSB operationcount)")
	cmd.Flags().IntVar(&o.Threads, "threads", 64, "client threads (YCSB threadcount)")
	cmd.Flags().IntVar(&o.FieldCount, "field-count", 10, "fields per record")
	cmd.Flags().IntVar(&o.FieldLength, "field-length", 100, "bytes per field")
	cmd.Flags().StringVar(&o.Distribution, "distribution", "", "request distribution for every workload: zipfian, uniform, latest, hotspot, sequential (default: each workload's own, zipfian; latest for D)")
	cmd.Flags().StringSliceVar(&o.Pools, "pool", []string{"dram"}, "DiStash pool(s) to run on (the embedded cluster has dram and pebble); the first is the baseline of the ratios")
	cmd.Flags().StringSliceVar(&o.Layouts, "layout", []string{"record"}, "driver record layouts to run each pool with: record (one key; read = Get, update = read-modify-write transaction) and/or fields (update = blind write of the field's own key, read = range read of the record)")
	cmd.Flags().StringVar(&o.Cluster, "cluster", "", "run on this running cluster (its coordinators, host:port,...) instead of an embedded one")
	cmd.Flags().StringVar(&configPath, "config", "", "configuration of the embedded cluster (TOML; default: pools dram and pebble, one stash each)")
	cmd.Flags().StringVar(&o.Dir, "dir", "", "embedded cluster directory (default: temporary)")
	cmd.Flags().StringSliceVar(&o.Peers, "peers", nil, "peer stores to run the same workloads on: redis, postgres, etcd")
	cmd.Flags().BoolVar(&o.NoInstall, "no-install", false, "do not apt-get install missing peers")
	cmd.Flags().StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run (benchmark, embedded cluster and DiStash client) to this file")
	cmd.Flags().StringVar(&o.OutDir, "out", "bench-out", "directory for ycsb.png")
	return cmd
}
