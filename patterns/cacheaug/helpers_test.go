package cacheaug

import (
	"context"
	"testing"
	"time"

	"github.com/distash/distash/distashtest"
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

type cluster = distashtest.Cluster

func startCluster(t testing.TB, toml string) *cluster { return distashtest.Start(t, toml) }

func ctxT(t testing.TB, d time.Duration) context.Context { return distashtest.Context(t, d) }
