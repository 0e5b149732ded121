// Package raftnet shares one listening address between gRPC and any number
// of raft groups: a node process has one --listen address, on which it
// serves the DiStash client API, the Coordinator and Log services (gRPC),
// the coordinators' raft group and the transaction log's raft group.
//
//	mux, err := raftnet.Listen(":4500", serverTLS, clientTLS) // or raftnet.New(ln, ...)
//	defer mux.Close()
//	gs := grpc.NewServer() // insecure credentials: the mux terminates TLS
//	go gs.Serve(mux.GRPCListener())
//	coordLayer := mux.StreamLayer(raftnet.KindCoord, "node-a:4500")
//	logTrans := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
//		Stream: mux.StreamLayer(raftnet.KindLog, "node-a:4500"), MaxPool: 3, Timeout: 5 * time.Second})
//
// With TLS (serverTLS and clientTLS, both or neither: tlsconf.Server and
// tlsconf.Client build mutual-TLS configurations) the mux runs every
// incoming handshake, in a goroutine of its own with a deadline so a slow
// or hostile peer cannot hold up the others, and counts the failures
// (RejectedConns): a peer whose certificate another CA signed never reaches
// gRPC or raft. Its server configuration offers ALPN "h2", which grpc-go
// clients using credentials.NewTLS require, and [ALPN] for raft dialers.
//
// Raft is for cluster nodes only: with TLS, a connection to a stream layer
// must present a node's certificate (tlsconf.RequireNodePeer: one allowing
// server authentication), checked before raft reads a byte of it; a
// client's certificate reaches gRPC only, where node-to-node calls are
// checked per method. Refusals are counted (RefusedPeers) and reported to
// the function given to [Mux.OnRefused]. Without TLS there is no check: a
// plaintext cluster trusts its network.
//
// After the handshake the mux reads the connection's first byte within the
// same deadline. A raft dialer of this package sends a one-byte stream kind
// first ([KindCoord], [KindLog], or any byte given to [Mux.StreamLayer]):
// the connection, that byte consumed, goes to the stream layer of that
// kind. A gRPC client starts with the HTTP/2 preface "PRI * HTTP/2.0": the
// connection, nothing consumed, goes to GRPCListener. A client of the
// data path's frames protocol (internal/frames) sends [KindFrames]: the
// connection, that byte consumed, goes to FramesListener; like gRPC, and
// unlike raft, it accepts a client's certificate. Anything else, or a
// kind no stream layer is open for, is closed and counted (UnknownConns).
//
// A role of the process itself may reach the process's gRPC and frames
// servers without the network and without TLS ([Mux.DialInProcess]): the
// embedded cluster's backup worker reads the cluster that way, since the
// server's certificate (serverAuth) is no client certificate. Handlers see
// such a connection's [InProcess] AuthInfo.
//
// Stream layers dial peers over TCP, or with the function given to
// [Mux.SetDialer] (an in-process network such as internal/simnet, in
// tests; TLS, if any, runs over what it returns).
//
// Raft connections state no DiStash protocol version (internal/protover),
// unlike gRPC and frames: their bytes are hashicorp/raft's own RPCs, which
// carry raft's protocol version, and the commands inside them are
// persistent formats (the coordinators' state, the log's entries) checked
// by their readers (internal/version). A node whose protocol versions the
// cluster does not speak is refused on its first gRPC call (registration
// with the controller, joining the coordinators, the log's membership),
// so it is never made a raft peer by the cluster; see docs/operations.md.
package raftnet

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/credentials"

	"github.com/distash/distash/internal/frames"
	"github.com/distash/distash/internal/tlsconf"
)

// Stream kinds: the first byte a raft dialer sends.
const (
	KindCoord byte = 'C' // the coordinators' raft group (internal/coord)
	KindLog   byte = 'L' // the transaction log's raft group (internal/txlog)
)

// grpcFirst is the first byte of the HTTP/2 client preface: no stream kind.
const grpcFirst = 'P'

// KindFrames is the first byte of a connection of the data path's frames
// protocol (internal/frames): it goes, that byte consumed, to
// FramesListener. Clients use it, so unlike the raft kinds it accepts a
// client's certificate.
const KindFrames = frames.RouteByte

// ALPN is the protocol raft dialers offer over TLS; the mux's server
// configuration offers it along with "h2".
const ALPN = "distash-raft"

// DefaultHandshakeTimeout bounds an incoming connection's TLS handshake and
// first byte together.
const DefaultHandshakeTimeout = 5 * time.Second

