package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/distash/distash"
	"github.com/distash/distash/config"
	"github.com/distash/distash/internal/clusterstatus"
	"github.com/distash/distash/internal/embedded"
	"github.com/distash/distash/internal/workload"
)

func demoCmd() *cobra.Command {
	var opts demoOptions
	var configPath, dir string
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the paper's cache-augmented workload on an embedded cluster",
		Long: `Start an embedded cluster (the built-in configuration: a DRAM ephemeral
pool "cache" and an SSD durable pool "data", unless --config says otherwise)
and run the cache-augmented workload of the DiStash paper: concurrent
clients read records through the cache (read-through on a miss: read the
data pool and fill the cache, in one transaction) and update them with
write-through (data and cache in one transaction) or write-around (data
updated, cached copy deleted, in one transaction). At the end it checks
that every cached value equals its data and prints what happened.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg := config.Default()
			if configPath != "" {
				var err error
				if cfg, err = config.Load(configPath); err != nil {
					return err
				}
			}
			return runDemo(cmd.Context(), cfg, dir, opts, os.Stdout)
		},
	}
	cmd.Flags().IntVar(&opts.Records, "records", 2000, "records in the data pool")
	cmd.Flags().IntVar(&opts.Ops, "ops", 20000, "operations to run")
	cmd.Flags().IntVar(&opts.Clients, "clients", 16, "concurrent clients")
	cmd.Flags().Float64Var(&opts.WriteFraction, "writes", 0.2, "fraction of operations that update (half write-through, half write-around)")
	cmd.Flags().StringVar(&configPath, "config", "", "cluster configuration (TOML); default: the built-in one")
	cmd.Flags().StringVar(&dir, "dir", "", "directory for the cluster's files (default: a temporary one, removed after)")
	return cmd
}

type demoOptions struct {
	Records, Ops, Clients int
	WriteFraction         float64
}

// demoStats counts what the workload did.
type demoStats struct {
	reads, hits, misses, writeThrough, writeAround, retries atomic.Int64
}

// runDemo runs the demo on a cluster in dir, or in a temporary directory,
// removed after, if dir is "".
func runDemo(ctx context.Context, cfg *config.Config, dir string, o demoOptions, out io.Writer) error {
	if ctx == nil {
		ctx = context.Background()
	}
	cache, data := demoPools(cfg)
	if cache == nil || data == nil {
		return fmt.Errorf("demo: the configuration needs an ephemeral pool (the cache) and a durable pool (the data)")
	}
	cl, err := embedded.Start(ctx, cfg, embedded.Options{Dir: dir, TempPattern: "distash-demo-"})
	if err != nil {
		return err
	}
	defer cl.Close()
	fmt.Fprintf(out, "Starting an embedded DiStash cluster in %s\n", cl.Dir)
	db := cl.DB
	for _, p := range cfg.Pools {
		fmt.Fprintf(out, "  pool %-8s prefix %-4q %-4s %-9s engine %-6s %d stash(es), replication %d, capacity %s/stash\n",
			p.Name, p.Prefix, p.Medium, p.Mode, p.Engine, p.Stashes, p.Replication, capacityString(p.Capacity))
	}
	dataKey := func(i int) []byte { return []byte(fmt.Sprintf("%sitem:%06d", data.Prefix, i)) }
	cacheKey := func(i int) []byte { return []byte(fmt.Sprintf("%sitem:%06d", cache.Prefix, i)) }

	fmt.Fprintf(out, "\nLoading %d records into pool %q...\n", o.Records, data.Name)
	for start := 0; start < o.Records; start += 500 {
		err := db.Transact(ctx, func(tr *distash.Tx) error {
			for i := start; i < min(start+500, o.Records); i++ {
				tr.Set(dataKey(i), []byte(fmt.Sprintf("record %d version 0", i)))
			}
			return nil
		})
		if err != nil {
			return err
		}
	}

	fmt.Fprintf(out, "Running %d operations from %d clients: %.0f%% reads through the cache, %.0f%% write-through, %.0f%% write-around\n",
		o.Ops, o.Clients, 100*(1-o.WriteFraction), 50*o.WriteFraction, 50*o.WriteFraction)
	bar := progressbar.NewOptions(o.Ops, progressbar.OptionSetWriter(out), progressbar.OptionSetDescription("transactions"),
		progressbar.OptionShowCount(), progressbar.OptionShowIts(), progressbar.OptionSetItsString("txn"), progressbar.OptionThrottle(100*time.Millisecond))
	var st demoStats
	var next atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, o.Clients)
	zipf := workload.NewZipf(o.Records, 0.99)
	start := time.Now()
	for c := 0; c < o.Clients; c++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, 7))
			for next.Add(1) <= int64(o.Ops) {
				i := zipf.Next(rng)
				var err error
				switch r := rng.Float64(); {
				case r < o.WriteFraction/2:
					err = demoWrite(ctx, db, &st, dataKey(i), cacheKey(i), i, true)
				case r < o.WriteFraction:
					err = demoWrite(ctx, db, &st, dataKey(i), cacheKey(i), i, false)
				default:
					err = demoRead(ctx, db, &st, dataKey(i), cacheKey(i))
				}
				if err != nil {
					errc <- err
					return
				}
				bar.Add(1)
			}
		}(uint64(c) + 1)
	}
	wg.Wait()
	bar.Finish()
	elapsed := time.Since(start)
	close(errc)
	if err := <-errc; err != nil {
		return err
	}

	// Check: every cached value equals its data.
	stale, cached := 0, 0
	err = db.ReadTransact(ctx, func(tr *distash.Tx) error {
		stale, cached = 0, 0
		for start := 0; start < o.Records; start += 500 {
			var keys [][]byte
			for i := start; i < min(start+500, o.Records); i++ {
				keys = append(keys, cacheKey(i), dataKey(i))
			}
			vals, err := tr.GetMulti(keys)
			if err != nil {
				return err
			}
			for j := 0; j < len(vals); j += 2 {
				if vals[j] != nil {
					cached++
					if !bytes.Equal(vals[j], vals[j+1]) {
						stale++
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	reads := st.reads.Load()
	fmt.Fprintf(out, "\n\nDone in %.1fs: %d transactions (%.0f txn/s)\n", elapsed.Seconds(), o.Ops, float64(o.Ops)/elapsed.Seconds())
	fmt.Fprintf(out, "  reads          %d: %d cache hits, %d misses filled from %q (hit rate %.1f%%)\n",
		reads, st.hits.Load(), st.misses.Load(), data.Name, 100*float64(st.hits.Load())/float64(max(reads, 1)))
	fmt.Fprintf(out, "  write-through  %d (data and cache updated in one transaction)\n", st.writeThrough.Load())
	fmt.Fprintf(out, "  write-around   %d (data updated, cached copy deleted, in one transaction)\n", st.writeAround.Load())
	fmt.Fprintf(out, "  conflicts retried %d (transactions that raced, aborted with not_committed and ran again)\n", st.retries.Load())
	fmt.Fprintf(out, "  consistency    %d cached entries checked, %d differ from the data\n", cached, stale)

	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	status, err := clusterstatus.Gather(sctx, cl.Server.ClusterString(), nil)
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "\nPools and stashes:")
	printStatusTo(out, status)
	if stale != 0 {
		return fmt.Errorf("demo: %d cached entries disagree with the data", stale)
	}
	return nil
}

func demoPools(cfg *config.Config) (cache, data *config.Pool) {
	for i := range cfg.Pools {
		p := &cfg.Pools[i]
		if p.Ephemeral() && cache == nil {
			cache = p
		}
		if !p.Ephemeral() && data == nil {
			data = p
		}
	}
	return cache, data
}

func capacityString(s config.Size) string {
	if s <= 0 {
		return "unlimited"
	}
	return humanize.IBytes(uint64(s))
}

// demoRead is the read-through of Figure 5a: look up the cache; on a miss
// read the data and fill the cache, in the same transaction.
func demoRead(ctx context.Context, db *distash.DB, st *demoStats, dataKey, cacheKey []byte) error {
	attempts := 0
	hit := false
	err := db.Transact(ctx, func(tr *distash.Tx) error {
		attempts++
		v, err := tr.Get(cacheKey)
		if err != nil {
			return err
		}
		if v != nil {
			hit = true
			return nil
		}
		hit = false
		d, err := tr.Get(dataKey)
		if err != nil {
			return err
		}
		if d != nil {
			tr.Set(cacheKey, d)
		}
		return nil
	})
	st.retries.Add(int64(attempts - 1))
	st.reads.Add(1)
	if hit {
		st.hits.Add(1)
	} else {
		st.misses.Add(1)
	}
	return err
}

// demoWrite updates a record: write-through sets data and cache, write-around
// sets data and deletes the cached copy; both in one transaction.
func demoWrite(ctx context.Context, db *distash.DB, st *demoStats, dataKey, cacheKey []byte, i int, through bool) error {
	attempts := 0
	err := db.Transact(ctx, func(tr *distash.Tx) error {
		attempts++
		old, err := tr.Get(dataKey)
		if err != nil {
			return err
		}
		var n int
		fmt.Sscanf(string(old), "record %d version %d", new(int), &n)
		v := []byte(fmt.Sprintf("record %d version %d", i, n+1))
		tr.Set(dataKey, v)
		if through {
			tr.Set(cacheKey, v)
		} else {
			tr.Clear(cacheKey)
		}
		return nil
	})
	st.retries.Add(int64(attempts - 1))
	if through {
		st.writeThrough.Add(1)
	} else {
		st.writeAround.Add(1)
	}
	return err
}
