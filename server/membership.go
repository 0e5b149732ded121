package server

import (
	"context"

	"github.com/distash/distash/internal/coord"
)

// probeCoordinator asks the coordinator at addr what it tells of itself
// (coord.Options.Probe).
func (n *node) probeCoordinator(ctx context.Context, addr string) (coord.PeerInfo, error) {
	v, err := n.cc.Probe(ctx, addr)
	if err != nil {
		return coord.PeerInfo{}, err
	}
	if !v.Local {
		// A coordinator of an older binary forwarded the question to its
		// controller: it runs in a group, with state.
		return coord.PeerInfo{HasState: true}, nil
	}
	p := coord.PeerInfo{RaftID: v.RaftId, HasState: v.RaftState}
	for _, m := range v.Coordinators {
		if m.RaftId != "" {
			p.Members = append(p.Members, coord.Member{ID: m.RaftId, Addr: m.Address, Voter: m.Voter})
		}
	}
	return p, nil
}
