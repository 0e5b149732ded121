// Command distash runs DiStash clusters, talks to them, and benchmarks them.
//
//	distash demo                       # embedded cluster + the paper's cache-augmented workload
//	distash server --config F --dir D  # run an embedded cluster until interrupted
//	distash cli get|set|clear|getrange|status
//	distash bench ingest|farmem
package main

import (
	"fmt"
	"os"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// defaultGCPercent trades memory for CPU: a cluster process allocates
// steadily (requests, log entries), and collecting less often measured ~9%
// more ingest throughput and a lower p99 than Go's default of 100. GOGC in
// the environment overrides it. The heap may then grow to five times what
// is live, which after a burst of large transactions was gigabytes: distash
// server also sets a soft memory limit (--memory, see server.go), near
// which the collector runs as often as it must.
const defaultGCPercent = 400

func main() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(defaultGCPercent)
	}
	root := &cobra.Command{
		Use:           "distash",
		Short:         "DiStash: a transactional key-value store over pools of stashes",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(serverCmd(), demoCmd(), cliCmd(), benchCmd(), versionCmd())
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(1)
	}
}
