// Package backupcost measures what a running backup costs the foreground
// load (issue 23, docs/backup.md): the throughput and latency of a write
// workload on an embedded cluster, in phases that alternate between no
// backup and a backup running, in one run, so that a machine whose load
// drifts weighs on both kinds alike. Each backed phase starts a new backup
// (to a fresh directory) and counts from the end of its first snapshot:
// the continuous copying of the mutation log, the steady state of a
// backup. The snapshot itself is reported apart.
package backupcost

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/distash/distash"
	"github.com/distash/distash/internal/backup"
	"github.com/distash/distash/internal/embedded"
	"github.com/distash/distash/internal/protover"
	"github.com/distash/distash/internal/wire"
)

// Options of a run.
type Options struct {
	Clients    int           // concurrent writers
	Keys       int           // keys written (and loaded first, so a snapshot has data to copy)
	ValueBytes int           // bytes of each value
	Phase      time.Duration // length of each measured phase
	Rounds     int           // pairs of phases: without, then with a backup
	Dir        string        // the cluster's and the backups' files ("": a temporary directory)
}

// Defaults fills zero fields.
func (o *Options) defaults() {
	if o.Clients <= 0 {
		o.Clients = 16
	}
	if o.Keys <= 0 {
		o.Keys = 20000
	}
	if o.ValueBytes <= 0 {
		o.ValueBytes = 200
	}
	if o.Phase <= 0 {
		o.Phase = 5 * time.Second
	}
	if o.Rounds <= 0 {
		o.Rounds = 3
	}
}

// ClusterTOML is the measured cluster: one durable Pebble pool of two
// stashes.
const ClusterTOML = `
[[pool]]
name = "data"
prefix = "d/"
medium = "ssd"
mode = "durable"
engine = "pebble"
stashes = 2
replication = 1
`

// Phase is one measured phase.
type Phase struct {
	Kind     string // "off": no backup; "snapshot": a backup's first snapshot; "on": a backup copying the log
	Ops      int
	Errors   int
	Duration time.Duration
	P50, P99 time.Duration
}

// OpsPerSec is the phase's throughput.
func (p Phase) OpsPerSec() float64 { return float64(p.Ops) / p.Duration.Seconds() }

// Result is a run's phases and summary.
type Result struct {
	Phases []Phase
	// Medians over the phases of each kind.
	OffOps, OnOps float64
	OffP99, OnP99 time.Duration
}

