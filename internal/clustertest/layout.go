package clustertest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Node classes, as `distash server --class` and server.NodeOptions take
// them.
const (
	Transaction = "transaction"
	Stash       = "stash"
)

// Spec is one node of a layout.
type Spec struct {
	Name  string // unique in the cluster; the node's directory under the cluster's
	Class string // Transaction or Stash
	Pool  string // a stash node's pool
	// DC and Zone are the node's locality ("": none given).
	DC, Zone string
}

// Specs parses nodes written "name class [pool]", e.g. "tx1 transaction"
// or "data1 stash data".
func Specs(nodes ...string) []Spec {
	out := make([]Spec, 0, len(nodes))
	for _, n := range nodes {
		f := strings.Fields(n)
		s := Spec{Name: f[0], Class: f[1]}
		if len(f) > 2 {
			s.Pool = f[2]
		}
		out = append(out, s)
	}
	return out
}

// BankLayout is the layout of the bank's cluster (bank.ClusterTOML): 3
// transaction nodes (the coordinators, holding the 3 log replicas), 3 stash
// nodes of pool data and 2 of pool cache.
func BankLayout() []Spec {
	return Specs("tx1 transaction", "tx2 transaction", "tx3 transaction",
		"data1 stash data", "data2 stash data", "data3 stash data", "cache1 stash cache", "cache2 stash cache")
}

// FreeAddrs returns n loopback addresses ("127.0.0.1:port") that were free
// a moment ago: they are all listened on at once, so no two are the same.
func FreeAddrs(n int) ([]string, error) {
	var out []string
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		out = append(out, l.Addr().String())
	}
	return out, nil
}

// DurablePool is the configuration of one durable Pebble pool "data"
// (prefix "d/", medium ssd) of stashes stashes, each shard on replication
// of them, under the [cluster] settings given ("key = value" lines).
func DurablePool(stashes, replication int, cluster ...string) string {
	var b strings.Builder
	if len(cluster) > 0 {
		b.WriteString("[cluster]\n" + strings.Join(cluster, "\n") + "\n\n")
	}
	fmt.Fprintf(&b, "[[pool]]\nname = \"data\"\nprefix = \"d/\"\nmedium = \"ssd\"\nmode = \"durable\"\nengine = \"pebble\"\nstashes = %d\nreplication = %d\n",
		stashes, replication)
	return b.String()
}

// WriteConfig writes toml as dir/cluster.toml and returns its path.
func WriteConfig(dir, toml string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(dir, "cluster.toml")
	return path, os.WriteFile(path, []byte(toml), 0o644)
}

// ErrTimeout is wrapped by Until's error when the condition did not hold
// in time.
var ErrTimeout = errors.New("clustertest: timed out")

// Until polls cond every interval until it holds, the timeout passes or
// ctx ends, and returns how long it took. The error names what was waited
// for and cond's last state.
func Until(ctx context.Context, timeout, interval time.Duration, what string, cond func() (bool, string)) (time.Duration, error) {
	began := time.Now()
	last := ""
	for {
		ok, state := cond()
		if ok {
			return time.Since(began), nil
		}
		last = state
		if time.Since(began) >= timeout {
			return time.Since(began), fmt.Errorf("%s: %w after %v (%s)", what, ErrTimeout, timeout, last)
		}
		select {
		case <-ctx.Done():
			return time.Since(began), fmt.Errorf("%s: %w (%s)", what, ctx.Err(), last)
		case <-time.After(interval):
		}
	}
}
