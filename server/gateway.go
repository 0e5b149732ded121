package server

import (
	"context"
	"net"

	"github.com/distash/distash/internal/frames"
	"github.com/distash/distash/internal/tlsconf"
	"github.com/distash/distash/internal/wire"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// The gateway: the gRPC server and the frames server that carry the
// DiStash service (service.go) and, on a node, the coordinators' and the
// log's services, with their interceptors and the node-only gate.

// newGRPCServer returns the gRPC server of this process, with its
// interceptors (panic recovery innermost, around the handlers) and opts.
func (s *Server) newGRPCServer(opts ...grpc.ServerOption) *grpc.Server {
	gopts := []grpc.ServerOption{grpc.MaxRecvMsgSize(64 << 20), grpc.MaxSendMsgSize(64 << 20)}
	gopts = append(gopts, opts...)
	unary := []grpc.UnaryServerInterceptor{s.recoverUnary}
	stream := []grpc.StreamServerInterceptor{s.recoverStream}
	if s.opts.Interceptor != nil {
		unary = append([]grpc.UnaryServerInterceptor{s.opts.Interceptor}, unary...)
	}
	if s.opts.StreamInterceptor != nil {
		stream = append([]grpc.StreamServerInterceptor{s.opts.StreamInterceptor}, stream...)
	}
	gopts = append(gopts, grpc.ChainUnaryInterceptor(unary...), grpc.ChainStreamInterceptor(stream...))
	return grpc.NewServer(gopts...)
}

// startFrames serves the data path's streams (ReadStream, CommitStream)
// over the frames protocol on ln, with the generated handlers behind the
// same stream interceptors as the gRPC server's (newGRPCServer).
func (s *Server) startFrames(ln net.Listener) {
	s.frames = frames.NewServer(frames.ServerOptions{
		Interceptor: frames.ChainStreamInterceptors(s.opts.StreamInterceptor, s.recoverStream),
		Logger:      s.logger,
	})
	s.frames.Register(&wire.DiStash_ServiceDesc, &service{s: s})
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.frames.Serve(ln); err != nil {
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
// pop a stash's tag.
func (s *Server) nodeOnly(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if !nodeOnlyMethods[info.FullMethod] || s.node.opts.ServerTLS == nil {
		return handler(ctx, req)
	}
	p, ok := peer.FromContext(ctx)
	if ok {
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && tlsconf.RequireNodePeer(ti.State) == nil {
			return handler(ctx, req)
		}
	}
	return nil, status.Errorf(codes.PermissionDenied, "%s is for cluster nodes: a node's certificate allows server authentication (extendedKeyUsage serverAuth), a client's does not", info.FullMethod)
}
