// Package protover makes every gRPC connection state the protocol versions
// its side speaks (internal/version) and refuses a peer with which it has
// none in common, naming both. A client sends its range in the request
// metadata; the server checks it before the handler runs and states its own
// in the response header, which the client checks in turn. Two peers whose
// ranges overlap talk; code that needs a newer version's feature asks
// Common for the highest version both speak. A request without the metadata
// comes from a release before versions were stated: protocol 1.
package protover

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/distash/distash/internal/version"
)

// Metadata keys: the newest and the oldest version a side speaks.
const (
	KeyMax = "distash-protocol"
	KeyMin = "distash-protocol-min"
)

// unstated is the version of a peer that states none.
const unstated = 1

// refusalPrefix starts the status message of a refusal, so a client can
// tell it from other FailedPrecondition errors.
const refusalPrefix = "distash: incompatible protocol: "

// Speaker is the range of protocol versions one side speaks. The zero
// value is this process: the binary's versions, or SetForTest's.
type Speaker struct {
	Min, Max int
}

// This is the zero Speaker (this process, looked up at each call).
var This Speaker

// override is what this process speaks if set (tests act as a binary of
// another release).
var override Speaker

// SetForTest makes this process speak s until restore is called. Not safe
// while connections are in use.
func SetForTest(s Speaker) (restore func()) {
	old := override
	override = s
	return func() { override = old }
}

func (s Speaker) norm() Speaker {
	if s != (Speaker{}) {
		return s
	}
	if override != (Speaker{}) {
		return override
	}
	return Speaker{Min: version.MinProtocol, Max: version.Protocol}
}

// Common returns the highest version both s and a peer speaking
// [peerMin, peerMax] speak, or an error naming both ranges.
func (s Speaker) Common(peerName string, peerMin, peerMax int) (int, error) {
	sp := s.norm()
	if peerMin > peerMax || peerMin > sp.Max || peerMax < sp.Min {
		return 0, &version.ProtocolError{Peer: peerName, PeerMin: peerMin, PeerMax: peerMax, Min: sp.Min, Max: sp.Max}
	}
	return min(sp.Max, peerMax), nil
}

// stated reads a peer's range from its metadata.
func stated(md metadata.MD) (lo, hi int) {
	get := func(key string, def int) int {
		vals := md.Get(key)
		if len(vals) == 0 {
			return def
		}
		v, err := strconv.Atoi(vals[0])
		if err != nil {
			return -1 // states something unreadable: refused
		}
		return v
	}
	hi = get(KeyMax, unstated)
	return get(KeyMin, hi), hi
}

func (s Speaker) pairs() []string {
	sp := s.norm()
	return []string{KeyMax, strconv.Itoa(sp.Max), KeyMin, strconv.Itoa(sp.Min)}
}

// refusal is the gRPC status a side answers a peer it refuses with.
func refusal(err error) error {
	return status.Error(codes.FailedPrecondition, refusalPrefix+err.Error())
}

// IsRefusal reports whether err is, or wraps, a refusal of this side's
// protocol versions, and returns its message.
func IsRefusal(err error) (string, bool) {
	var se interface{ GRPCStatus() *status.Status }
	if !errors.As(err, &se) {
		return "", false
	}
	st := se.GRPCStatus()
	if st.Code() != codes.FailedPrecondition || !strings.HasPrefix(st.Message(), refusalPrefix) {
		return "", false
	}
	return strings.TrimPrefix(st.Message(), refusalPrefix), true
}

// Range is the versions s speaks, oldest first.
func (s Speaker) Range() (lo, hi int) {
	sp := s.norm()
	return sp.Min, sp.Max
}

// String is the range as transports without metadata state it: "1-2".
func (s Speaker) String() string {
	lo, hi := s.Range()
	return fmt.Sprintf("%d-%d", lo, hi)
}

// ParseRange reads a range String wrote; "" (a peer that states nothing)
// is protocol 1, and anything unreadable a range no one speaks.
func ParseRange(str string) (lo, hi int) {
	if str == "" {
		return unstated, unstated
	}
	a, b, ok := strings.Cut(str, "-")
	l, err1 := strconv.Atoi(a)
	h, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil {
		return -1, -1
	}
	return l, h
}

// Check returns nil if s and a peer named peerName speaking [lo, hi] have
// a version in common, else the refusal status an RPC answers, naming
// both ranges (IsRefusal recognises it).
func (s Speaker) Check(peerName string, lo, hi int) error {
	if _, err := s.Common(peerName, lo, hi); err != nil {
		return refusal(err)
	}
	return nil
}

func (s Speaker) checkIncoming(ctx context.Context) error {
	md, _ := metadata.FromIncomingContext(ctx)
	lo, hi := stated(md)
	name := "client"
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		name = fmt.Sprintf("client %s", p.Addr)
	}
	if _, err := s.Common(name, lo, hi); err != nil {
		return refusal(err)
	}
	return nil
}

// UnaryServer checks the caller's versions before the handler runs.
func (s Speaker) UnaryServer(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := s.checkIncoming(ctx); err != nil {
		return nil, err
	}
	grpc.SetHeader(ctx, metadata.Pairs(s.pairs()...))
	return handler(ctx, req)
}

// StreamServer checks the caller's versions before the handler runs.
func (s Speaker) StreamServer(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if err := s.checkIncoming(ss.Context()); err != nil {
		return err
	}
	ss.SetHeader(metadata.Pairs(s.pairs()...))
	return handler(srv, ss)
}

// ServerOptions are the options every gRPC server of the cluster runs with.
func (s Speaker) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(s.UnaryServer), grpc.ChainStreamInterceptor(s.StreamServer)}
}

// UnaryClient states this side's versions and checks the server's.
func (s Speaker) UnaryClient(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	var hdr metadata.MD
	ctx = metadata.AppendToOutgoingContext(ctx, s.pairs()...)
	if err := invoker(ctx, method, req, reply, cc, append(opts, grpc.Header(&hdr))...); err != nil {
		return err
	}
	lo, hi := stated(hdr)
	if _, err := s.Common("server "+cc.Target(), lo, hi); err != nil {
		return refusal(err)
	}
	return nil
}

// StreamClient states this side's versions on a stream and checks the
// server's when the first message arrives.
func (s Speaker) StreamClient(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	cs, err := streamer(metadata.AppendToOutgoingContext(ctx, s.pairs()...), desc, cc, method, opts...)
	if err != nil {
		return nil, err
	}
	return &checkedStream{ClientStream: cs, sp: s, target: cc.Target()}, nil
}

// checkedStream checks the server's stated versions once, when the first
// message arrives (the header has come by then).
type checkedStream struct {
	grpc.ClientStream
	sp      Speaker
	target  string
	checked bool // only RecvMsg's goroutine touches it
}

func (s *checkedStream) RecvMsg(m any) error {
	if err := s.ClientStream.RecvMsg(m); err != nil {
		return err
	}
	if !s.checked {
		s.checked = true
		if hdr, err := s.ClientStream.Header(); err == nil {
			lo, hi := stated(hdr)
			if _, cerr := s.sp.Common("server "+s.target, lo, hi); cerr != nil {
				return refusal(cerr)
			}
		}
	}
	return nil
}

// DialOptions are the options every gRPC client of the cluster dials with.
func (s Speaker) DialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithChainUnaryInterceptor(s.UnaryClient), grpc.WithChainStreamInterceptor(s.StreamClient)}
}