// ErrClosed is returned by Accept on a closed listener or stream layer.
var ErrClosed = errors.New("raftnet: closed")

// Mux is one listening address shared by gRPC and raft stream layers.
type Mux struct {
	ln                   net.Listener
	serverTLS, clientTLS *tls.Config
	timeout              time.Duration
	dial                 func(ctx context.Context, addr string) (net.Conn, error) // nil: TCP

	rejected atomic.Int64 // failed TLS handshakes
	unknown  atomic.Int64 // no or an unknown first byte
	refused  atomic.Int64 // raft connections from a peer that is not a node
	// onRefused, if set, hears of each refused raft connection.
	onRefused atomic.Pointer[func(remote net.Addr, err error)]

	grpc     *listener
	frames   *listener
	framesOn atomic.Bool // FramesListener was called: someone serves it
	// onRejected, if set, hears of each failed TLS handshake.
	onRejected atomic.Pointer[func(remote net.Addr, err error)]

	mu      sync.Mutex
	layers  map[byte]*listener
	pending map[net.Conn]struct{} // connections not yet handed over
	closed  bool

	done chan struct{}
	wg   sync.WaitGroup
}

// Listen listens on addr (TCP) and returns a Mux serving it. serverTLS and
// clientTLS, both or neither, make every connection mutual TLS.
func Listen(addr string, serverTLS, clientTLS *tls.Config) (*Mux, error) {
	if (serverTLS == nil) != (clientTLS == nil) {
		return nil, errors.New("raftnet: TLS needs both a server and a client configuration")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("raftnet: %w", err)
	}
	m, err := New(ln, serverTLS, clientTLS)
	if err != nil {
		ln.Close()
	}
	return m, err
}

// New returns a Mux serving ln, which it owns from then on (Close closes
// it; so does New if it fails). serverTLS and clientTLS: as for Listen.
func New(ln net.Listener, serverTLS, clientTLS *tls.Config) (*Mux, error) {
	if (serverTLS == nil) != (clientTLS == nil) {
		ln.Close()
		return nil, errors.New("raftnet: TLS needs both a server and a client configuration")
	}
	m := &Mux{ln: ln, timeout: DefaultHandshakeTimeout, layers: make(map[byte]*listener),
		pending: make(map[net.Conn]struct{}), done: make(chan struct{})}
	if serverTLS != nil {
		m.serverTLS = withALPN(serverTLS, "h2", ALPN)
		m.clientTLS = clientTLS.Clone()
		m.clientTLS.NextProtos = []string{ALPN}
	}
	m.grpc = m.newListener(0, ln.Addr())
	m.frames = m.newListener(KindFrames, ln.Addr())
	m.wg.Add(1)
	go m.serve()
	return m, nil
}

// ServeClients returns a Mux serving ln for a process with no raft group
// (an embedded cluster): gRPC and the frames protocol on one address, TLS
// (if serverTLS is not nil) terminated by the mux. Its stream layers, if
// any, would dial without TLS.
func ServeClients(ln net.Listener, serverTLS *tls.Config) *Mux {
	m := &Mux{ln: ln, timeout: DefaultHandshakeTimeout, layers: make(map[byte]*listener),
		pending: make(map[net.Conn]struct{}), done: make(chan struct{})}
	if serverTLS != nil {
		m.serverTLS = withALPN(serverTLS, "h2", ALPN)
	}
	m.grpc = m.newListener(0, ln.Addr())
	m.frames = m.newListener(KindFrames, ln.Addr())
	m.wg.Add(1)
	go m.serve()
	return m
}

// withALPN returns a copy of cfg offering protos, including in the
// configurations its GetConfigForClient returns (tlsconf.Server's
// certificate reloading works that way).
func withALPN(cfg *tls.Config, protos ...string) *tls.Config {
	c := cfg.Clone()
	c.NextProtos = protos
	if get := cfg.GetConfigForClient; get != nil {
		c.GetConfigForClient = func(hi *tls.ClientHelloInfo) (*tls.Config, error) {
			cc, err := get(hi)
			if cc == nil || err != nil {
				return cc, err
			}
			cc = cc.Clone()
			cc.NextProtos = protos
			return cc, nil
		}
	}
	return c
}

// SetHandshakeTimeout sets how long an incoming connection has for its TLS
// handshake and first byte (default DefaultHandshakeTimeout). Call it
// before connections arrive.
func (m *Mux) SetHandshakeTimeout(d time.Duration) {
	m.mu.Lock()
	m.timeout = d
	m.mu.Unlock()
}

