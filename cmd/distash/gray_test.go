package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
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

// grayLoad is the workload of the gray-failure test: read-modify-write
// transfers (bank), blind writes (one key each, retried by hand on a
// retryable error so each error is seen) and a probe that commits a key
// and reads it back in a new transaction. It records when each kind
// succeeded and every error that is not retryable.
type grayLoad struct {
	db *distash.DB
	b  *bank.Bank

	mu      sync.Mutex
	acks    map[string][]time.Time // kind -> when each success ended
	acked   map[string]string      // blind writes acknowledged
	fatal   []string               // non-retryable errors, with when
	readLat []time.Duration        // the probe's read-back latencies, after its commit
	notes   []string               // the last retryable errors of the probe
}

func newGrayLoad(db *distash.DB, b *bank.Bank) *grayLoad {
	return &grayLoad{db: db, b: b, acks: map[string][]time.Time{}, acked: map[string]string{}}
}

func (g *grayLoad) ack(kind string) {
	g.mu.Lock()
	g.acks[kind] = append(g.acks[kind], time.Now())
	g.mu.Unlock()
}

// failed records err unless it is retryable or the test's end.
func (g *grayLoad) failed(ctx context.Context, kind string, err error) {
	var de *distash.Error
	if ctx.Err() != nil || (errors.As(err, &de) && de.Retryable()) {
		return
	}
	g.mu.Lock()
	g.fatal = append(g.fatal, fmt.Sprintf("%s %s: %v", time.Now().Format("15:04:05.000"), kind, err))
	g.mu.Unlock()
}

// run starts the workers; wait stops waiting for them after ctx ends.
func (g *grayLoad) run(ctx context.Context) (wait func()) {
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Go(func() { // read-modify-write
			rng := rand.New(rand.NewPCG(7, uint64(w)))
			for ctx.Err() == nil {
				// Long enough that only the cluster's recovery, not
				// this deadline, ends a stall.
				tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				err := g.b.Transfer(tctx, rng)
				cancel()
				if err == nil {
					g.ack("rmw")
				} else {
					g.failed(ctx, "read-modify-write", err)
				}
			}
		})
	}
	for w := range 3 {
		wg.Go(func() { // blind writes
			for i := 0; ctx.Err() == nil; i++ {
				k, v := fmt.Sprintf("d/gray:%d:%06d", w, i), fmt.Sprint("v", i)
				for ctx.Err() == nil {
					tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
					tr, err := g.db.CreateTransaction(tctx)
					if err == nil {
						tr.Set([]byte(k), []byte(v))
						err = tr.Commit()
					}
					cancel()
					if err == nil {
						g.mu.Lock()
						g.acked[k] = v
						g.mu.Unlock()
						g.ack("blind")
						break
					}
					g.failed(ctx, "blind write", err)
					if ctx.Err() != nil {
						return
					}
					time.Sleep(5 * time.Millisecond)
				}
			}
		})
	}
	wg.Go(func() { // commit, then read the commit back in a new transaction
		for i := 0; ctx.Err() == nil; i++ {
			k := []byte(fmt.Sprintf("d/probe:%06d", i))
			tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			var err error
			for tctx.Err() == nil { // the write, each attempt's error seen
				var tr *distash.Tx
				if tr, err = g.db.CreateTransaction(tctx); err == nil {
					tr.Set(k, k)
					err = tr.Commit()
				}
				if err == nil || !retryable(err) {
					break
				}
				g.note("probe write", err)
				time.Sleep(5 * time.Millisecond)
			}
			var got []byte
			began := time.Now()
			if err == nil {
				err = g.db.ReadTransact(tctx, func(tr *distash.Tx) error {
					var err error
					if got, err = tr.Get(k); err != nil {
						g.note("probe read", err)
					}
					return err
				})
			}
			cancel()
			if err != nil {
				g.failed(ctx, "probe", err)
				continue
			}
			if string(got) != string(k) {
				g.mu.Lock()
				g.fatal = append(g.fatal, fmt.Sprintf("probe read %q back as %q", k, got))
				g.mu.Unlock()
			}
			g.mu.Lock()
			g.readLat = append(g.readLat, time.Since(began))
			g.mu.Unlock()
			g.ack("probe")
			time.Sleep(10 * time.Millisecond)
		}
	})
	return wg.Wait
}

// note keeps a retryable error for the report of a stall.
func (g *grayLoad) note(what string, err error) {
	g.mu.Lock()
	g.notes = append(g.notes, fmt.Sprintf("%s %s: %v", time.Now().Format("15:04:05.000"), what, err))
	if len(g.notes) > 200 {
		g.notes = g.notes[len(g.notes)-200:]
	}
	g.mu.Unlock()
}

func retryable(err error) bool {
	var de *distash.Error
	return errors.As(err, &de) && de.Retryable()
}

