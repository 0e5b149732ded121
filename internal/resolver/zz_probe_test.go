package resolver

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/google/btree"
)

func BenchmarkZZDescend(b *testing.B) {
	t := btree.NewG[entry](32, lessEntry)
	for i := range 1_000_000 {
		k := binary.BigEndian.AppendUint64([]byte("user"), uint64(i)*2)
		t.ReplaceOrInsert(mk(k, 1))
	}
	rng := rand.New(rand.NewPCG(1, 1))
	var buf [12]byte
	copy(buf[:], "user")
	var sink entry
	fn := func(e entry) bool { sink = e; return false }
	b.ResetTimer()
	for range b.N {
		binary.BigEndian.PutUint64(buf[4:], rng.Uint64N(2_000_000))
		t.DescendLessOrEqual(mk(buf[:], 0), fn)
	}
	_ = sink
}

func BenchmarkZZGet(b *testing.B) {
	t := btree.NewG[entry](32, lessEntry)
	for i := range 1_000_000 {
		k := binary.BigEndian.AppendUint64([]byte("user"), uint64(i)*2)
		t.ReplaceOrInsert(mk(k, 1))
	}
	rng := rand.New(rand.NewPCG(1, 1))
	var buf [12]byte
	copy(buf[:], "user")
	b.ResetTimer()
	for range b.N {
		binary.BigEndian.PutUint64(buf[4:], rng.Uint64N(2_000_000))
		t.Get(mk(buf[:], 0))
	}
}
