package stash

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/distash/distash/internal/kv"
)

// TestClearIndexMatchesAList checks the index against a plain list of
// clears under random clears, drops and queries.
func TestClearIndexMatchesAList(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	key := func() []byte { return []byte(fmt.Sprintf("k%02d", rng.IntN(40))) }
	for round := 0; round < 50; round++ {
		idx := newClearIndex()
		var list []rangeClear
		v := kv.Version(0)
		dropped := kv.Version(0)
		for step := 0; step < 200; step++ {
			switch r := rng.IntN(10); {
			case r < 4:
				b, e := key(), key()
				if bytes.Compare(b, e) > 0 {
					b, e = e, b
				}
				v++
				idx.add(b, e, v)
				if bytes.Compare(b, e) < 0 {
					list = append(list, rangeClear{version: v, begin: b, end: e})
				}
			case r < 5 && v > dropped:
				target := dropped + kv.Version(rng.IntN(int(v-dropped))+1)
				kept := list[:0]
				for _, rc := range list {
					if rc.version <= target {
						idx.drop(rc.begin, rc.end, target)
					} else {
						kept = append(kept, rc)
					}
				}
				list, dropped = kept, target
			default:
				k := key()
				after := kv.Version(rng.IntN(int(v)+2)) - 1
				upTo := kv.Version(rng.IntN(int(v) + 1))
				want := false
				for _, rc := range list {
					if rc.version > after && rc.version <= upTo && bytes.Compare(k, rc.begin) >= 0 && bytes.Compare(k, rc.end) < 0 {
						want = true
					}
				}
				if got := idx.clearedIn(k, after, upTo); got != want {
					t.Fatalf("round %d step %d: clearedIn(%s, %d, %d) = %v, want %v (clears %v)", round, step, k, after, upTo, got, want, list)
				}
			}
			// Fragments stay disjoint and sorted, none without versions.
			var prev *clearFrag
			idx.frags.Ascend(func(f *clearFrag) bool {
				if len(f.versions) == 0 || bytes.Compare(f.begin, f.end) >= 0 || (prev != nil && bytes.Compare(prev.end, f.begin) > 0) {
					t.Fatalf("round %d step %d: bad fragment [%s, %s) %v after %v", round, step, f.begin, f.end, f.versions, prev)
				}
				prev = f
				return true
			})
		}
	}
}

// BenchmarkReadsAmongManyClears: point and range reads of a window that
// holds 20,000 clears (a load of records written with ClearRange+Set).
func BenchmarkReadsAmongManyClears(b *testing.B) {
	w := newWindow()
	for i := 0; i < 20000; i++ {
		k := []byte(fmt.Sprintf("user%08d", i))
		w.clearRange(kv.Version(i+1), k, append(append([]byte(nil), k...), 1))
		w.put(kv.Version(i+1), k, []byte("v"), true, 0)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		k := []byte(fmt.Sprintf("user%08d", i%20000))
		w.at(k, 30000)
		w.overlay(k, append(k, 1), 30000)
	}
}
