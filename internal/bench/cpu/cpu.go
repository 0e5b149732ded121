// Package cpu is `distash bench cpu`: the CPU time one operation costs,
// process CPU time (user + system) divided by the operations done, for a
// point read, a 10-key GetMulti, a 1-record range read, a single-key blind
// commit and a read-modify-write commit, on a DRAM pool (memory engine)
// and a Pebble pool, one stash each, R=1.
//
// Two modes: embedded (the whole cluster in this process; one figure, the
// process's CPU per operation) and processes (a cluster of `distash
// server` processes on loopback that the caller starts, Options.Processes;
// the client's CPU per operation, from getrusage of this process, and the
// servers', the sum of the nodes' CPU, apart).
//
// Reads are of data at rest: the records are loaded, then the benchmark
// waits until they have left the stashes' MVCC window, so that every read
// is served by the stash's engine (Options.Fresh adds rows of reads of
// records just rewritten, served from the window).
//
// Writes count the work they leave behind: a write row starts with every
// window empty and its CPU is counted until the windows are empty again
// (the stashes flushed its commits to their engines, mvcc_window and more
// after the row), less the cluster's CPU at rest over that wait, measured
// for a second before the row. Without it a row's flushes fell into the
// next row (the DRAM pool's into the Pebble pool's) or into none.
package cpu

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/distash/distash"
	"github.com/distash/distash/config"
	"github.com/distash/distash/internal/bench/ingest"
	"github.com/distash/distash/internal/clusterstatus"
	"github.com/distash/distash/internal/embedded"
)

// The operations, in the order rows run.
const (
	OpGet        = "get"        // read-only transaction: a read version and one Get
	OpGetMulti10 = "getmulti10" // read-only transaction: a read version and one 10-key GetMulti
	OpRange1     = "range1"     // read-only transaction: a read version and one GetRange returning 1 record
	OpBlind      = "blind"      // a commit of one Set of a fresh key, no read (as bench ingest)
	OpRMW        = "rmw"        // a commit that reads a random record and writes it back changed
)

// AllOps are the operations in the order they run.
var AllOps = []string{OpGet, OpGetMulti10, OpRange1, OpBlind, OpRMW}

func isRead(op string) bool { return op == OpGet || op == OpGetMulti10 || op == OpRange1 }

// The modes.
const (
	ModeEmbedded  = "embedded"
	ModeProcesses = "processes"
)

// Config is the cluster of both modes by default: pools dram and pebble,
// one stash each, R=1, one log replica (bench ycsb's).
const Config = ingest.TwoPools

// Options configure a run; zero values take the defaults given.
type Options struct {
	Ops   []string // default AllOps
	Pools []string // default dram, pebble
	Modes []string // default embedded, processes
	// Clients is the number of concurrent clients (goroutines sharing one
	// distash.DB), default 64.
	Clients int
	// Duration is the length of each row (default 5 s), unless Count > 0:
	// then each row does Count operations.
	Duration time.Duration
	Count    int
	// Records of ValueBytes each (default 20,000 of 1,000) are loaded into
	// each pool before the rows.
	Records, ValueBytes int
	// Fresh adds, per read operation, a row of reads of records rewritten
	// just before it (in the MVCC window); the row is cut short to end
	// before the first rewritten record leaves the window.
	Fresh bool
	// Rounds, if > 1, runs every mode that many times, the modes'
	// order reversed each round, so that modes compare in the same
	// minutes; with both modes the summary gives each round's
	// processes ÷ embedded ratio and their median (Ratios). Default 1.
	Rounds int
	// ConfigTOML replaces Config (both modes).
	ConfigTOML string
	// ProfileDir, if set, receives one pprof CPU profile per row: this
	// process's (the whole cluster, embedded; the client, processes), and
	// in processes mode each node's when it serves /debug/pprof/.
	ProfileDir string
	// OutDir, if set, receives cpu.csv and cpu.md.
	OutDir string
	// Dir holds the embedded cluster's files (default: temporary).
	Dir string
	// Processes starts the multi-process cluster of configuration toml
	// (ModeProcesses; nil refuses that mode). With profile, its nodes
	// should serve /debug/pprof/ (Node.PprofURL).
	Processes func(ctx context.Context, toml string, profile bool, out io.Writer) (*ProcessCluster, error)
}

