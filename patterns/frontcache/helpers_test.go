package frontcache

import (
	"context"
	"testing"
	"time"

	"github.com/distash/distash/distashtest"
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

type cluster = distashtest.Cluster

func startCluster(t testing.TB, toml string) *cluster { return distashtest.Start(t, toml) }

func ctxT(t testing.TB, d time.Duration) context.Context { return distashtest.Context(t, d) }
