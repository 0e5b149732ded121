package main

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/distash/distash/config"
	"github.com/distash/distash/server"
)

const defaultCluster = "127.0.0.1:4500"

// memoryLimit returns the soft memory limit --memory asks for with cfg:
// "auto" is server.MemoryBudget(cfg), unless GOMEMLIMIT is set (the runtime
// applied it) or the budget is unbounded; "off" is no limit; anything else
// is a size ("2GiB"). ok is false when the runtime's limit should stay.
func memoryLimit(flag string, cfg *config.Config) (limit int64, ok bool, err error) {
	switch flag {
	case "auto":
		if os.Getenv("GOMEMLIMIT") != "" {
			return 0, false, nil
		}
		if b := server.MemoryBudget(cfg); b > 0 {
			return b, true, nil
		}
		return 0, false, nil
	case "off":
		return math.MaxInt64, true, nil
	}
	size, err := config.ParseSize(flag)
	if err != nil || size <= 0 {
		return 0, false, fmt.Errorf("--memory %q: want auto, off or a size such as 2GiB", flag)
	}
	return int64(size), true, nil
}

// httpAddr checks --http: "off" (or "") serves no HTTP; anything else must
// be host:port. given says whether the flag was set: without it an
// embedded cluster serves at server.DefaultHTTPAddr if that port is free
// (optional) and a cluster node serves none.
func httpAddr(flag string, given, node bool) (addr string, optional bool, err error) {
	if !given {
		if node {
			return "", false, nil
		}
		return server.DefaultHTTPAddr, true, nil
	}
	if flag == "" || strings.EqualFold(flag, "off") {
		return "", false, nil
	}
	_, port, err := net.SplitHostPort(flag)
	if err == nil {
		if n, perr := strconv.Atoi(port); perr != nil || n < 0 || n > 65535 {
			err = fmt.Errorf("bad port %q", port)
		}
	}
	if err != nil {
		return "", false, fmt.Errorf("--http %q: want host:port (port 0: any free port) or off: %v", flag, err)
	}
	return flag, false, nil
}

// newLogger returns the server's logger: text or JSON lines (--log-format)
// on stderr, at info level with -v and warnings otherwise.
func newLogger(format string, verbose bool) (*slog.Logger, error) {
	level := slog.LevelWarn
	if verbose {
		level = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: level}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}

