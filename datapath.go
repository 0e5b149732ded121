package distash

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/distash/distash/internal/frames"
	"github.com/distash/distash/internal/protover"
)

// The data path's transport. Reads and commits travel on long-lived
// streams (commitstream.go); each stream is one connection of the frames
// protocol (internal/frames) to the node, which costs far less CPU per
// message than gRPC's HTTP/2 transport. A node that does not speak frames
// (an older server) gets the same streams over gRPC, as does every node
// with WithGRPCDataPath. Read versions and metadata stay unary gRPC: read
// versions are batched, so their transport is a small share.

// notFramesFor is how long a node that did not speak frames gets gRPC
// streams before the client tries frames again (it may have been upgraded,
// or the refusal may have been a node restarting mid-open).
const notFramesFor = 30 * time.Second

// Streams opened, by transport, for tests to check which path they use.
var framesStreams, grpcStreams atomic.Int64

// framesDialer opens frames streams to one node.
type framesDialer struct {
	addr     string
	dial     func(ctx context.Context, addr string) (net.Conn, error) // WithDialer; nil: TCP
	tls      *tls.Config                                              // nil: plaintext
	off      bool                                                     // WithGRPCDataPath
	notUntil atomic.Int64                                             // unix ns: gRPC until then
}

func (db *DB) framesDialer(addr string) *framesDialer {
	fd := &framesDialer{addr: addr, dial: db.dialer, off: db.grpcDataPath}
	if db.tls != nil {
		// As gRPC's TLS credentials: the server's name is the host
		// dialled unless the configuration names one. No ALPN: the
		// server routes by the first byte.
		fd.tls = db.tls.Clone()
		fd.tls.NextProtos = nil
		if fd.tls.ServerName == "" {
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				host = addr
			}
			fd.tls.ServerName = host
		}
	}
	return fd
}

// open opens a frames stream of method; frames.ErrNotFrames if the node
// does not speak the protocol.
func (fd *framesDialer) open(ctx context.Context, method string) (*frames.ClientStream, error) {
	var c net.Conn
	var err error
	if fd.dial != nil {
		c, err = fd.dial(ctx, fd.addr)
	} else {
		var d net.Dialer
		c, err = d.DialContext(ctx, "tcp", fd.addr)
	}
	if err != nil {
		return nil, status.Error(codes.Unavailable, "dial "+fd.addr+": "+err.Error())
	}
	if fd.tls != nil {
		tc := tls.Client(c, fd.tls)
		if err := tc.HandshakeContext(ctx); err != nil {
			c.Close()
			return nil, status.Error(codes.Unavailable, "TLS handshake with "+fd.addr+": "+err.Error())
		}
		c = tc
	}
	return frames.Open(ctx, c, []byte{frames.RouteByte}, method, protover.This)
}

// openDataStream opens a stream of method to fd's node: over frames, or
// over gRPC (viaGRPC) when the client is told to or the node does not
// speak frames.
func openDataStream[S any, R proto.Message](ctx context.Context, fd *framesDialer, method string, newR func() R,
	viaGRPC func(context.Context) (bidiStream[S, R], error)) (bidiStream[S, R], error) {
	if fd != nil && !fd.off && time.Now().UnixNano() >= fd.notUntil.Load() {
		cs, err := fd.open(ctx, method)
		if err == nil {
			framesStreams.Add(1)
			return &framesStream[S, R]{cs: cs, newR: newR}, nil
		}
		if !errors.Is(err, frames.ErrNotFrames) {
			return nil, err
		}
		fd.notUntil.Store(time.Now().Add(notFramesFor).UnixNano())
	}
	grpcStreams.Add(1)
	return viaGRPC(ctx)
}

// framesStream is a frames.ClientStream as a bidiStream.
type framesStream[S any, R proto.Message] struct {
	cs   *frames.ClientStream
	newR func() R
}

func (f *framesStream[S, R]) Send(m S) error { return f.cs.Send(m) }

// concurrentSend marks a stream whose Send may be called concurrently.
func (f *framesStream[S, R]) concurrentSend() {}

func (f *framesStream[S, R]) Recv() (R, error) {
	r := f.newR()
	if err := f.cs.Recv(r); err != nil {
		var zero R
		return zero, err
	}
	return r, nil
}
