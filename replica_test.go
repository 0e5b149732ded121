package distash

import (
	"testing"

	"github.com/distash/distash/internal/kv"
)

// TestPickReplicaAvoidsRetiredStashes: a stash the view calls retired
// (replaced; the shard map may name it until its shards move) is never
// chosen while another team member exists, even one marked down, and even
// after its own down mark would have expired; it is chosen only when it is
// the whole team. Before, a retired stash looked the least loaded (it
// serves nothing) and was picked again every time its 2 s down mark
// expired: "stash N is no longer in the cluster" kept coming back.
func TestPickReplicaAvoidsRetiredStashes(t *testing.T) {
	db := &DB{load: map[uint32]*stashLoad{}}
	db.loadOf(5).retired.Store(true)
	db.loadOf(6).latencyNs.Store(50_000_000) // slow, busy: still preferred
	db.loadOf(6).inflight.Store(100)
	for range 200 {
		if id := db.pickReplica([]kv.Tag{5, 6}); id != 6 {
			t.Fatalf("picked %d of [5 (retired) 6]", id)
		}
	}
	db.markDown(6)
	for range 200 {
		if id := db.pickReplica([]kv.Tag{6, 5}); id != 6 {
			t.Fatalf("picked %d of [6 (down) 5 (retired)]", id)
		}
	}
	if id := db.pickReplica([]kv.Tag{5}); id != 5 {
		t.Fatalf("picked %d of [5]", id)
	}
	db.loadOf(5).retired.Store(false) // a later view: a new stash took the tag's place
	db.loadOf(6).downUntil.Store(0)
	db.loadOf(6).latencyNs.Store(0)
	db.loadOf(6).inflight.Store(0)
	seen := map[uint32]bool{}
	for range 200 {
		seen[db.pickReplica([]kv.Tag{5, 6})] = true
	}
	if !seen[5] || !seen[6] {
		t.Fatalf("equal replicas: picked only %v", seen)
	}
}
