package layout

import (
	"fmt"
	"testing"
)

// TestSpreadByteIsEven checks that similar keys spread evenly over 16
// shards, as DiStash's initial shard map splits a pool on the spread byte.
func TestSpreadByteIsEven(t *testing.T) {
	const n, shards = 20000, 16
	var count [shards]int
	for i := 0; i < n; i++ {
		count[int(SpreadByte([]byte(fmt.Sprintf("user%06d", i))))*shards/256]++
	}
	for s, c := range count {
		if c < n/shards*8/10 || c > n/shards*12/10 {
			t.Fatalf("shard %d has %d of %d keys: %v", s, c, n, count)
		}
	}
}

func TestBytesRoundTrip(t *testing.T) {
	b := AppendBytes(nil, []byte("abc"))
	b = AppendBytes(b, nil)
	x, rest, err := ReadBytes(b)
	if err != nil || string(x) != "abc" {
		t.Fatal(x, err)
	}
	y, rest, err := ReadBytes(rest)
	if err != nil || len(y) != 0 || len(rest) != 0 {
		t.Fatal(y, rest, err)
	}
	if _, _, err := ReadBytes([]byte{5, 1}); err == nil {
		t.Fatal("short input accepted")
	}
	if string(PrefixEnd([]byte("a\xff"))) != "b" || string(KeyAfter([]byte("a"))) != "a\x00" {
		t.Fatal("PrefixEnd/KeyAfter")
	}
}

func TestMediumRank(t *testing.T) {
	prev := -1
	for _, m := range []string{"dram", "nvm", "ssd", "hdd"} {
		r, ok := MediumRank(m)
		if !ok || r <= prev {
			t.Fatalf("%s: %d %v", m, r, ok)
		}
		prev = r
	}
	if _, ok := MediumRank("tape"); ok {
		t.Fatal("tape ranked")
	}
}
