package main

import (
	"context"
	"os"
	"os/signal"
	"time"

	"github.com/spf13/cobra"

	"github.com/distash/distash/internal/bench/backupcost"
)

func benchBackupCmd() *cobra.Command {
	var o backupcost.Options
	cmd := &cobra.Command{
		Use:   "backup",
		Short: "Issue 23: the foreground cost of a running backup (write throughput and p99 without and with one)",
		Long: `Runs writers on an embedded cluster (one durable Pebble pool of two
stashes) and alternates phases without a backup and with one running: each
backed phase starts a new backup to a fresh directory, waits for its first
snapshot (reported as its own phase) and then measures while the backup
copies the mutation log. Prints each phase's throughput and latency, and
the medians of each kind (docs/backup.md).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
			defer stop()
			_, err := backupcost.Run(ctx, o, cmd.OutOrStdout())
			return err
		},
	}
	cmd.Flags().IntVar(&o.Clients, "clients", 16, "concurrent writers")
	cmd.Flags().IntVar(&o.Keys, "keys", 20000, "keys (loaded first, then overwritten at random)")
	cmd.Flags().IntVar(&o.ValueBytes, "value-bytes", 200, "bytes of each value")
	cmd.Flags().DurationVar(&o.Phase, "phase", 5*time.Second, "length of each measured phase")
	cmd.Flags().IntVar(&o.Rounds, "rounds", 3, "rounds of a phase without, then one with a backup")
	cmd.Flags().StringVar(&o.Dir, "dir", "", "directory for the cluster and the backups (default: a temporary one, removed)")
	return cmd
}
