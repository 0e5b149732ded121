package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"time"

	"github.com/spf13/cobra"

	"github.com/distash/distash/internal/bench/cpu"
)

func benchCPUCmd() *cobra.Command {
	o := cpu.Options{}
	nodes := cpu.ProcessOptions{}
	var configPath string
	cmd := &cobra.Command{
		Use:   "cpu",
		Short: "CPU µs per operation (point read, 10-key GetMulti, 1-record range read, blind and read-modify-write commits) on DRAM and Pebble pools, embedded and as server processes",
		Long: `Measures the CPU time one operation costs: process CPU time (user + system)
divided by the operations done, one row per mode, pool and operation:

  get         read-only transaction: a read version and one Get
  getmulti10  read-only transaction: a read version and a GetMulti of 10 keys
  range1      read-only transaction: a read version and a GetRange returning 1 record
  blind       a commit of one Set of a fresh key (no read), as bench ingest
  rmw         a commit that reads a random record and writes it back changed

Modes: embedded (the whole cluster in this process: the total only) and
processes (a cluster of distash server processes on loopback, started here:
one transaction node per log replica and one stash node per stash; the
client's CPU from getrusage of this process, the servers' from
/proc/PID/stat of the nodes, and their sum).

Before the rows each pool gets --records records of --value-bytes; reads
wait until the load has left the stashes' MVCC window (mvcc_window + 1 s,
then until the windows are empty), so that every read is served by the
stash's engine: reads of data at rest. Every record is then read back and
compared with what was written (its index, repeated): a record lost or
damaged on the way fails the benchmark. --fresh adds rows of reads of
records rewritten just before (served from the window), cut short to end
before the first rewritten record leaves the window. Keys are drawn
uniformly. Reads at rest run first, then fresh reads, then the writes.
A write row's CPU includes the work its commits leave behind: the row
starts with the stashes' windows empty and is counted until they are
empty again (mvcc_window and more after the row; the cluster's CPU at
rest over that wait is taken off, measured for a second before the row).

--profile-dir writes one CPU profile per row: this process's (embedded: the
whole cluster; processes: the client), and each node's (processes, from
the nodes' /debug/pprof/, distash server --pprof; with --duration only).

--rounds N runs the modes N times, each round in the reverse order of the
one before, and with both modes prints the processes ÷ embedded ratio of
each row's ops/s and CPU per operation, round by round, and their median:
ratios taken in the same minutes, on a machine whose speed drifts.

--node-gomaxprocs auto gives each server process its share of the CPUs
(GOMAXPROCS = CPUs ÷ nodes, at least 1), as nodes on machines of their own
each have theirs; by default each sizes its scheduler to every CPU.
See docs/benchmarks.md, "CPU per operation".`,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
			defer stop()
			if configPath != "" {
				b, err := os.ReadFile(configPath)
				if err != nil {
					return err
				}
				o.ConfigTOML = string(b)
			}
			if o.Rounds < 1 {
				return fmt.Errorf("--rounds %d: want at least 1", o.Rounds)
			}
			if _, err := cpu.NodeGOMAXPROCS(nodes.GOMAXPROCS, 1, 1); err != nil {
				return err
			}
			o.Processes = cpu.Processes(nodes)
			_, err := cpu.Run(ctx, o, cmd.OutOrStdout())
			return err
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&o.Ops, "ops", cpu.AllOps, "operations: get, getmulti10, range1, blind, rmw")
	f.StringSliceVar(&o.Pools, "pools", []string{"dram", "pebble"}, "pools (of the configuration) to measure")
	f.StringSliceVar(&o.Modes, "modes", []string{cpu.ModeEmbedded, cpu.ModeProcesses}, "embedded (cluster in this process) and/or processes (distash server processes on loopback)")
	f.IntVar(&o.Clients, "clients", 64, "concurrent clients (goroutines sharing one connection to the cluster)")
	f.DurationVar(&o.Duration, "duration", 5*time.Second, "length of each row")
	f.IntVar(&o.Count, "count", 0, "operations per row instead of --duration (nodes' profiles need --duration)")
	f.IntVar(&o.Records, "records", 20000, "records loaded into each pool")
	f.IntVar(&o.ValueBytes, "value-bytes", 1000, "bytes per record")
	f.IntVar(&o.Rounds, "rounds", 1, "run every mode this many times, the modes' order reversed each round; with both modes, print each round's processes ÷ embedded ratios and their median")
	f.BoolVar(&o.Fresh, "fresh", false, "also measure reads of records rewritten just before each row (in the MVCC window)")
	f.StringVar(&o.ProfileDir, "profile-dir", "", "write one CPU profile per row (and per node, processes) to this directory")
	f.StringVar(&o.OutDir, "out", "bench-out", "directory for cpu.csv and cpu.md (the table)")
	f.StringVar(&configPath, "config", "", "cluster configuration of both modes (TOML; default: pools dram and pebble, one stash each, R=1, one log replica)")
	f.StringVar(&nodes.Dir, "dir", "", "directory of the server processes' files and logs (default: temporary; removed at the end unless --keep)")
	f.BoolVar(&nodes.Keep, "keep", false, "keep the server processes' directory")
	f.BoolVarP(&nodes.Verbose, "verbose", "v", false, "server processes log at info level (into DIR/<node>.log)")
	f.StringVar(&nodes.GOMAXPROCS, "node-gomaxprocs", "", "GOMAXPROCS of each server process: auto (the CPUs shared out among the nodes, at least 1 each), a number, or empty for Go's default (every CPU)")
	f.StringVar(&nodes.Binary, "binary", "", "distash binary to run the nodes (default: this executable)")
	_ = f.MarkHidden("binary")
	return cmd
}
