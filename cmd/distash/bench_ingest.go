package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime/trace"
	"time"

	"github.com/spf13/cobra"

	"github.com/distash/distash/internal/bench/ingest"
)

// embeddedConfig reads a bench command's --config file ("" without one);
// it is refused with --cluster, whose running cluster has its own.
func embeddedConfig(path, cluster string) (string, error) {
	if path == "" {
		return "", nil
	}
	if cluster != "" {
		return "", fmt.Errorf("--config is for the embedded cluster; with --cluster the running cluster's configuration applies")
	}
	b, err := os.ReadFile(path)
	return string(b), err
}

func benchIngestCmd() *cobra.Command {
	o := ingest.Options{}
	var cpuProfile, traceFile, configPath string
	cmd := &cobra.Command{
		Use:   "ingest",
		Short: "Paper Fig. 9/10/11: single-key insert transactions into DRAM, Pebble and SQLite pools, optionally on emulated devices",
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
			if traceFile != "" {
				f, err := os.Create(traceFile)
				if err != nil {
					return err
				}
				defer f.Close()
				if err := trace.Start(f); err != nil {
					return err
				}
				defer trace.Stop()
			}
			if cpuProfile != "" {
				stop, err := startCPUProfile(cpuProfile)
				if err != nil {
					return err
				}
				defer stop()
			}
			_, err = ingest.Run(ctx, o, os.Stdout)
			return err
		},
	}
	cmd.Flags().StringSliceVar(&o.Pools, "pools", []string{"dram", "pebble", "sqlite"}, "pools to ingest into")
	cmd.Flags().IntSliceVar(&o.Clients, "clients", []int{1, 10, 64}, "concurrent clients per run")
	cmd.Flags().DurationVar(&o.Duration, "duration", 10*time.Second, "length of each run")
	cmd.Flags().IntVar(&o.ValueSize, "value-size", 100, "bytes per value")
	cmd.Flags().StringVar(&o.OutDir, "out", "bench-out", "directory for the figures: fig9-throughput, fig10-latency, fig11-utilisation (.png and .csv, one row per second) and ingest.png")
	cmd.Flags().StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile to this file")
	cmd.Flags().StringVar(&traceFile, "trace", "", "write a Go execution trace to this file")
	cmd.Flags().StringVar(&o.Dir, "dir", "", "cluster directory (default: temporary)")
	cmd.Flags().StringVar(&o.Cluster, "cluster", "", "ingest into this running cluster (its coordinators, host:port,...) instead of an embedded one")
	cmd.Flags().StringVar(&configPath, "config", "", "configuration of the embedded cluster (TOML; default: one stash per pool dram, pebble, sqlite)")
	cmd.Flags().StringVar(&o.DeviceProfile, "device-profile", "none", "emulated device of the embedded cluster's pools other than DRAM: none, ssd, hdd, nvm (SQLite pools cannot emulate one: their files bypass the file-system seam)")
	cmd.Flags().Float64Var(&o.DeviceScale, "device-scale", 1, "slow the device profile down by this factor (latencies ×, IOPS and bandwidth ÷) so that two cores can saturate it; printed with the resulting figures")
	return cmd
}
