package hierarchy

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/distash/distash"
	"github.com/distash/distash/config"
	_ "github.com/distash/distash/internal/engine/flash" // registers engine "flash"
	"github.com/distash/distash/server"
)

// tiersConfig has one pool per medium, a second dram pool and an
// ephemeral flash SSD pool: enough for exclusive (nvm > ssd > hdd) and
// inclusive (dram > nvm > hdd) hierarchies and for the bad inputs.
const tiersConfig = `
[cluster]
mvcc_window = "1s" # evictions reach the engine sooner

[[pool]]
name = "dram"
prefix = "r/"
medium = "dram"
mode = "ephemeral"
engine = "memory"
stashes = 2
replication = 1
capacity = "1500B"

[[pool]]
name = "dram2"
prefix = "q/"
medium = "dram"
mode = "ephemeral"
engine = "memory"
stashes = 1
replication = 1
capacity = "64KiB"

[[pool]]
name = "nvm"
prefix = "n/"
medium = "nvm"
mode = "durable"
engine = "pebble"
stashes = 2
replication = 1

[[pool]]
name = "ssd"
prefix = "s/"
medium = "ssd"
mode = "durable"
engine = "pebble"
stashes = 2
replication = 1

[[pool]]
name = "flashssd"
prefix = "x/"
medium = "ssd"
mode = "ephemeral"
engine = "flash"
stashes = 1
replication = 1
capacity = "1MiB"

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
