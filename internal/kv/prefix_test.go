package kv

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// TestLessKeysOrdersAsBytesCompare: over random keys built from few byte
// values (so that long shared prefixes, zero bytes and keys that are
// prefixes of others are common), LessKeys agrees with bytes.Compare.
func TestLessKeysOrdersAsBytesCompare(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	key := func() []byte {
		k := make([]byte, rng.IntN(2*KeyPrefixBytes+4))
		for i := range k {
			k[i] = []byte{0, 1, 'a', 0xff}[rng.IntN(4)]
		}
		if rng.IntN(3) == 0 && len(k) > 0 {
			for i := range k[:min(len(k), KeyPrefixBytes+2)] {
				k[i] = 'a' // a long shared prefix
			}
		}
		return k
	}
	for i := 0; i < 200000; i++ {
		a, b := key(), key()
		if rng.IntN(4) == 0 {
			b = append(append([]byte{}, a...), key()...) // a is a prefix of b
		}
		want := bytes.Compare(a, b) < 0
		pa, pb := PrefixOf(a), PrefixOf(b)
		if got := LessKeys(&pa, a, &pb, b); got != want {
			t.Fatalf("LessKeys(%q, %q) = %v, bytes.Compare says %v", a, b, got, want)
		}
	}
}
