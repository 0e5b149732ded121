// Package simnet is an in-process network with injected faults, so that a
// whole cluster of nodes (gRPC services, raft groups) runs inside one test:
// nodes listen on names instead of ports, and the test partitions sets of
// nodes, delays every write of a link, or kills a node (its listener and
// every connection it has).
//
//	n := simnet.New()
//	lis, _ := n.Listen("coord-1")
//	conn, _ := grpc.NewClient("passthrough:///coord-1",
//		grpc.WithContextDialer(n.Dialer("client")), ...)
//	n.Partition([]string{"coord-1"}, []string{"coord-2", "coord-3"})
//
// Faults act on connections, as on a real network carrying TCP: a
// partition breaks the connections that cross it and refuses new ones
// until Heal, a drop black-holes a link silently (writes succeed and are
// lost, dials hang: the peers find out only by their timeouts) until Heal
// breaks the connections that lost bytes, a delay holds each write of a
// link before it is delivered (bytes of one connection stay in order;
// messages on different connections may overtake each other), and nothing
// is duplicated. A pause freezes a node as SIGSTOP (or a VM pause, a long
// GC, a hung disk) looks from outside: its connections stay open but
// nothing it writes, and nothing written to it, moves; its dials and dials
// to it wait; all resumes in order on Resume. (The node's own goroutines go
// on running in a test: only what crosses the network stops.)
// StreamLayer adapts a node for raft.NewNetworkTransport.
package simnet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// ErrUnreachable is what a dial across a partition, or to a node that is
// not listening, returns.
var ErrUnreachable = errors.New("simnet: unreachable")

// Network is a set of named nodes and the links between them.
type Network struct {
	mu        sync.Mutex
	listeners map[string]*listener   // Protected by mu.
	conns     map[*conn]struct{}     // both ends of every open connection. Protected by mu.
	cut       map[[2]string]struct{} // partitioned pairs, both orders. Protected by mu.
	drop      map[[2]string]struct{} // black-holed pairs, both orders. Protected by mu.
	healed    chan struct{}          // closed (and replaced) by Heal. Protected by mu.
	delay     map[[2]string]time.Duration
	paused    map[string]chan struct{} // closed on Resume. Protected by mu.
	nextPort  int
}

// New returns an empty network.
func New() *Network {
	return &Network{listeners: map[string]*listener{}, conns: map[*conn]struct{}{}, cut: map[[2]string]struct{}{},
		drop: map[[2]string]struct{}{}, healed: make(chan struct{}), delay: map[[2]string]time.Duration{},
		paused: map[string]chan struct{}{}}
}

// Listen makes node addr listen. A node listens at most once at a time.
func (n *Network) Listen(addr string) (net.Listener, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.listeners[addr]; ok {
		return nil, fmt.Errorf("simnet: %s is already listening", addr)
	}
	l := &listener{net: n, addr: addr, accept: make(chan net.Conn), closed: make(chan struct{})}
	n.listeners[addr] = l
	return l, nil
}

// Dial connects node from to node to.
func (n *Network) Dial(ctx context.Context, from, to string) (net.Conn, error) {
	n.mu.Lock()
	l, ok := n.listeners[to]
	_, cut := n.cut[[2]string{from, to}]
	_, dropped := n.drop[[2]string{from, to}]
	healed := n.healed
	n.nextPort++
	port := n.nextPort
	n.mu.Unlock()
	if err := n.waitUnpaused(ctx, from, to, nil, time.Time{}); err != nil {
		return nil, fmt.Errorf("%w: %s -> %s: %v", ErrUnreachable, from, to, err)
	}
	if dropped {
		// The connection request is lost: the dialer waits for nothing.
		select {
		case <-ctx.Done():
		case <-healed:
		}
		return nil, fmt.Errorf("%w: %s -> %s: no answer", ErrUnreachable, from, to)
	}
	if !ok || cut {
		return nil, fmt.Errorf("%w: %s -> %s", ErrUnreachable, from, to)
	}
	a, b := net.Pipe()
	// The accepting side sees the dialer under a port of its own, as TCP
	// would, so several connections from one node are told apart.
	client := &conn{Conn: a, net: n, local: addr(from, port), remote: addr(to, 0), from: from, to: to}
	server := &conn{Conn: b, net: n, local: addr(to, 0), remote: addr(from, port), from: to, to: from}
	shared := &pair{ends: [2]*conn{client, server}, done: make(chan struct{})}
	client.pair, server.pair = shared, shared
	n.mu.Lock()
	n.conns[client], n.conns[server] = struct{}{}, struct{}{}
	n.mu.Unlock()
	select {
	case l.accept <- server:
		return client, nil
	case <-l.closed:
	case <-ctx.Done():
	}
	client.Close()
	return nil, fmt.Errorf("%w: %s -> %s: not accepted", ErrUnreachable, from, to)
}

