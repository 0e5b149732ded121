package server

import (
	"context"
	"time"

	"github.com/distash/distash/internal/dcdelay"
)

// Several data centers on one machine (docs/cluster.md): a node whose
// data center delay is on dials every other node (gRPC, both raft groups,
// the coordinators) through a dcdelay.Table, which delays the connections
// to nodes of another --dc by the delay each way. The node learns the
// other nodes' data centers from the coordinators' View; a node it has
// not seen in a view yet is not delayed until it has.

// dcViewInterval is how often a node with a data center delay asks the
// coordinators for the nodes' data centers.
const dcViewInterval = time.Second

// dcDelay is the one-way delay the node adds to connections to other data
// centers: NodeOptions.DCDelay if set (negative: none), else the
// configuration's [cluster] dc_delay.
func (o *NodeOptions) dcDelay() time.Duration {
	switch {
	case o.DCDelay > 0:
		return o.DCDelay
	case o.DCDelay < 0:
		return 0
	case o.Config != nil:
		return o.Config.Cluster.DCDelay.Duration
	}
	return 0
}

// setupDCDelay makes the node dial through a data-center table when its
// delay is on: n.opts.Dialer (or TCP) wrapped. Call it before the node
// dials anything.
func (n *node) setupDCDelay() {
	d := n.opts.dcDelay()
	if d <= 0 {
		return
	}
	n.dcs = dcdelay.NewTable(n.opts.DC, d)
	n.dcs.Learn(n.opts.Listen, n.opts.DC)
	n.opts.Dialer = n.dcs.Dialer(n.opts.Dialer)
}

// followDCs keeps the node's data-center table up to date from the
// coordinators' View until ctx ends (nothing without a delay).
func (n *node) followDCs(ctx context.Context) {
	s := n.s
	if n.dcs == nil {
		return
	}
	s.logger.Info("delaying connections to other data centers", "dc", n.opts.DC, "one_way_delay", n.dcs.Delay())
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t := time.NewTicker(dcViewInterval)
		defer t.Stop()
		for {
			vctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			v, err := n.cc.View(vctx)
			cancel()
			if err == nil {
				for _, cn := range v.Nodes {
					if cn.Address != "" {
						n.dcs.Learn(cn.Address, cn.Dc)
					}
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}
