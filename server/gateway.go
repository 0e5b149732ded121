package server

import (
	"context"
	"errors"
	"net"

	"github.com/distash/distash/internal/frames"
	"github.com/distash/distash/internal/raftnet"
	"github.com/distash/distash/internal/tlsconf"
	"github.com/distash/distash/internal/wire"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// gateway is the process's service surface: the gRPC server and the
// frames server that carry the DiStash service (service.go) and, on a
// node, the coordinators' and the log's services, with their interceptors
// and the node-only gate, all on one listening address (mux).
type gateway struct {
	s      *Server
	mux    *raftnet.Mux   // routes each connection by its first byte: gRPC, frames, (a node's) raft
	grpc   *grpc.Server   // nil until open
	frames *frames.Server // the data path's streams over frames; nil until serve

	// Set by a node before serve: its services served on frames too (the
	// log's PeekStream) and the gate of its node-only methods there.
	framesAlso []framesService
	framesGate grpc.StreamServerInterceptor
}

// framesService is a service a node serves on frames besides DiStash's
// streams.
type framesService struct {
	desc *grpc.ServiceDesc
	impl any
}

// open sets the gateway up on mux: a gRPC server, with opts after the
// mux's credentials, carrying the DiStash service. The caller registers
// its other services on the returned server before serve.
func (g *gateway) open(mux *raftnet.Mux, opts ...grpc.ServerOption) *grpc.Server {
	g.mux = mux
	mux.OnRejected(g.s.logRejected)
	// TLS, if any, ends in the mux; its credentials show handlers the
	// peer's certificate.
	g.grpc = g.s.newGRPCServer(append([]grpc.ServerOption{grpc.Creds(raftnet.GRPCCredentials())}, opts...)...)
	wire.RegisterDiStashServer(g.grpc, &service{s: g.s})
	registerBackup(g.grpc, g.s) // backup hook (issue 23)
	return g.grpc
}

// serve serves gRPC and the frames protocol until stop.
func (g *gateway) serve() {
	s := g.s
	g.startFrames(g.mux.FramesListener())
	lis := g.mux.GRPCListener()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := g.grpc.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			s.logger.Error("grpc serve", "err", err)
		}
	}()
}

// stop ends the gRPC and frames servers and their connections.
func (g *gateway) stop() {
	if g.frames != nil {
		g.frames.Stop()
	}
	if g.grpc != nil {
		g.grpc.Stop()
	}
}

// close closes the listening address, last: on a node the raft groups of
// the log and the coordinators run over it until they are stopped.
func (g *gateway) close() {
	if g.mux != nil {
		g.mux.Close()
	}
}

// newGRPCServer returns the gRPC server of this process, with its
// interceptors and opts' (opts' first; then the protocol version check,
// the test hook's, and panic recovery innermost, around the handlers).
func (s *Server) newGRPCServer(opts ...grpc.ServerOption) *grpc.Server {
	gopts := []grpc.ServerOption{grpc.MaxRecvMsgSize(64 << 20), grpc.MaxSendMsgSize(64 << 20)}
	gopts = append(gopts, opts...)
	unary := []grpc.UnaryServerInterceptor{s.recoverUnary}
	stream := []grpc.StreamServerInterceptor{s.recoverStream}
	if s.auth != nil {
		unary = append([]grpc.UnaryServerInterceptor{s.authUnary}, unary...)
		stream = append([]grpc.StreamServerInterceptor{s.authStream}, stream...)
	}
	if s.opts.Interceptor != nil {
		unary = append([]grpc.UnaryServerInterceptor{s.opts.Interceptor}, unary...)
	}
	if s.opts.StreamInterceptor != nil {
		stream = append([]grpc.StreamServerInterceptor{s.opts.StreamInterceptor}, stream...)
	}
	unary = append([]grpc.UnaryServerInterceptor{s.opts.Protocol.UnaryServer}, unary...)
	stream = append([]grpc.StreamServerInterceptor{s.opts.Protocol.StreamServer}, stream...)
	gopts = append(gopts, grpc.ChainUnaryInterceptor(unary...), grpc.ChainStreamInterceptor(stream...))
	return grpc.NewServer(gopts...)
}

