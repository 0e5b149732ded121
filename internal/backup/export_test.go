package backup

import (
	"context"

	"github.com/distash/distash"
	"github.com/distash/distash/internal/kv"
)

// WriteForTest applies muts, in order, to db as a restore does: in
// batches of at most txnBytes, each committed twice if twice.
func WriteForTest(ctx context.Context, db *distash.DB, txnBytes int, muts []kv.Mutation, twice bool) error {
	w := &writer{db: db, o: &RestoreOptions{TxnBytes: txnBytes}, commitTwice: twice}
	for _, m := range muts {
		if err := w.mutate(ctx, m); err != nil {
			return err
		}
	}
	return w.flush(ctx)
}
