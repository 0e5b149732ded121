package server

import (
	"context"
	"log/slog"
)

// Every log line of a server carries the node it comes from ("node": the
// node's id, or "embedded"), the generation the node knows at the time of
// the line ("generation", read when the line is written: it changes under
// a long-lived logger) and, where a role logs, the role ("role": proxy,
// log, stash, distributor, coordinator, sequencer). An operator filtering
// a cluster's merged logs by node, role or generation then finds every
// line of a recovery or of one stash.

// Roles as the "role" attribute of log lines names them.
const (
	logRoleProxy       = "proxy"
	logRoleLog         = "log"
	logRoleStash       = "stash"
	logRoleDistributor = "distributor"
	logRoleCoordinator = "coordinator"
	logRoleSequencer   = "sequencer" // recoveries: FoundationDB's master, the sequencer, runs them
)

// embeddedNode is the "node" attribute of an embedded cluster's lines.
const embeddedNode = "embedded"

// serverLogger returns base with the node and generation attributes that
// every line of the server carries; generation is called once per line.
func serverLogger(base *slog.Logger, node string, generation func() uint64) *slog.Logger {
	return slog.New(generationHandler{inner: base.Handler(), generation: generation}).With("node", node)
}

// Logger returns the server's logger: its lines carry the node and the
// generation (see above).
func (s *Server) Logger() *slog.Logger { return s.logger }

// roleLogger returns the logger of role within the server.
func (s *Server) roleLogger(role string) *slog.Logger { return s.logger.With("role", role) }

// generationHandler adds the current generation to every record.
type generationHandler struct {
	inner      slog.Handler
	generation func() uint64
}

func (h generationHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.inner.Enabled(ctx, l)
}

func (h generationHandler) Handle(ctx context.Context, r slog.Record) error {
	r = r.Clone() // the caller's record may share its attributes' storage
	r.AddAttrs(slog.Uint64("generation", h.generation()))
	return h.inner.Handle(ctx, r)
}

func (h generationHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return generationHandler{inner: h.inner.WithAttrs(attrs), generation: h.generation}
}

func (h generationHandler) WithGroup(name string) slog.Handler {
	return generationHandler{inner: h.inner.WithGroup(name), generation: h.generation}
}
