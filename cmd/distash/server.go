package main

import (
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/distash/distash/config"
	"github.com/distash/distash/server"
)

const defaultCluster = "127.0.0.1:4500"

func serverCmd() *cobra.Command {
	var configPath, dir, listen string
	var verbose bool
	var tlsf tlsFlags
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run an embedded cluster (all roles in this process) until interrupted",
		Long: `Run a whole DiStash cluster in this process: log, sequencer, resolver,
proxies and every stash of every pool, serving clients over gRPC.
Without --config it uses the built-in default configuration (a DRAM
ephemeral pool "cache" with prefix c/ and an SSD durable pool "data" with
prefix d/). Data lives under --dir; restarting on the same directory
recovers the cluster. Prints "listening on ADDR" once it serves.

Every client that connects may read, write and clear every key: --listen
defaults to 127.0.0.1, and a non-loopback address without TLS draws a
warning. With --tls-cert, --tls-key and --tls-ca the server presents its
certificate and accepts only clients whose certificate the CA signed
(mutual TLS); see docs/security.md.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg := config.Default()
			if configPath != "" {
				var err error
				if cfg, err = config.Load(configPath); err != nil {
					return err
				}
			}
			level := slog.LevelWarn
			if verbose {
				level = slog.LevelInfo
			}
			logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
			tlsConfig, err := tlsf.server(logger)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			srv, err := server.Start(ctx, server.Options{Dir: dir, Config: cfg, ListenAddr: listen, TLS: tlsConfig, Logger: logger})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "listening on %s\n", srv.ClusterString())
			<-ctx.Done()
			fmt.Fprintln(os.Stderr, "stopping")
			srv.Stop()
			return nil
		},
	}
	cmd.Flags().StringVar(&configPath, "config", "", "cluster configuration (TOML); default: the built-in one")
	cmd.Flags().StringVar(&dir, "dir", "distash-data", "directory for the cluster's files")
	cmd.Flags().StringVar(&listen, "listen", defaultCluster, "gRPC listen address (port 0: any free port); beyond loopback, use TLS")
	tlsf.add(cmd.Flags(), "server", false)
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "log at info level")
	return cmd
}