// startFrames serves the data path's streams (ReadStream, CommitStream),
// and a node's framesAlso, over the frames protocol on ln, with the
// generated handlers behind the same stream interceptors as the gRPC
// server's (newGRPCServer) and a node's framesGate.
func (g *gateway) startFrames(ln net.Listener) {
	s := g.s
	var authStream grpc.StreamServerInterceptor
	if s.auth != nil {
		authStream = s.authStream
	}
	g.frames = frames.NewServer(frames.ServerOptions{
		Interceptor: frames.ChainStreamInterceptors(g.framesGate, s.opts.StreamInterceptor, authStream, s.recoverStream),
		Logger:      s.logger,
		Protocol:    s.opts.Protocol,
	})
	g.frames.Register(&wire.DiStash_ServiceDesc, &service{s: s})
	for _, fs := range g.framesAlso {
		g.frames.Register(fs.desc, fs.impl)
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := g.frames.Serve(ln); err != nil {
			s.logger.Error("frames serve", "err", err)
		}
	}()
}

// nodeOnlyMethods are the calls only cluster nodes make: registering,
// heartbeats, claiming a generation, retiring a tag, pulling and popping a
// tag, usage reports, the data distributor's shard metrics. Clients may ask
// for the coordinators' View. (Raft is refused to non-nodes in the mux,
// before a byte reaches it: raftnet.)
var nodeOnlyMethods = map[string]bool{
	wire.Coordinator_Register_FullMethodName:     true,
	wire.Coordinator_Heartbeat_FullMethodName:    true,
	wire.Coordinator_Claim_FullMethodName:        true,
	wire.Coordinator_RecoveryDone_FullMethodName: true,
	wire.Coordinator_Retire_FullMethodName:       true,
	wire.Log_Peek_FullMethodName:                 true,
	wire.Log_PeekStream_FullMethodName:           true,
	wire.Log_Pop_FullMethodName:                  true,
	wire.Log_Report_FullMethodName:               true,
	wire.DiStash_ShardMetrics_FullMethodName:     true,

	// Membership changes (membership.go).
	wire.Coordinator_JoinCoordinators_FullMethodName: true,
	wire.Coordinator_SetLogReplicas_FullMethodName:   true,
}

// nodeOnly refuses, on a cluster served over mutual TLS, node-to-node calls
// from a peer whose certificate is not a node's: a node certificate allows
// server authentication (a node serves its peers), a client certificate
// only client authentication (docs/security.md). So a client certificate
// reads and writes data but cannot register nodes, claim generations or
// pop a stash's tag. With [auth] the authorization interceptor decides
// instead (authz's rules give these methods to nodes only), so that the
// refusal names the identity and is audited as every other.
func (n *node) nodeOnly(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := n.refuseNonNode(ctx, info.FullMethod); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

// nodeOnlyStream is nodeOnly for streams (the log's PeekStream), on gRPC
// and on frames.
func (n *node) nodeOnlyStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if err := n.refuseNonNode(ss.Context(), info.FullMethod); err != nil {
		return err
	}
	return handler(srv, ss)
}

// refuseNonNode is nodeOnly's decision: nil if the call of method may go on.
func (n *node) refuseNonNode(ctx context.Context, method string) error {
	if !nodeOnlyMethods[method] || n.opts.ServerTLS == nil || n.s.auth != nil {
		return nil
	}
	p, ok := peer.FromContext(ctx)
	if ok {
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && tlsconf.RequireNodePeer(ti.State) == nil {
			return nil
		}
	}
	return status.Errorf(codes.PermissionDenied, "%s is for cluster nodes: a node's certificate allows server authentication (extendedKeyUsage serverAuth), a client's does not", method)
}
