// Package anomalies measures the DiStash paper's argument for one
// transaction (§3.2, Figures 6 and 7) against real peers.
//
// The same cache-augmented workload runs on two setups:
//
//   - distash: every operation is ONE DiStash transaction over a DRAM
//     ephemeral "cache" pool and an SSD durable Pebble "data" pool
//     (Figure 5);
//   - redis+postgres: the two storage managers a user would otherwise
//     combine, Redis for the cache (GET, SET, DEL) and PostgreSQL for the
//     data (table kv(k text primary key, v text), each statement its own
//     transaction), with the separate transactions of Figure 6.
//
// Concurrent clients pick keys of a small Zipf-distributed key set and run
//
//   - a read-through read: look the key up in the cache; on a miss read
//     the data, wait Options.Delay (0 by default), and fill the cache with
//     what was read;
//   - a write-through write: increment the key's version in the data (a
//     read-modify-write: one UPDATE ... RETURNING in PostgreSQL, a Get and
//     Set in DiStash), then set the cache to the new version.
//
// A data value is the key's version number in decimal; a cached value is
// that number followed by the origin of the entry ("f" for a fill, "w" for
// a write), so that a stale entry and the step that left it are visible.
// Versions of a key only grow, so after the run quiesces every cached value
// must equal the data's: a cached version lower than the data's is an
// anomaly, the lost update of Figure 7 (a fill that read the data before a
// concurrent write committed and filled the cache after that write had set
// it) or two write-throughs whose cache updates crossed.
//
// A stale entry lasts until the key's next write-through or eviction, so
// on a small hot key set most anomalies are repaired before the run ends
// and the count after quiescence understates them. The run therefore also
// counts stale reads: reads that returned a version older than one whose
// write-through had completed before the read began. Both counts must be 0
// on DiStash.
//
// A write-through cache that never loses an entry would, once warm, never
// miss, and the racing fill would never run. A real cache loses entries to
// its replacement policy; the workload stands for that by evicting the
// cache entry of a Zipf-drawn key after a share of the operations
// (Options.Evict, 10% by default), in both setups alike.
//
// Options.Delay widens the window between the data read and the cache fill
// of a miss (time spent computing a query result from the data). It is the
// same in both setups and 0 by default; results with 0 are the honest
// baseline, a positive delay only makes the race easier to hit in a short
// run.
//
// Run starts an embedded DiStash cluster, and a private redis-server and a
// private PostgreSQL cluster (initdb into a temporary directory, run as the
// "postgres" system user when the benchmark runs as root), on free loopback
// ports; it stops them and removes their files at the end. The peers come
// from the Debian packages redis-server and postgresql; see CheckServers.
package anomalies

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// The setups Options.Setups may name.
const (
	SetupDiStash       = "distash"
	SetupRedisPostgres = "redis+postgres"
)

// Options configure a run. Zero values take the defaults given.
type Options struct {
	// Clients is the number of concurrent clients (default 32).
	Clients int
	// Keys is the size of the key set (default 100).
	Keys int
	// Duration is how long each setup runs (default 10s).
	Duration time.Duration
	// ReadFraction is the share of operations that are read-through reads;
	// the rest are write-through writes (default 0.5).
	ReadFraction float64
	// Zipf is the skew of the key choice, YCSB's zipfian constant; must not
	// be 1 (default 0.99).
	Zipf float64
	// Delay is slept between the data read and the cache fill of a miss, in
	// both setups (default 0).
	Delay time.Duration
	// Evict is the probability that an operation is followed by the
	// eviction of the cache entry of a Zipf-drawn key, standing for the
	// cache's replacement policy (default 0.1; negative means never).
	Evict float64
	// Setups lists what to run, among SetupDiStash and SetupRedisPostgres
	// (default both, DiStash first).
	Setups []string
	// Dir holds the DiStash cluster's files (default: a temporary
	// directory, removed at the end).
	Dir string
	// Seed seeds the clients' random choices; both setups use the same
	// (default: random).
	Seed uint64
}

