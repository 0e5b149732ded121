package clusterstatus

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/distash/distash/config"
	"github.com/distash/distash/internal/wire"
)

// membership fills st's coordinator and log membership from the view and
// the nodes' health in st, and warns, in plain sentences, while either
// raft group runs with fewer members than configured or answering, and
// when one has lost its quorum.
func membership(st *wire.StatusResponse, view *wire.ViewResponse) {
	now := time.Now()
	nodeAt := map[string]*wire.NodeStatus{}
	byID := map[string]*wire.NodeStatus{}
	for _, n := range st.Nodes {
		byID[n.Id] = n
		if o := nodeAt[n.Address]; o == nil || n.Health == "alive" {
			nodeAt[n.Address] = n
		}
	}
	if len(view.Coordinators) > 0 {
		cs := &wire.MembershipStatus{}
		for _, c := range view.Coordinators {
			m := &wire.MemberStatus{Id: c.RaftId, Address: c.Address, Alive: c.Alive, Member: c.RaftId != "" && c.Voter}
			if n := nodeAt[c.Address]; n != nil {
				m.Node = n.Id
			}
			if !m.Alive && c.LastSeenUnixMs > 0 {
				m.UnreachableMs = max(now.Sub(time.UnixMilli(c.LastSeenUnixMs)).Milliseconds(), 0)
			}
			if c.Configured {
				cs.Configured++
			}
			if m.Member {
				cs.Members++
				if m.Alive {
					cs.Alive++
				}
			}
			cs.Member = append(cs.Member, m)
		}
		cs.Quorum = cs.Alive > cs.Members/2
		st.CoordinatorMembership = cs
		down := downList(cs)
		switch {
		case !cs.Quorum:
			st.Warnings = append(st.Warnings, fmt.Sprintf("the coordinators have no quorum: %d of %d members answer%s: there is no controller, so nodes cannot register, the log cannot recover and settings cannot change until a majority is back",
				cs.Alive, cs.Members, down))
		case cs.Alive < cs.Members || cs.Members < cs.Configured:
			st.Warnings = append(st.Warnings, fmt.Sprintf("the coordinators run on %d of %d configured%s", cs.Alive, cs.Configured, down))
		}
	}
	if len(view.LogReplicas) == 0 {
		return
	}
	ls := &wire.MembershipStatus{Members: int32(len(view.LogReplicas))}
	if cfg, err := config.Parse([]byte(view.Config)); err == nil && view.Config != "" {
		ls.Configured = int32(cfg.Log.Replicas)
	}
	for i, id := range view.LogReplicas {
		m := &wire.MemberStatus{Id: id, Node: id, Member: true}
		if i < len(view.LogIds) {
			m.Id = view.LogIds[i]
		}
		if n := byID[id]; n != nil {
			m.Address = n.Address
			m.Alive = n.Health == "alive"
			m.UnreachableMs = n.UnreachableMs
		}
		if m.Alive {
			ls.Alive++
		}
		ls.Member = append(ls.Member, m)
	}
	ls.Quorum = ls.Alive > ls.Members/2
	st.LogMembership = ls
	down := downList(ls)
	switch {
	case !ls.Quorum:
		st.Warnings = append(st.Warnings, fmt.Sprintf("the log has no quorum: %d of %d replicas alive%s: commits cannot be made", ls.Alive, ls.Members, down))
	case ls.Alive < ls.Members:
		st.Warnings = append(st.Warnings, fmt.Sprintf("the log runs on %d of %d replicas%s", ls.Alive, ls.Members, down))
	}
	if ls.Members < ls.Configured {
		st.Warnings = append(st.Warnings, fmt.Sprintf("the log has %d replicas of the %d configured: no live spare transaction node to add", ls.Members, ls.Configured))
	}
}

// downList names the members of m that do not answer, and since when if
// known: "; down: a:1 (n-1, unreachable for 12s)".
func downList(m *wire.MembershipStatus) string {
	var out []string
	for _, x := range m.Member {
		if x.Member && x.Alive || !x.Member && x.Id != "" {
			continue // answering, or a non-voter
		}
		what := x.Address
		if x.Node != "" {
			what += " (node " + x.Node + ")"
		}
		if x.Address == "" {
			what = "node " + x.Node
		}
		switch {
		case !x.Member:
			what += " has no member in the raft configuration"
		case x.UnreachableMs > 0:
			what += " unreachable for " + ms(x.UnreachableMs)
		default:
			what += " unreachable"
		}
		out = append(out, what)
	}
	slices.Sort(out)
	if len(out) == 0 {
		return ""
	}
	return "; down: " + strings.Join(out, ", ")
}
