package frames

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/distash/distash/internal/protover"
)

// ServerOptions configure a Server.
type ServerOptions struct {
	// Interceptor wraps every stream, as the gRPC server's chain of stream
	// interceptors (ChainStreamInterceptors builds one). Nil: none.
	Interceptor grpc.StreamServerInterceptor
	// Logger receives refused connections and malformed frames; default
	// slog.Default().
	Logger *slog.Logger
	// OpenTimeout bounds the wait for a connection's open frame; default
	// 10 s.
	OpenTimeout time.Duration
	// WriteTimeout bounds each write to a connection: a client that reads
	// nothing for this long loses its stream. Default 30 s.
	WriteTimeout time.Duration
	// MaxFrame bounds a received frame; default MaxFrame.
	MaxFrame int
	// Protocol is the protocol versions the server speaks (the zero
	// Speaker: this binary's); a client with none in common is refused.
	Protocol protover.Speaker
}

// Server serves streams over frames connections with the stream handlers
// of the services registered.
type Server struct {
	opts    ServerOptions
	methods map[string]method // by full name; fixed before serving

	malformed atomic.Int64
	served    atomic.Int64

	mu     sync.Mutex
	conns  map[net.Conn]struct{} // Protected by mu.
	lns    []net.Listener        // Protected by mu.
	closed bool                  // Protected by mu.
	wg     sync.WaitGroup
}

type method struct {
	srv  any
	desc *grpc.StreamDesc
}

// NewServer returns a server with no services.
func NewServer(o ServerOptions) *Server {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.OpenTimeout <= 0 {
		o.OpenTimeout = 10 * time.Second
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = 30 * time.Second
	}
	if o.MaxFrame <= 0 {
		o.MaxFrame = MaxFrame
	}
	return &Server{opts: o, methods: map[string]method{}, conns: map[net.Conn]struct{}{}}
}

// Register serves the bidirectional stream methods of desc, implemented by
// impl (what grpc.Server.RegisterService would take). Unary methods are
// not served here. Call it before serving.
func (s *Server) Register(desc *grpc.ServiceDesc, impl any) {
	for i := range desc.Streams {
		sd := &desc.Streams[i]
		if sd.ClientStreams && sd.ServerStreams {
			s.methods["/"+desc.ServiceName+"/"+sd.StreamName] = method{srv: impl, desc: sd}
		}
	}
}

// MalformedConns counts connections closed for a malformed or oversized
// frame.
func (s *Server) MalformedConns() int64 { return s.malformed.Load() }

// Streams counts the streams served (accepted).
func (s *Server) Streams() int64 { return s.served.Load() }

// servedAll counts the streams every Server of the process accepted.
var servedAll atomic.Int64

// StreamsServed counts the streams every Server of the process accepted,
// for tests that check their clients use frames.
func StreamsServed() int64 { return servedAll.Load() }

// Serve accepts connections on ln and serves each in a goroutine of its
// own, until ln fails or Stop.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ln.Close()
		return net.ErrClosed
	}
	s.lns = append(s.lns, ln)
	s.mu.Unlock()
	for {
		c, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return nil
			}
			return err
		}
		if !s.track(c) {
			c.Close()
			return nil
		}
		go func() {
			defer s.untrack(c)
			s.serveConn(c)
		}()
	}
}

// ServeConn serves one connection and returns when its stream ended.
func (s *Server) ServeConn(c net.Conn) {
	if !s.track(c) {
		c.Close()
		return
	}
	defer s.untrack(c)
	s.serveConn(c)
}

func (s *Server) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	return true
}

func (s *Server) untrack(c net.Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	s.wg.Done()
}

