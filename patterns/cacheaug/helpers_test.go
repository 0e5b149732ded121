package cacheaug

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/distash/distash"
	"github.com/distash/distash/config"
	"github.com/distash/distash/server"
)

// cacheConfig has a small DRAM cache (it evicts), an SSD pool of durable
// query results (a second cache level), the SSD data pool, and pools for
// the bad inputs.
const cacheConfig = `
[cluster]
mvcc_window = "1s" # evictions reach the engine sooner

[[pool]]
name = "cache"
prefix = "c/"
medium = "dram"
mode = "ephemeral"
engine = "memory"
stashes = 2
replication = 2
capacity = "400B"

[[pool]]
name = "bigcache"
prefix = "b/"
medium = "dram"
mode = "ephemeral"
engine = "memory"
stashes = 1
replication = 1
capacity = "16MiB"

[[pool]]
name = "results"
prefix = "r/"
medium = "ssd"
mode = "durable"
engine = "pebble"
stashes = 1
replication = 1

[[pool]]
name = "data"
prefix = "d/"
medium = "ssd"
mode = "durable"
engine = "pebble"
stashes = 2
replication = 1
`

type cluster struct {
	srv *server.Server
	db  *distash.DB
}

func startCluster(t testing.TB, toml string) *cluster {
	t.Helper()
	cfg, err := config.Parse([]byte(toml))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := server.Start(ctx, server.Options{Dir: t.TempDir(), Config: cfg,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), FlushInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	db, err := distash.Open(ctx, srv.ClusterString())
	if err != nil {
		srv.Stop()
		t.Fatal(err)
	}
	c := &cluster{srv: srv, db: db}
	t.Cleanup(func() {
		c.db.Close()
		c.srv.Stop()
	})
	return c
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