// SetDialer makes the stream layers dial peers with dial instead of TCP
// (an in-process network in tests, say); TLS, if any, runs over the
// connections it returns. Call it before dialing.
func (m *Mux) SetDialer(dial func(ctx context.Context, addr string) (net.Conn, error)) {
	m.mu.Lock()
	m.dial = dial
	m.mu.Unlock()
}

// Addr is the address the mux listens on.
func (m *Mux) Addr() net.Addr { return m.ln.Addr() }

// RejectedConns counts incoming connections whose TLS handshake failed.
func (m *Mux) RejectedConns() int64 { return m.rejected.Load() }

// UnknownConns counts incoming connections closed because their first
// byte did not come in time, or named no open stream layer nor gRPC.
func (m *Mux) UnknownConns() int64 { return m.unknown.Load() }

// OnRejected makes the mux call f (from the connection's goroutine) for
// every incoming connection whose TLS handshake failed, so the process can
// log why (the peer often sees only its connection closed).
func (m *Mux) OnRejected(f func(remote net.Addr, err error)) { m.onRejected.Store(&f) }

// FramesListener returns the listener of the frames connections
// (KindFrames, that byte consumed), TLS already terminated: serve it with
// frames.Server. Closing it refuses later frames connections.
// Until it is called, frames connections are closed at once (counted in
// UnknownConns), so that a client falls back to gRPC instead of waiting
// for an Accept that never comes.
func (m *Mux) FramesListener() net.Listener {
	m.framesOn.Store(true)
	return m.frames
}

// RefusedPeers counts raft connections refused because the peer's
// certificate is not a node's.
func (m *Mux) RefusedPeers() int64 { return m.refused.Load() }

// OnRefused makes the mux call f (from the connection's goroutine) for
// every raft connection it refuses because the peer is not a node, so the
// node can log who tried.
func (m *Mux) OnRefused(f func(remote net.Addr, err error)) { m.onRefused.Store(&f) }

// GRPCListener returns the listener of the gRPC connections: serve it with
// a grpc.Server using insecure credentials, since the mux has terminated
// TLS already. Closing it (grpc.Server.Stop does) refuses later gRPC
// connections; the mux and its stream layers go on.
func (m *Mux) GRPCListener() net.Listener { return m.grpc }

// StreamLayer returns the raft stream layer of kind: Accept returns the
// incoming connections of that kind, Dial connects to a peer's mux (TLS
// when the mux has it) and sends kind, and Addr is advertise, the address
// peers know this node by (in the coordinators list, or the log's peer
// list), which a mux listening on 0.0.0.0 could not report. Closing the
// layer (raft.NetworkTransport.Close does) frees kind for another
// StreamLayer. It panics if kind is 0 or 'P' (gRPC's first byte), or has
// an open layer: both are programming errors.
func (m *Mux) StreamLayer(kind byte, advertise string) raft.StreamLayer {
	if kind == grpcFirst || kind == KindFrames || kind == 0 {
		panic(fmt.Sprintf("raftnet: stream kind %q is reserved", kind))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.layers[kind]; ok {
		panic(fmt.Sprintf("raftnet: stream kind %q already has a layer", kind))
	}
	l := m.newListener(kind, advertised(advertise))
	if m.closed {
		l.close()
	} else {
		m.layers[kind] = l
	}
	return &streamLayer{listener: l}
}

// Close stops the mux: the listener, the gRPC listener, every stream layer
// and every connection not yet handed over. Connections already accepted
// by gRPC or raft are theirs to close.
func (m *Mux) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	close(m.done)
	err := m.ln.Close()
	for c := range m.pending {
		c.Close()
	}
	layers := make([]*listener, 0, len(m.layers))
	for _, l := range m.layers {
		layers = append(layers, l)
	}
	m.mu.Unlock()
	m.grpc.close()
	m.frames.close()
	for _, l := range layers {
		l.close()
	}
	m.wg.Wait()
	return err
}

// serve accepts connections and hands each to a goroutine of its own.
func (m *Mux) serve() {
	defer m.wg.Done()
	var backoff time.Duration
	for {
		c, err := m.ln.Accept()
		if err != nil {
			select {
			case <-m.done:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors, say: wait and retry, like
			// net/http.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			select {
			case <-m.done:
				return
			case <-time.After(backoff):
			}
			continue
		}
		backoff = 0
		m.mu.Lock()
		if m.closed {
			m.mu.Unlock()
			c.Close()
			return
		}
		m.pending[c] = struct{}{}
		timeout := m.timeout
		m.wg.Add(1)
		m.mu.Unlock()
		go m.route(c, timeout)
	}
}

