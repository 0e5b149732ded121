package distash_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/distash/distash"
	"github.com/distash/distash/internal/testutil/wait"
)

// TestFigure7RaceAbortsTheStaleFill orchestrates the race of the paper's
// Figure 7 step by step: a reader misses in the cache and reads the data; a
// writer updates data and cache and commits; the reader then writes its
// stale value into the cache. With one transaction over both pools the
// reader must get ErrNotCommitted, and its retry must leave the new value
// in the cache.
func TestFigure7RaceAbortsTheStaleFill(t *testing.T) {
	for _, policy := range []string{"write-through", "write-around"} {
		t.Run(policy, func(t *testing.T) {
			c := startCluster(t, twoPools)
			ctx := ctxT(t, 20*time.Second)
			data, cache := []byte("d/user:1"), []byte("c/user:1")
			if err := c.DB.Transact(ctx, func(tr *distash.Tx) error { tr.Set(data, []byte("v1")); return nil }); err != nil {
				t.Fatal(err)
			}
			// Step 1: the reader misses in the cache and reads the data pool.
			reader, _ := c.DB.CreateTransaction(ctx)
			if v, err := reader.Get(cache); err != nil || v != nil {
				t.Fatalf("cache lookup = %q, %v; want a miss", v, err)
			}
			stale, err := reader.Get(data)
			if err != nil || string(stale) != "v1" {
				t.Fatalf("data read = %q, %v", stale, err)
			}
			// Step 2: the writer updates the data (and the cache) and commits.
			err = c.DB.Transact(ctx, func(tr *distash.Tx) error {
				tr.Set(data, []byte("v2"))
				if policy == "write-through" {
					tr.Set(cache, []byte("v2"))
				} else {
					tr.Clear(cache)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			// Step 3: the reader fills the cache with its stale value.
			reader.Set(cache, stale)
			if err := reader.Commit(); !errors.Is(err, distash.ErrNotCommitted) {
				t.Fatalf("stale fill committed (err = %v): the cache would hold v1 while the data holds v2", err)
			}
			// Step 4: the retry (read-through again) sees v2.
			err = c.DB.Transact(ctx, func(tr *distash.Tx) error {
				v, err := tr.Get(cache)
				if err != nil || v != nil {
					return err
				}
				d, err := tr.Get(data)
				if err != nil {
					return err
				}
				tr.Set(cache, d)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			c.DB.ReadTransact(ctx, func(tr *distash.Tx) error {
				v, err := tr.Get(cache)
				if err != nil || string(v) != "v2" {
					t.Fatalf("cache after retry = %q, %v; want v2", v, err)
				}
				return nil
			})
		})
	}
}

// TestBankInvariantAcrossPools: balances durable in the SSD pool, cached in
// the DRAM pool (read-through fills, write-through and write-around
// updates), 32 concurrent clients moving money and auditing through the
// cache. Every audit sees the same total; at the end every cached balance
// equals its durable balance.
func TestBankInvariantAcrossPools(t *testing.T) {
	runBank(t, startCluster(t, twoPools), 32, 4*time.Second)
}

// TestBankInvariantUnderTransportFaults runs the bank through a server that
// breaks the data path's streams before a request is handled or after,
// and delays requests.
func TestBankInvariantUnderTransportFaults(t *testing.T) {
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(11, 13))
	// Every data-path stream (read versions, reads, commits) breaks now
	// and then, before a request reaches its handler (the request is
	// lost) or after it was handled (its reply is lost: every commit in
	// flight on the stream has an unknown result); requests are delayed.
	var lostRequests, lostReplies atomic.Int64
	streamFaults := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		return handler(srv, &faultyStream{ServerStream: ss, fail: func(reply bool) bool {
			mu.Lock()
			r, delay := rng.Float64(), time.Duration(rng.IntN(1000))*time.Microsecond
			mu.Unlock()
			if !reply {
				time.Sleep(delay)
			}
			if r >= 0.01 {
				return false
			}
			if reply {
				lostReplies.Add(1)
			} else {
				lostRequests.Add(1)
			}
			return true
		}})
	}
	framesBefore, grpcBefore := distash.DataPathStreams()
	runBank(t, startClusterWith(t, twoPools, nil, streamFaults), 16, 2*time.Second)
	framesAfter, grpcAfter := distash.DataPathStreams()
	t.Logf("streams broken: %d before a request, %d before a reply; streams opened: %d over frames, %d over gRPC",
		lostRequests.Load(), lostReplies.Load(), framesAfter-framesBefore, grpcAfter-grpcBefore)
	if framesAfter == framesBefore || grpcAfter != grpcBefore {
		t.Fatal("the faults were not injected on the frames streams clients use")
	}
	if lostRequests.Load() == 0 || lostReplies.Load() == 0 {
		t.Fatal("no faults injected")
	}
}

// faultyStream breaks a stream when fail says so: on a receive (the request
// is lost) or on a send (the request was handled, its reply is lost).
type faultyStream struct {
	grpc.ServerStream
	fail func(reply bool) bool
}

func (f *faultyStream) RecvMsg(m any) error {
	if f.fail(false) {
		return status.Error(codes.Unavailable, "injected: stream broken before a request")
	}
	return f.ServerStream.RecvMsg(m)
}

func (f *faultyStream) SendMsg(m any) error {
	if f.fail(true) {
		return status.Error(codes.Unavailable, "injected: stream broken before a reply")
	}
	return f.ServerStream.SendMsg(m)
}

func runBank(t *testing.T, c *cluster, clients int, duration time.Duration) {
	const accounts, initial = 24, 1000
	if testing.Short() {
		duration = time.Second
	}
	ctx := ctxT(t, duration+60*time.Second)
	dataKey := func(i int) []byte { return []byte(fmt.Sprintf("d/acct:%02d", i)) }
	cacheKey := func(i int) []byte { return []byte(fmt.Sprintf("c/acct:%02d", i)) }
	err := c.DB.Transact(ctx, func(tr *distash.Tx) error {
		for i := 0; i < accounts; i++ {
			tr.Set(dataKey(i), distash.EncodeInt64(initial))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// readThrough reads an account via the cache, filling it on a miss.
	readThrough := func(tr *distash.Tx, i int) (int64, error) {
		v, err := tr.Get(cacheKey(i))
		if err != nil {
			return 0, err
		}
		if v == nil {
			if v, err = tr.Get(dataKey(i)); err != nil {
				return 0, err
			}
			tr.Set(cacheKey(i), v)
		}
		return distash.Int64(v), nil
	}
	var transfers, audits, violations atomic.Int64
	deadline := time.Now().Add(duration)
	var wg sync.WaitGroup
	for cl := 0; cl < clients; cl++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, 99))
			for time.Now().Before(deadline) {
				if rng.IntN(2) == 0 {
					from, to := rng.IntN(accounts), rng.IntN(accounts)
					amount := int64(rng.IntN(50))
					through := rng.IntN(2) == 0
					err := c.DB.Transact(ctx, func(tr *distash.Tx) error {
						a, err := readThrough(tr, from)
						if err != nil {
							return err
						}
						b, err := readThrough(tr, to)
						if err != nil {
							return err
						}
						if from == to {
							return nil
						}
						a, b = a-amount, b+amount
						tr.Set(dataKey(from), distash.EncodeInt64(a))
						tr.Set(dataKey(to), distash.EncodeInt64(b))
						if through {
							tr.Set(cacheKey(from), distash.EncodeInt64(a))
							tr.Set(cacheKey(to), distash.EncodeInt64(b))
						} else {
							tr.Clear(cacheKey(from))
							tr.Clear(cacheKey(to))
						}
						return nil
					})
					if err != nil {
						t.Error(err)
						return
					}
					transfers.Add(1)
				} else {
					err := c.DB.Transact(ctx, func(tr *distash.Tx) error {
						// Read-through of every account, batched: the cache
						// first, then the data of the misses, filling them.
						cacheKeys := make([][]byte, accounts)
						for i := range cacheKeys {
							cacheKeys[i] = cacheKey(i)
						}
						cached, err := tr.GetMulti(cacheKeys)
						if err != nil {
							return err
						}
						var missKeys [][]byte
						var missIdx []int
						for i, v := range cached {
							if v == nil {
								missKeys, missIdx = append(missKeys, dataKey(i)), append(missIdx, i)
							}
						}
						data, err := tr.GetMulti(missKeys)
						if err != nil {
							return err
						}
						for j, i := range missIdx {
							cached[i] = data[j]
							tr.Set(cacheKey(i), data[j])
						}
						var sum int64
						for _, v := range cached {
							sum += distash.Int64(v)
						}
						if sum != accounts*initial {
							violations.Add(1)
							t.Errorf("audit saw total %d, want %d", sum, accounts*initial)
						}
						return nil
					})
					if err != nil {
						t.Error(err)
						return
					}
					audits.Add(1)
				}
			}
		}(uint64(cl))
	}
	wg.Wait()
	t.Logf("%d transfers, %d audits, %d violations", transfers.Load(), audits.Load(), violations.Load())
	if transfers.Load() == 0 || audits.Load() == 0 {
		t.Fatal("workload did nothing")
	}
	err = c.DB.ReadTransact(ctx, func(tr *distash.Tx) error {
		var sum int64
		for i := 0; i < accounts; i++ {
			vals, err := tr.GetMulti([][]byte{dataKey(i), cacheKey(i)})
			if err != nil {
				return err
			}
			sum += distash.Int64(vals[0])
			if vals[1] != nil && !bytes.Equal(vals[0], vals[1]) {
				t.Errorf("account %d: cached %d, durable %d", i, distash.Int64(vals[1]), distash.Int64(vals[0]))
			}
		}
		if sum != accounts*initial {
			t.Errorf("final total %d, want %d", sum, accounts*initial)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

const smallCache = `
[[pool]]
name = "cache"
prefix = "c/"
medium = "dram"
mode = "ephemeral"
engine = "memory"
stashes = 1
replication = 1
capacity = "1MiB"
eviction = "lru"

[[pool]]
name = "data"
prefix = "d/"
medium = "ssd"
mode = "durable"
engine = "pebble"
stashes = 1
replication = 1
capacity = "64KiB"
`

// TestEphemeralPoolStaysWithinCapacity writes 50 MiB into a 1 MiB
// ephemeral pool: resident bytes never exceed capacity, evicted keys read
// absent and surviving keys read their latest value.
func TestEphemeralPoolStaysWithinCapacity(t *testing.T) {
	c := startCluster(t, smallCache)
	ctx := ctxT(t, 120*time.Second)
	const valueSize, keys, perTxn = 10_000, 500, 10
	total := 50 << 20
	rounds := (total + valueSize*keys - 1) / (valueSize * keys)
	value := func(i, r int) []byte {
		v := bytes.Repeat([]byte{byte(r)}, valueSize)
		copy(v, fmt.Sprintf("key %d round %d;", i, r))
		return v
	}
	capacity := int64(1 << 20)
	maxResident := int64(0)
	for r := 0; r < rounds; r++ {
		for i := 0; i < keys; i += perTxn {
			err := c.DB.Transact(ctx, func(tr *distash.Tx) error {
				for j := i; j < i+perTxn; j++ {
					tr.Set([]byte(fmt.Sprintf("c/k%04d", j)), value(j, r))
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			for _, st := range c.Server.Stashes() {
				if st.Pool == "cache" {
					maxResident = max(maxResident, st.EngineBytes)
					if st.EngineBytes > capacity {
						t.Fatalf("round %d: cache stash holds %d bytes, capacity %d", r, st.EngineBytes, capacity)
					}
				}
			}
		}
	}
	// Let the window drain into the engine, then read everything.
	time.Sleep(200 * time.Millisecond)
	present := 0
	err := c.DB.ReadTransact(ctx, func(tr *distash.Tx) error {
		present = 0
		for i := 0; i < keys; i++ {
			v, err := tr.Get([]byte(fmt.Sprintf("c/k%04d", i)))
			if err != nil {
				return err
			}
			if v == nil {
				continue
			}
			present++
			if !bytes.Equal(v, value(i, rounds-1)) {
				t.Fatalf("key %d reads an older value: %.30q", i, v)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var evictions int64
	for _, st := range c.Server.Stashes() {
		if st.Pool == "cache" {
			evictions = st.Evictions
			if st.EngineBytes > capacity {
				t.Fatalf("final resident %d > capacity %d", st.EngineBytes, capacity)
			}
		}
	}
	t.Logf("wrote %d MiB in %d rounds; max resident %d bytes; %d of %d keys survive; %d evictions", rounds*valueSize*keys>>20, rounds, maxResident, present, keys, evictions)
	if evictions == 0 || present == keys {
		t.Fatalf("nothing was evicted (evictions %d, present %d)", evictions, present)
	}
	if present == 0 {
		t.Fatal("every key was evicted: the cache holds nothing")
	}
}

// TestDurablePoolFullRefusesWholeTransaction fills a 64 KiB durable pool:
// the next transaction fails with ErrPoolFull and applies nothing (not even
// its write to another pool), earlier data is intact, and after a clear the
// pool takes writes again.
func TestDurablePoolFullRefusesWholeTransaction(t *testing.T) {
	c := startCluster(t, smallCache)
	ctx := ctxT(t, 60*time.Second)
	value := bytes.Repeat([]byte("x"), 1000)
	var written int
	var fullErr error
	for i := 0; i < 200; i++ {
		err := c.DB.Transact(ctx, func(tr *distash.Tx) error {
			tr.Set([]byte(fmt.Sprintf("d/k%04d", i)), value)
			tr.Set([]byte(fmt.Sprintf("c/k%04d", i)), value)
			return nil
		})
		if err != nil {
			fullErr = err
			break
		}
		written++
	}
	if !errors.Is(fullErr, distash.ErrPoolFull) {
		t.Fatalf("after %d writes: err = %v, want ErrPoolFull", written, fullErr)
	}
	if written < 50 || written > 66 {
		t.Fatalf("pool of 64 KiB took %d writes of ~1 KB", written)
	}
	t.Logf("pool full after %d writes: %v", written, fullErr)
	err := c.DB.ReadTransact(ctx, func(tr *distash.Tx) error {
		for i := 0; i < written; i++ {
			v, err := tr.Get([]byte(fmt.Sprintf("d/k%04d", i)))
			if err != nil {
				return err
			}
			if !bytes.Equal(v, value) {
				t.Fatalf("d/k%04d lost after the pool filled", i)
			}
		}
		v, err := tr.Get([]byte(fmt.Sprintf("c/k%04d", written)))
		if err != nil {
			return err
		}
		if v != nil {
			t.Fatal("the refused transaction's cache write was applied")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.DB.Transact(ctx, func(tr *distash.Tx) error { tr.ClearRange([]byte("d/k0000"), []byte("d/k0030")); return nil }); err != nil {
		t.Fatal(err)
	}
	wait.Every(t, 20*time.Millisecond, 10*time.Second, "a write after the clear", func() bool {
		err := c.DB.Transact(ctx, func(tr *distash.Tx) error { tr.Set([]byte("d/again"), value); return nil })
		if err != nil && !errors.Is(err, distash.ErrPoolFull) {
			t.Fatalf("write after clear: %v", err)
		}
		return err == nil
	})
}
