package clustertest

import (
	"context"
	"fmt"

	"google.golang.org/grpc"

	"github.com/distash/distash"
	"github.com/distash/distash/internal/wire"
)

// CheckStash checks that the stash with tag, on the node conn reaches,
// holds every key of want with its value: it reads that stash itself (not
// another replica), in batches of 500 keys, each at a fresh read version
// of db.
func CheckStash(ctx context.Context, conn *grpc.ClientConn, db *distash.DB, tag uint32, want map[string]string) error {
	api := wire.NewDiStashClient(conn)
	keys := make([][]byte, 0, len(want))
	for k := range want {
		keys = append(keys, []byte(k))
	}
	for i := 0; i < len(keys); i += 500 {
		batch := keys[i:min(i+500, len(keys))]
		tr, err := db.CreateTransaction(ctx)
		if err != nil {
			return err
		}
		v, err := tr.ReadVersion()
		if err != nil {
			return err
		}
		resp, err := api.Read(ctx, &wire.ReadRequest{Stash: tag, Version: v, Keys: batch})
		if err == nil {
			err = resp.Error.Err()
		}
		if err != nil {
			return err
		}
		for j, k := range batch {
			if got := resp.Values[j]; !got.Present || string(got.Value) != want[string(k)] {
				return fmt.Errorf("%q = %.30q (present %v), want %.30q", k, got.Value, got.Present, want[string(k)])
			}
		}
	}
	return nil
}