// DialInProcess returns a connection to this mux's gRPC and frames
// servers that stays in the process: one end of a pipe, whose other end
// the mux routes as an accepted connection, without TLS (nothing leaves
// the process) and with the [InProcess] AuthInfo. Raft refuses it.
func (m *Mux) DialInProcess(ctx context.Context) (net.Conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	client, server := net.Pipe()
	c := &inProcessConn{Conn: server}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		client.Close()
		server.Close()
		return nil, ErrClosed
	}
	m.pending[c] = struct{}{}
	timeout := m.timeout
	m.wg.Add(1)
	m.mu.Unlock()
	go m.route(c, timeout)
	return client, nil
}

// inProcessConn is the mux's end of a DialInProcess pipe.
type inProcessConn struct{ net.Conn }

// AuthInfo is what handlers see of the connection (credentials.AuthInfo;
// the frames server asks for it through this method).
func (*inProcessConn) AuthInfo() credentials.AuthInfo {
	return InProcess{CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}
}

// InProcess is the AuthInfo of a connection made with DialInProcess: a
// role of the serving process itself.
type InProcess struct{ credentials.CommonAuthInfo }

// AuthType implements credentials.AuthInfo.
func (InProcess) AuthType() string { return "in-process" }

// route terminates TLS on c (not on an in-process connection), reads its
// first byte and hands it over.
func (m *Mux) route(raw net.Conn, timeout time.Duration) {
	defer m.wg.Done()
	c := raw
	handed := false
	defer func() {
		m.mu.Lock()
		delete(m.pending, raw)
		m.mu.Unlock()
		if !handed {
			c.Close()
		}
	}()
	deadline := time.Now().Add(timeout)
	_, local := raw.(*inProcessConn)
	if m.serverTLS != nil && !local {
		tc := tls.Server(raw, m.serverTLS)
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		err := tc.HandshakeContext(ctx)
		cancel()
		if err != nil {
			m.rejected.Add(1)
			if f := m.onRejected.Load(); f != nil {
				(*f)(raw.RemoteAddr(), err)
			}
			return
		}
		c = tc
	}
	c.SetReadDeadline(deadline)
	var first [1]byte
	if _, err := c.Read(first[:]); err != nil {
		m.unknown.Add(1)
		return
	}
	c.SetReadDeadline(time.Time{})

	var to *listener
	switch first[0] {
	case grpcFirst:
		to, c = m.grpc, &peeked{Conn: c, first: first[0], unread: true}
	case KindFrames:
		if m.framesOn.Load() {
			to = m.frames // TLS checked the certificate: a client's will do
		}
	default:
		if local {
			m.unknown.Add(1) // raft is for other nodes
			return
		}
		if tc, ok := c.(*tls.Conn); ok {
			if err := tlsconf.RequireNodePeer(tc.ConnectionState()); err != nil {
				m.refused.Add(1)
				if f := m.onRefused.Load(); f != nil {
					(*f)(raw.RemoteAddr(), err)
				}
				return
			}
		}
		m.mu.Lock()
		to = m.layers[first[0]]
		m.mu.Unlock()
	}
	if to == nil || !to.deliver(c, m.done) {
		m.unknown.Add(1)
		return
	}
	handed = true
}

// peeked is a connection whose first byte was read by the mux: it reads it
// again first.
type peeked struct {
	net.Conn
	first  byte
	unread bool
}

func (p *peeked) Read(b []byte) (int, error) {
	if p.unread && len(b) > 0 {
		b[0], p.unread = p.first, false
		return 1, nil
	}
	return p.Conn.Read(b)
}

// listener is a net.Listener fed by the mux.
type listener struct {
	mux   *Mux
	kind  byte // 0 for gRPC
	addr  net.Addr
	conns chan net.Conn
	once  sync.Once
	done  chan struct{}
}

func (m *Mux) newListener(kind byte, addr net.Addr) *listener {
	return &listener{mux: m, kind: kind, addr: addr, conns: make(chan net.Conn), done: make(chan struct{})}
}

// deliver waits for Accept to take c; false if the listener or the mux
// closed first.
func (l *listener) deliver(c net.Conn, muxDone chan struct{}) bool {
	select {
	case l.conns <- c:
		return true
	case <-l.done:
	case <-muxDone:
	}
	return false
}

func (l *listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, ErrClosed
	}
}

func (l *listener) close() {
	l.once.Do(func() { close(l.done) })
}

