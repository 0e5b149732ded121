package coord

import (
	"context"
	"crypto/tls"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// streamLayer carries raft's RPCs over TCP, inside mutual TLS when server
// and client configs are set: a peer whose certificate the CA did not sign
// fails the handshake and none of its RPCs reaches raft.
type streamLayer struct {
	net.Listener
	server, client *tls.Config
	timeout        time.Duration // of a handshake
	rejected       atomic.Int64  // incoming handshakes that failed
	advertise      string        // the address peers dial, as in the coordinators list
}

// Addr is what raft tells its peers this node's address is: the one in
// the coordinators list, which a listener on 0.0.0.0 would not report.
func (s *streamLayer) Addr() net.Addr { return advertised(s.advertise) }

type advertised string

func (advertised) Network() string  { return "tcp" }
func (a advertised) String() string { return string(a) }

func (s *streamLayer) Accept() (net.Conn, error) {
	c, err := s.Listener.Accept()
	if err != nil || s.server == nil {
		return c, err
	}
	// The handshake runs on the connection's first use, in raft's
	// per-connection goroutine, so a slow or hostile peer cannot hold up
	// Accept; the deadline bounds how long it can hold that goroutine.
	return &serverConn{Conn: tls.Server(c, s.server), layer: s}, nil
}

func (s *streamLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout}
	if s.client == nil {
		return d.Dial("tcp", string(addr))
	}
	// tls.Dialer verifies the server against the host dialled when the
	// config names no server.
	td := &tls.Dialer{NetDialer: d, Config: s.client}
	return td.Dial("tcp", string(addr))
}

type serverConn struct {
	*tls.Conn
	layer *streamLayer
	once  sync.Once
	err   error
}

func (c *serverConn) handshake() error {
	c.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), c.layer.timeout)
		defer cancel()
		if c.err = c.Conn.HandshakeContext(ctx); c.err != nil {
			c.layer.rejected.Add(1)
			c.Conn.Close()
		}
	})
	return c.err
}

func (c *serverConn) Read(b []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Read(b)
}

func (c *serverConn) Write(b []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}
