// Package distashtest starts embedded DiStash clusters for tests: one call
// gives a running cluster in a temporary directory and a connected client,
// both stopped when the test ends.
//
//	c := distashtest.Start(t, toml)
//	err := c.DB.Transact(distashtest.Context(t, 10*time.Second), func(tr *distash.Tx) error { ... })
package distashtest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/distash/distash"
	"github.com/distash/distash/config"
	"github.com/distash/distash/internal/embedded"
	"github.com/distash/distash/internal/testutil/wait"
	"github.com/distash/distash/server"
)

// Options shape a test cluster.
type Options struct {
	// Interceptor and StreamInterceptor, if set, wrap every RPC the server
	// handles (inject faults with them).
	Interceptor       grpc.UnaryServerInterceptor
	StreamInterceptor grpc.StreamServerInterceptor
	// FlushInterval is the stashes' flush period; default 20ms, so tests
	// see versions reach the engines quickly.
	FlushInterval time.Duration
}

// Cluster is a running embedded cluster and a client connected to it.
type Cluster struct {
	Server *server.Server
	DB     *distash.DB
	Dir    string
	Config *config.Config
	c      *embedded.Cluster // what runs; the fields above mirror it
}

// Start parses toml, starts a cluster in a temporary directory and opens a
// client; the test fails if either fails. The cluster stops when the test ends.
func Start(t testing.TB, toml string) *Cluster { return StartWith(t, toml, Options{}) }

// StartWith is Start with options.
func StartWith(t testing.TB, toml string, o Options) *Cluster {
	t.Helper()
	if o.FlushInterval == 0 {
		o.FlushInterval = 20 * time.Millisecond
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ec, err := embedded.StartTOML(ctx, toml, embedded.Options{
		Dir: t.TempDir(), FlushInterval: o.FlushInterval, Interceptor: o.Interceptor, StreamInterceptor: o.StreamInterceptor,
	})
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{Server: ec.Server, DB: ec.DB, Dir: ec.Dir, Config: ec.Config, c: ec}
	t.Cleanup(c.Stop)
	return c
}

// Restart starts the cluster again on its directory after Stop.
func (c *Cluster) Restart(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c.c.Dir, c.c.Config = c.Dir, c.Config
	if err := c.c.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	c.Server, c.DB = c.c.Server, c.c.DB
}

// Stop closes the client and stops the cluster, keeping its directory.
// Safe to call twice.
func (c *Cluster) Stop() {
	c.c.Stop()
	c.Server, c.DB = nil, nil
}

// WaitFlushed waits until every stash has made durable in its engine
// every version the log held when it was called: what was committed before
// has left the MVCC window and reached the engines. The test fails if
// that takes more than 30 s.
func (c *Cluster) WaitFlushed(t testing.TB) {
	t.Helper()
	WaitFlushed(t, c.Server)
}

// WaitFlushed is Cluster.WaitFlushed for the stashes of servers (the nodes
// of a cluster; the log's last version is the newest any of them holds).
func WaitFlushed(t testing.TB, servers ...*server.Server) {
	t.Helper()
	var last int64
	for _, s := range servers {
		last = max(last, int64(s.LogStats().LastVersion))
	}
	wait.Within(t, 30*time.Second, fmt.Sprintf("every stash durable to version %d", last), func() bool {
		for _, s := range servers {
			for _, st := range s.Stashes() {
				if st.DurableVersion < last {
					return false
				}
			}
		}
		return true
	})
}

// Context returns a context that ends after d or with the test.
func Context(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
