package main

import (
	"github.com/spf13/cobra"
)

func benchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Benchmarks that reproduce the papers' figures (print figures, write PNGs)",
	}
	cmd.AddCommand(benchIngestCmd(), benchAnomaliesCmd(), benchFarmemCmd(), benchFailureCmd(), benchYCSBCmd(), benchGraphCmd(), benchCPUCmd(), benchBackupCmd())
	return cmd
}
