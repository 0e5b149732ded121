package distash_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime/pprof"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/distash/distash"
)

// onePoolEach is the read benchmark's cluster: one DRAM and one Pebble
// pool, one stash each, R=1 (the YCSB comparison's setup).
const onePoolEach = `
[[pool]]
name = "dram"
prefix = "m/"
medium = "dram"
mode = "ephemeral"
engine = "memory"
capacity = "256MiB"

[[pool]]
name = "pebble"
prefix = "p/"
medium = "ssd"
mode = "durable"
engine = "pebble"
`

// BenchmarkReadTransactions measures read-only transactions of one key
// (a read version, then one read), 64 at a time, on each pool: ops/s and
// p50/p99 latency. go test -run XXX -bench ReadTransactions .
func BenchmarkReadTransactions(b *testing.B) {
	c := startCluster(b, onePoolEach)
	ctx := context.Background()
	const records = 20000
	val := make([]byte, 1000)
	for _, prefix := range []string{"m/", "p/"} {
		for i := 0; i < records; i += 500 {
			err := c.DB.Transact(ctx, func(tr *distash.Tx) error {
				for j := i; j < i+500; j++ {
					tr.Set([]byte(fmt.Sprintf("%suser%08d", prefix, j)), val)
					// The same record in the fields layout after all ten
					// of its fields were updated: its base key and ten
					// override keys of 100 bytes.
					base := fmt.Sprintf("%srec%08d", prefix, j)
					tr.Set([]byte(base), val)
					for f := 0; f < 10; f++ {
						tr.Set([]byte(fmt.Sprintf("%s\x00field%d", base, f)), val[:100])
					}
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	// Let the load leave the stashes' MVCC windows (5 s) and their engines
	// absorb it, so the first case does not pay for the others' flushes.
	c.WaitFlushed(b)
	// get: one Get; range: one GetRange of [k, k\x01) (a record of the
	// go-ycsb driver: its base key and any field overrides, here none);
	// fields: the same range read of a record with ten overrides (eleven
	// pairs, 2,000 bytes of values).
	reads := map[string]func(tr *distash.Tx, k []byte) ([]byte, error){
		"get": func(tr *distash.Tx, k []byte) ([]byte, error) { return tr.Get(k) },
		"range": func(tr *distash.Tx, k []byte) ([]byte, error) {
			kvs, err := tr.GetRange(k, append(k[:len(k):len(k)], 1), distash.RangeOptions{})
			if err != nil || len(kvs) == 0 {
				return nil, err
			}
			return kvs[0].Value, nil
		},
		"fields": func(tr *distash.Tx, k []byte) ([]byte, error) {
			base := bytes.Replace(k, []byte("user"), []byte("rec"), 1)
			kvs, err := tr.GetRange(base, append(base, 1), distash.RangeOptions{})
			if err != nil || len(kvs) != 11 {
				return nil, fmt.Errorf("%q: %d pairs, %v", base, len(kvs), err)
			}
			return kvs[0].Value, nil
		},
	}
	for _, prefix := range []string{"m/", "p/"} {
		for _, mode := range []string{"get", "range", "fields"} {
			b.Run(prefix[:1]+"/"+mode, func(b *testing.B) { benchReads(b, benchDB(b, c), prefix, records, len(val), reads[mode]) })
		}
	}
}

// readProfile names a CPU profile of the measured phases of
// BenchmarkReadTransactions and BenchmarkWriteTransactions only (not the
// load): go test -run XXX -bench ReadTransactions/m/get -readprofile read.prof .
var readProfile = flag.String("readprofile", "", "write a CPU profile of the read or write benchmark's measured phase (not the load) to this file")

func benchReads(b *testing.B, db *distash.DB, prefix string, records, valueBytes int, read func(tr *distash.Tx, k []byte) ([]byte, error)) {
	ctx := context.Background()
	runClients(b, 7, func(rng *rand.Rand) error {
		k := []byte(fmt.Sprintf("%suser%08d", prefix, rng.IntN(records)))
		return db.ReadTransact(ctx, func(tr *distash.Tx) error {
			v, err := read(tr, k)
			if err == nil && len(v) != valueBytes {
				err = fmt.Errorf("%s: %d bytes", k, len(v))
			}
			return err
		})
	})
}

// runClients runs b.N operations from 64 goroutines (each with its own
// random source, seeded with its number and stream) and reports ops/s,
// p50/p99 latency and the process's CPU per operation; -readprofile
// profiles just this phase.
func runClients(b *testing.B, stream uint64, op func(rng *rand.Rand) error) {
	const threads = 64
	if *readProfile != "" {
		f, err := os.Create(*readProfile)
		if err != nil {
			b.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			b.Fatal(err)
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	var next atomic.Int64
	var mu sync.Mutex
	var lats []time.Duration
	began, cpuBefore := time.Now(), processCPU()
	var wg sync.WaitGroup
	for g := 0; g < threads; g++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, stream))
			var mine []time.Duration
			for next.Add(1) <= int64(b.N) {
				t0 := time.Now()
				if err := op(rng); err != nil {
					b.Error(err)
					return
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			lats = append(lats, mine...)
			mu.Unlock()
		}(uint64(g))
	}
	wg.Wait()
	elapsed, cpu := time.Since(began), processCPU()-cpuBefore
	sort.Slice(lats, func(i, j int) bool { return lats[i] < lats[j] })
	if len(lats) > 0 {
		b.ReportMetric(float64(len(lats))/elapsed.Seconds(), "ops/s")
		b.ReportMetric(float64(lats[len(lats)/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(lats[len(lats)*99/100].Microseconds()), "p99-µs")
		// CPU time of the whole process (client and cluster) per
		// operation: steadier than ops/s on a shared machine.
		b.ReportMetric(float64(cpu.Microseconds())/float64(len(lats)), "cpu-µs/op")
	}
}

// processCPU is the user and system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
