package main

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/distash/distash"
	"github.com/distash/distash/internal/clustertest"
	"github.com/distash/distash/internal/coordrpc"
	"github.com/distash/distash/internal/testutil/bank"
	"github.com/distash/distash/internal/testutil/wait"
	"github.com/distash/distash/internal/wire"
)

// poolDistribution asks the node holding the stateless roles for the data
// distributor's view of pool.
func poolDistribution(ctx context.Context, coordinators, pool string) (*wire.PoolDistribution, map[uint32]*wire.StashShare, error) {
	cc, err := coordrpc.NewClient(coordinators, coordrpc.ClientOptions{})
	if err != nil {
		return nil, nil, err
	}
	defer cc.Close()
	v, err := cc.View(ctx)
	if err != nil {
		return nil, nil, err
	}
	conn, err := grpc.NewClient(v.StatelessAddress, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, err
	}
	defer conn.Close()
	st, err := wire.NewDiStashClient(conn).Status(ctx, &wire.StatusRequest{})
	if err != nil {
		return nil, nil, err
	}
	shares := map[uint32]*wire.StashShare{}
	for _, s := range st.StashShares {
		shares[s.Id] = s
	}
	for _, d := range st.Distribution {
		if d.Pool == pool {
			return d, shares, nil
		}
	}
	return nil, shares, fmt.Errorf("no distribution status for pool %q", pool)
}