// Dialer returns node from's dialer for grpc.WithContextDialer: the
// target is the name of the node to reach.
func (n *Network) Dialer(from string) func(ctx context.Context, target string) (net.Conn, error) {
	return func(ctx context.Context, target string) (net.Conn, error) { return n.Dial(ctx, from, target) }
}

// Partition cuts every link between a node of as and a node of bs: their
// connections break and new ones are refused until Heal.
func (n *Network) Partition(as, bs []string) {
	n.mu.Lock()
	for _, a := range as {
		for _, b := range bs {
			n.cut[[2]string{a, b}] = struct{}{}
			n.cut[[2]string{b, a}] = struct{}{}
		}
	}
	var broken []*conn
	for c := range n.conns {
		if _, ok := n.cut[[2]string{c.from, c.to}]; ok {
			broken = append(broken, c)
		}
	}
	n.mu.Unlock()
	for _, c := range broken {
		c.Close()
	}
}

// Drop black-holes every link between a node of as and a node of bs, in
// both directions: writes on their connections succeed but are lost
// (nothing after a lost byte of a connection arrives either, as TCP would
// not deliver it), and dials hang until their context ends. Heal ends it
// and breaks the connections that lost bytes, as their TCP would time out.
func (n *Network) Drop(as, bs []string) {
	n.mu.Lock()
	for _, a := range as {
		for _, b := range bs {
			n.drop[[2]string{a, b}] = struct{}{}
			n.drop[[2]string{b, a}] = struct{}{}
		}
	}
	n.mu.Unlock()
}

// Pause freezes node (see the package doc) until Resume or Heal.
func (n *Network) Pause(node string) {
	n.mu.Lock()
	if _, ok := n.paused[node]; !ok {
		n.paused[node] = make(chan struct{})
	}
	n.mu.Unlock()
}

// Resume lets a paused node's connections and dials go on.
func (n *Network) Resume(node string) {
	n.mu.Lock()
	if ch, ok := n.paused[node]; ok {
		close(ch)
		delete(n.paused, node)
	}
	n.mu.Unlock()
}

// gate returns a channel to wait on when node a or b is paused, else nil.
func (n *Network) gate(a, b string) chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	if ch, ok := n.paused[a]; ok {
		return ch
	}
	return n.paused[b]
}

// waitUnpaused waits while a or b is paused, until ctx ends, done closes
// or deadline (if set) passes.
func (n *Network) waitUnpaused(ctx context.Context, a, b string, done chan struct{}, deadline time.Time) error {
	for {
		g := n.gate(a, b)
		if g == nil {
			return nil
		}
		var timeout <-chan time.Time
		if !deadline.IsZero() {
			t := time.NewTimer(time.Until(deadline))
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-g:
		case <-ctx.Done():
			return ctx.Err()
		case <-done:
			return net.ErrClosed
		case <-timeout:
			return os.ErrDeadlineExceeded
		}
	}
}

// Heal removes every partition and drop, and resumes every paused node.
func (n *Network) Heal() {
	n.mu.Lock()
	for node, ch := range n.paused {
		close(ch)
		delete(n.paused, node)
	}
	n.cut = map[[2]string]struct{}{}
	n.drop = map[[2]string]struct{}{}
	close(n.healed)
	n.healed = make(chan struct{})
	var lost []*conn
	for c := range n.conns {
		if c.pair.lost.Load() {
			lost = append(lost, c)
		}
	}
	n.mu.Unlock()
	for _, c := range lost {
		c.Close()
	}
}

// SetDelay holds each write from node a to node b, and from b to a, for d
// before delivering it (0 removes the delay).
func (n *Network) SetDelay(a, b string, d time.Duration) {
	n.mu.Lock()
	n.delay[[2]string{a, b}], n.delay[[2]string{b, a}] = d, d
	n.mu.Unlock()
}

