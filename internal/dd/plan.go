package dd

import (
	"bytes"
	"slices"

	"github.com/distash/distash/internal/kv"
)

// Shard is what the tracker knows of one shard of a pool.
type Shard struct {
	Begin, End []byte
	Pool       string
	Team       []kv.Tag
	Bytes      int64 // estimated from the team's byte samples
}

// Change is a split or a merge the tracker asks for.
type Change struct {
	Split bool
	// Split: the shard and the key it splits at. Merge: the first shard,
	// whose end (= At) is the boundary that goes away.
	Shard Shard
	At    []byte
}

// MergeFraction: two neighbours merge when together they hold less than
// this fraction of the shard size limit, well below the split point, so a
// merged shard is not split again at once.
const MergeFraction = 0.25

// PlanShards decides, for the shards of one pool in key order, which to
// split (over maxBytes, at the key splitKey gives, never at its begin) and
// which neighbours to merge (the same team, together under MergeFraction
// of maxBytes, and not across the pool's prefix boundary: they are both
// inside prefix). A shard is in at most one change.
func PlanShards(shards []Shard, prefix []byte, maxBytes int64, splitKey func(begin, end []byte) []byte) []Change {
	var out []Change
	used := make([]bool, len(shards))
	for i, sh := range shards {
		if sh.Bytes <= maxBytes {
			continue
		}
		at := splitKey(sh.Begin, sh.End)
		if at == nil || bytes.Compare(at, sh.Begin) <= 0 || (sh.End != nil && bytes.Compare(at, sh.End) >= 0) {
			continue
		}
		out = append(out, Change{Split: true, Shard: sh, At: at})
		used[i] = true
	}
	inPool := func(sh Shard) bool {
		return bytes.HasPrefix(sh.Begin, prefix) && (sh.End == nil || bytes.Compare(sh.End, kv.PrefixEnd(prefix)) <= 0)
	}
	for i := 0; i+1 < len(shards); i++ {
		a, b := shards[i], shards[i+1]
		if used[i] || used[i+1] || a.Pool != b.Pool || !inPool(a) || !inPool(b) ||
			!bytes.Equal(a.End, b.Begin) || !slices.Equal(a.Team, b.Team) ||
			float64(a.Bytes+b.Bytes) >= MergeFraction*float64(maxBytes) {
			continue
		}
		out = append(out, Change{Shard: a, At: a.End})
		used[i], used[i+1] = true, true
	}
	return out
}
