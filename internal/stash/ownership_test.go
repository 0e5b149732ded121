package stash

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/distash/distash/internal/kv"
)

// TestReadableKeyIsReadableOfThePoint: the point reads' check answers as
// readable does for [key, key\x00), on random tables of current and past
// ranges (adjacent, overlapping past ones, empty bounds) and keys at and
// between their bounds.
func TestReadableKeyIsReadableOfThePoint(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	key := func() []byte {
		if rng.IntN(8) == 0 {
			return []byte{}
		}
		return fmt.Appendf(nil, "k%02d", rng.IntN(20))
	}
	span := func() (b, e []byte) {
		b, e = key(), key()
		if string(b) > string(e) {
			b, e = e, b
		}
		return b, e
	}
	agreed, yes := 0, 0
	for table := 0; table < 2000; table++ {
		var o ownership
		for range rng.IntN(4) {
			b, e := span()
			st := serving
			if rng.IntN(3) == 0 {
				st = fetching
			}
			o.cur = append(o.cur, ownRange{Begin: b, End: e, State: st, From: kv.Version(rng.IntN(10))})
		}
		for range rng.IntN(3) {
			b, e := span()
			from := kv.Version(rng.IntN(10))
			o.past = append(o.past, ownRange{Begin: b, End: e, State: serving, From: from, Until: from + kv.Version(rng.IntN(5))})
		}
		for range 20 {
			k, v := key(), kv.Version(rng.IntN(12))
			want := o.readable(k, kv.KeyAfter(k), v)
			if got := o.readableKey(k, v); got != want {
				t.Fatalf("cur %v past %v: readableKey(%q, %d) = %v, readable = %v", o.cur, o.past, k, v, got, want)
			}
			agreed++
			if want {
				yes++
			}
		}
	}
	if yes == 0 || yes == agreed {
		t.Fatalf("%d of %d readable: the cases do not exercise both answers", yes, agreed)
	}
}