// TestProcessClusterReReplicatesAfterFailures runs the 8-process cluster
// with failure_wait = 2s under the bank workload and a writer: kill -9 of
// a stash of the durable R=2 pool, wait until the data distributor has
// rebuilt its shards' second replicas on the others, then kill -9 of a
// second one. Every acknowledged write is still readable, and the bank
// invariant (balances, cached copies) holds. The rebuild time per GiB is
// logged.
func TestProcessClusterReReplicatesAfterFailures(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 8 real server processes")
	}
	t.Parallel() // its processes wait on their timers (elections, failure_wait, restarts) most of the time: overlaps another such test
	toml := strings.Replace(bank.ClusterTOML, "[cluster]\n", "[cluster]\nfailure_wait = \"2s\"\nshard_bytes = \"256KiB\"\n", 1)
	c := newProcClusterOf(t, toml)
	defer c.stopAll()
	c.start()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	db, err := distash.Open(ctx, c.Coordinators)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// Some bulk for the rebuild to copy: 8 MiB.
	val := make([]byte, 8<<10)
	for i := 0; i < 1024; i += 32 {
		err := db.Transact(ctx, func(tr *distash.Tx) error {
			for j := i; j < i+32; j++ {
				tr.Set([]byte(fmt.Sprintf("d/bulk:%05d", j)), val)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	b := &bank.Bank{DB: db, Data: "d/", Cache: "c/", Accounts: 20, Initial: 1000}
	if err := b.Open(ctx); err != nil {
		t.Fatal(err)
	}
	w := &bank.Writer{DB: db, Prefix: "d/"}
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	_, waitBank := b.Run(wctx, 4, 1)
	waitWriter := w.Run(wctx, 2)

	settled := func(what string) time.Duration {
		t.Helper()
		took, err := clustertest.Until(ctx, 2*time.Minute, 100*time.Millisecond, what+": the data pool settles", func() (bool, string) {
			qctx, qcancel := context.WithTimeout(ctx, 3*time.Second)
			d, _, err := poolDistribution(qctx, c.Coordinators, "data")
			qcancel()
			return err == nil && d.UnderReplicated == 0 && d.Moving == 0 && d.Queued == 0, fmt.Sprintf("%v %v", d, err)
		})
		if err != nil {
			t.Fatal(err)
		}
		return took
	}
	// The 8 MiB are split into shards of at most 256 KiB and spread.
	if _, err := clustertest.Until(ctx, time.Minute, 100*time.Millisecond, "the bulk is split and spread over the three stashes", func() (bool, string) {
		d, _, err := poolDistribution(ctx, c.Coordinators, "data")
		if err != nil || d.Shards < 24 {
			return false, fmt.Sprintf("%v %v", d, err)
		}
		_, shares, _ := poolDistribution(ctx, c.Coordinators, "data")
		var b []int64
		for _, sh := range shares {
			if sh.Bytes > 0 {
				b = append(b, sh.Bytes)
			}
		}
		return len(b) == 3 && slices.Max(b) < slices.Min(b)*3/2, fmt.Sprintf("%v; stashes' bytes %v", d, b)
	}); err != nil {
		t.Fatal(err)
	}
	settled("before the failures")
	_, shares, err := poolDistribution(ctx, c.Coordinators, "data")
	if err != nil {
		t.Fatal(err)
	}
	// data1's tag, from the controller's view.
	cc, err := coordrpc.NewClient(c.Coordinators, coordrpc.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	v, err := cc.View(ctx)
	cc.Close()
	if err != nil {
		t.Fatal(err)
	}
	addr := c.node("data1").Addr
	var lost int64
	for _, sl := range v.Stashes {
		if sl.Address == addr {
			lost = shares[sl.Tag].GetBytes()
		}
	}
	t.Logf("shares before: %v; data1 (%s) holds %d KiB", shares, addr, lost>>10)

	// `exclude --wait` drains data3 (its shards go to the two others) and
	// returns once it holds none; `include` gives it shards back.
	addr3 := c.node("data3").Addr
	cli := func(args ...string) string {
		t.Helper()
		out, err := exec.CommandContext(ctx, c.Binary, append([]string{"cli", "--cluster", c.Coordinators}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("distash cli %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	began := time.Now()
	out := cli("exclude", addr3, "--wait", "--timeout", "2m")
	t.Logf("exclude --wait of data3 returned after %v: %s", time.Since(began).Round(time.Millisecond), lastLine(out))
	_, shares3, err := poolDistribution(ctx, c.Coordinators, "data")
	if err != nil {
		t.Fatal(err)
	}
	for _, sl := range v.Stashes {
		if sl.Address == addr3 && shares3[sl.Tag].GetShards() != 0 {
			t.Fatalf("exclude --wait returned with data3 holding %d shards", shares3[sl.Tag].GetShards())
		}
	}
	cli("include", addr3)
	n := int32(0)
	took, err := clustertest.Until(ctx, time.Minute, 100*time.Millisecond, "data3 gets shards back after include", func() (bool, string) {
		_, sh, err := poolDistribution(ctx, c.Coordinators, "data")
		for _, sl := range v.Stashes {
			if sl.Address == addr3 && err == nil {
				n = sh[sl.Tag].GetShards()
			}
		}
		return n > 0, fmt.Sprint(err)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("include: data3 holds %d shards again after %v", n, took.Round(time.Millisecond))
	settled("after include")
	// data1's share now, what its failure makes the others rebuild.
	if _, shares, err = poolDistribution(ctx, c.Coordinators, "data"); err != nil {
		t.Fatal(err)
	}
	for _, sl := range v.Stashes {
		if sl.Address == addr {
			lost = shares[sl.Tag].GetBytes()
		}
	}

	// The first failure: its shards' second replicas are rebuilt after
	// failure_wait.
	killed := time.Now()
	c.kill("data1")
	// The controller notices (2 s liveness) before settled can hold.
	wait.Every(t, 50*time.Millisecond, 30*time.Second, "the data distributor sees the pool under-replicated", func() bool {
		d, _, err := poolDistribution(ctx, c.Coordinators, "data")
		return err == nil && d.UnderReplicated > 0
	})
	settled("after kill -9 of data1")
	total := time.Since(killed)
	// The controller marks a node dead after 2 s without heartbeats, then
	// the distributor waits failure_wait (2 s) before it rebuilds.
	rebuild := total - 4*time.Second
	t.Logf("kill -9 data1: two replicas per shard again %v after the kill (liveness 2 s + failure_wait 2 s): rebuild of %d KiB in %v = %.0f s per GiB",
		total.Round(time.Millisecond), lost>>10, rebuild.Round(time.Millisecond), rebuild.Seconds()*float64(1<<30)/float64(max(lost, 1)))
	actx, acancel := context.WithTimeout(ctx, 30*time.Second)
	if err := b.Audit(actx); err != nil {
		t.Fatalf("audit after the rebuild: %v", err)
	}
	acancel()

	// The second failure: every shard still has a live replica.
	c.kill("data2")
	before := b.Commits.Load()
	wait.Within(t, time.Minute, "200 transfers with data2 down", func() bool { return b.Commits.Load() >= before+200 })
	wcancel()
	waitBank()
	waitWriter()
	actx, acancel = context.WithTimeout(ctx, 60*time.Second)
	defer acancel()
	if err := b.Audit(actx); err != nil {
		t.Fatalf("audit with data1 and data2 down: %v", err)
	}
	missing, err := w.Check(actx, db)
	if err != nil || missing != 0 {
		t.Fatalf("with data1 and data2 down: %d of %d acknowledged writes missing (%v)", missing, w.Count(), err)
	}
	err = db.ReadTransact(actx, func(tr *distash.Tx) error {
		kvs, err := tr.GetRange([]byte("d/bulk:"), []byte("d/bulk;"), distash.RangeOptions{})
		if err != nil {
			return err
		}
		if len(kvs) != 1024 {
			return fmt.Errorf("%d bulk keys, want 1024", len(kvs))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d transfers and %d writer keys acknowledged; all readable with two of three stashes down", b.Commits.Load(), w.Count())
}

// lastLine returns the last non-empty line of out.
func lastLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return lines[len(lines)-1]
}
