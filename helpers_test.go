package distash_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/distash/distash/distashtest"
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

type cluster = distashtest.Cluster

func startCluster(t testing.TB, toml string) *cluster { return distashtest.Start(t, toml) }

func startClusterWith(t testing.TB, toml string, unary grpc.UnaryServerInterceptor, stream grpc.StreamServerInterceptor) *cluster {
	return distashtest.StartWith(t, toml, distashtest.Options{Interceptor: unary, StreamInterceptor: stream})
}

func ctxT(t testing.TB, d time.Duration) context.Context { return distashtest.Context(t, d) }
