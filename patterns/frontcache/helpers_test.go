package frontcache

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

// frontConfig has a DRAM front pool over four SSD stashes, plus pools for
// the bad inputs.
const frontConfig = `
[[pool]]
name = "front"
prefix = "f/"
medium = "dram"
mode = "ephemeral"
engine = "memory"
stashes = 1
replication = 1
capacity = "16MiB"

[[pool]]
name = "slow"
prefix = "s/"
medium = "ssd"
mode = "durable"
engine = "pebble"
stashes = 4
replication = 1

[[pool]]
name = "hdd"
prefix = "h/"
medium = "hdd"
mode = "durable"
engine = "pebble"
stashes = 1
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
