package clusterstatus

import (
	"context"
	"errors"
	"testing"

	"github.com/distash/distash/internal/wire"
)

// TestFromViewProtocols: each node's protocol range and build come from
// its own status; the cluster's range is what every node that answers
// speaks (empty, min > max, when they share none); a node that does not
// answer shows none and counts for nothing.
func TestFromViewProtocols(t *testing.T) {
	type speaks struct {
		lo, hi int32
		build  string
	}
	for _, tc := range []struct {
		name           string
		nodes          []speaks // hi 0: the node does not answer
		wantLo, wantHi int32
	}{
		{"same", []speaks{{1, 2, "v1"}, {1, 2, "v1"}}, 1, 2},
		{"mid-upgrade", []speaks{{1, 1, "v0"}, {1, 2, "v1"}, {2, 3, "v2"}}, 2, 1},
		{"rolling", []speaks{{1, 2, "v1"}, {2, 3, "v2"}}, 2, 2},
		{"one down", []speaks{{1, 2, "v1"}, {0, 0, ""}}, 1, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			view := &wire.ViewResponse{}
			by := map[string]speaks{}
			for i, n := range tc.nodes {
				addr := string(rune('a' + i))
				view.Nodes = append(view.Nodes, &wire.ClusterNode{Id: addr, Address: addr, Alive: true})
				by[addr] = n
			}
			st, err := FromView(context.Background(), view, func(_ context.Context, addr string) (*wire.StatusResponse, error) {
				n := by[addr]
				if n.hi == 0 {
					return nil, errors.New("unreachable")
				}
				return &wire.StatusResponse{Node: &wire.NodeStatus{ProtocolMin: n.lo, ProtocolMax: n.hi, BuildVersion: n.build, BuildCommit: "abc"}}, nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if st.ProtocolMin != tc.wantLo || st.ProtocolMax != tc.wantHi {
				t.Errorf("cluster range %d-%d, want %d-%d", st.ProtocolMin, st.ProtocolMax, tc.wantLo, tc.wantHi)
			}
			for i, ns := range st.Nodes {
				n := tc.nodes[i]
				if ns.ProtocolMin != n.lo || ns.ProtocolMax != n.hi || ns.BuildVersion != n.build {
					t.Errorf("node %s: %d-%d %q, want %d-%d %q", ns.Address, ns.ProtocolMin, ns.ProtocolMax, ns.BuildVersion, n.lo, n.hi, n.build)
				}
			}
		})
	}
}
