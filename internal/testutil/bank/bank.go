// Package bank is the workload the cluster fault tests run: transfers
// between accounts of a durable pool, written through to a cache pool in
// the same transaction, and a writer of keys that records which commits
// were acknowledged. Its audits state the invariants: the total never
// changes, the cache never disagrees with the data, and every
// acknowledged write is readable.
package bank

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distash/distash"
)

// ClusterTOML is the configuration of the cluster tests that run the bank:
// a DRAM cache pool (prefix c/, 2 stashes) and a durable Pebble pool
// (prefix d/, 3 stashes), both with replication 2, and three log replicas.
const ClusterTOML = `
[cluster]
mvcc_window = "5s"

[log]
replicas = 3

[[pool]]
name = "cache"
prefix = "c/"
medium = "dram"
mode = "ephemeral"
engine = "memory"
stashes = 2
replication = 2
capacity = "64MiB"
eviction = "lru"

[[pool]]
name = "data"
prefix = "d/"
medium = "ssd"
mode = "durable"
engine = "pebble"
stashes = 3
replication = 2
capacity = "unlimited"
`

// Bank is a set of accounts: Data+"acct:NNN" in a durable pool and their
// cached copies Cache+"acct:NNN" in a cache pool.
type Bank struct {
	DB          *distash.DB
	Data, Cache string // key prefixes of the durable and the cache pool
	Accounts    int
	Initial     int64 // each account's opening balance

	// Commits counts acknowledged transfers; LastCommit is the unix ns of
	// the latest (any goroutine's).
	Commits    atomic.Int64
	LastCommit atomic.Int64
	// MaxGap is the longest time between two acknowledged commits seen by
	// Track.
	maxGap atomic.Int64
}

func (b *Bank) account(i int) []byte { return fmt.Appendf(nil, "%sacct:%03d", b.Data, i) }
func (b *Bank) cached(i int) []byte  { return fmt.Appendf(nil, "%sacct:%03d", b.Cache, i) }

func enc(v int64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(v))
	return b[:]
}

func dec(b []byte) (int64, error) {
	if len(b) != 8 {
		return 0, fmt.Errorf("balance of %d bytes", len(b))
	}
	return int64(binary.BigEndian.Uint64(b)), nil
}

// Total is the sum of all balances.
func (b *Bank) Total() int64 { return int64(b.Accounts) * b.Initial }

// Open writes every account's opening balance (and its cached copy).
func (b *Bank) Open(ctx context.Context) error {
	return b.DB.Transact(ctx, func(tr *distash.Tx) error {
		for i := 0; i < b.Accounts; i++ {
			tr.Set(b.account(i), enc(b.Initial))
			tr.Set(b.cached(i), enc(b.Initial))
		}
		return nil
	})
}

func (b *Bank) noteCommit() {
	b.Commits.Add(1)
	now := time.Now().UnixNano()
	if last := b.LastCommit.Swap(now); last != 0 && now-last > b.maxGap.Load() {
		b.maxGap.Store(now - last)
	}
}

// MaxGap is the longest time between two acknowledged transfers.
func (b *Bank) MaxGap() time.Duration { return time.Duration(b.maxGap.Load()) }

// ResetGap forgets the gaps seen so far.
func (b *Bank) ResetGap() { b.maxGap.Store(0) }

// Transfer moves a random amount between two random accounts, reading the
// balances from the durable pool and writing both pools. Half the
// transfers read at the client's recent version (SetRecentReadVersion),
// so the audits check that path too: a read its commit failed to check
// would lose or make money.
func (b *Bank) Transfer(ctx context.Context, rng *rand.Rand) error {
	from, to := rng.IntN(b.Accounts), rng.IntN(b.Accounts)
	if from == to {
		to = (to + 1) % b.Accounts
	}
	amount := int64(rng.IntN(10) + 1)
	recent := rng.IntN(2) == 0
	err := b.DB.Transact(ctx, func(tr *distash.Tx) error {
		if recent {
			tr.Options().SetRecentReadVersion()
		}
		fv, err := tr.Get(b.account(from))
		if err != nil {
			return err
		}
		tv, err := tr.Get(b.account(to))
		if err != nil {
			return err
		}
		f, err := dec(fv)
		if err != nil {
			return fmt.Errorf("account %d: %w", from, err)
		}
		t, err := dec(tv)
		if err != nil {
			return fmt.Errorf("account %d: %w", to, err)
		}
		tr.Set(b.account(from), enc(f-amount))
		tr.Set(b.account(to), enc(t+amount))
		tr.Set(b.cached(from), enc(f-amount))
		tr.Set(b.cached(to), enc(t+amount))
		return nil
	})
	if err == nil {
		b.noteCommit()
	}
	return err
}

// Run transfers on workers goroutines until ctx ends. Errors (a kill in
// progress) are counted, not fatal: Transact already retried what it may.
func (b *Bank) Run(ctx context.Context, workers int, seed uint64) (failures *atomic.Int64, wait func()) {
	failures = new(atomic.Int64)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			for ctx.Err() == nil {
				tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				if err := b.Transfer(tctx, rng); err != nil && ctx.Err() == nil {
					failures.Add(1)
				}
				cancel()
			}
		}(w)
	}
	return failures, wg.Wait
}

