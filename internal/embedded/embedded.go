// Package embedded starts a DiStash cluster inside the process with a
// client connected to it: the demo, the benchmarks, the examples and
// distashtest start theirs here.
//
//	c, err := embedded.StartTOML(ctx, toml, embedded.Options{})
//	defer c.Close()
//	err = c.DB.Transact(ctx, ...)
package embedded

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"time"

	"google.golang.org/grpc"

	"github.com/distash/distash"
	"github.com/distash/distash/config"
	"github.com/distash/distash/server"
)

// Options shape an embedded cluster.
type Options struct {
	// Dir holds the cluster's files. "" makes a temporary directory, which
	// Close removes.
	Dir string
	// TempPattern names that temporary directory (a pattern of
	// os.MkdirTemp); default "distash-".
	TempPattern string
	// Logger receives the cluster's logs; nil discards them (an embedded
	// cluster's logs would mix with its program's output).
	Logger *slog.Logger
	// FlushInterval, Interceptor and StreamInterceptor are passed to
	// server.Start (zero: its defaults).
	FlushInterval     time.Duration
	Interceptor       grpc.UnaryServerInterceptor
	StreamInterceptor grpc.StreamServerInterceptor
}

// Cluster is a running embedded cluster and a client connected to it.
type Cluster struct {
	Server *server.Server
	DB     *distash.DB
	Dir    string
	Config *config.Config

	opts Options
	tmp  bool // Dir was made by Start: Close removes it
}

// StartTOML parses toml and starts a cluster of that configuration, as Start.
func StartTOML(ctx context.Context, toml string, o Options) (*Cluster, error) {
	cfg, err := config.Parse([]byte(toml))
	if err != nil {
		return nil, err
	}
	return Start(ctx, cfg, o)
}

// Start starts a cluster of configuration cfg in o.Dir (a temporary
// directory if "") and opens a client. ctx bounds the start only. On an
// error nothing is left running and the temporary directory is removed.
func Start(ctx context.Context, cfg *config.Config, o Options) (*Cluster, error) {
	if cfg == nil {
		return nil, errors.New("embedded: no configuration")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	c := &Cluster{Dir: o.Dir, Config: cfg, opts: o}
	if c.Dir == "" {
		pattern := o.TempPattern
		if pattern == "" {
			pattern = "distash-"
		}
		dir, err := os.MkdirTemp("", pattern)
		if err != nil {
			return nil, err
		}
		c.Dir, c.tmp = dir, true
	}
	if err := c.Restart(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Restart starts the cluster again on its directory, with its Config,
// after Stop (and is how Start starts it the first time).
func (c *Cluster) Restart(ctx context.Context) error {
	srv, err := server.Start(ctx, server.Options{
		Dir: c.Dir, Config: c.Config, Logger: c.opts.Logger, FlushInterval: c.opts.FlushInterval,
		Interceptor: c.opts.Interceptor, StreamInterceptor: c.opts.StreamInterceptor,
	})
	if err != nil {
		return err
	}
	db, err := distash.Open(ctx, srv.ClusterString())
	if err != nil {
		srv.Stop()
		return err
	}
	c.Server, c.DB = srv, db
	return nil
}

// Stop closes the client and stops the cluster, keeping its directory.
// Safe to call twice.
func (c *Cluster) Stop() {
	if c.DB != nil {
		c.DB.Close()
		c.DB = nil
	}
	if c.Server != nil {
		c.Server.Stop()
		c.Server = nil
	}
}

// Close stops the cluster as Stop and removes its directory if Start made
// it. Safe to call twice.
func (c *Cluster) Close() {
	c.Stop()
	if c.tmp {
		os.RemoveAll(c.Dir)
		c.tmp = false
	}
}