func (o Options) withDefaults() (Options, error) {
	if o.Clients == 0 {
		o.Clients = 32
	}
	if o.Keys == 0 {
		o.Keys = 100
	}
	if o.Duration == 0 {
		o.Duration = 10 * time.Second
	}
	if o.ReadFraction == 0 {
		o.ReadFraction = 0.5
	}
	if o.Zipf == 0 {
		o.Zipf = 0.99
	}
	if o.Evict == 0 {
		o.Evict = 0.1
	}
	if o.Evict < 0 {
		o.Evict = 0
	}
	if len(o.Setups) == 0 {
		o.Setups = []string{SetupDiStash, SetupRedisPostgres}
	}
	if o.Seed == 0 {
		o.Seed = rand.Uint64()
	}
	switch {
	case o.Clients < 0:
		return o, fmt.Errorf("anomalies: clients must be positive, got %d", o.Clients)
	case o.Keys < 0:
		return o, fmt.Errorf("anomalies: keys must be positive, got %d", o.Keys)
	case o.Duration < 0:
		return o, fmt.Errorf("anomalies: duration must be positive, got %s", o.Duration)
	case o.ReadFraction < 0 || o.ReadFraction > 1:
		return o, fmt.Errorf("anomalies: read fraction must be in [0, 1], got %g", o.ReadFraction)
	case o.Zipf < 0 || o.Zipf == 1:
		return o, fmt.Errorf("anomalies: zipf constant must be positive and not 1, got %g", o.Zipf)
	case o.Evict > 1:
		return o, fmt.Errorf("anomalies: evict probability must be at most 1, got %g", o.Evict)
	case o.Delay < 0:
		return o, fmt.Errorf("anomalies: delay must not be negative, got %s", o.Delay)
	}
	seen := map[string]bool{}
	for _, s := range o.Setups {
		if s != SetupDiStash && s != SetupRedisPostgres {
			return o, fmt.Errorf("anomalies: unknown setup %q (want %s or %s)", s, SetupDiStash, SetupRedisPostgres)
		}
		if seen[s] {
			return o, fmt.Errorf("anomalies: setup %q given twice", s)
		}
		seen[s] = true
	}
	return o, nil
}

// Result is a run's figures: Options with the defaults applied, and one
// SetupResult per setup run, in the order run.
type Result struct {
	Options Options
	Setups  []SetupResult
}

// Setup returns the result of the named setup, or nil if it was not run.
func (r Result) Setup(name string) *SetupResult {
	for i := range r.Setups {
		if r.Setups[i].Setup == name {
			return &r.Setups[i]
		}
	}
	return nil
}

// SetupResult is one setup's figures.
type SetupResult struct {
	Setup string
	// Servers names the servers that ran it, with their versions.
	Servers string
	// Ops counts the completed reads and writes (evictions are not
	// operations of the workload: they stand for the cache's replacement).
	Ops, Reads, Hits, Fills, Writes, Evictions int64
	// StaleReads counts reads that returned a version older than one whose
	// write-through had completed before the read began: a lasting
	// anomaly observed while it lasted (anomalies that later writes or
	// evictions repaired do not show in Audit).
	StaleReads int64
	// StaleReadsFill counts the stale reads that hit an entry left by a
	// read-through fill (Figure 7); the others hit an entry left by a
	// write-through whose cache update crossed another's.
	StaleReadsFill int64
	// Retries counts transaction attempts beyond the first (DiStash aborts
	// one of two conflicting transactions; the two-store setup never
	// retries).
	Retries int64
	// Errors counts operations that failed for good.
	Errors    int64
	Seconds   float64
	OpsPerSec float64
	// P50 and P99 are latency percentiles of reads and writes.
	P50, P99 time.Duration
	// Audit compares cache and data after the run quiesced.
	Audit Audit
}

// Audit is the comparison of every cached value with the data, after the
// run quiesced.
type Audit struct {
	Keys   int // keys in the key set
	Cached int // keys with a cache entry
	// Stale counts cached values that disagree with the data: the anomalies.
	Stale int
	// StaleFill counts stale entries left by a read-through fill (Figure
	// 7), StaleWrite those left by a write-through's cache update.
	StaleFill, StaleWrite int
	// Newer counts cached versions above the data's (impossible unless a
	// write to the data was lost); they are included in Stale.
	Newer int
	// Malformed counts cached or data values that do not parse, and keys
	// missing from the data; they are included in Stale.
	Malformed int
	// MaxLag is the largest number of versions a stale entry is behind.
	MaxLag int64
	// Examples shows up to five stale keys as "key: cache C, data D".
	Examples []string
}

