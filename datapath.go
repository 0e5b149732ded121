package distash

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
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
	token    bearer                                                   // WithToken; nil: none
	notUntil atomic.Int64                                             // unix ns: gRPC until then
}

func (db *DB) framesDialer(addr string) *framesDialer {
	fd := &framesDialer{addr: addr, dial: db.dialer, off: db.grpcDataPath, token: db.token}
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

// errTokenNeedsTLS: as gRPC's per-RPC credentials, a token is not sent
// in the clear.
var errTokenNeedsTLS = status.Error(codes.Unauthenticated, "distash: a bearer token (WithToken) travels only over TLS (WithTLS)")

// open opens a frames stream of method, with the DB's token in its open
// frame; frames.ErrNotFrames if the node does not speak the protocol, or
// speaks a release of it without tokens.
func (fd *framesDialer) open(ctx context.Context, method string) (*frames.ClientStream, error) {
	var authorization string
	if fd.token != nil {
		if fd.tls == nil {
			return nil, errTokenNeedsTLS
		}
		tok, err := fd.token(ctx)
		if err != nil {
			return nil, status.Error(codes.Unauthenticated, "distash: the token source: "+err.Error())
		}
		authorization = "Bearer " + tok
	}
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
	cs, err := frames.OpenAuthorized(ctx, c, []byte{frames.RouteByte}, method, protover.This, authorization)
	if _, refused := protover.IsRefusal(err); refused && authorization != "" {
		// A server of the release before tokens rode frames reads the
		// authorization as part of the versions and refuses them: gRPC
		// carries the token to it (and states the versions again there).
		return nil, fmt.Errorf("%w (a release without tokens on frames: %v)", frames.ErrNotFrames, err)
	}
	return cs, err
}

// openDataStream opens a stream of method to fd's node: over frames, or
// over gRPC (viaGRPC) when the client is told to or the node does not
// speak frames. A frames stream's writes end after writeTimeout, the
// longest its requests may take (callWithin watches only the replies).
func openDataStream[S any, R proto.Message](ctx context.Context, fd *framesDialer, method string, writeTimeout time.Duration, newR func() R,
	viaGRPC func(context.Context) (bidiStream[S, R], error)) (bidiStream[S, R], error) {
	if fd != nil && !fd.off && time.Now().UnixNano() >= fd.notUntil.Load() {
		cs, err := fd.open(ctx, method)
		if err == nil {
			cs.SetWriteTimeout(writeTimeout)
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

// idResponse is a data-path stream's reply: a message naming the request
// it answers.
type idResponse[T any] interface {
	*T
	proto.Message
	GetId() uint64
}

// newDataStreamer returns the idStreamer of a data-path stream (reads,
// read versions, commits) of method to fd's node, whose requests take at
// most timeout: over frames, or over gRPC with viaGRPC (openDataStream).
func newDataStreamer[S any, T any, R idResponse[T]](fd *framesDialer, method string, timeout time.Duration, token bearer,
	viaGRPC func(context.Context) (bidiStream[S, R], error)) *idStreamer[S, R] {
	return &idStreamer[S, R]{
		open: func(ctx context.Context) (bidiStream[S, R], error) {
			return openDataStream(ctx, fd, method, timeout, func() R { return R(new(T)) }, viaGRPC)
		},
		id:    R.GetId,
		token: token,
	}
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
