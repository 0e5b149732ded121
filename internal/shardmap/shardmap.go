// Package shardmap maps key ranges (shards) to the team of stashes that
// holds them. The map lives in the system key space under
// "\xff/keyServers/<begin>" and changes only through committed transactions,
// so every mutation is tagged consistently with the map at its commit
// version; this package encodes and decodes those system keys and keeps the
// in-memory copy that the commit proxy and clients consult.
package shardmap

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"sort"

	"github.com/distash/distash/internal/kv"
)

// KeyServersPrefix starts the shard map's system keys.
var KeyServersPrefix = []byte("\xff/keyServers/")

// SystemTag is the tag of the system stash, which holds the \xff key space.
const SystemTag kv.Tag = 0

// SystemRange is the key range of the system key space.
var SystemRange = kv.KeyRange{Begin: []byte{0xff}, End: []byte{0xff, 0xff}}

// Shard is a key range, the pool it belongs to and the stashes that hold it.
type Shard struct {
	Begin, End []byte
	Pool       string
	// Team serves the shard's reads and receives its writes.
	Team []kv.Tag
	// Dest, while the shard moves, are the stashes fetching it: they
	// receive its writes from the version the move began but serve no
	// reads until the data distributor makes them (part of) the Team.
	Dest []kv.Tag
}

