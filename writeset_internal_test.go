package distash

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/google/btree"
)

// TestWriteSetMatchesBTree runs random puts, gets, range scans and range
// deletes on a writeSet and on a B-tree side by side, across the move from
// the small slice to the tree, and requires the same answers.
func TestWriteSetMatchesBTree(t *testing.T) {
	for seed := uint64(0); seed < 200; seed++ {
		rng := rand.New(rand.NewPCG(seed, 1))
		var s writeSet
		model := btree.NewG(8, lessLocal)
		keys := 4 + rng.IntN(3*smallWrites) // some seeds stay small, some grow past it
		key := func() []byte { return []byte(fmt.Sprintf("k%03d", rng.IntN(keys))) }
		for step := 0; step < 300; step++ {
			switch op := rng.IntN(10); {
			case op < 5:
				w := &localWrite{key: key(), value: []byte(fmt.Sprint(step)), present: true, baseKnown: true}
				s.put(w)
				model.ReplaceOrInsert(w)
			case op < 7:
				k := key()
				got, ok := s.get(k)
				want, wok := model.Get(&localWrite{key: k})
				if ok != wok || got != want {
					t.Fatalf("seed %d step %d: get %s = %v %v, want %v %v", seed, step, k, got, ok, want, wok)
				}
			case op < 9:
				b, e := key(), key()
				if rng.IntN(8) == 0 {
					e = nil // the end of the key space: nothing is below it
				}
				var got, want [][]byte
				limit := 1 + rng.IntN(5)
				s.ascendRange(b, e, func(w *localWrite) bool { got = append(got, w.key); return len(got) < limit })
				model.AscendRange(&localWrite{key: b}, &localWrite{key: e}, func(w *localWrite) bool { want = append(want, w.key); return len(want) < limit })
				if !equalKeys(got, want) {
					t.Fatalf("seed %d step %d: range [%s, %s) = %q, want %q", seed, step, b, e, got, want)
				}
			default:
				b, e := key(), key()
				s.deleteRange(b, e)
				var inside []*localWrite
				model.AscendRange(&localWrite{key: b}, &localWrite{key: e}, func(w *localWrite) bool { inside = append(inside, w); return true })
				for _, w := range inside {
					model.Delete(w)
				}
			}
			if s.empty() != (model.Len() == 0) {
				t.Fatalf("seed %d step %d: empty %v with %d keys in the model", seed, step, s.empty(), model.Len())
			}
		}
		var got, want [][]byte
		s.ascendRange([]byte{}, []byte{0xff}, func(w *localWrite) bool { got = append(got, w.key); return true })
		model.Ascend(func(w *localWrite) bool { want = append(want, w.key); return true })
		if !equalKeys(got, want) {
			t.Fatalf("seed %d: holds %q, want %q", seed, got, want)
		}
	}
}

func equalKeys(a, b [][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}
