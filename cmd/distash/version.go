package main

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/distash/distash/internal/version"
)

// versionCmd prints the build and the protocol and format versions it
// speaks: what an operator compares before running two binaries in one
// cluster (docs/operations.md).
func versionCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the build, and the protocol and format versions this binary speaks",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b := version.Current()
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return enc.Encode(map[string]any{
					"module": b.Module, "version": b.Version, "commit": b.Commit, "modified": b.Modified, "go": b.GoVersion,
					"protocol": version.Protocol, "min_protocol": version.MinProtocol, "formats": version.Formats(),
				})
			}
			fmt.Fprintln(out, "distash", b.String())
			fmt.Fprintf(out, "protocol %d (speaks %d to %d)\n", version.Protocol, version.MinProtocol, version.Protocol)
			for _, f := range version.FormatList() {
				fmt.Fprintln(out, "format", f)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	return cmd
}
