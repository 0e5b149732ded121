package server_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/distash/distash"
	"github.com/distash/distash/config"
	"github.com/distash/distash/internal/testutil/bank"
	"github.com/distash/distash/internal/testutil/wait"
	"github.com/distash/distash/internal/wire"
	"github.com/distash/distash/server"
)

// deviceTOML is the data pool's emulated SSD in the tests: the preset
// with short latencies, so the tests stay fast while every I/O waits.
const deviceTOML = `
[pool.device]
profile = "ssd"
read_latency = "50µs"
write_latency = "50µs"
sync_latency = "200µs"
`

func deviceValue(i int) []byte { return bytes.Repeat([]byte{byte('a' + i%26)}, 100+i) }

// devicesOf returns the status's device of each stash, by pool.
func devicesOf(t *testing.T, st *wire.StatusResponse) map[string][]*wire.DeviceStatus {
	t.Helper()
	out := map[string][]*wire.DeviceStatus{}
	for _, s := range st.Stashes {
		out[s.Pool] = append(out[s.Pool], s.Device)
	}
	return out
}

// TestStashDevice: an embedded cluster whose Pebble pool emulates an SSD
// serves its reads and writes, before and after a restart (when its
// engine reads its files back through the device), and the status shows
// each data stash's device with its I/O; the DRAM pool has none.
func TestStashDevice(t *testing.T) {
	cfg := config.Default()
	cfg.Pools[1].Device = &config.Device{Profile: "ssd",
		ReadLatency: &config.Duration{Duration: 50 * time.Microsecond}, WriteLatency: &config.Duration{Duration: 50 * time.Microsecond},
		SyncLatency: &config.Duration{Duration: 200 * time.Microsecond}}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const n = 100
	srv, db := start(t, dir, cfg)
	if err := db.Transact(ctx, func(tr *distash.Tx) error {
		for i := 0; i < n; i++ {
			tr.Set([]byte(fmt.Sprintf("d/%03d", i)), deviceValue(i))
			tr.Set([]byte(fmt.Sprintf("c/%03d", i)), deviceValue(i))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	waitForPops(t, srv) // the data reached the engines' files
	db.Close()
	srv.Stop()

	srv, db = start(t, dir, cfg)
	defer srv.Stop()
	defer db.Close()
	if err := db.Transact(ctx, func(tr *distash.Tx) error {
		for i := 0; i < n; i++ {
			k := fmt.Sprintf("d/%03d", i)
			v, err := tr.Get([]byte(k))
			if err != nil {
				return err
			}
			if !bytes.Equal(v, deviceValue(i)) {
				return fmt.Errorf("%s = %q after the restart", k, v)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(srv.ClusterString(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	st, err := wire.NewDiStashClient(conn).Status(ctx, &wire.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	devs := devicesOf(t, st)
	if len(devs["data"]) != 2 || len(devs["cache"]) != 2 {
		t.Fatalf("stashes in the status: %v", devs)
	}
	for _, d := range devs["cache"] {
		if d != nil {
			t.Errorf("a DRAM stash shows a device: %v", d)
		}
	}
	for _, d := range devs["data"] {
		if d == nil {
			t.Fatal("a data stash shows no device")
		}
		t.Logf("data stash device: %v", d)
		if d.Profile != "ssd" || d.Reads == 0 || d.Writes == 0 || d.Syncs == 0 || d.ReadBytes == 0 || d.WrittenBytes == 0 ||
			d.BusySeconds <= 0 || d.ReadP50Us < 50 || d.SyncP99Us < 200 {
			t.Errorf("device status %v", d)
		}
	}
}

// TestRemoteStashDevice: on a multi-process cluster (in-process nodes
// over simnet) the data pool's stash nodes emulate their devices too, and
// each reports its own.
func TestRemoteStashDevice(t *testing.T) {
	t.Parallel() // waits on the cluster's timers most of the time: overlaps another such test
	c := newSimCluster(t, "")
	c.TOML = strings.Replace(bank.ClusterTOML, `capacity = "unlimited"`, `capacity = "unlimited"`+deviceTOML, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c.StartAll(ctx)
	db := c.Open(ctx)
	if err := db.Transact(ctx, func(tr *distash.Tx) error {
		for i := 0; i < 50; i++ {
			tr.Set([]byte(fmt.Sprintf("d/%03d", i)), deviceValue(i))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Nodes {
		if n.Class != server.ClassStash {
			continue
		}
		conn, err := grpc.NewClient("passthrough:///"+n.Addr, grpc.WithContextDialer(c.Net.Dialer("probe")),
			grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		// The writes reach each data stash's engine (and device) within
		// a flush interval or so.
		var d *wire.DeviceStatus
		wait.Within(t, 30*time.Second, n.Name+": a device with writes and syncs in the status", func() bool {
			st, err := wire.NewDiStashClient(conn).Status(ctx, &wire.StatusRequest{})
			if err != nil {
				t.Fatalf("%s: %v", n.Name, err)
			}
			d = nil
			for _, s := range st.Stashes {
				if s.Pool == n.Pool {
					d = s.Device
				}
			}
			if n.Pool == "cache" {
				if d != nil {
					t.Errorf("%s: a DRAM stash shows a device: %v", n.Name, d)
				}
				return true
			}
			if d == nil {
				t.Fatalf("%s: no device in the status", n.Name)
			}
			return d.Profile == "ssd" && d.Writes > 0 && d.Syncs > 0 && d.WrittenBytes > 0
		})
		t.Logf("%s: %v", n.Name, d)
	}
}