// ProcessCluster is a running multi-process cluster.
type ProcessCluster struct {
	Cluster string // coordinators, the cluster string
	Nodes   []Node
	Stop    func() // stops every node and removes what it must
	// Note describes the nodes' settings for the run's conditions (e.g.
	// their GOMAXPROCS); "" for none.
	Note string
}

// Node is one server process.
type Node struct {
	Name string
	// CPU is the user + system CPU time the process has used so far.
	CPU func() (time.Duration, error)
	// PprofURL is the node's /debug/pprof/ address ("" if it serves none).
	PprofURL string
}

// Row is one (mode, pool, operation) measurement.
type Row struct {
	Mode, Pool, Op string
	Round          int  // 1, 2, ... with Options.Rounds > 1; else 0
	Fresh          bool // reads of records just rewritten, not at rest
	Ops, Errors    int64
	Seconds        float64
	OpsPerSec      float64
	P50, P99       time.Duration
	// Client is this process's CPU time over the row (embedded: client
	// and cluster); Server the nodes' (processes; -1 embedded).
	Client, Server time.Duration
	// WindowBytes is what the pool's stashes held in their MVCC windows
	// when the row began (reads at rest: about 0).
	WindowBytes int64
	// Settle (writes) is how long after its operations the row's CPU was
	// counted: until the stashes had flushed what they wrote out of their
	// windows, the cluster's CPU at rest over that time taken off.
	Settle   time.Duration
	Profiles []string // files written
	FirstErr string
}

// Data says which data the row read: "at rest" or "fresh"; "-" for writes.
func (r Row) Data() string {
	switch {
	case !isRead(r.Op):
		return "-"
	case r.Fresh:
		return "fresh"
	}
	return "at rest"
}

// perOp is µs of d per operation (NaN without operations or d < 0).
func (r Row) perOp(d time.Duration) float64 {
	if r.Ops-r.Errors <= 0 || d < 0 {
		return math.NaN()
	}
	return float64(d.Microseconds()) / float64(r.Ops-r.Errors)
}

// ClientUsPerOp is the client's CPU µs per operation (NaN embedded, where
// client and servers share the process).
func (r Row) ClientUsPerOp() float64 {
	if r.Mode == ModeEmbedded {
		return math.NaN()
	}
	return r.perOp(r.Client)
}

// ServerUsPerOp is the servers' CPU µs per operation (NaN embedded).
func (r Row) ServerUsPerOp() float64 { return r.perOp(r.Server) }

// TotalUsPerOp is the CPU µs per operation of client and servers.
func (r Row) TotalUsPerOp() float64 {
	if r.Server < 0 {
		return r.perOp(r.Client)
	}
	return r.perOp(r.Client + r.Server)
}

func (o Options) withDefaults() (Options, error) {
	if len(o.Ops) == 0 {
		o.Ops = AllOps
	}
	for _, op := range o.Ops {
		if !slices.Contains(AllOps, op) {
			return o, fmt.Errorf("cpu: unknown operation %q (want %s)", op, strings.Join(AllOps, ", "))
		}
	}
	// Reads at rest first: the writes put records into the window.
	var ops []string
	for _, op := range AllOps {
		if slices.Contains(o.Ops, op) {
			ops = append(ops, op)
		}
	}
	o.Ops = ops
	if len(o.Pools) == 0 {
		o.Pools = []string{"dram", "pebble"}
	}
	if len(o.Modes) == 0 {
		o.Modes = []string{ModeEmbedded, ModeProcesses}
	}
	for _, m := range o.Modes {
		switch m {
		case ModeEmbedded:
		case ModeProcesses:
			if o.Processes == nil {
				return o, errors.New("cpu: mode processes needs a way to start server processes")
			}
		default:
			return o, fmt.Errorf("cpu: unknown mode %q (want embedded, processes)", m)
		}
	}
	if o.Clients == 0 {
		o.Clients = 64
	}
	if o.Duration == 0 {
		o.Duration = 5 * time.Second
	}
	if o.Records == 0 {
		o.Records = 20000
	}
	if o.ValueBytes == 0 {
		o.ValueBytes = 1000
	}
	if o.Rounds == 0 {
		o.Rounds = 1
	}
	if o.Clients < 1 || o.Duration < 0 || o.Count < 0 || o.Records < 10 || o.ValueBytes < 8 || o.Rounds < 1 {
		return o, fmt.Errorf("cpu: want clients ≥ 1, duration and count ≥ 0, records ≥ 10 (a GetMulti reads 10), value bytes ≥ 8, rounds ≥ 1")
	}
	if o.ConfigTOML == "" {
		o.ConfigTOML = Config
	}
	return o, nil
}