// Audit reads every account and its cached copy in one transaction: the
// total must be Total(), and a cached copy that exists must equal its
// account.
func (b *Bank) Audit(ctx context.Context) error {
	return b.DB.ReadTransact(ctx, func(tr *distash.Tx) error {
		keys := make([][]byte, 0, 2*b.Accounts)
		for i := 0; i < b.Accounts; i++ {
			keys = append(keys, b.account(i), b.cached(i))
		}
		vals, err := tr.GetMulti(keys)
		if err != nil {
			return err
		}
		var sum int64
		for i := 0; i < b.Accounts; i++ {
			v, err := dec(vals[2*i])
			if err != nil {
				return &Violation{fmt.Sprintf("account %d: %v", i, err)}
			}
			sum += v
			if c := vals[2*i+1]; c != nil {
				cv, err := dec(c)
				if err != nil || cv != v {
					return &Violation{fmt.Sprintf("account %d holds %d but its cached copy %d (%v)", i, v, cv, err)}
				}
			}
		}
		if sum != b.Total() {
			return &Violation{fmt.Sprintf("the balances sum to %d, not %d", sum, b.Total())}
		}
		return nil
	})
}

// AuditRange is Audit by range reads: the accounts, scanned in one
// GetRange (across however many shards and stashes hold them, moving or
// not), must be exactly Accounts and sum to Total().
func (b *Bank) AuditRange(ctx context.Context) error {
	return b.DB.ReadTransact(ctx, func(tr *distash.Tx) error {
		begin := fmt.Appendf(nil, "%sacct:", b.Data)
		end := fmt.Appendf(nil, "%sacct;", b.Data)
		kvs, err := tr.GetRange(begin, end, distash.RangeOptions{})
		if err != nil {
			return err
		}
		if len(kvs) != b.Accounts {
			return &Violation{fmt.Sprintf("a range scan of the accounts found %d, not %d", len(kvs), b.Accounts)}
		}
		var sum int64
		for i, kv := range kvs {
			if want := b.account(i); string(kv.Key) != string(want) {
				return &Violation{fmt.Sprintf("a range scan found %q where %q belongs", kv.Key, want)}
			}
			v, err := dec(kv.Value)
			if err != nil {
				return &Violation{fmt.Sprintf("account %d: %v", i, err)}
			}
			sum += v
		}
		if sum != b.Total() {
			return &Violation{fmt.Sprintf("a range scan's balances sum to %d, not %d", sum, b.Total())}
		}
		return nil
	})
}

// Violation is an audit that found a broken invariant (not a retryable
// failure to read).
type Violation struct{ What string }

func (v *Violation) Error() string { return "bank invariant broken: " + v.What }

// IsViolation reports whether err is a broken invariant.
func IsViolation(err error) bool {
	var v *Violation
	return errors.As(err, &v)
}

// Writer writes new keys Prefix+"w:<id>:<n>" one per transaction and
// records the acknowledged ones.
type Writer struct {
	DB     *distash.DB
	Prefix string
	// Pause is how long each worker waits between writes (0: none).
	Pause time.Duration

	mu    sync.Mutex
	acked map[string]string // Protected by mu.
}

// Run writes until ctx ends on workers goroutines.
func (w *Writer) Run(ctx context.Context, workers int) (wait func()) {
	w.mu.Lock()
	if w.acked == nil {
		w.acked = map[string]string{}
	}
	w.mu.Unlock()
	var wg sync.WaitGroup
	for g := 0; g < workers; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				k := fmt.Sprintf("%sw:%d:%d:%08d", w.Prefix, g, time.Now().UnixNano(), i)
				v := fmt.Sprintf("v%d", i)
				tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				err := w.DB.Transact(tctx, func(tr *distash.Tx) error {
					tr.Set([]byte(k), []byte(v))
					return nil
				})
				cancel()
				if err == nil {
					w.mu.Lock()
					w.acked[k] = v
					w.mu.Unlock()
				}
				if w.Pause > 0 {
					select {
					case <-ctx.Done():
					case <-time.After(w.Pause):
					}
				}
			}
		}(g)
	}
	return wg.Wait
}

// Count is how many writes were acknowledged.
func (w *Writer) Count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.acked)
}

// Acked returns a copy of the acknowledged writes.
func (w *Writer) Acked() map[string]string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]string, len(w.acked))
	for k, v := range w.acked {
		out[k] = v
	}
	return out
}

// Check reads every acknowledged write (in batches, each its own
// transaction) and returns how many are missing or wrong.
func (w *Writer) Check(ctx context.Context, db *distash.DB) (missing int, err error) {
	acked := w.Acked()
	keys := make([]string, 0, len(acked))
	for k := range acked {
		keys = append(keys, k)
	}
	for start := 0; start < len(keys); start += 500 {
		batch := keys[start:min(start+500, len(keys))]
		var bad int
		err := db.ReadTransact(ctx, func(tr *distash.Tx) error {
			bad = 0
			req := make([][]byte, len(batch))
			for i, k := range batch {
				req[i] = []byte(k)
			}
			vals, err := tr.GetMulti(req)
			if err != nil {
				return err
			}
			for i, k := range batch {
				if string(vals[i]) != acked[k] {
					bad++
				}
			}
			return nil
		})
		if err != nil {
			return missing, err
		}
		missing += bad
	}
	return missing, nil
}
