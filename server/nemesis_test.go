package server_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distash/distash"
	"github.com/distash/distash/patterns/cacheaug"
)

// cacheWorkload is the nemesis's cache-pattern workload: a cache-augmented
// store (patterns/cacheaug) whose cached query results — the sum of three
// neighbouring items — depend on several data keys, read through (a miss
// fills the cache in the reading transaction) while writers update items
// write-around or write-through. Its invariant, checked by Verify after
// the faults: every cached result equals its recomputation from the data.
type cacheWorkload struct {
	store *cacheaug.Store
	ops   atomic.Int64 // acknowledged reads and writes
}

const cacheItems = 24

func itemKey(i int) []byte { return fmt.Appendf(nil, "item:%02d", i%cacheItems) }

func newCacheWorkload(db *distash.DB) (*cacheWorkload, error) {
	sum3 := cacheaug.Family{Name: "sum3", Compute: func(r *cacheaug.Reader, args []byte) ([]byte, error) {
		i, err := strconv.Atoi(string(args))
		if err != nil {
			return nil, err
		}
		var total int
		for j := i; j < i+3; j++ {
			v, err := r.Get(itemKey(j))
			if err != nil {
				return nil, err
			}
			if v != nil {
				n, err := strconv.Atoi(string(v))
				if err != nil {
					return nil, fmt.Errorf("item %d holds %q", j, v)
				}
				total += n
			}
		}
		return []byte(strconv.Itoa(total)), nil
	}}
	st, err := cacheaug.New(db, cacheaug.Options{CachePools: []string{"cache"}, DataPool: "data", Families: []cacheaug.Family{sum3}})
	if err != nil {
		return nil, err
	}
	return &cacheWorkload{store: st}, nil
}

// run reads and writes on workers goroutines until ctx ends; failures (a
// fault in progress) are not counted.
func (w *cacheWorkload) run(ctx context.Context, workers int, seed uint64) (wait func()) {
	var wg sync.WaitGroup
	for k := 0; k < workers; k++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(200+k)))
			for ctx.Err() == nil {
				octx, cancel := context.WithTimeout(ctx, 5*time.Second)
				var err error
				if rng.IntN(3) == 0 {
					policy := cacheaug.WriteAround
					if rng.IntN(2) == 0 {
						policy = cacheaug.WriteThrough
					}
					err = w.store.Set(octx, itemKey(rng.IntN(cacheItems)), []byte(strconv.Itoa(rng.IntN(1000))), policy)
				} else {
					_, err = w.store.Get(octx, cacheaug.Query{Family: "sum3", Args: []byte(strconv.Itoa(rng.IntN(cacheItems)))})
				}
				cancel()
				if err == nil {
					w.ops.Add(1)
				}
			}
		}()
	}
	return wg.Wait
}