// Run runs every row, prints the conditions and the table to out and
// writes the files asked for.
func Run(ctx context.Context, o Options, out io.Writer) ([]Row, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	cfg, err := config.Parse([]byte(o.ConfigTOML))
	if err != nil {
		return nil, err
	}
	for _, p := range o.Pools {
		if !slices.ContainsFunc(cfg.Pools, func(cp config.Pool) bool { return cp.Name == p }) {
			return nil, fmt.Errorf("cpu: pool %q is not in the configuration", p)
		}
	}
	for _, d := range []string{o.ProfileDir, o.OutDir} {
		if d != "" {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return nil, err
			}
		}
	}
	cond := conditions(o, cfg.Cluster.MVCCWindow.Duration)
	fmt.Fprintln(out, cond)
	var rows []Row
	var notes []string
	for round := 1; round <= o.Rounds; round++ {
		modes := slices.Clone(o.Modes)
		if round%2 == 0 {
			slices.Reverse(modes) // each mode goes first as often
		}
		if o.Rounds > 1 {
			fmt.Fprintf(out, "round %d of %d: %s\n", round, o.Rounds, strings.Join(modes, ", "))
		}
		noteTo := &notes
		if round > 1 {
			noteTo = nil // the same notes as the first round's
		}
		for _, mode := range modes {
			rs, err := runMode(ctx, o, cfg, mode, out, noteTo, round)
			rows = append(rows, rs...)
			if err != nil {
				return rows, err
			}
		}
	}
	fmt.Fprintln(out)
	PrintTable(out, rows)
	ratios := Ratios(rows)
	if len(ratios) > 0 {
		fmt.Fprintln(out)
		for _, l := range ratios {
			fmt.Fprintln(out, l)
		}
	}
	if o.OutDir != "" {
		csvPath, mdPath := filepath.Join(o.OutDir, "cpu.csv"), filepath.Join(o.OutDir, "cpu.md")
		if err := writeCSV(csvPath, rows); err != nil {
			return rows, err
		}
		if len(notes) > 0 {
			cond += "; " + strings.Join(notes, "; ")
		}
		if err := writeMarkdown(mdPath, cond, rows, ratios); err != nil {
			return rows, err
		}
		fmt.Fprintf(out, "wrote %s, %s\n", csvPath, mdPath)
	}
	return rows, nil
}

// conditions is one line of the run's conditions.
func conditions(o Options, window time.Duration) string {
	length := o.Duration.String() + " per row"
	if o.Count > 0 {
		length = fmt.Sprintf("%d operations per row", o.Count)
	}
	load := "?"
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		load = strings.Join(strings.Fields(string(b))[:3], " ")
	}
	return fmt.Sprintf("bench cpu %s: %d clients, %d records of %d bytes per pool, uniform keys, %s, mvcc_window %v, GOMAXPROCS %d, %d CPUs, load average %s, %s",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), o.Clients, o.Records, o.ValueBytes, length, window,
		runtime.GOMAXPROCS(0), runtime.NumCPU(), load, runtime.Version())
}

// cluster is a started cluster of one mode.
type cluster struct {
	db     *distash.DB
	str    string
	nodes  []Node // processes only
	note   string // processes: ProcessCluster.Note
	round  int    // Row.Round of its rows
	stop   func()
	window time.Duration
}

func startCluster(ctx context.Context, o Options, cfg *config.Config, mode string, out io.Writer) (*cluster, error) {
	c := &cluster{window: cfg.Cluster.MVCCWindow.Duration}
	if mode == ModeEmbedded {
		e, err := embedded.Start(ctx, cfg, embedded.Options{Dir: o.Dir, TempPattern: "distash-bench-cpu-"})
		if err != nil {
			return nil, err
		}
		c.db, c.str, c.stop = e.DB, e.Server.ClusterString(), e.Close
		fmt.Fprintln(out, "embedded cluster (client and cluster in this process)")
		return c, nil
	}
	pc, err := o.Processes(ctx, o.ConfigTOML, o.ProfileDir != "", out)
	if err != nil {
		return nil, err
	}
	octx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	db, err := distash.Open(octx, pc.Cluster)
	if err != nil {
		pc.Stop()
		return nil, err
	}
	c.db, c.str, c.nodes, c.note = db, pc.Cluster, pc.Nodes, pc.Note
	c.stop = func() { db.Close(); pc.Stop() }
	var names []string
	for _, n := range pc.Nodes {
		names = append(names, n.Name)
	}
	fmt.Fprintf(out, "cluster of %d server processes on loopback (%s), coordinators %s; %s\n", len(pc.Nodes), strings.Join(names, ", "), pc.Cluster, pc.Note)
	return c, nil
}