// longestGap is the longest time in [from, to] without a success of kind
// (from and to count as successes: a stall that began before from is
// measured from from).
func (g *grayLoad) longestGap(kind string, from, to time.Time) time.Duration {
	g.mu.Lock()
	ts := slices.Clone(g.acks[kind])
	g.mu.Unlock()
	prev, longest := from, time.Duration(0)
	for _, t := range append(ts, to) {
		if t.Before(from) {
			continue
		}
		if t.After(to) {
			t = to
		}
		longest = max(longest, t.Sub(prev))
		prev = t
		if !t.Before(to) {
			break
		}
	}
	return longest
}

// successesSince is how many successes of kind ended after from.
func (g *grayLoad) successesSince(kind string, from time.Time) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	ts := g.acks[kind]
	i, _ := slices.BinarySearchFunc(ts, from, func(a, b time.Time) int { return a.Compare(b) })
	return len(ts) - i
}

func (g *grayLoad) fatalErrors() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.fatal)
}

// TestProcessClusterSurvivesAFrozenNode is the gray failure of a node that
// stops answering while its connections stay open (a VM pause, a long GC,
// a hung disk): SIGSTOP of the transaction node holding the sequencer, the
// proxies and the log's leader for 8 s under a load of read-modify-write
// transactions, blind writes and a commit-then-read probe, then of the
// cluster controller's node (wherever it is then) for 5 s. Commits of
// every kind resume within grayBound of the pause's start (the log's raft
// elects a new leader, which claims a new generation; clients, stashes
// and the coordinators move over); no transaction fails with a
// non-retryable error, during the pause or when the frozen node wakes up
// deposed; every acknowledged write is there afterwards and the bank's
// invariants hold. Then a stash node is paused: reads keep flowing from
// the other replicas of its shards.
func TestProcessClusterSurvivesAFrozenNode(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 8 real server processes")
	}
	const (
		pause     = 8 * time.Second
		grayBound = 6 * time.Second // commits resume within this of the pause's start
		readBound = 3 * time.Second // the longest wait for a read while a stash is paused (readTimeout 1.5 s, then another replica)
		afterWake = 30              // successes of every kind measured after a node wakes up (the probe, the slowest, makes about 10 a second)
	)
	c := newProcCluster(t)
	defer c.stopAll()
	c.start()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	db, b := c.openBank(ctx)
	defer db.Close()
	g := newGrayLoad(db, b)
	lctx, lcancel := context.WithCancel(ctx)
	loadDone := g.run(lctx)
	defer func() { lcancel(); loadDone() }()
	wait.Within(t, time.Minute, "100 successes of every kind of transaction", func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		for _, kind := range []string{"rmw", "blind", "probe"} {
			if len(g.acks[kind]) < 100 {
				return false
			}
		}
		return true
	})

	// The node holding the stateless roles (and so the log's leader).
	cc, err := coordrpc.NewClient(c.Coordinators, coordrpc.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	vctx, vcancel := context.WithTimeout(ctx, 10*time.Second)
	v, err := cc.View(vctx)
	vcancel()
	if err != nil {
		t.Fatal(err)
	}
	// pauseNode stops n for d, lets it run again, and checks that every
	// kind of transaction went on within grayBound meanwhile and after.
	pauseNode := func(n *clustertest.Proc, d time.Duration, what string) {
		t.Helper()
		t.Logf("pausing %s (%s) for %v", n.Name, what, d)
		paused := time.Now()
		if err := n.Pause(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(d)
		if err := n.Resume(); err != nil {
			t.Fatal(err)
		}
		resumed := time.Now()
		// The window after the wake-up is a count of successes of every
		// kind, not a fixed time: a stall after the wake-up shows as a gap
		// up to the successes that end it (a fixed window shorter than
		// grayBound could not show one).
		wait.Within(t, time.Minute, fmt.Sprintf("%d successes of every kind after %s woke up", afterWake, n.Name), func() bool {
			for _, kind := range []string{"rmw", "blind", "probe"} {
				if g.successesSince(kind, resumed) < afterWake {
					return false
				}
			}
			return true
		})
		end := time.Now()
		for _, kind := range []string{"rmw", "blind", "probe"} {
			during, after := g.longestGap(kind, paused, resumed), g.longestGap(kind, resumed, end)
			t.Logf("%s: longest time without a success from the pause on %v, after the node woke up %v", kind, during.Round(time.Millisecond), after.Round(time.Millisecond))
			if during > 2*time.Second || after > 2*time.Second {
				g.mu.Lock()
				t.Logf("the probe's last retryable errors:\n%s", strings.Join(g.notes, "\n"))
				g.mu.Unlock()
			}
			if during > grayBound {
				t.Errorf("%s transactions stopped for %v after %s was paused: want < %v", kind, during.Round(time.Millisecond), n.Name, grayBound)
			}
			if after > grayBound {
				t.Errorf("%s transactions stopped for %v after %s woke up: want < %v", kind, after.Round(time.Millisecond), n.Name, grayBound)
			}
		}
		vctx, vcancel := context.WithTimeout(ctx, 10*time.Second)
		if v, err := cc.View(vctx); err == nil {
			t.Logf("the roles are on %s now, generation %d, controller %s", v.StatelessAddress, v.Generation, v.Controller)
		}
		vcancel()
	}
	pauseNode(c.byAddr(v.StatelessAddress), pause, fmt.Sprintf("the stateless roles and the log's leader of generation %d; the controller too: %v",
		v.Generation, v.Controller == v.StatelessAddress))
	// Then the cluster controller's node, wherever it is now (the
	// stateless roles' node too, at times).
	vctx, vcancel = context.WithTimeout(ctx, 10*time.Second)
	v, err = cc.View(vctx)
	vcancel()
	if err != nil {
		t.Fatal(err)
	}
	pauseNode(c.byAddr(v.Controller), 5*time.Second, fmt.Sprintf("the cluster controller; the stateless roles too: %v", v.Controller == v.StatelessAddress))

	// A paused stash: its shards' other replicas serve the reads. The
	// one paused holds the accounts (a replica of their shard). The
	// readers use a new client, which knows no replica's latency yet, so
	// that reads go to the paused replica too (the least expected wait
	// prefers an unknown one).
	stashNode := c.accountStash(ctx, cc, b)
	if err := stashNode.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Logf("pausing stash node %s for 5s", stashNode.Name)
	octx, ocancel := context.WithTimeout(ctx, 30*time.Second)
	db2, err := distash.Open(octx, c.Coordinators)
	ocancel()
	if err != nil {
		t.Fatal(err)
	}
	defer db2.Close()
	b2 := &bank.Bank{DB: db2, Data: b.Data, Cache: b.Cache, Accounts: b.Accounts, Initial: b.Initial}
	var readMu sync.Mutex
	var longestRead time.Duration
	audits := 0
	var rwg sync.WaitGroup
	stop := time.Now().Add(5 * time.Second)
	for range 2 {
		rwg.Go(func() {
			for time.Now().Before(stop) {
				began := time.Now()
				tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				err := b2.Audit(tctx) // reads every account
				cancel()
				if err != nil {
					t.Errorf("audit with %s paused: %v", stashNode.Name, err)
					return
				}
				readMu.Lock()
				longestRead = max(longestRead, time.Since(began))
				audits++
				readMu.Unlock()
			}
		})
	}
	rwg.Wait()
	if err := stashNode.Resume(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d audits (reads of every account) while %s was paused: the longest took %v", audits, stashNode.Name, longestRead.Round(time.Millisecond))
	if longestRead > readBound {
		t.Errorf("a read took %v while stash node %s was paused: want < %v", longestRead.Round(time.Millisecond), stashNode.Name, readBound)
	}

	lcancel()
	loadDone()
	for _, f := range g.fatalErrors() {
		t.Errorf("non-retryable error: %s", f)
	}
	g.mu.Lock()
	lat := slices.Clone(g.readLat)
	acked := g.acked
	g.mu.Unlock()
	slices.Sort(lat)
	if len(lat) > 0 {
		t.Logf("probe read-backs: %d, median %v, longest %v", len(lat), lat[len(lat)/2].Round(time.Millisecond), lat[len(lat)-1].Round(time.Millisecond))
	}
	actx, acancel := context.WithTimeout(ctx, 30*time.Second)
	defer acancel()
	if err := b.Audit(actx); err != nil {
		t.Fatalf("audit at the end: %v", err)
	}
	missing := 0
	keys := make([][]byte, 0, len(acked))
	for k := range acked {
		keys = append(keys, []byte(k))
	}
	for start := 0; start < len(keys); start += 500 {
		batch := keys[start:min(start+500, len(keys))]
		err := db.ReadTransact(actx, func(tr *distash.Tx) error {
			vals, err := tr.GetMulti(batch)
			if err != nil {
				return err
			}
			for i, k := range batch {
				if string(vals[i]) != acked[string(k)] {
					missing++
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d blind writes acknowledged, %d missing; %d transfers", len(acked), missing, b.Commits.Load())
	if missing > 0 {
		t.Fatalf("%d acknowledged blind writes missing", missing)
	}
}

// accountStash is the node of a stash holding the shard of b's first
// account.
func (c *procCluster) accountStash(ctx context.Context, cc *coordrpc.Client, b *bank.Bank) *clustertest.Proc {
	c.t.Helper()
	vctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	v, err := cc.View(vctx)
	if err != nil {
		c.t.Fatal(err)
	}
	conn, err := grpc.NewClient(v.StatelessAddress, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		c.t.Fatal(err)
	}
	defer conn.Close()
	key := []byte(b.Data + "acct:000")
	loc, err := wire.NewDiStashClient(conn).Locations(vctx, &wire.LocationsRequest{Begin: key, End: append(key, 0)})
	if err != nil || len(loc.Shards) == 0 || len(loc.Shards[0].Stashes) == 0 {
		c.t.Fatalf("locations of %q: %v %v", key, loc, err)
	}
	for _, s := range v.Stashes {
		if s.Tag == loc.Shards[0].Stashes[0] {
			return c.byAddr(s.Address)
		}
	}
	c.t.Fatalf("no node serves stash %d", loc.Shards[0].Stashes[0])
	return nil
}
