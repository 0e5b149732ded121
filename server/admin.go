package server

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc"

	"github.com/distash/distash/internal/wire"
)

// ErrKilled is what Failed reports (errors.Is) when an operator stopped the
// node with `distash cli kill`: the process exits with status 0.
var ErrKilled = errors.New(`stopped by "distash cli kill"`)

// KilledError is the error of a kill, with the reason the caller gave.
type KilledError struct{ Reason string }

func (e *KilledError) Error() string {
	if e.Reason == "" {
		return ErrKilled.Error()
	}
	return ErrKilled.Error() + ": " + e.Reason
}

// Is makes errors.Is(err, ErrKilled) true.
func (e *KilledError) Is(target error) bool { return target == ErrKilled }

// maxKillReason bounds the reason a kill carries into the log.
const maxKillReason = 256

// killDelay lets the Kill reply leave before the node stops serving.
const killDelay = 100 * time.Millisecond

// adminServer serves the Admin service: operator calls to one node. On a
// cluster served over mutual TLS any client whose certificate the CA
// signed may make them, as it may read and write data.
type adminServer struct {
	wire.UnimplementedAdminServer
	s    *Server
	kill func(reason string) // stops the node; nil: an embedded cluster, which kill does not stop
}

// registerAdmin serves the Admin service on g; kill stops the node (nil
// for an embedded cluster).
func registerAdmin(g *grpc.Server, s *Server, kill func(reason string)) {
	wire.RegisterAdminServer(g, &adminServer{s: s, kill: kill})
}

// Auth lists or changes the cluster's roles (authlive.go).
func (a *adminServer) Auth(ctx context.Context, req *wire.AuthRequest) (*wire.AuthResponse, error) {
	return a.s.link.authChange(ctx, req)
}

// Kill stops the node, shortly after answering.
func (a *adminServer) Kill(ctx context.Context, req *wire.KillRequest) (*wire.KillResponse, error) {
	if a.kill == nil {
		return a.UnimplementedAdminServer.Kill(ctx, req) // as before the embedded cluster served Admin
	}
	reason := req.GetReason()
	if len(reason) > maxKillReason {
		reason = reason[:maxKillReason]
	}
	time.AfterFunc(killDelay, func() { a.kill(reason) })
	return &wire.KillResponse{}, nil
}