// Cache entry origins.
const (
	originFill  = 'f'
	originWrite = 'w'
)

// dataValue is the data's value for a version.
func dataValue(ver int64) string { return strconv.FormatInt(ver, 10) }

// parseData parses a data value.
func parseData(s string) (int64, bool) {
	v, err := strconv.ParseInt(s, 10, 64)
	return v, err == nil && v >= 0
}

// cacheValue is a cached value: the data value it copies and its origin.
func cacheValue(data string, origin byte) string { return data + " " + string(origin) }

// parseCache parses a cached value.
func parseCache(s string) (ver int64, origin byte, ok bool) {
	d, o, found := strings.Cut(s, " ")
	if !found || len(o) != 1 || (o[0] != originFill && o[0] != originWrite) {
		return 0, 0, false
	}
	v, ok := parseData(d)
	return v, o[0], ok
}

// audit compares every cached value of keys with the data. A key absent
// from cache is not cached; a key absent from data is malformed.
func audit(keys []string, cache, data map[string]string) Audit {
	a := Audit{Keys: len(keys)}
	for _, k := range keys {
		c, cached := cache[k]
		if !cached {
			continue
		}
		a.Cached++
		d, ok := data[k]
		dv, dok := parseData(d)
		cv, origin, cok := parseCache(c)
		switch {
		case !ok || !dok || !cok:
			a.Stale++
			a.Malformed++
		case cv == dv:
			continue
		default:
			a.Stale++
			if cv > dv {
				a.Newer++
			} else {
				a.MaxLag = max(a.MaxLag, dv-cv)
			}
			if origin == originFill {
				a.StaleFill++
			} else {
				a.StaleWrite++
			}
		}
		if len(a.Examples) < 5 {
			a.Examples = append(a.Examples, fmt.Sprintf("%s: cache %q, data %q", k, c, d))
		}
	}
	return a
}

// keyNames names the key set.
func keyNames(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%06d", i)
	}
	return keys
}

// A backend is one setup's storage.
type backend interface {
	// load writes version 0 of every key to the data and empties the cache.
	load(ctx context.Context, keys []string) error
	// newClient returns one client's connection.
	newClient(ctx context.Context) (client, error)
	// snapshot reads every key's cached value (absent if not cached) and
	// data value.
	snapshot(ctx context.Context, keys []string) (cache, data map[string]string, err error)
	// servers names the servers and their versions.
	servers(ctx context.Context) string
	close()
}

// A client runs the workload's operations. attempts counts the
// transaction attempts an operation took (1 without retries).
type client interface {
	// read is the read-through: on a miss it reads the data, calls
	// beforeFill, and fills the cache. It returns the version read and,
	// on a hit, the origin of the cache entry (0 on a miss).
	read(ctx context.Context, key string, beforeFill func()) (ver int64, origin byte, attempts int, err error)
	// write is the write-through: it increments the key's version in the
	// data, then sets the cache to it. It returns the version written.
	write(ctx context.Context, key string) (ver int64, attempts int, err error)
	// evict drops key's cache entry.
	evict(ctx context.Context, key string) error
	close()
}

