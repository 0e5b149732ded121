package blog

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/distash/distash/internal/kv"
)

func TestLogMutationsCopiesBackedUpRangesInOrder(t *testing.T) {
	cfg := &Config{ID: "ab", Ranges: []kv.KeyRange{{Begin: []byte("d/"), End: []byte("d0")}, {Begin: []byte("f/"), End: []byte("f0")}}}
	c, err := WatchConfig(nil, []kv.Mutation{{Type: kv.MutSet, Key: ConfigKey, Param: cfg.Encode()}})
	if err != nil || c == nil {
		t.Fatalf("WatchConfig: %v, %v", c, err)
	}
	big := bytes.Repeat([]byte("v"), 100_000)
	muts := []kv.Mutation{
		{Type: kv.MutSet, Key: []byte("d/1"), Param: []byte("one")},
		{Type: kv.MutSet, Key: []byte("e/1"), Param: []byte("not backed up")},
		{Type: kv.MutClearRange, Key: []byte("a"), Param: []byte("f/5")},
		{Type: kv.MutAdd, Key: []byte("f/2"), Param: kv.EncodeInt64(3)},
		{Type: kv.MutSet, Key: []byte("f/3"), Param: big},
	}
	out := c.LogMutations(42, muts)
	if len(out) < 2 {
		t.Fatalf("%d parts, want the 100 KB value split", len(out))
	}
	var joined []byte
	for i, m := range out {
		v, part, err := ParseLogKey("ab", m.Key)
		if err != nil || v != 42 || part != uint32(i) {
			t.Fatalf("key %q: version %d part %d err %v", m.Key, v, part, err)
		}
		if len(m.Param) > logPartBytes {
			t.Fatalf("part of %d bytes", len(m.Param))
		}
		joined = append(joined, m.Param...)
	}
	got, err := DecodeMutations(joined)
	if err != nil {
		t.Fatal(err)
	}
	want := []kv.Mutation{
		{Type: kv.MutSet, Key: []byte("d/1"), Param: []byte("one")},
		{Type: kv.MutClearRange, Key: []byte("d/"), Param: []byte("d0")},
		{Type: kv.MutClearRange, Key: []byte("f/"), Param: []byte("f/5")},
		{Type: kv.MutAdd, Key: []byte("f/2"), Param: kv.EncodeInt64(3)},
		{Type: kv.MutSet, Key: []byte("f/3"), Param: big},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded %v\nwant %v", got, want)
	}
	if c.LogMutations(43, muts[1:2]) != nil {
		t.Fatal("a batch outside the ranges logged something")
	}
	if r := LogRange("ab"); !(bytes.Compare(r.Begin, out[0].Key) <= 0 && bytes.Compare(out[len(out)-1].Key, r.End) < 0) {
		t.Fatal("log keys outside LogRange")
	}
	if c, _ := WatchConfig(c, []kv.Mutation{{Type: kv.MutClear, Key: ConfigKey}}); c != nil {
		t.Fatal("clearing the record kept the capture")
	}
}

func TestDecodeMutationsRefusesDamage(t *testing.T) {
	enc := AppendMutation(nil, kv.Mutation{Type: kv.MutSet, Key: []byte("k"), Param: []byte("value")})
	for i := 0; i < len(enc); i++ {
		if _, err := DecodeMutations(enc[:i]); i > 0 && err == nil {
			t.Errorf("cut at %d decoded", i)
		}
	}
	if _, err := DecodeMutations(append([]byte{99}, enc[1:]...)); err == nil {
		t.Error("unknown type decoded")
	}
}
