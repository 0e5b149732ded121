package main

import (
	"io"
	"os"

	"github.com/spf13/cobra"
	"golang.org/x/term"
)

func benchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Benchmarks that reproduce the papers' figures (print figures, write PNGs)",
	}
	cmd.AddCommand(benchIngestCmd(), benchAnomaliesCmd(), benchFarmemCmd(), benchFailureCmd(), benchYCSBCmd(), benchGraphCmd(), benchCPUCmd(), benchBackupCmd())
	return cmd
}

// isTerminal reports whether w is a terminal: progress bars redraw their
// line there, but in a file or a pipe each redraw would be kept, so the
// benches show them only on a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