// Run runs the workload on each of o.Setups, audits each, and prints a
// table to out.
func Run(ctx context.Context, o Options, out io.Writer) (Result, error) {
	o, err := o.withDefaults()
	if err != nil {
		return Result{}, err
	}
	res := Result{Options: o}
	for _, s := range o.Setups {
		if s == SetupRedisPostgres {
			if err := CheckServers(); err != nil {
				return res, err
			}
		}
	}
	evict := "no evictions"
	if o.Evict > 0 {
		evict = fmt.Sprintf("%.0f%% of operations followed by an eviction", 100*o.Evict)
	}
	fmt.Fprintf(out, "cache-augmented workload: %d clients, %d keys (zipf %.2f), %.0f%% read-through reads / %.0f%% write-through writes, %s, fill delay %s, %s per setup\n",
		o.Clients, o.Keys, o.Zipf, 100*o.ReadFraction, 100*(1-o.ReadFraction), evict, o.Delay, o.Duration)
	for _, s := range o.Setups {
		var (
			b   backend
			err error
		)
		switch s {
		case SetupDiStash:
			fmt.Fprintf(out, "%s: one DiStash transaction per operation over a DRAM ephemeral cache pool and an SSD durable Pebble data pool\n", s)
			b, err = startDiStash(ctx, o.Dir)
		case SetupRedisPostgres:
			fmt.Fprintf(out, "%s: Redis cache (GET/SET/DEL) and PostgreSQL data (one statement per transaction), separate transactions per Figure 6\n", s)
			b, err = startRedisPostgres(ctx, o.Clients)
		}
		if err != nil {
			return res, err
		}
		r, err := runWorkload(ctx, b, s, o)
		b.close()
		if err != nil {
			return res, fmt.Errorf("anomalies: %s: %w", s, err)
		}
		fmt.Fprintf(out, "  on %s\n", r.Servers)
		fmt.Fprintf(out, "  %d ops, %.0f ops/s, p50 %s, p99 %s, %d stale reads, %d stale cached values\n", r.Ops, r.OpsPerSec,
			r.P50.Round(time.Microsecond), r.P99.Round(time.Microsecond), r.StaleReads, r.Audit.Stale)
		res.Setups = append(res.Setups, r)
	}
	printTable(out, res)
	return res, nil
}

func printTable(out io.Writer, res Result) {
	fmt.Fprintf(out, "\n%-15s %9s %9s %9s %9s %6s %7s %7s %7s %8s %6s %6s %11s %6s\n",
		"setup", "ops", "ops/s", "p50", "p99", "hit%", "fills", "writes", "evicts", "retries", "errors", "cached", "stale reads", "stale")
	for _, r := range res.Setups {
		hit := 0.0
		if r.Reads > 0 {
			hit = 100 * float64(r.Hits) / float64(r.Reads)
		}
		fmt.Fprintf(out, "%-15s %9d %9.0f %9s %9s %6.1f %7d %7d %7d %8d %6d %6d %11d %6d\n",
			r.Setup, r.Ops, r.OpsPerSec, r.P50.Round(time.Microsecond), r.P99.Round(time.Microsecond), hit,
			r.Fills, r.Writes, r.Evictions, r.Retries, r.Errors, r.Audit.Cached, r.StaleReads, r.Audit.Stale)
	}
	fmt.Fprintln(out, "\nstale: cached values that disagree with the data after the run quiesced (the anomalies);")
	fmt.Fprintln(out, "stale reads: reads, during the run, that returned an older version than a write-through completed before they began.")
	fmt.Fprintln(out)
	for _, r := range res.Setups {
		a := r.Audit
		reads := fmt.Sprintf("%d stale reads", r.StaleReads)
		if r.StaleReads > 0 {
			reads += fmt.Sprintf(" (%d hit an entry left by a fill, %d one left by a write-through)", r.StaleReadsFill, r.StaleReads-r.StaleReadsFill)
		}
		if a.Stale == 0 {
			fmt.Fprintf(out, "%s: 0 anomalies: all %d cached values of %d keys equal the data; %s.\n", r.Setup, a.Cached, a.Keys, reads)
			continue
		}
		fmt.Fprintf(out, "%s: %d anomalies: %d of %d cached values disagree with the data (%d left by a read-through fill that read the data before a concurrent write, Figure 7; %d by write-throughs whose cache updates crossed",
			r.Setup, a.Stale, a.Stale, a.Cached, a.StaleFill, a.StaleWrite)
		if a.Newer > 0 {
			fmt.Fprintf(out, "; %d newer than the data", a.Newer)
		}
		if a.Malformed > 0 {
			fmt.Fprintf(out, "; %d malformed", a.Malformed)
		}
		fmt.Fprintf(out, "); the worst is %d version(s) behind; %s.\n", a.MaxLag, reads)
		for _, e := range a.Examples {
			fmt.Fprintf(out, "    %s\n", e)
		}
	}
}

// maxLatency bounds the latency histogram.
const maxLatency = time.Minute