// Run runs the benchmark and prints its phases and summary to out.
func Run(ctx context.Context, o Options, out io.Writer) (*Result, error) {
	o.defaults()
	dir := o.Dir
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "distash-bench-backup-"); err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
	}
	c, err := embedded.StartTOML(ctx, ClusterTOML, embedded.Options{Dir: filepath.Join(dir, "cluster")})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	conn, err := grpc.NewClient(c.Server.Addr(), append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, protover.This.DialOptions()...)...)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	bc := wire.NewBackupClient(conn)

	val := make([]byte, o.ValueBytes)
	for i := range val {
		val[i] = byte('a' + i%26)
	}
	key := func(i int) []byte { return fmt.Appendf(nil, "d/k/%08d", i) }
	for i := 0; i < o.Keys; i += 200 {
		if err := c.DB.Transact(ctx, func(tr *distash.Tx) error {
			for j := i; j < min(i+200, o.Keys); j++ {
				tr.Set(key(j), val)
			}
			return nil
		}); err != nil {
			return nil, fmt.Errorf("load: %w", err)
		}
	}
	fmt.Fprintf(out, "backup cost: %d writers, one %d-byte write per transaction over %d keys; %d rounds of %v without and %v with a backup\n",
		o.Clients, o.ValueBytes, o.Keys, o.Rounds, o.Phase, o.Phase)

	// The writers run all along; each phase takes the latencies of the
	// transactions that began in it.
	rec := &recorder{}
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for w := 0; w < o.Clients; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for wctx.Err() == nil {
				k := key(rng.IntN(o.Keys))
				began := time.Now()
				err := c.DB.Transact(wctx, func(tr *distash.Tx) error {
					tr.Set(k, val)
					return nil
				})
				if wctx.Err() == nil {
					rec.add(time.Since(began), err != nil)
				}
			}
		}(w)
	}
	defer func() {
		stop()
		wg.Wait()
	}()

	res := &Result{}
	measure := func(kind string, d time.Duration, until func() bool) {
		rec.reset()
		began := time.Now()
		for time.Since(began) < d || (until != nil && !until()) {
			select {
			case <-ctx.Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
		res.Phases = append(res.Phases, rec.phase(kind, time.Since(began)))
	}
	status := func() (backup.Status, error) {
		resp, err := bc.Status(ctx, &wire.BackupStatusRequest{})
		if err != nil {
			return backup.Status{}, err
		}
		if resp.Error != nil {
			return backup.Status{}, fmt.Errorf("backup status: %s", resp.Error.Detail)
		}
		var st backup.Status
		return st, json.Unmarshal([]byte(resp.StatusJson), &st)
	}
	for r := 0; r < o.Rounds && ctx.Err() == nil; r++ {
		measure("off", o.Phase, nil)
		resp, err := bc.Start(ctx, &wire.BackupStartRequest{Url: "file://" + filepath.Join(dir, fmt.Sprintf("backup%d", r))})
		if err == nil && resp.Error != nil {
			err = fmt.Errorf("backup start: %s", resp.Error.Detail)
		}
		if err != nil {
			return nil, err
		}
		var serr error
		measure("snapshot", 0, func() bool {
			st, err := status()
			if err != nil {
				serr = err
				return true
			}
			return st.SnapshotDone
		})
		if serr != nil {
			return nil, serr
		}
		measure("on", o.Phase, nil)
		st, err := status()
		if err != nil {
			return nil, err
		}
		if st.LastError != "" {
			fmt.Fprintf(out, "round %d: the backup's last error: %s\n", r+1, st.LastError)
		}
		if resp, err := bc.Stop(ctx, &wire.BackupStopRequest{}); err != nil || resp.Error != nil {
			return nil, fmt.Errorf("backup stop: %v %v", err, resp.GetError())
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	res.summarize()
	res.Print(out)
	return res, nil
}

// recorder collects the latencies of the current phase.
type recorder struct {
	mu     sync.Mutex
	lat    []time.Duration
	errors int
}

func (r *recorder) add(d time.Duration, failed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if failed {
		r.errors++
		return
	}
	r.lat = append(r.lat, d)
}

func (r *recorder) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lat, r.errors = r.lat[:0], 0
}

func (r *recorder) phase(kind string, d time.Duration) Phase {
	r.mu.Lock()
	defer r.mu.Unlock()
	lat := slices.Clone(r.lat)
	slices.Sort(lat)
	p := Phase{Kind: kind, Ops: len(lat), Errors: r.errors, Duration: d}
	if len(lat) > 0 {
		p.P50, p.P99 = lat[len(lat)/2], lat[min(len(lat)-1, len(lat)*99/100)]
	}
	return p
}

func (res *Result) summarize() {
	med := func(kind string, f func(Phase) float64) float64 {
		var xs []float64
		for _, p := range res.Phases {
			if p.Kind == kind {
				xs = append(xs, f(p))
			}
		}
		if len(xs) == 0 {
			return 0
		}
		slices.Sort(xs)
		return xs[len(xs)/2]
	}
	ops := func(p Phase) float64 { return p.OpsPerSec() }
	p99 := func(p Phase) float64 { return float64(p.P99) }
	res.OffOps, res.OnOps = med("off", ops), med("on", ops)
	res.OffP99, res.OnP99 = time.Duration(med("off", p99)), time.Duration(med("on", p99))
}

// Print writes the phases and the summary.
func (res *Result) Print(out io.Writer) {
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "PHASE\tBACKUP\tSECONDS\tOPS\tOPS/S\tP50 MS\tP99 MS\tERRORS\t")
	for i, p := range res.Phases {
		fmt.Fprintf(w, "%d\t%s\t%.1f\t%d\t%.0f\t%.2f\t%.2f\t%d\t\n", i+1, p.Kind, p.Duration.Seconds(), p.Ops, p.OpsPerSec(),
			ms(p.P50), ms(p.P99), p.Errors)
	}
	w.Flush()
	fmt.Fprintf(out, "median over phases: without a backup %.0f ops/s, p99 %.2f ms; with a backup copying the log %.0f ops/s (%+.1f%%), p99 %.2f ms (%+.1f%%)\n",
		res.OffOps, ms(res.OffP99), res.OnOps, pct(res.OnOps, res.OffOps), ms(res.OnP99), pct(float64(res.OnP99), float64(res.OffP99)))
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func pct(x, base float64) float64 {
	if base == 0 {
		return 0
	}
	return 100 * (x - base) / base
}
