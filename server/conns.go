package server

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/distash/distash"
	"github.com/distash/distash/internal/protover"
	"github.com/distash/distash/internal/wire"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// How a node reaches other nodes: its connection pool, and the lookup of
// the log leader's node for its stash's log client (logrpc.Leader).

// Conn implements logrpc.Leader: the log leader's node is the one holding
// the stateless roles (it leads the log), as the controller's view says.
func (n *node) Conn(ctx context.Context) (grpc.ClientConnInterface, error) {
	addr, err := n.logLeaderAddr(ctx)
	if err != nil {
		return nil, err
	}
	return n.connTo(addr)
}

// DialFrames implements logrpc.FramesLeader: a connection to the frames
// server of the node Conn would name, dialled as raft's (the node's
// dialer and client certificate).
func (n *node) DialFrames(ctx context.Context) (net.Conn, protover.Speaker, error) {
	addr, err := n.logLeaderAddr(ctx)
	if err != nil {
		return nil, n.opts.Protocol, err
	}
	c, err := n.s.gw.mux.DialFrames(ctx, addr)
	return c, n.opts.Protocol, err
}

// logLeaderAddr is the address of the node serving the log, asked of the
// cluster's view when the node knows none (until ctx ends).
func (n *node) logLeaderAddr(ctx context.Context) (string, error) {
	n.leaderMu.Lock()
	addr := n.leaderAddr
	n.leaderMu.Unlock()
	for addr == "" {
		vctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		v, err := n.cc.View(vctx)
		cancel()
		if err == nil && v.StatelessAddress != "" {
			addr = v.StatelessAddress
			n.leaderMu.Lock()
			n.leaderAddr = addr
			n.leaderMu.Unlock()
			break
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = ctx.Err()
			}
			return "", fmt.Errorf("server: find the log leader: %w", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
	return addr, nil
}

// Failed implements logrpc.Leader.
func (n *node) Failed(grpc.ClientConnInterface) {
	n.leaderMu.Lock()
	n.leaderAddr = ""
	n.leaderMu.Unlock()
}

// Moved implements logrpc.Mover: the channel is closed when the node
// hears of a newer generation (its heartbeat's answer), which is how it
// learns that the log's leader, and with it the node serving the log, may
// have moved. A stash's peek in flight to the old node is then sent again
// to the node the view names, instead of waiting out PeekTimeout on a
// node that may have stopped answering.
func (n *node) Moved() <-chan struct{} {
	n.leaderMu.Lock()
	defer n.leaderMu.Unlock()
	if n.moved == nil {
		n.moved = make(chan struct{})
	}
	return n.moved
}

// newGeneration notes generation gen from the controller: a newer one than
// the node's log client knows makes it look the log's leader up again.
func (n *node) newGeneration(gen uint64) {
	n.leaderMu.Lock()
	defer n.leaderMu.Unlock()
	if gen <= n.leaderGen {
		return
	}
	first := n.leaderGen == 0
	n.leaderGen = gen
	if first {
		return // the generation the node started in
	}
	n.leaderAddr = ""
	if n.moved != nil {
		close(n.moved)
		n.moved = nil
	}
}

// connTo returns the node's connection to addr.
func (n *node) connTo(addr string) (*grpc.ClientConn, error) {
	n.connMu.Lock()
	defer n.connMu.Unlock()
	if c, ok := n.conns[addr]; ok {
		return c, nil
	}
	creds := insecure.NewCredentials()
	if n.opts.ClientTLS != nil {
		creds = credentials.NewTLS(n.opts.ClientTLS)
	}
	dopts := []grpc.DialOption{grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20))}
	dopts = append(dopts, n.opts.Protocol.DialOptions()...)
	target := addr
	if n.opts.Dialer != nil {
		target = "passthrough:///" + addr
		dopts = append(dopts, grpc.WithContextDialer(n.opts.Dialer))
	}
	c, err := grpc.NewClient(target, dopts...)
	if err != nil {
		return nil, err
	}
	n.conns[addr] = c
	return c, nil
}

// viewCache keeps the controller's last view for a node's lookups (stash
// addresses for fetches and metrics, the data distributor's stashes and
// settings); it is refreshed on demand when older than its reader allows.
type viewCache struct {
	mu   sync.Mutex
	view *wire.ViewResponse // Protected by mu.
	at   time.Time          // Protected by mu.
}

// viewWithin returns a view at most maxAge old, or the last one if the
// controller does not answer (nil if none could be had).
func (n *node) view(maxAge time.Duration) *wire.ViewResponse {
	c := &n.views
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.view != nil && time.Since(c.at) < maxAge {
		return c.view
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if v, err := n.cc.View(ctx); err == nil {
		c.view, c.at = v, time.Now()
	}
	return c.view
}

// asClient implements clusterLink: the coordinators, with the node's client
// certificate and dialer.
func (n *node) asClient() (string, []distash.Option) {
	opts := []distash.Option{distash.WithTLS(n.opts.ClientTLS)}
	if n.opts.Dialer != nil {
		opts = append(opts, distash.WithDialer(n.opts.Dialer))
	}
	return n.s.ClusterString(), opts
}
