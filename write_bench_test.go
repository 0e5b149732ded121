package distash_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

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
	runClients(b, 11, func(rng *rand.Rand) error {
		k := []byte(fmt.Sprintf("%suser%08d", prefix, rng.IntN(records)))
		return db.Transact(ctx, func(tr *distash.Tx) error { return write(tr, k) })
	})
}