// runMode runs the rows of one mode on a cluster of its own; the
// cluster's note, if any, is added to notes (nil: not kept).
func runMode(ctx context.Context, o Options, cfg *config.Config, mode string, out io.Writer, notes *[]string, round int) ([]Row, error) {
	c, err := startCluster(ctx, o, cfg, mode, out)
	if err != nil {
		return nil, err
	}
	if o.Rounds > 1 {
		c.round = round
	}
	defer c.stop()
	if c.note != "" && notes != nil {
		*notes = append(*notes, mode+": "+c.note)
	}
	pools := map[string]*distash.Pool{}
	for _, name := range o.Pools {
		p, err := c.db.Pool(name)
		if err != nil {
			return nil, err
		}
		pools[name] = p
		began := time.Now()
		if err := load(ctx, c.db, p, o); err != nil {
			return nil, fmt.Errorf("cpu: load %s: %w", name, err)
		}
		fmt.Fprintf(out, "  loaded %d records of %d bytes into %s (%s) in %v\n", o.Records, o.ValueBytes, name, p.Engine(), time.Since(began).Round(10*time.Millisecond))
	}
	var rows []Row
	run := func(pool, op string, fresh bool, d time.Duration) error {
		wb, err := windowBytes(ctx, c.str, pool)
		if err != nil {
			return err
		}
		var settle func() error
		if !isRead(op) {
			// A commit's work does not end with its acknowledgement: the
			// stashes flush it from their windows after mvcc_window. The
			// row starts with the windows empty and counts the CPU until
			// they are empty again, so that no row pays for another's.
			if err := waitDrained(ctx, c, o.Pools); err != nil {
				return err
			}
			settle = func() error { return waitDrained(ctx, c, o.Pools) }
		}
		r, err := runRow(ctx, o, c, pools[pool], mode, op, fresh, d, settle)
		if err != nil {
			return err
		}
		r.WindowBytes = wb
		fmt.Fprintf(out, "  %-9s %-6s %-10s %-7s %8.0f ops/s  total %6.1f µs/op  client %6s  server %6s  p50 %s p99 %s%s\n",
			mode, pool, op, r.Data(), r.OpsPerSec, r.TotalUsPerOp(), us(r.ClientUsPerOp()), us(r.ServerUsPerOp()),
			fmtLatency(r.P50), fmtLatency(r.P99), errNote(r))
		rows = append(rows, r)
		return nil
	}
	// Reads at rest: wait until the load has left every pool's window.
	if slices.ContainsFunc(o.Ops, isRead) {
		if err := waitAtRest(ctx, c, o, out); err != nil {
			return rows, err
		}
		for _, pool := range o.Pools {
			err := verify(ctx, c.db, pools[pool], o)
			if errors.Is(err, errCacheLost) {
				// A cache may lose entries (a stash counted failed, its
				// shard started empty: the nodes' logs say why). The reads
				// need every record, so load the pool again once; a record
				// still absent, or any wrong value, fails the bench.
				fmt.Fprintf(out, "  %v; loading %s again\n", err, pool)
				if err = load(ctx, c.db, pools[pool], o); err == nil {
					if err = waitAtRest(ctx, c, o, out); err == nil {
						err = verify(ctx, c.db, pools[pool], o)
					}
				}
			}
			if err != nil {
				return rows, err
			}
		}
		fmt.Fprintf(out, "  read back every record of %s at rest: all as written\n", strings.Join(o.Pools, ", "))
		for _, pool := range o.Pools {
			for _, op := range o.Ops {
				if isRead(op) {
					if err := run(pool, op, false, o.Duration); err != nil {
						return rows, err
					}
				}
			}
		}
	}
	if o.Fresh {
		for _, pool := range o.Pools {
			for _, op := range o.Ops {
				if !isRead(op) {
					continue
				}
				// Rewrite the records; on a machine so loaded that they
				// left the window before the row could begin, again (a
				// few times): the row is of reads in the window.
				var began time.Time
				for try := 0; ; try++ {
					began = time.Now()
					if err := load(ctx, c.db, pools[pool], o); err != nil {
						return rows, err
					}
					wb, err := windowBytes(ctx, c.str, pool)
					if err != nil {
						return rows, err
					}
					if wb >= int64(o.Records*o.ValueBytes) || try == 2 {
						break
					}
				}
				// End the row before the first record rewritten leaves
				// the window (with half a second to spare).
				d := c.window - time.Since(began) - 500*time.Millisecond
				if o.Count == 0 {
					d = min(d, o.Duration)
				}
				if d < 500*time.Millisecond && o.Count == 0 {
					return rows, fmt.Errorf("cpu: --fresh: rewriting the records took %v of the %v window; load fewer records", time.Since(began).Round(time.Millisecond), c.window)
				}
				if err := run(pool, op, true, d); err != nil {
					return rows, err
				}
			}
		}
	}
	for _, pool := range o.Pools {
		for _, op := range o.Ops {
			if !isRead(op) {
				if err := run(pool, op, false, o.Duration); err != nil {
					return rows, err
				}
			}
		}
	}
	return rows, nil
}

