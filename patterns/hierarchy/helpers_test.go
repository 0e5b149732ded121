package hierarchy

import (
	"context"
	"testing"
	"time"

	"github.com/distash/distash/distashtest"
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

type cluster = distashtest.Cluster

func startCluster(t testing.TB, toml string) *cluster { return distashtest.Start(t, toml) }

func ctxT(t testing.TB, d time.Duration) context.Context { return distashtest.Context(t, d) }