// Stop closes the listeners and every connection, and waits for the
// handlers to return.
func (s *Server) Stop() {
	s.mu.Lock()
	s.closed = true
	for _, ln := range s.lns {
		ln.Close()
	}
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// refuse logs and counts a malformed frame on c.
func (s *Server) refuse(c net.Conn, what string, err error) {
	s.malformed.Add(1)
	s.opts.Logger.Warn("closed a frames connection: "+what, "remote", c.RemoteAddr().String(), "err", err)
}

func (s *Server) serveConn(c net.Conn) {
	defer c.Close()
	r := bufio.NewReaderSize(c, 32<<10)
	c.SetReadDeadline(time.Now().Add(s.opts.OpenTimeout))
	typ, body, err := ReadFrame(r, nil, MaxOpenFrame)
	if err != nil {
		if errors.Is(err, ErrMalformed) || errors.Is(err, ErrTooLarge) {
			s.refuse(c, "bad open frame", err)
		}
		return
	}
	if typ != TypeOpen {
		s.refuse(c, "bad open frame", ErrMalformed)
		return
	}
	c.SetReadDeadline(time.Time{})
	// The open frame is the method, then, from clients that state their
	// protocol versions, a NUL and their range (none: protocol 1), then,
	// from a client with a bearer token, a NUL and its authorization.
	name, versions, _ := strings.Cut(string(body), "\x00")
	versions, authorization, hasAuth := strings.Cut(versions, "\x00")
	w := newWriter(c, s.opts.WriteTimeout)
	lo, hi := protover.ParseRange(versions)
	if err := s.opts.Protocol.Check("client "+c.RemoteAddr().String(), lo, hi); err != nil {
		st := status.Convert(err)
		w.sendRaw(TypeStatus, AppendStatus(nil, uint32(st.Code()), st.Message()))
		return
	}
	m, ok := s.methods[name]
	if !ok {
		w.sendRaw(TypeStatus, AppendStatus(nil, uint32(codes.Unimplemented), "unknown stream method "+name))
		return
	}
	// The accept states the server's range (before versions were stated
	// it was empty).
	if err := w.sendRaw(TypeAccept, []byte(s.opts.Protocol.String())); err != nil {
		return
	}
	s.served.Add(1)
	servedAll.Add(1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := &peer.Peer{Addr: c.RemoteAddr(), LocalAddr: c.LocalAddr()}
	if tc, ok := c.(interface{ ConnectionState() tls.ConnectionState }); ok {
		p.AuthInfo = credentials.TLSInfo{State: tc.ConnectionState(), CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}
	} else if ac, ok := c.(interface{ AuthInfo() credentials.AuthInfo }); ok {
		p.AuthInfo = ac.AuthInfo() // a connection that knows its peer otherwise (raftnet's in-process ones)
	}
	ctx = peer.NewContext(ctx, p)
	ctx = context.WithValue(ctx, concurrentKey{}, true)
	if hasAuth {
		ctx = metadata.NewIncomingContext(ctx, metadata.Pairs("authorization", authorization))
	}
	ss := &serverStream{s: s, c: c, r: r, w: w, ctx: ctx, cancel: cancel}
	info := &grpc.StreamServerInfo{FullMethod: name, IsClientStream: true, IsServerStream: true}
	if s.opts.Interceptor != nil {
		err = s.opts.Interceptor(m.srv, ss, info, m.desc.Handler)
	} else {
		err = m.desc.Handler(m.srv, ss)
	}
	st := toStatus(err)
	w.sendRaw(TypeStatus, AppendStatus(nil, uint32(st.Code()), st.Message()))
}

// toStatus is the status gRPC would send for a handler's error.
func toStatus(err error) *status.Status {
	if err == nil {
		return status.New(codes.OK, "")
	}
	if st, ok := status.FromError(err); ok {
		return st
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return status.FromContextError(err)
	}
	return status.New(codes.Unknown, err.Error())
}

// serverStream is a stream as the handler sees it: grpc.ServerStream over
// a frames connection.
type serverStream struct {
	s      *Server
	c      net.Conn
	r      *bufio.Reader
	rbuf   []byte // reused for frames up to 64 KiB; used by RecvMsg only
	w      *writer
	ctx    context.Context
	cancel context.CancelFunc
}

func (ss *serverStream) Context() context.Context     { return ss.ctx }
func (ss *serverStream) SetHeader(metadata.MD) error  { return nil }
func (ss *serverStream) SendHeader(metadata.MD) error { return nil }
func (ss *serverStream) SetTrailer(metadata.MD)       {}

func (ss *serverStream) SendMsg(m any) error {
	if err := ss.w.send(TypeMsg, m); err != nil {
		ss.cancel()
		if _, ok := status.FromError(err); ok {
			return err
		}
		return status.Error(codes.Unavailable, "frames: "+err.Error())
	}
	return nil
}

// RecvMsg reads the next request. The connection's end is io.EOF (the
// client hung up, as a cancelled gRPC stream, so the context ends too); a
// malformed frame closes the connection.
func (ss *serverStream) RecvMsg(m any) error {
	if ss.rbuf == nil {
		ss.rbuf = make([]byte, 0, 64<<10)
	}
	typ, body, err := ReadFrame(ss.r, ss.rbuf, ss.s.opts.MaxFrame)
	if err == nil && typ != TypeMsg {
		err = ErrMalformed
	}
	if err == nil {
		if uerr := unmarshal(body, m); uerr != nil {
			err = errors.Join(ErrMalformed, uerr)
		}
	}
	if err == nil {
		return nil
	}
	ss.cancel()
	ss.w.fail(err)
	if errors.Is(err, ErrMalformed) || errors.Is(err, ErrTooLarge) {
		ss.s.refuse(ss.c, "malformed frame", err)
		ss.c.Close()
		return status.Error(codes.Internal, "frames: "+err.Error())
	}
	ss.c.Close()
	if err == io.EOF || errors.Is(err, net.ErrClosed) {
		return io.EOF
	}
	return status.Error(codes.Canceled, "frames: "+err.Error())
}

// ChainStreamInterceptors returns one interceptor that runs ints in order,
// the first outermost, as grpc.ChainStreamInterceptor does.
func ChainStreamInterceptors(ints ...grpc.StreamServerInterceptor) grpc.StreamServerInterceptor {
	var out []grpc.StreamServerInterceptor
	for _, i := range ints {
		if i != nil {
			out = append(out, i)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		return out[0](srv, ss, info, chained(out, 1, info, handler))
	}
}

func chained(ints []grpc.StreamServerInterceptor, i int, info *grpc.StreamServerInfo, final grpc.StreamHandler) grpc.StreamHandler {
	if i == len(ints) {
		return final
	}
	return func(srv any, ss grpc.ServerStream) error {
		return ints[i](srv, ss, info, chained(ints, i+1, info, final))
	}
}