// Tags returns the stashes that receive the shard's writes: its team and
// the destinations of a move in flight.
func (s Shard) Tags() []kv.Tag {
	if len(s.Dest) == 0 {
		return s.Team
	}
	out := append([]kv.Tag(nil), s.Team...)
	for _, t := range s.Dest {
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return out
}

// Moving reports whether a move of the shard is in flight.
func (s Shard) Moving() bool { return len(s.Dest) > 0 }

// Map is an ordered set of non-overlapping shards. It is not safe for
// concurrent mutation; callers guard it or copy it.
type Map struct {
	shards []Shard // sorted by Begin
}

// New returns a map of the given shards (sorted by the call).
func New(shards []Shard) *Map {
	m := &Map{shards: append([]Shard(nil), shards...)}
	sort.Slice(m.shards, func(i, j int) bool { return bytes.Compare(m.shards[i].Begin, m.shards[j].Begin) < 0 })
	return m
}

// Shards returns the shards in key order. The caller must not modify them.
func (m *Map) Shards() []Shard { return m.shards }

// Lookup returns the shard holding key.
func (m *Map) Lookup(key []byte) (Shard, bool) {
	i := sort.Search(len(m.shards), func(i int) bool { return bytes.Compare(m.shards[i].Begin, key) > 0 }) - 1
	if i < 0 {
		return Shard{}, false
	}
	s := m.shards[i]
	if bytes.Compare(key, s.End) >= 0 {
		return Shard{}, false
	}
	return s, true
}

// Intersect returns the shards that intersect [begin, end), each clipped to it.
func (m *Map) Intersect(begin, end []byte) []Shard {
	var out []Shard
	for _, s := range m.shards {
		if bytes.Compare(s.End, begin) <= 0 || bytes.Compare(s.Begin, end) >= 0 {
			continue
		}
		c := s
		if bytes.Compare(c.Begin, begin) < 0 {
			c.Begin = begin
		}
		if bytes.Compare(c.End, end) > 0 {
			c.End = end
		}
		out = append(out, c)
	}
	return out
}

// Clone returns a copy of the map sharing no slice with it.
func (m *Map) Clone() *Map {
	c := &Map{shards: make([]Shard, len(m.shards))}
	for i, s := range m.shards {
		c.shards[i] = Shard{Begin: slices.Clone(s.Begin), End: slices.Clone(s.End), Pool: s.Pool, Team: slices.Clone(s.Team), Dest: slices.Clone(s.Dest)}
	}
	return c
}

// RangesOf returns the ranges whose team includes tag.
func (m *Map) RangesOf(tag kv.Tag) []kv.KeyRange {
	var out []kv.KeyRange
	for _, s := range m.shards {
		for _, t := range s.Team {
			if t == tag {
				out = append(out, kv.KeyRange{Begin: s.Begin, End: s.End})
				break
			}
		}
	}
	return out
}

// IsShardKey reports whether key belongs to the shard map.
func IsShardKey(key []byte) bool { return bytes.HasPrefix(key, KeyServersPrefix) }

// Key returns the system key recording the shard that starts at begin.
func Key(begin []byte) []byte { return append(append([]byte(nil), KeyServersPrefix...), begin...) }

// Encode returns the system key and value recording s.
func Encode(s Shard) (key, value []byte) {
	var v []byte
	v = binary.AppendUvarint(v, uint64(len(s.End)))
	v = append(v, s.End...)
	v = binary.AppendUvarint(v, uint64(len(s.Pool)))
	v = append(v, s.Pool...)
	v = appendTags(v, s.Team)
	if len(s.Dest) > 0 {
		// Absent in maps written before moves existed: Decode reads no
		// destinations then.
		v = appendTags(v, s.Dest)
	}
	return Key(s.Begin), v
}

func appendTags(v []byte, tags []kv.Tag) []byte {
	v = binary.AppendUvarint(v, uint64(len(tags)))
	for _, t := range tags {
		v = binary.AppendUvarint(v, uint64(t))
	}
	return v
}

// readTags decodes what appendTags wrote, returning the rest of r.
func readTags(r []byte, key []byte) ([]kv.Tag, []byte, error) {
	n, w := binary.Uvarint(r)
	if w <= 0 || n > uint64(len(r)) {
		return nil, nil, fmt.Errorf("shardmap: corrupt team for %q", key)
	}
	r = r[w:]
	tags := make([]kv.Tag, 0, n)
	for i := uint64(0); i < n; i++ {
		t, w := binary.Uvarint(r)
		if w <= 0 {
			return nil, nil, fmt.Errorf("shardmap: corrupt team for %q", key)
		}
		r = r[w:]
		tags = append(tags, kv.Tag(t))
	}
	return tags, r, nil
}

// Decode parses a shard map system key and value.
func Decode(key, value []byte) (Shard, error) {
	if !IsShardKey(key) {
		return Shard{}, fmt.Errorf("shardmap: %q is not a shard key", key)
	}
	s := Shard{Begin: append([]byte(nil), key[len(KeyServersPrefix):]...)}
	r := value
	next := func() ([]byte, error) {
		n, w := binary.Uvarint(r)
		if w <= 0 || uint64(len(r)-w) < n {
			return nil, fmt.Errorf("shardmap: corrupt value for %q", key)
		}
		b := r[w : w+int(n)]
		r = r[w+int(n):]
		return b, nil
	}
	end, err := next()
	if err != nil {
		return Shard{}, err
	}
	s.End = append([]byte(nil), end...)
	pool, err := next()
	if err != nil {
		return Shard{}, err
	}
	s.Pool = string(pool)
	if s.Team, r, err = readTags(r, key); err != nil {
		return Shard{}, err
	}
	if len(r) > 0 {
		if s.Dest, r, err = readTags(r, key); err != nil {
			return Shard{}, err
		}
		if len(s.Dest) == 0 {
			s.Dest = nil
		}
	}
	if len(r) > 0 {
		return Shard{}, fmt.Errorf("shardmap: %d trailing bytes in the value of %q", len(r), key)
	}
	return s, nil
}

// AssignPrefix starts the private mutations the commit proxy adds to a
// commit that changes the shard map: one per changed shard, tagged to
// every stash that held, holds or fetches it, so each learns at that exact
// version what it must serve, fetch or drop. They are never stored.
var AssignPrefix = []byte("\xff\xff/assign/")

// IsAssign reports whether key is a private assignment mutation's.
func IsAssign(key []byte) bool { return bytes.HasPrefix(key, AssignPrefix) }

// AssignMutation returns the private mutation announcing shard s.
func AssignMutation(s Shard) kv.Mutation {
	_, v := Encode(s)
	return kv.Mutation{Type: kv.MutSet, Key: append(append([]byte(nil), AssignPrefix...), s.Begin...), Param: v}
}

// DecodeAssign parses a private assignment mutation.
func DecodeAssign(m kv.Mutation) (Shard, error) {
	if !IsAssign(m.Key) {
		return Shard{}, fmt.Errorf("shardmap: %q is not an assignment", m.Key)
	}
	return Decode(Key(m.Key[len(AssignPrefix):]), m.Param)
}

// Apply updates the map with a committed system mutation; it reports
// whether the map changed. Setting a shard key replaces every shard whose
// begin lies in the new shard's range; clearing one removes it.
func (m *Map) Apply(mut kv.Mutation) (bool, error) {
	switch {
	case mut.Type == kv.MutSet && IsShardKey(mut.Key):
		s, err := Decode(mut.Key, mut.Param)
		if err != nil {
			return false, err
		}
		kept := m.shards[:0:0]
		for _, o := range m.shards {
			if bytes.Compare(o.Begin, s.Begin) >= 0 && bytes.Compare(o.Begin, s.End) < 0 {
				continue
			}
			kept = append(kept, o)
		}
		m.shards = New(append(kept, s)).shards
		return true, nil
	case mut.Type == kv.MutClear && IsShardKey(mut.Key):
		begin := mut.Key[len(KeyServersPrefix):]
		for i, o := range m.shards {
			if bytes.Equal(o.Begin, begin) {
				m.shards = append(m.shards[:i:i], m.shards[i+1:]...)
				return true, nil
			}
		}
	}
	return false, nil
}

// PoolSpec is what Initial needs to know of a pool.
type PoolSpec struct {
	Name        string
	Prefix      []byte
	Tags        []kv.Tag // the pool's stashes
	Replication int
}

// Initial returns the first shard map of a cluster: each pool's key space
// split into one shard per stash at evenly spaced byte boundaries after
// the prefix, shard i owned by the team of stashes i, i+1, ..., i+R-1
// (mod the number of stashes), and the system key space on the system stash.
func Initial(pools []PoolSpec) *Map {
	shards := []Shard{{Begin: SystemRange.Begin, End: SystemRange.End, Pool: "system", Team: []kv.Tag{SystemTag}}}
	for _, p := range pools {
		n := len(p.Tags)
		end := kv.PrefixEnd(p.Prefix)
		bounds := [][]byte{p.Prefix}
		for i := 1; i < n && n <= 256; i++ {
			bounds = append(bounds, append(append([]byte(nil), p.Prefix...), byte(i*256/n)))
		}
		bounds = append(bounds, end)
		for i := 0; i+1 < len(bounds); i++ {
			team := make([]kv.Tag, 0, p.Replication)
			for r := 0; r < p.Replication; r++ {
				team = append(team, p.Tags[(i+r)%n])
			}
			shards = append(shards, Shard{Begin: bounds[i], End: bounds[i+1], Pool: p.Name, Team: team})
		}
	}
	return New(shards)
}
