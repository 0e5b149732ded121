package distash

import (
	"time"

	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/wire"
)

// Data centers (docs/cluster.md, "Several data centers on one machine"):
// a client opened WithDC reads from the replicas in its own data center,
// when one of a shard's replicas is there and not marked down, and from
// the least loaded replica of any data center otherwise. Where each stash
// is comes from the coordinators' View: its node's --dc.

// WithDC tells Open the client's data center: reads of a replicated shard
// go to a replica whose node is in dc (the least loaded of them), and to
// another data center's only when none there can serve (none is, or
// they are marked down after failing). Read versions and commits go to
// the stateless node wherever it is. An embedded cluster has one data
// center; the option changes nothing there. "" means no preference, as
// without the option.
func WithDC(dc string) Option {
	return func(o *openOptions) { o.dc = dc }
}

// noteDCs records which stashes of view v live in the client's data
// center (nothing without WithDC).
func (db *DB) noteDCs(v *wire.ViewResponse) {
	if db.dc == "" {
		return
	}
	dcOf := make(map[string]string, len(v.Nodes))
	for _, n := range v.Nodes {
		dcOf[n.Id] = n.Dc
	}
	local := map[uint32]bool{}
	for _, s := range v.Stashes {
		if s.Node != "" && s.Alive && dcOf[s.Node] == db.dc {
			local[s.Tag] = true
		}
	}
	db.localStashes.Store(&local)
}

// preferLocal returns the members of team that pickReplica should choose
// among: those in the client's data center that are not marked down, if
// any; otherwise the whole team.
func (db *DB) preferLocal(team []kv.Tag) []kv.Tag {
	if db.dc == "" || len(team) < 2 {
		return team
	}
	lp := db.localStashes.Load()
	if lp == nil {
		return team
	}
	local := *lp
	now := time.Now().UnixNano()
	usable := func(id kv.Tag) bool {
		l := db.loadOf(uint32(id))
		return local[uint32(id)] && l.downUntil.Load() <= now && !l.retired.Load()
	}
	var out []kv.Tag
	for _, id := range team {
		if usable(id) {
			out = append(out, id)
		}
	}
	if len(out) == 0 || len(out) == len(team) {
		return team
	}
	return out
}