func serverCmd() *cobra.Command {
	var configPath, dir, listen, memory, httpFlag, logFormat string
	var coordinators, class, pool, dc, zone, machine, cpuProfile string
	var verbose, pprofHTTP bool
	var dcDelay time.Duration
	var tlsf tlsFlags
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run an embedded cluster, or one node of a multi-process cluster, until interrupted",
		Long: `Without --coordinators: run a whole DiStash cluster in this process: log,
sequencer, resolver, proxies and every stash of every pool, serving
clients over gRPC.

With --coordinators: run one node of a multi-process cluster (see
docs/cluster.md). A node whose --listen address is in --coordinators is
a coordinator. --class transaction nodes hold log replicas and the
stateless roles; --class stash --pool P nodes hold one stash of pool P
on its own engine under --dir. Every node is given the same --config;
clients use the coordinators list as the cluster string:

  distash server --config cluster.toml --dir D1 --listen 127.0.0.1:4501 \
      --coordinators 127.0.0.1:4501,127.0.0.1:4502,127.0.0.1:4503 \
      --class transaction --dc dc1 --zone z1
  distash server --config cluster.toml --dir D4 --listen 127.0.0.1:4504 \
      --coordinators 127.0.0.1:4501,127.0.0.1:4502,127.0.0.1:4503 \
      --class stash --pool data --dc dc1 --zone za

Without --config it uses the built-in default configuration (a DRAM
ephemeral pool "cache" with prefix c/ and an SSD durable pool "data" with
prefix d/). Data lives under --dir; restarting on the same directory
recovers the cluster. Prints "listening on ADDR" once it serves, then
"http on ADDR" if it serves HTTP.

--http ADDR serves Prometheus metrics at /metrics and the web console at
/ (docs/metrics.md). An embedded cluster serves it at 127.0.0.1:4580 by
default (if that port is taken, it warns and goes on without); a cluster
node serves none unless --http is given; --http off turns it off. An
address given that cannot be bound is an error. --pprof also serves Go's
profiles at /debug/pprof/ there (CPU profiles of up to 29 s).

Logs go to stderr, as text or JSON lines (--log-format); every line
carries the node ("embedded" or the node's id), the generation and, where
a role logs, the role.

Every client that connects may read, write and clear every key: --listen
defaults to 127.0.0.1, and a non-loopback address without TLS draws a
warning. With --tls-cert, --tls-key and --tls-ca the server presents its
certificate and accepts only clients whose certificate the CA signed
(mutual TLS); see docs/security.md.

--memory sets the Go runtime's soft memory limit: past it the garbage
collector works harder (the process keeps running; it is not a cap). The
default, auto, is the sum of the cluster's memory bounds plus 512 MiB
(docs/architecture.md, "Memory bounds"): with the default GOGC of 400 the
heap could otherwise grow to five times what it holds live. GOMEMLIMIT in
the environment takes the place of auto. Once the server is idle (no
collection for 5 seconds), it returns freed memory to the system.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg := config.Default()
			if configPath != "" {
				var err error
				if cfg, err = config.Load(configPath); err != nil {
					return err
				}
			}
			logger, err := newLogger(logFormat, verbose)
			if err != nil {
				return err
			}
			httpListen, httpOptional, err := httpAddr(httpFlag, cmd.Flags().Changed("http"), coordinators != "")
			if err != nil {
				return err
			}
			if pprofHTTP && httpListen == "" {
				return fmt.Errorf("--pprof serves /debug/pprof/ on the HTTP server: give --http too")
			}
			limit, setLimit, err := memoryLimit(memory, cfg)
			if err != nil {
				return err
			}
			if setLimit {
				debug.SetMemoryLimit(limit)
			}
			// Once the server runs, lines go to its logger, which adds the
			// node and the generation to each.
			var runLogger atomic.Pointer[slog.Logger]
			runLogger.Store(logger)
			tlsConfig, err := tlsf.server(runLogger.Load)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			var srv *server.Server
			if coordinators == "" {
				for _, f := range []string{"class", "pool", "dc", "zone", "machine", "dc-delay"} {
					if cmd.Flags().Changed(f) {
						return fmt.Errorf("--%s is a flag of a cluster node: give --coordinators too (without it the server runs a whole embedded cluster)", f)
					}
				}
				srv, err = server.Start(ctx, server.Options{Dir: dir, Config: cfg, ListenAddr: listen, TLS: tlsConfig, Logger: logger,
					HTTPAddr: httpListen, HTTPOptional: httpOptional, Pprof: pprofHTTP})
			} else {
				if zone == "" {
					zone = listen
				}
				opts := server.NodeOptions{Dir: dir, Config: cfg, Listen: listen, Class: class, Pool: pool,
					DC: dc, Zone: zone, Machine: machine, ServerTLS: tlsConfig, Logger: logger, HTTPAddr: httpListen, Pprof: pprofHTTP}
				if cmd.Flags().Changed("dc-delay") {
					if dcDelay < 0 {
						return fmt.Errorf("--dc-delay %v: want a duration >= 0", dcDelay)
					}
					opts.DCDelay = dcDelay
					if dcDelay == 0 {
						opts.DCDelay = -1 // off, whatever [cluster] dc_delay says
					}
				}
				for _, a := range strings.Split(coordinators, ",") {
					if a = strings.TrimSpace(a); a != "" {
						opts.Coordinators = append(opts.Coordinators, a)
					}
				}
				if tlsConfig != nil {
					if opts.ClientTLS, err = tlsf.client(); err != nil {
						return err
					}
				}
				srv, err = server.StartNode(ctx, opts)
			}
			if err != nil {
				return err
			}
			runLogger.Store(srv.Logger())
			srv.Logger().Info("soft memory limit", "bytes", debug.SetMemoryLimit(-1))
			fmt.Fprintf(cmd.OutOrStdout(), "listening on %s\n", srv.ClusterString())
			if a := srv.HTTPAddr(); a != "" {
				fmt.Fprintf(cmd.OutOrStdout(), "http on %s\n", a)
			}
			if id := srv.NodeID(); id != "" {
				fmt.Fprintf(cmd.OutOrStdout(), "node %s (%s) serving on %s\n", id, class, srv.Addr())
			}
			if cpuProfile != "" {
				stop, err := startCPUProfile(cpuProfile)
				if err != nil {
					return err
				}
				defer stop()
			}
			go newIdleTrimmer(srv.Logger()).run(ctx)
			select {
			case <-ctx.Done():
			case err := <-srv.Failed():
				srv.Stop()
				if errors.Is(err, server.ErrKilled) {
					// An operator's `distash cli kill`: a clean exit.
					fmt.Fprintln(os.Stderr, err)
					return nil
				}
				return err
			}
			fmt.Fprintln(os.Stderr, "stopping")
			return stopWithin(srv.Stop, stopTimeout)
		},
	}
	cmd.Flags().StringVar(&configPath, "config", "", "cluster configuration (TOML); default: the built-in one")
	cmd.Flags().StringVar(&dir, "dir", "distash-data", "directory for the cluster's files")
	cmd.Flags().StringVar(&listen, "listen", defaultCluster, "gRPC listen address (port 0: any free port); beyond loopback, use TLS")
	cmd.Flags().StringVar(&memory, "memory", "auto", "soft memory limit of the process: auto (the cluster's memory bounds + 512MiB), off, or a size such as 2GiB")
	cmd.Flags().StringVar(&coordinators, "coordinators", "", "run as a node of a multi-process cluster with these coordinators (host:port,...)")
	cmd.Flags().StringVar(&class, "class", "transaction", "node class: transaction (log replicas, proxies, sequencer, resolver) or stash")
	cmd.Flags().StringVar(&pool, "pool", "", "a stash node's pool")
	cmd.Flags().StringVar(&dc, "dc", "dc1", "the node's data center")
	cmd.Flags().StringVar(&zone, "zone", "", "the node's zone (failure domain); default: its address")
	cmd.Flags().StringVar(&machine, "machine", "", "the node's machine; nodes on one machine share its failures")
	cmd.Flags().DurationVar(&dcDelay, "dc-delay", 0, "one-way delay added to this node's connections to nodes of other --dc (emulated data centers); overrides [cluster] dc_delay, 0 turns it off")
	cmd.Flags().StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the process to this file until it stops")
	tlsf.add(cmd.Flags(), "server", false)
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "log at info level")
	cmd.Flags().StringVar(&logFormat, "log-format", "text", "log lines as text or json")
	cmd.Flags().BoolVar(&pprofHTTP, "pprof", false, "also serve Go's profiles at /debug/pprof/ on the --http address (bench cpu profiles its nodes with it)")
	cmd.Flags().StringVar(&httpFlag, "http", "", "HTTP address of /metrics and the web console, or off (default "+server.DefaultHTTPAddr+" for an embedded cluster, off for a cluster node)")
	return cmd
}

// stopTimeout bounds a graceful stop: a node that cannot finish stopping
// (a peer it waits for is gone for good) exits anyway, as a crash would —
// every role recovers from one — rather than hang its supervisor.
const stopTimeout = 30 * time.Second

// stopWithin runs stop and returns nil when it finishes within d; else it
// writes every goroutine's stack to stderr, saying why, and returns an
// error (the process exits non-zero without waiting for stop).
func stopWithin(stop func(), d time.Duration) error {
	done := make(chan struct{})
	go func() { stop(); close(done) }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return nil
	case <-t.C:
	}
	fmt.Fprintf(os.Stderr, "stop did not finish within %v; exiting without it. Goroutines:\n", d)
	_ = pprof.Lookup("goroutine").WriteTo(os.Stderr, 2)
	return fmt.Errorf("stop did not finish within %v", d)
}