// Kill stops node addr as a crash would: its listener closes and every
// connection to or from it breaks. It may Listen again (a restart).
func (n *Network) Kill(addr string) {
	n.mu.Lock()
	l := n.listeners[addr]
	var broken []*conn
	for c := range n.conns {
		if c.from == addr || c.to == addr {
			broken = append(broken, c)
		}
	}
	n.mu.Unlock()
	if l != nil {
		l.Close()
	}
	for _, c := range broken {
		c.Close()
	}
}

// link returns the delay of the link from -> to and whether it drops.
func (n *Network) link(from, to string) (time.Duration, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	_, dropped := n.drop[[2]string{from, to}]
	return n.delay[[2]string{from, to}], dropped
}

type listener struct {
	net       *Network
	addr      string
	accept    chan net.Conn
	closed    chan struct{}
	closeOnce sync.Once
}

func (l *listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.accept:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *listener) Close() error {
	l.closeOnce.Do(func() {
		close(l.closed)
		l.net.mu.Lock()
		if l.net.listeners[l.addr] == l {
			delete(l.net.listeners, l.addr)
		}
		l.net.mu.Unlock()
	})
	return nil
}

func (l *listener) Addr() net.Addr { return addr(l.addr, 0) }

// conn is one end of a connection between two nodes.
type conn struct {
	net.Conn
	net           *Network
	pair          *pair
	local, remote net.Addr
	from, to      string
	writeDeadline atomic.Pointer[time.Time]
}

// pair is a connection's two ends, closed together once.
type pair struct {
	once sync.Once
	ends [2]*conn
	lost atomic.Bool   // a write was dropped: nothing more is delivered
	done chan struct{} // closed with the pair
}

func (c *conn) LocalAddr() net.Addr  { return c.local }
func (c *conn) RemoteAddr() net.Addr { return c.remote }

// SetDeadline and SetWriteDeadline also bound a write's wait on a pause.
func (c *conn) SetDeadline(t time.Time) error {
	c.writeDeadline.Store(&t)
	return c.Conn.SetDeadline(t)
}

func (c *conn) SetWriteDeadline(t time.Time) error {
	c.writeDeadline.Store(&t)
	return c.Conn.SetWriteDeadline(t)
}

func (c *conn) Write(b []byte) (int, error) {
	var deadline time.Time
	if d := c.writeDeadline.Load(); d != nil {
		deadline = *d
	}
	if err := c.net.waitUnpaused(context.Background(), c.from, c.to, c.pair.done, deadline); err != nil {
		return 0, err
	}
	d, dropped := c.net.link(c.from, c.to)
	if dropped {
		c.pair.lost.Store(true)
	}
	if c.pair.lost.Load() {
		select {
		case <-c.pair.done:
			return 0, net.ErrClosed
		default:
		}
		return len(b), nil
	}
	if d > 0 {
		time.Sleep(d)
	}
	return c.Conn.Write(b)
}

// Close closes both ends: a broken link is broken for both nodes.
func (c *conn) Close() error {
	c.pair.once.Do(func() {
		close(c.pair.done)
		c.net.mu.Lock()
		for _, e := range c.pair.ends {
			delete(c.net.conns, e)
		}
		c.net.mu.Unlock()
		for _, e := range c.pair.ends {
			e.Conn.Close()
		}
	})
	return nil
}

// simAddr is a node's name as a net.Addr.
type simAddr string

func (a simAddr) Network() string { return "simnet" }
func (a simAddr) String() string  { return string(a) }

func addr(node string, port int) net.Addr {
	if port == 0 {
		return simAddr(node)
	}
	return simAddr(fmt.Sprintf("%s#%d", node, port))
}

// StreamLayer is a node of the network as raft's transport sees it: raft
// nodes address each other by node name.
type StreamLayer struct {
	net.Listener
	net  *Network
	node string
}

// StreamLayer makes node listen and returns it as a raft.StreamLayer.
func (n *Network) StreamLayer(node string) (*StreamLayer, error) {
	l, err := n.Listen(node)
	if err != nil {
		return nil, err
	}
	return &StreamLayer{Listener: l, net: n, node: node}, nil
}

// Dial implements raft.StreamLayer.
func (s *StreamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return s.net.Dial(ctx, s.node, string(address))
}