// recordKey is record i of pool p.
func recordKey(p *distash.Pool, i int) []byte { return p.Key(fmt.Appendf(nil, "cpu/%08d", i)) }

// recordValue is what the load writes into record i: its index repeated,
// so that a value lost, cut short or overwritten by another's bytes on the
// way shows in verify.
func recordValue(i, n int) []byte {
	v := make([]byte, n)
	tag := fmt.Appendf(nil, "%08d;", i)
	for j := 0; j < n; j += len(tag) {
		copy(v[j:], tag)
	}
	return v
}

// load writes the records, 100 per transaction from 8 concurrent loaders:
// commits of 100 KB at the default --value-bytes, whose frames are large
// enough to fill the frames writer's batches past 1 MiB.
func load(ctx context.Context, db *distash.DB, p *distash.Pool, o Options) error {
	const batch, loaders = 100, 8
	var next atomic.Int64
	errc := make(chan error, loaders)
	for range loaders {
		go func() {
			for {
				lo := int(next.Add(batch)) - batch
				if lo >= o.Records {
					errc <- nil
					return
				}
				err := db.Transact(ctx, func(tr *distash.Tx) error {
					for i := lo; i < min(lo+batch, o.Records); i++ {
						tr.Set(recordKey(p, i), recordValue(i, o.ValueBytes))
					}
					return nil
				})
				if err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	var first error
	for range loaders {
		if err := <-errc; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// errCacheLost is verify's error for a record absent from an ephemeral pool.
var errCacheLost = errors.New("absent: the cache lost it")

// verify reads every record back, 100 to a GetMulti, and fails naming the
// first that is not exactly what load wrote: the bench's check that the
// data path keeps every key of large concurrent commits.
func verify(ctx context.Context, db *distash.DB, p *distash.Pool, o Options) error {
	const batch = 100
	keys := make([][]byte, 0, batch)
	for lo := 0; lo < o.Records; lo += batch {
		keys = keys[:0]
		for i := lo; i < min(lo+batch, o.Records); i++ {
			keys = append(keys, recordKey(p, i))
		}
		err := db.ReadTransact(ctx, func(tr *distash.Tx) error {
			vs, err := tr.GetMulti(keys)
			if err != nil {
				return err
			}
			for j, v := range vs {
				if v == nil && p.Ephemeral() {
					return fmt.Errorf("cpu: record %q of ephemeral pool %s: %w", keys[j], p.Name(), errCacheLost)
				}
				if want := recordValue(lo+j, o.ValueBytes); !bytes.Equal(v, want) {
					at := 0
					for at < min(len(v), len(want)) && v[at] == want[at] {
						at++
					}
					return fmt.Errorf("cpu: record %q holds %d bytes, want %d; they differ from byte %d: %.24q, want %.24q", keys[j], len(v), len(want), at, v[at:], want[at:])
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// windowBytes is what the stashes of pool hold in their MVCC windows.
func windowBytes(ctx context.Context, clusterStr, pool string) (int64, error) {
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, err := clusterstatus.Gather(sctx, clusterStr, nil)
	if err != nil {
		return 0, fmt.Errorf("cpu: status: %w", err)
	}
	var n int64
	for _, s := range st.Stashes {
		if s.Pool == pool {
			n += s.WindowBytes
		}
	}
	return n, nil
}

// waitAtRest waits the MVCC window (and a second) after the load, then
// until every pool's windows hold less than 1% of what was loaded.
func waitAtRest(ctx context.Context, c *cluster, o Options, out io.Writer) error {
	began := time.Now()
	limit := int64(o.Records) * int64(o.ValueBytes) / 100
	pool, wb, err := waitWindows(ctx, c, o.Pools, time.Second, limit)
	if err != nil {
		return err
	}
	if pool != "" {
		fmt.Fprintf(out, "  warning: pool %s's window still holds %d bytes; reading anyway\n", pool, wb)
	}
	fmt.Fprintf(out, "  waited %v for the load to leave the MVCC window (%v): reads at rest\n", time.Since(began).Round(100*time.Millisecond), c.window)
	return nil
}

// waitWindows waits the MVCC window and then extra, then until the
// stashes of every pool hold at most limit bytes in their windows, at most
// the window and 30 s more: pool is the first one still over it then, and
// wb what it held ("" and 0 if none).
func waitWindows(ctx context.Context, c *cluster, pools []string, extra time.Duration, limit int64) (pool string, wb int64, err error) {
	select {
	case <-time.After(c.window + extra):
	case <-ctx.Done():
		return "", 0, ctx.Err()
	}
	deadline := time.Now().Add(c.window + 30*time.Second)
	for _, pool := range pools {
		for {
			wb, err := windowBytes(ctx, c.str, pool)
			if err != nil {
				return "", 0, err
			}
			if wb <= limit {
				break
			}
			if time.Now().After(deadline) {
				return pool, wb, nil
			}
			select {
			case <-time.After(200 * time.Millisecond):
			case <-ctx.Done():
				return "", 0, ctx.Err()
			}
		}
	}
	return "", 0, nil
}

// cpuRate is the CPU the process (client) and the nodes (server) use per
// second of wall time.
type cpuRate struct{ client, server float64 }

// cpuOver is the CPU used over d at rate (CPU per second of wall time).
func cpuOver(rate float64, d time.Duration) time.Duration {
	return time.Duration(rate * float64(d))
}

// restRate measures the cluster's CPU at rest (no operations: heartbeats,
// the proxies' empty commits, the stashes' timers) over d.
func restRate(ctx context.Context, c *cluster, d time.Duration) (cpuRate, error) {
	serverBefore, err := nodesCPU(c.nodes)
	if err != nil {
		return cpuRate{}, err
	}
	clientBefore, began := selfCPU(), time.Now()
	select {
	case <-time.After(d):
	case <-ctx.Done():
		return cpuRate{}, ctx.Err()
	}
	serverAfter, err := nodesCPU(c.nodes)
	if err != nil {
		return cpuRate{}, err
	}
	wall := float64(time.Since(began))
	return cpuRate{client: float64(selfCPU()-clientBefore) / wall, server: float64(serverAfter-serverBefore) / wall}, nil
}

// drainedBytes: windows holding at most this much count as empty (a
// status's figures lag by a flush).
const drainedBytes = 64 << 10

// waitDrained waits until every pool's stashes hold at most drainedBytes
// in their windows (waitWindows): what was written until then has been
// flushed to the engines.
func waitDrained(ctx context.Context, c *cluster, pools []string) error {
	pool, wb, err := waitWindows(ctx, c, pools, 500*time.Millisecond, drainedBytes)
	if err == nil && pool != "" {
		err = fmt.Errorf("cpu: pool %s's windows still hold %d bytes long after the writes", pool, wb)
	}
	return err
}

// selfCPU is this process's user + system CPU time.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// nodesCPU is the sum of the nodes' CPU times.
func nodesCPU(nodes []Node) (time.Duration, error) {
	var sum time.Duration
	for _, n := range nodes {
		d, err := n.CPU()
		if err != nil {
			return 0, fmt.Errorf("cpu: node %s: %w", n.Name, err)
		}
		sum += d
	}
	return sum, nil
}

const histMaxUs = int64(60 * time.Second / time.Microsecond)

// opTimeout bounds one operation (its retries included), past the row's
// end in a timed row: one that cannot finish counts as an error with its
// last error, instead of holding the row up forever.
const opTimeout = 20 * time.Second

// runRow runs one row for d (or o.Count operations).
// runRow runs one row. settle, if not nil (writes), waits after the
// operations until the cluster has done the work they left (waitDrained);
// the row's CPU then counts that wait too, less the cluster's CPU at rest
// over as long, measured for a second before the row.
func runRow(ctx context.Context, o Options, c *cluster, p *distash.Pool, mode, op string, fresh bool, d time.Duration, settle func() error) (Row, error) {
	r := Row{Mode: mode, Pool: p.Name(), Op: op, Fresh: fresh, Server: -1, Round: c.round}
	var idle cpuRate
	if settle != nil {
		var err error
		if idle, err = restRate(ctx, c, time.Second); err != nil {
			return r, err
		}
	}
	name := fmt.Sprintf("%s-%s-%s", mode, p.Name(), op)
	if fresh {
		name += "-fresh"
	}
	if c.round > 0 {
		name += fmt.Sprintf("-r%d", c.round)
	}
	// Profiles: this process's, and each node's over HTTP for the row's
	// length (whole seconds; not with a count, whose length is unknown).
	var stopProfile func() error
	var nodeProfiles sync.WaitGroup
	var profErrs []error
	var profMu sync.Mutex
	if o.ProfileDir != "" {
		path := filepath.Join(o.ProfileDir, name+".pprof")
		f, err := os.Create(path)
		if err != nil {
			return r, err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return r, err
		}
		stopProfile = func() error { pprof.StopCPUProfile(); return f.Close() }
		r.Profiles = append(r.Profiles, path)
		if o.Count == 0 {
			secs := int(math.Ceil(d.Seconds()))
			for _, n := range c.nodes {
				if n.PprofURL == "" {
					continue
				}
				path := filepath.Join(o.ProfileDir, name+"-"+n.Name+".pprof")
				r.Profiles = append(r.Profiles, path)
				nodeProfiles.Add(1)
				go func() {
					defer nodeProfiles.Done()
					if err := fetchProfile(ctx, n.PprofURL, secs, path); err != nil {
						profMu.Lock()
						profErrs = append(profErrs, fmt.Errorf("node %s: %w", n.Name, err))
						profMu.Unlock()
					}
				}()
			}
		}
	}

	hist := hdrhistogram.New(1, histMaxUs, 3)
	var histMu sync.Mutex
	var ops, errs atomic.Int64
	var firstErr atomic.Value
	var claimed atomic.Int64
	runID := rand.Uint32()
	serverBefore, err := nodesCPU(c.nodes)
	if err != nil {
		return r, err
	}
	cpuBefore, start := selfCPU(), time.Now()
	deadline := start.Add(d)
	var wg sync.WaitGroup
	for cl := range o.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(runID), uint64(cl)))
			local := hdrhistogram.New(1, histMaxUs, 3)
			do := newOp(c.db, p, op, o, rng, fmt.Sprintf("%08x/%03d", runID, cl))
			// A timed row bounds every operation by one deadline, the row's
			// end plus opTimeout, made once per client: a context and timer
			// per operation cost 2-3% of a single-key commit's CPU, which
			// the row would charge to the cluster. A counted row has no end
			// to count from, so its operations get their own.
			opCtx, cancelOps := context.WithDeadline(ctx, deadline.Add(opTimeout))
			defer cancelOps()
			for {
				if o.Count > 0 {
					if claimed.Add(1) > int64(o.Count) {
						break
					}
				} else if time.Now().After(deadline) {
					break
				}
				if ctx.Err() != nil {
					break
				}
				t0 := time.Now()
				octx, cancel := opCtx, context.CancelFunc(nil)
				if o.Count > 0 {
					octx, cancel = context.WithTimeout(ctx, opTimeout)
				}
				err := do(octx)
				if cancel != nil {
					cancel()
				}
				lat := time.Since(t0)
				ops.Add(1)
				if err != nil {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				local.RecordValue(max(1, lat.Microseconds()))
			}
			histMu.Lock()
			hist.Merge(local)
			histMu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if stopProfile != nil {
		if err := stopProfile(); err != nil {
			return r, err
		}
	}
	if settle != nil {
		if err := settle(); err != nil {
			return r, err
		}
		r.Settle = time.Since(start) - elapsed
	}
	cpuAfter := selfCPU()
	serverAfter, err := nodesCPU(c.nodes)
	if err != nil {
		return r, err
	}
	nodeProfiles.Wait()
	if err := ctx.Err(); err != nil {
		return r, err
	}
	if len(profErrs) > 0 {
		return r, fmt.Errorf("cpu: node profiles: %w", errors.Join(profErrs...))
	}
	r.Ops, r.Errors, r.Seconds = ops.Load(), errs.Load(), elapsed.Seconds()
	r.OpsPerSec = float64(r.Ops-r.Errors) / r.Seconds
	r.P50 = time.Duration(hist.ValueAtQuantile(50)) * time.Microsecond
	r.P99 = time.Duration(hist.ValueAtQuantile(99)) * time.Microsecond
	r.Client = max(0, cpuAfter-cpuBefore-cpuOver(idle.client, r.Settle))
	if len(c.nodes) > 0 {
		r.Server = max(0, serverAfter-serverBefore-cpuOver(idle.server, r.Settle))
	}
	if e, ok := firstErr.Load().(string); ok {
		r.FirstErr = e
	}
	return r, nil
}

// fetchProfile saves the node's CPU profile of the next secs seconds.
func fetchProfile(ctx context.Context, base string, secs int, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%sprofile?seconds=%d", base, secs), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// newOp returns one client's operation op; tag makes its fresh keys its own.
func newOp(db *distash.DB, p *distash.Pool, op string, o Options, rng *rand.Rand, tag string) func(context.Context) error {
	want := func(k, v []byte) error {
		if len(v) != o.ValueBytes {
			return fmt.Errorf("%q: %d bytes, want %d", k, len(v), o.ValueBytes)
		}
		return nil
	}
	switch op {
	case OpGet:
		return func(ctx context.Context) error {
			k := recordKey(p, rng.IntN(o.Records))
			return db.ReadTransact(ctx, func(tr *distash.Tx) error {
				v, err := tr.Get(k)
				if err != nil {
					return err
				}
				return want(k, v)
			})
		}
	case OpGetMulti10:
		keys := make([][]byte, 10)
		return func(ctx context.Context) error {
			for i := range keys {
				keys[i] = recordKey(p, rng.IntN(o.Records))
			}
			return db.ReadTransact(ctx, func(tr *distash.Tx) error {
				vs, err := tr.GetMulti(keys)
				if err != nil {
					return err
				}
				for i, v := range vs {
					if err := want(keys[i], v); err != nil {
						return err
					}
				}
				return nil
			})
		}
	case OpRange1:
		return func(ctx context.Context) error {
			k := recordKey(p, rng.IntN(o.Records))
			end := append(k[:len(k):len(k)], 0) // [k, k\x00) holds k alone
			return db.ReadTransact(ctx, func(tr *distash.Tx) error {
				kvs, err := tr.GetRange(k, end, distash.RangeOptions{})
				if err != nil {
					return err
				}
				if len(kvs) != 1 {
					return fmt.Errorf("range of %q: %d records, want 1", k, len(kvs))
				}
				return want(k, kvs[0].Value)
			})
		}
	case OpBlind:
		val := make([]byte, o.ValueBytes)
		seq := 0
		return func(ctx context.Context) error {
			seq++
			k := p.Key(fmt.Appendf(nil, "cpu-blind/%s/%010d", tag, seq))
			return db.Transact(ctx, func(tr *distash.Tx) error {
				tr.Set(k, val)
				return nil
			})
		}
	case OpRMW:
		return func(ctx context.Context) error {
			k := recordKey(p, rng.IntN(o.Records))
			return db.Transact(ctx, func(tr *distash.Tx) error {
				v, err := tr.Get(k)
				if err != nil {
					return err
				}
				if err := want(k, v); err != nil {
					return err
				}
				v = slices.Clone(v)
				v[0]++
				tr.Set(k, v)
				return nil
			})
		}
	}
	panic("cpu: unknown operation " + op)
}

func errNote(r Row) string {
	if r.Errors == 0 {
		return ""
	}
	return fmt.Sprintf("  %d errors (e.g. %s)", r.Errors, r.FirstErr)
}
