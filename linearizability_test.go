package distash_test

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/distash/distash"
)

type kvInput struct {
	write bool
	key   string
	value string
}

// kvModel is a register per key: a read returns the last written value.
var kvModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		for _, op := range history {
			k := op.Input.(kvInput).key
			byKey[k] = append(byKey[k], op)
		}
		var out [][]porcupine.Operation
		for _, ops := range byKey {
			out = append(out, ops)
		}
		return out
	},
	Init: func() any { return "" },
	Step: func(state, input, output any) (bool, any) {
		in := input.(kvInput)
		if in.write {
			return true, in.value
		}
		return output.(string) == state.(string), state
	},
	DescribeOperation: func(input, output any) string {
		in := input.(kvInput)
		if in.write {
			return fmt.Sprintf("set(%s, %s)", in.key, in.value)
		}
		return fmt.Sprintf("get(%s) -> %s", in.key, output)
	},
}

// TestSingleKeyHistoriesAreLinearizable runs concurrent single-key reads
// and writes on keys of both pools (the cache pool reads through
// replicas chosen by load) and checks the history with porcupine.
func TestSingleKeyHistoriesAreLinearizable(t *testing.T) {
	c := startCluster(t, twoPools)
	ctx := ctxT(t, 60*time.Second)
	keys := []string{"d/a", "d/b", "c/a", "c/b"}
	var mu sync.Mutex
	var history []porcupine.Operation
	var wg sync.WaitGroup
	deadline := time.Now().Add(1500 * time.Millisecond)
	for cl := 0; cl < 8; cl++ {
		wg.Add(1)
		go func(cl int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(cl), 5))
			for i := 0; time.Now().Before(deadline); i++ {
				k := keys[rng.IntN(len(keys))]
				in := kvInput{key: k}
				var out string
				call := time.Now().UnixNano()
				var err error
				if rng.IntN(2) == 0 {
					in.write, in.value = true, fmt.Sprintf("%d-%d", cl, i)
					err = c.DB.Transact(ctx, func(tr *distash.Tx) error { tr.Set([]byte(k), []byte(in.value)); return nil })
				} else {
					err = c.DB.ReadTransact(ctx, func(tr *distash.Tx) error {
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
	if res := porcupine.CheckOperationsTimeout(kvModel, history, 30*time.Second); res != porcupine.Ok {
		t.Fatalf("history is not linearizable (result %v)", res)
	}
}
