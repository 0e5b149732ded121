package dd

import (
	"bytes"
	"testing"

	"github.com/distash/distash/internal/kv"
)

func TestPlanShards(t *testing.T) {
	team := []kv.Tag{1, 2}
	other := []kv.Tag{3, 4}
	mid := func(begin, end []byte) []byte { return append(bytes.Clone(begin), 'm') }
	shards := []Shard{
		{Begin: []byte("d/"), End: []byte("d/b"), Pool: "data", Team: team, Bytes: 10},
		{Begin: []byte("d/b"), End: []byte("d/c"), Pool: "data", Team: team, Bytes: 10},   // merges with the first
		{Begin: []byte("d/c"), End: []byte("d/d"), Pool: "data", Team: team, Bytes: 5000}, // splits at d/cm
		{Begin: []byte("d/d"), End: []byte("d/e"), Pool: "data", Team: team, Bytes: 10},
		{Begin: []byte("d/e"), End: []byte("d/f"), Pool: "data", Team: other, Bytes: 10}, // another team: no merge
		{Begin: []byte("d/f"), End: []byte("d0"), Pool: "data", Team: other, Bytes: 900}, // together too big to merge
	}
	got := PlanShards(shards, []byte("d/"), 1000, mid)
	if len(got) != 2 {
		t.Fatalf("%d changes, want a split and a merge: %+v", len(got), got)
	}
	if !got[0].Split || !bytes.Equal(got[0].At, []byte("d/cm")) {
		t.Errorf("first change %+v, want the split of [d/c, d/d) at d/cm", got[0])
	}
	if got[1].Split || !bytes.Equal(got[1].At, []byte("d/b")) {
		t.Errorf("second change %+v, want the merge at d/b", got[1])
	}

	// A split key the sample cannot give, or one outside the shard, is no split.
	none := func(begin, end []byte) []byte { return nil }
	if got := PlanShards(shards[2:3], []byte("d/"), 1000, none); len(got) != 0 {
		t.Errorf("split without a key: %+v", got)
	}
	outside := func(begin, end []byte) []byte { return []byte("zz") }
	if got := PlanShards(shards[2:3], []byte("d/"), 1000, outside); len(got) != 0 {
		t.Errorf("split outside the shard: %+v", got)
	}
	// Never across the pool's prefix boundary.
	cross := []Shard{
		{Begin: []byte("c/x"), End: []byte("c0"), Pool: "data", Team: team, Bytes: 1},
		{Begin: []byte("c0"), End: []byte("d/"), Pool: "data", Team: team, Bytes: 1},
	}
	if got := PlanShards(cross, []byte("c/"), 1000, mid); len(got) != 0 {
		t.Errorf("merge across the prefix boundary: %+v", got)
	}
}
