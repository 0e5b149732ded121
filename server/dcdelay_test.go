package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distash/distash"
	"github.com/distash/distash/config"
	"github.com/distash/distash/internal/simnet"
	"github.com/distash/distash/internal/testutil/wait"
	"github.com/distash/distash/internal/wire"
)

func TestDCDelayPrecedence(t *testing.T) {
	cfg := &config.Config{}
	cfg.Cluster.DCDelay.Duration = 20 * time.Millisecond
	for _, c := range []struct {
		opt, want time.Duration
	}{{0, 20 * time.Millisecond}, {5 * time.Millisecond, 5 * time.Millisecond}, {-1, 0}} {
		o := NodeOptions{Config: cfg, DCDelay: c.opt}
		if got := o.dcDelay(); got != c.want {
			t.Errorf("DCDelay %v with dc_delay 20ms: %v, want %v", c.opt, got, c.want)
		}
	}
	if got := (&NodeOptions{Config: &config.Config{}}).dcDelay(); got != 0 {
		t.Errorf("no delay configured: %v", got)
	}
}

const dcTestTOML = `
[cluster]
dc_delay = "30ms"

[log]
replicas = 3

[[pool]]
name = "data"
prefix = "d/"
medium = "dram"
mode = "ephemeral"
engine = "memory"
stashes = 2
replication = 2
capacity = "64MiB"
`

// TestNodesDelayOtherDCs runs the paper's deployment over simnet: the
// log (three transaction nodes, the coordinators) in dc3, a stash in dc1
// and one in dc2, with dc_delay 30ms. Every node learns the others' data
// centers; its connections to other data centers take the delay each way
// and those within its own do not; transactions work.
func TestNodesDelayOtherDCs(t *testing.T) {
	// Not parallel: it bounds round trips from above (within a DC well
	// below dc_delay), which a starved CPU stretches.
	const d = 30 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cfg, err := config.Parse([]byte(dcTestTOML))
	if err != nil {
		t.Fatal(err)
	}
	type spec struct{ name, class, pool, dc string }
	specs := []spec{
		{"tx1", ClassTransaction, "", "dc3"}, {"tx2", ClassTransaction, "", "dc3"}, {"tx3", ClassTransaction, "", "dc3"},
		{"data1", ClassStash, "data", "dc1"}, {"data2", ClassStash, "data", "dc2"},
	}
	network := simnet.New()
	root := t.TempDir()
	var coords []string
	for _, s := range specs {
		if s.class == ClassTransaction {
			coords = append(coords, s.name+":4500")
		}
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	srvs := make([]*Server, len(specs))
	var wg sync.WaitGroup
	errs := make([]error, len(specs))
	for i, s := range specs {
		addr := s.name + ":4500"
		ln, err := network.Listen(addr)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			srvs[i], errs[i] = StartNode(ctx, NodeOptions{
				Dir: filepath.Join(root, s.name), Config: cfg, Listen: addr, Listener: ln, Dialer: network.Dialer(addr),
				Coordinators: coords, Class: s.class, Pool: s.pool, DC: s.dc, Zone: s.name,
				Logger: logger, FlushInterval: 20 * time.Millisecond,
			})
		})
	}
	wg.Wait()
	t.Cleanup(func() {
		var wg sync.WaitGroup
		for _, s := range srvs {
			if s != nil {
				wg.Go(s.Stop)
			}
		}
		wg.Wait()
	})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("start %s: %v", specs[i].name, err)
		}
	}

	// Every node learns every node's data center from the views.
	for i, s := range srvs {
		for _, o := range specs {
			wait.Within(t, 15*time.Second, fmt.Sprintf("%s learns %s's data center %q", specs[i].name, o.name, o.dc), func() bool {
				dc, ok := s.link.(*node).dcs.DC(o.name + ":4500")
				return ok && dc == o.dc
			})
			want := time.Duration(0)
			if specs[i].dc != o.dc {
				want = d
			}
			if got := s.link.(*node).dcs.DelayFor(o.name + ":4500"); got != want {
				t.Fatalf("%s's delay to %s: %v, want %v", specs[i].name, o.name, got, want)
			}
		}
	}

	// Round trips of the nodes' own connections: a coordinator's View.
	rtt := func(from *Server, to string) time.Duration {
		t.Helper()
		conn, err := from.link.(*node).connTo(to)
		if err != nil {
			t.Fatal(err)
		}
		api := wire.NewCoordinatorClient(conn)
		best := time.Duration(-1)
		for range 6 {
			start := time.Now()
			if _, err := api.View(ctx, &wire.ViewRequest{}); err != nil {
				t.Fatal(err)
			}
			if took := time.Since(start); best < 0 || took < best {
				best = took
			}
		}
		t.Logf("round trip %s -> %s: %v", from.link.(*node).opts.Listen, to, best)
		return best
	}
	// tx1 to tx2 and the controller: all in dc3.
	if got := rtt(srvs[0], "tx2:4500"); got >= d {
		t.Errorf("round trip tx1 -> tx2 (both dc3): %v, want well below %v", got, d)
	}
	// A stash node in dc1 to a coordinator in dc3 (which may ask the
	// controller in dc3: no further delay).
	if got := rtt(srvs[3], "tx2:4500"); got < 2*d {
		t.Errorf("round trip data1 (dc1) -> tx2 (dc3): %v, want >= %v", got, 2*d)
	}
	// The other stash node, in dc2, to the log in dc3.
	if got := rtt(srvs[4], "tx1:4500"); got < 2*d {
		t.Errorf("round trip data2 (dc2) -> tx1 (dc3): %v, want >= %v", got, 2*d)
	}

	// Transactions work across the data centers, for a client in dc1.
	db, err := distash.Open(ctx, strings.Join(coords, ","), distash.WithDialer(network.Dialer("client")), distash.WithDC("dc1"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for i := range 20 {
		key := fmt.Appendf(nil, "d/k%d", i)
		if err := db.Transact(ctx, func(tr *distash.Tx) error { tr.Set(key, key); return nil }); err != nil {
			t.Fatal(err)
		}
		var got []byte
		if err := db.ReadTransact(ctx, func(tr *distash.Tx) error {
			var err error
			got, err = tr.Get(key)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if string(got) != string(key) {
			t.Fatalf("read %q, want %q", got, key)
		}
	}
}
