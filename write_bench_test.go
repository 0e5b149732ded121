package distash_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime/pprof"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distash/distash"
)

// BenchmarkWriteTransactions measures commits of one key, 64 at a time, on
// each pool: blind (a Set of a random key among 20,000, no read) and rmw
// (a Get then a Set of the same key): ops/s, p50/p99 latency and CPU per
// commit (client and cluster). -readprofile profiles the commit phases
// too. go test -run XXX -bench WriteTransactions .
func BenchmarkWriteTransactions(b *testing.B) {
	c := startCluster(b, onePoolEach)
	const records = 20000
	val := make([]byte, 100)
	modes := map[string]func(tr *distash.Tx, k []byte) error{
		"blind": func(tr *distash.Tx, k []byte) error { tr.Set(k, val); return nil },
		"rmw": func(tr *distash.Tx, k []byte) error {
			if _, err := tr.Get(k); err != nil {
				return err
			}
			tr.Set(k, val)
			return nil
		},
	}
	for _, prefix := range []string{"m/", "p/"} {
		for _, mode := range []string{"blind", "rmw"} {
			b.Run(prefix[:1]+"/"+mode, func(b *testing.B) { benchWrites(b, c.DB, prefix, records, modes[mode]) })
		}
	}
}

func benchWrites(b *testing.B, db *distash.DB, prefix string, records int, write func(tr *distash.Tx, k []byte) error) {
	ctx := context.Background()
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
	const threads = 64
	var next atomic.Int64
	var mu sync.Mutex
	var lats []time.Duration
	began, cpuBefore := time.Now(), processCPU()
	var wg sync.WaitGroup
	for g := 0; g < threads; g++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, 11))
			var mine []time.Duration
			for next.Add(1) <= int64(b.N) {
				k := []byte(fmt.Sprintf("%suser%08d", prefix, rng.IntN(records)))
				t0 := time.Now()
				if err := db.Transact(ctx, func(tr *distash.Tx) error { return write(tr, k) }); err != nil {
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
		b.ReportMetric(float64(cpu.Microseconds())/float64(len(lats)), "cpu-µs/op")
	}
}
