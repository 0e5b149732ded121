package distash_test

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/distash/distash"
	"github.com/distash/distash/internal/testutil/register"
)

// TestSingleKeyHistoriesAreLinearizable runs concurrent single-key reads,
// writes and swaps (a read and a write in one transaction, reading at a
// recent version: SetRecentReadVersion) on keys of both pools (the cache
// pool reads through replicas chosen by load) and checks the history with
// porcupine: once with every goroutine on one client, whose read versions
// are shared, and once with a client each, whose first reads mostly race
// their read versions (readRacingVersion).
func TestSingleKeyHistoriesAreLinearizable(t *testing.T) {
	// Swaps read at a version up to a second old: certainly not a fresh one.
	defer distash.SetRecentReadVersionAge(time.Second)()
	c := startCluster(t, twoPools)
	ctx := ctxT(t, 60*time.Second)
	t.Run("one client", func(t *testing.T) {
		dbs := make([]*distash.DB, 8)
		for i := range dbs {
			dbs[i] = c.DB
		}
		checkLinearizable(t, dbs, "1")
	})
	t.Run("a client each", func(t *testing.T) {
		dbs := make([]*distash.DB, 8)
		for i := range dbs {
			db, err := distash.Open(ctx, c.Server.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			dbs[i] = db
		}
		checkLinearizable(t, dbs, "2")
		var won, lost int64
		for _, db := range dbs {
			w, l := db.FirstReadRaces()
			won, lost = won+w, lost+l
		}
		t.Logf("first reads racing their read versions: %d kept, %d read again", won, lost)
		if won == 0 {
			t.Fatal("no first read raced its read version and was kept")
		}
	})
}

// checkLinearizable runs the operations, goroutine cl on dbs[cl], on keys
// named with tag, and checks their history.
func checkLinearizable(t *testing.T, dbs []*distash.DB, tag string) {
	ctx := ctxT(t, 60*time.Second)
	keys := []string{"d/a" + tag, "d/b" + tag, "c/a" + tag, "c/b" + tag}
	var mu sync.Mutex
	var history []porcupine.Operation
	var wg sync.WaitGroup
	deadline := time.Now().Add(1500 * time.Millisecond)
	for cl := range dbs {
		wg.Add(1)
		go func(cl int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(cl), 5))
			for i := 0; time.Now().Before(deadline); i++ {
				k := keys[rng.IntN(len(keys))]
				in := register.Input{Key: k}
				var out string
				call := time.Now().UnixNano()
				var err error
				switch rng.IntN(3) {
				case 0:
					in.Write, in.Value = true, fmt.Sprintf("%d-%d", cl, i)
					err = dbs[cl].Transact(ctx, func(tr *distash.Tx) error { tr.Set([]byte(k), []byte(in.Value)); return nil })
				case 1:
					in.Swap, in.Value = true, fmt.Sprintf("%d-%d", cl, i)
					err = dbs[cl].Transact(ctx, func(tr *distash.Tx) error {
						tr.Options().SetRecentReadVersion()
						v, err := tr.Get([]byte(k))
						out = string(v)
						tr.Set([]byte(k), []byte(in.Value))
						return err
					})
				default:
					err = dbs[cl].ReadTransact(ctx, func(tr *distash.Tx) error {
						v, err := tr.Get([]byte(k))
						out = string(v)
						return err
					})
				}
				ret := time.Now().UnixNano()
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				history = append(history, porcupine.Operation{ClientId: cl, Input: in, Output: out, Call: call, Return: ret})
				mu.Unlock()
			}
		}(cl)
	}
	wg.Wait()
	t.Logf("checking %d operations", len(history))
	if res := porcupine.CheckOperationsTimeout(register.Model, history, 30*time.Second); res != porcupine.Ok {
		t.Fatalf("history is not linearizable (result %v)", res)
	}
}