// runWorkload loads the key set, runs o.Clients clients for o.Duration and
// audits cache against data.
func runWorkload(ctx context.Context, b backend, setup string, o Options) (SetupResult, error) {
	keys := keyNames(o.Keys)
	if err := b.load(ctx, keys); err != nil {
		return SetupResult{}, fmt.Errorf("load: %w", err)
	}
	clients := make([]client, o.Clients)
	for i := range clients {
		c, err := b.newClient(ctx)
		if err != nil {
			for _, c := range clients[:i] {
				c.close()
			}
			return SetupResult{}, fmt.Errorf("connect: %w", err)
		}
		clients[i] = c
	}
	defer func() {
		for _, c := range clients {
			c.close()
		}
	}()

	beforeFill := func() {}
	if o.Delay > 0 {
		beforeFill = func() { time.Sleep(o.Delay) }
	}
	var (
		mu       sync.Mutex
		total    SetupResult
		hist     = hdrhistogram.New(1, int64(maxLatency/time.Microsecond), 3)
		firstErr error
	)
	// acked[i] is the highest version of keys[i] whose write-through has
	// completed: a read that begins later must not return an older one.
	acked := make([]atomic.Int64, len(keys))
	start := time.Now()
	deadline := start.Add(o.Duration)
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(o.Seed, uint64(i)))
			pick := newKeyPicker(o.Keys, o.Zipf, rng)
			local := hdrhistogram.New(1, int64(maxLatency/time.Microsecond), 3)
			var r SetupResult
			var opErr error
			for time.Now().Before(deadline) && ctx.Err() == nil {
				ki := pick()
				key := keys[ki]
				t0 := time.Now()
				var attempts int
				var err error
				if rng.Float64() < o.ReadFraction {
					floor := acked[ki].Load()
					var ver int64
					var origin byte
					ver, origin, attempts, err = c.read(ctx, key, beforeFill)
					if err == nil {
						r.Reads++
						if origin != 0 {
							r.Hits++
						} else {
							r.Fills++
						}
						if ver < floor {
							r.StaleReads++
							if origin == originFill {
								r.StaleReadsFill++
							}
						}
					}
				} else {
					var ver int64
					ver, attempts, err = c.write(ctx, key)
					if err == nil {
						r.Writes++
						for cur := acked[ki].Load(); cur < ver && !acked[ki].CompareAndSwap(cur, ver); cur = acked[ki].Load() {
						}
					}
				}
				lat := time.Since(t0)
				r.Retries += int64(max(attempts-1, 0))
				if err != nil {
					if ctx.Err() == nil {
						r.Errors++
						opErr = cmpErr(opErr, err)
					}
					continue
				}
				r.Ops++
				_ = local.RecordValue(min(max(lat.Microseconds(), 1), int64(maxLatency/time.Microsecond)))
				if o.Evict > 0 && rng.Float64() < o.Evict {
					if err := c.evict(ctx, keys[pick()]); err != nil {
						if ctx.Err() == nil {
							r.Errors++
							opErr = cmpErr(opErr, err)
						}
					} else {
						r.Evictions++
					}
				}
			}
			mu.Lock()
			defer mu.Unlock()
			hist.Merge(local)
			total.Ops += r.Ops
			total.Reads += r.Reads
			total.Hits += r.Hits
			total.Fills += r.Fills
			total.Writes += r.Writes
			total.Evictions += r.Evictions
			total.StaleReads += r.StaleReads
			total.StaleReadsFill += r.StaleReadsFill
			total.Retries += r.Retries
			total.Errors += r.Errors
			firstErr = cmpErr(firstErr, opErr)
		}()
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	if err := ctx.Err(); err != nil {
		return SetupResult{}, err
	}
	if total.Ops == 0 && firstErr != nil {
		return SetupResult{}, fmt.Errorf("every operation failed: %w", firstErr)
	}
	// Every client has returned: the run has quiesced.
	cache, data, err := b.snapshot(ctx, keys)
	if err != nil {
		return SetupResult{}, fmt.Errorf("audit: %w", err)
	}
	total.Setup = setup
	total.Servers = b.servers(ctx)
	total.Seconds = secs
	total.OpsPerSec = float64(total.Ops) / secs
	total.P50 = time.Duration(hist.ValueAtQuantile(50)) * time.Microsecond
	total.P99 = time.Duration(hist.ValueAtQuantile(99)) * time.Microsecond
	total.Audit = audit(keys, cache, data)
	return total, nil
}

// cmpErr keeps the first non-nil error.
func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// errServersMissing is wrapped by CheckServers' error.
var errServersMissing = errors.New("redis-server or PostgreSQL not installed")
