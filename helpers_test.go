package distash_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/distash/distash"
	"github.com/distash/distash/config"
	"github.com/distash/distash/server"
)

// twoPools is the paper's cache-augmented configuration: a DRAM ephemeral
// cache over an SSD durable data pool.
const twoPools = `
[[pool]]
name = "cache"
prefix = "c/"
medium = "dram"
mode = "ephemeral"
engine = "memory"
stashes = 2
replication = 2
capacity = "64MiB"

[[pool]]
name = "data"
prefix = "d/"
medium = "ssd"
mode = "durable"
engine = "pebble"
stashes = 2
replication = 2
`

type cluster struct {
	srv *server.Server
	db  *distash.DB
	dir string
	cfg *config.Config
	// interceptor, if set, wraps the server's RPCs (fault injection).
	interceptor grpc.UnaryServerInterceptor
}

func startCluster(t testing.TB, toml string) *cluster {
	return startClusterWith(t, toml, nil)
}

func startClusterWith(t testing.TB, toml string, interceptor grpc.UnaryServerInterceptor) *cluster {
	t.Helper()
	cfg, err := config.Parse([]byte(toml))
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{dir: t.TempDir(), cfg: cfg, interceptor: interceptor}
	c.start(t)
	t.Cleanup(c.stop)
	return c
}

func (c *cluster) start(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := server.Start(ctx, server.Options{Dir: c.dir, Config: c.cfg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), FlushInterval: 20 * time.Millisecond, Interceptor: c.interceptor})
	if err != nil {
		t.Fatal(err)
	}
	db, err := distash.Open(ctx, srv.ClusterString())
	if err != nil {
		srv.Stop()
		t.Fatal(err)
	}
	c.srv, c.db = srv, db
}

func (c *cluster) stop() {
	if c.db != nil {
		c.db.Close()
		c.db = nil
	}
	if c.srv != nil {
		c.srv.Stop()
		c.srv = nil
	}
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
