package main

import (
	"context"
	"os"
	"os/signal"
	"time"

	"github.com/spf13/cobra"

	"github.com/distash/distash/internal/bench/anomalies"
)

func benchAnomaliesCmd() *cobra.Command {
	var o anomalies.Options
	cmd := &cobra.Command{
		Use:   "anomalies",
		Short: "Paper §3.2: the cache-augmented workload on DiStash vs Redis + PostgreSQL, counting stale cache entries",
		Long: `Runs the same cache-augmented workload (read-through fills and
write-through updates on a Zipf key set) on DiStash, one transaction per
operation over a DRAM cache pool and an SSD data pool, and on Redis (cache)
plus PostgreSQL (data) used as two separate storage managers, as in the
paper's Figure 6. It starts private Redis and PostgreSQL servers (Debian
packages redis-server and postgresql), and prints throughput, latency, stale
reads and, after quiescence, cached values that disagree with the data.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
			defer stop()
			_, err := anomalies.Run(ctx, o, os.Stdout)
			return err
		},
	}
	cmd.Flags().IntVar(&o.Clients, "clients", 32, "concurrent clients")
	cmd.Flags().IntVar(&o.Keys, "keys", 100, "keys in the hot set")
	cmd.Flags().DurationVar(&o.Duration, "duration", 10*time.Second, "length of each run")
	cmd.Flags().Float64Var(&o.ReadFraction, "reads", 0.5, "fraction of operations that read through the cache")
	cmd.Flags().Float64Var(&o.Zipf, "zipf", 0.99, "Zipf skew of key choice (not 1)")
	cmd.Flags().DurationVar(&o.Delay, "delay", 0, "pause between the data read and the cache fill, in both setups")
	cmd.Flags().Float64Var(&o.Evict, "evict", 0.1, "fraction of operations that evict a cached entry (negative: none)")
	cmd.Flags().StringSliceVar(&o.Setups, "setups", nil, "setups to run (default both: distash, redis+postgres)")
	return cmd
}
