package shardmap

import (
	"bytes"
	"math/rand"
	"testing"

	"github.com/distash/distash/internal/kv"
)

func TestInitialCoversEachPoolWithTeamsOfR(t *testing.T) {
	m := Initial([]PoolSpec{
		{Name: "cache", Prefix: []byte("c/"), Tags: []kv.Tag{1, 2, 3}, Replication: 2},
		{Name: "data", Prefix: []byte("d/"), Tags: []kv.Tag{4}, Replication: 1},
	})
	rng := rand.New(rand.NewSource(1))
	for i := 0; i < 1000; i++ {
		k := make([]byte, 1+rng.Intn(6))
		rng.Read(k)
		for _, p := range []string{"c/", "d/"} {
			key := append([]byte(p), k...)
			s, ok := m.Lookup(key)
			if !ok || !bytes.HasPrefix(key, []byte(p)) || (p == "c/" && (s.Pool != "cache" || len(s.Team) != 2)) || (p == "d/" && s.Pool != "data") {
				t.Fatalf("key %q -> %+v %v", key, s, ok)
			}
			if s.Team[0] == s.Team[len(s.Team)-1] && len(s.Team) > 1 {
				t.Fatalf("team %v repeats a stash", s.Team)
			}
		}
	}
	if _, ok := m.Lookup([]byte("x/1")); ok {
		t.Fatal("key outside pools found a shard")
	}
	if s, ok := m.Lookup([]byte("\xff/keyServers/a")); !ok || s.Team[0] != SystemTag {
		t.Fatal("system key not on the system stash")
	}
	// Every stash of the cache pool holds some ranges.
	for _, tag := range []kv.Tag{1, 2, 3} {
		if len(m.RangesOf(tag)) != 2 {
			t.Fatalf("stash %d holds %v", tag, m.RangesOf(tag))
		}
	}
}

func TestEncodeDecodeApplyRoundTrip(t *testing.T) {
	m := Initial([]PoolSpec{{Name: "p", Prefix: []byte("p/"), Tags: []kv.Tag{1, 2}, Replication: 2}})
	rebuilt := New(nil)
	for _, s := range m.Shards() {
		k, v := Encode(s)
		if _, err := rebuilt.Apply(kv.Mutation{Type: kv.MutSet, Key: k, Param: v}); err != nil {
			t.Fatal(err)
		}
	}
	if len(rebuilt.Shards()) != len(m.Shards()) {
		t.Fatalf("rebuilt %d shards, want %d", len(rebuilt.Shards()), len(m.Shards()))
	}
	for i, s := range m.Shards() {
		r := rebuilt.Shards()[i]
		if !bytes.Equal(s.Begin, r.Begin) || !bytes.Equal(s.End, r.End) || s.Pool != r.Pool || len(s.Team) != len(r.Team) {
			t.Fatalf("shard %d: %+v != %+v", i, r, s)
		}
	}
	if _, err := Decode(Key([]byte("a")), []byte{0xff}); err == nil {
		t.Fatal("corrupt value decoded")
	}
}

func TestIntersectClips(t *testing.T) {
	m := Initial([]PoolSpec{{Name: "p", Prefix: []byte("p/"), Tags: []kv.Tag{1, 2}, Replication: 1}})
	got := m.Intersect([]byte("p/\x10"), []byte("p/\x90"))
	if len(got) != 2 || !bytes.Equal(got[0].Begin, []byte("p/\x10")) || !bytes.Equal(got[1].End, []byte("p/\x90")) {
		t.Fatalf("intersect = %+v", got)
	}
}