// Close stops the listener; a stream layer's kind is free again.
func (l *listener) Close() error {
	l.close()
	if l.kind != 0 && l.kind != KindFrames {
		m := l.mux
		m.mu.Lock()
		if m.layers[l.kind] == l {
			delete(m.layers, l.kind)
		}
		m.mu.Unlock()
	}
	return nil
}

func (l *listener) Addr() net.Addr { return l.addr }

// streamLayer is a raft.StreamLayer of one kind.
type streamLayer struct {
	*listener
}

func (s *streamLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.Background(), context.CancelFunc(func() {})
	if timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, timeout)
	}
	defer cancel()
	return s.mux.dialKind(ctx, string(addr), s.kind)
}

// DialFrames connects to the mux of the node at addr as this node does
// for raft (the mux's dialer, TLS with its client certificate) and routes
// the connection to that node's frames server: what a node's frames
// streams to another node (a stash's pull of the log) run on. ctx bounds
// the dial and the handshake.
func (m *Mux) DialFrames(ctx context.Context, addr string) (net.Conn, error) {
	return m.dialKind(ctx, addr, KindFrames)
}

// dialKind dials the mux at addr (TLS when this mux has it) and sends kind.
func (m *Mux) dialKind(ctx context.Context, addr string, kind byte) (net.Conn, error) {
	m.mu.Lock()
	dial := m.dial
	m.mu.Unlock()
	var c net.Conn
	var err error
	if dial != nil {
		c, err = m.dialWith(ctx, dial, addr)
	} else if cfg := m.clientTLS; cfg != nil {
		// tls.Dialer verifies the server against the host dialled when
		// the config names no server.
		c, err = (&tls.Dialer{Config: cfg}).DialContext(ctx, "tcp", addr)
	} else {
		var d net.Dialer
		c, err = d.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		c.SetWriteDeadline(dl)
	}
	if _, err := c.Write([]byte{kind}); err != nil {
		c.Close()
		return nil, fmt.Errorf("raftnet: send the stream kind to %s: %w", addr, err)
	}
	c.SetWriteDeadline(time.Time{})
	return c, nil
}

// dialWith dials addr with a custom dial function, then runs the TLS
// handshake over it if the mux has TLS.
func (m *Mux) dialWith(ctx context.Context, dial func(context.Context, string) (net.Conn, error), addr string) (net.Conn, error) {
	raw, err := dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	cfg := m.clientTLS
	if cfg == nil {
		return raw, nil
	}
	if cfg.ServerName == "" {
		cfg = cfg.Clone()
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			host = addr
		}
		cfg.ServerName = host
	}
	tc := tls.Client(raw, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		raw.Close()
		return nil, err
	}
	return tc, nil
}

type advertised string

func (advertised) Network() string  { return "tcp" }
func (a advertised) String() string { return string(a) }

var (
	_ raft.StreamLayer = (*streamLayer)(nil)
	_ net.Listener     = (*listener)(nil)
)

// TLSState returns the TLS connection state of a connection the mux
// handed to GRPCListener, and false for a plaintext one.
func TLSState(c net.Conn) (tls.ConnectionState, bool) {
	if p, ok := c.(*peeked); ok {
		c = p.Conn
	}
	if tc, ok := c.(*tls.Conn); ok {
		return tc.ConnectionState(), true
	}
	return tls.ConnectionState{}, false
}

// GRPCCredentials are the server credentials of a gRPC server on
// GRPCListener: the mux already terminated TLS, so the handshake does
// nothing, but handlers see the peer's TLS state (its certificate) as
// credentials.TLSInfo, as with gRPC's own TLS.
func GRPCCredentials() credentials.TransportCredentials { return muxCreds{} }

type muxCreds struct{}

func (muxCreds) ClientHandshake(context.Context, string, net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("raftnet: GRPCCredentials are server credentials")
}

func (muxCreds) ServerHandshake(c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	inner := c
	if p, ok := c.(*peeked); ok {
		inner = p.Conn
	}
	if ip, ok := inner.(*inProcessConn); ok {
		return c, ip.AuthInfo(), nil
	}
	if st, ok := TLSState(c); ok {
		return c, credentials.TLSInfo{State: st, CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}, nil
	}
	return c, insecureInfo{}, nil
}

func (muxCreds) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "raftnet"}
}
func (muxCreds) Clone() credentials.TransportCredentials { return muxCreds{} }
func (muxCreds) OverrideServerName(string) error         { return nil }

// insecureInfo is the AuthInfo of a plaintext connection.
type insecureInfo struct{ credentials.CommonAuthInfo }

func (insecureInfo) AuthType() string { return "insecure" }
