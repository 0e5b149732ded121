package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"time"

	"github.com/distash/distash"
	"github.com/distash/distash/internal/engine"
	"github.com/distash/distash/internal/fsys"
	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/raftnet"
	"github.com/distash/distash/internal/shardmap"
	"github.com/distash/distash/internal/stash"
	"github.com/distash/distash/internal/txlog"
	"github.com/distash/distash/internal/wire"
	"google.golang.org/grpc"
)

// MaxStashesPerProcess bounds the stashes of all pools that one embedded
// cluster runs: each holds an engine (a Pebble stash up to about 20 MiB of
// cache and memtable), an MVCC window and goroutines.
const MaxStashesPerProcess = 256

// embedded is the clusterLink of an embedded cluster: every role and
// every stash runs in this process, on its one log, for one generation
// (0). There is no controller to ask, no other node to reach or to copy
// from, and no node-level failure to report.
type embedded struct {
	s        *Server
	listener net.Listener // set once the cluster listens
}

func (e *embedded) addr() string {
	if e.listener != nil {
		return e.listener.Addr().String()
	}
	return e.s.opts.ListenAddr
}

func (e *embedded) clusterString() string { return e.listener.Addr().String() }

// asClient implements clusterLink: the cluster's own address, once it
// serves (its roles start before), reached in process.
func (e *embedded) asClient() (string, []distash.Option) {
	addr := e.s.backupAddr.Load()
	if addr == nil {
		return "", nil
	}
	// In process, without TLS: the server's certificate allows only server
	// authentication, so it cannot be the worker's client certificate.
	mux := e.s.gw.mux
	return *addr, []distash.Option{distash.WithDialer(func(ctx context.Context, _ string) (net.Conn, error) {
		return mux.DialInProcess(ctx)
	})}
}
func (e *embedded) nodeID() string { return "" }

// view is nil: an embedded cluster has no controller; its settings are
// the configuration's and its stashes are this process's slots.
func (e *embedded) view(time.Duration) *wire.ViewResponse { return nil }

// connTo is never needed: every stash is in this process (stashAddress
// finds none without a view).
func (e *embedded) connTo(addr string) (*grpc.ClientConn, error) {
	return nil, fmt.Errorf("server: an embedded cluster has no node at %s", addr)
}

// retire has no controller to tell: the log's pop is all.
func (e *embedded) retire(context.Context, kv.Tag) error { return nil }

func (e *embedded) status() *wire.NodeStatus                            { return nil }
func (e *embedded) stashNode() (id, addr string)                        { return "", "" }
func (e *embedded) reportedLogLast() kv.Version                         { return 0 } // the log is in this process
func (e *embedded) rolesStarting(*txRoles, func(func(context.Context))) {}
func (e *embedded) stop()                                               {}

// clusterStatus is the process's own status: it is the whole cluster.
func (e *embedded) clusterStatus(ctx context.Context, own func(context.Context) (*wire.StatusResponse, error)) (*wire.StatusResponse, error) {
	return own(ctx)
}

// systemStashBehind does nothing: the log never force-pops the system
// tag, whose stash pops only what it made durable, and an embedded cluster
// has no other copy of the system stash to take one from.
func (e *embedded) systemStashBehind(context.Context, engine.Engine, kv.Version) error { return nil }

// systemDiskFull does nothing beyond the stash's own report: the process
// is the whole cluster, and its stashes keep serving reads.
func (e *embedded) systemDiskFull(error) {}

// stashDamaged leaves the damaged stash serving nothing; the other
// replicas of its shards serve, and the data distributor re-replicates
// them, unless it holds the only replica: then its reads are refused.
func (e *embedded) stashDamaged(_ context.Context, sl *stashSlot, pool, file, reason string, err error) {
	s := e.s
	if r := s.poolReplication(pool); r <= 1 {
		s.refuseDamaged(sl, pool, r, err)
		return
	}
	s.roleLogger(logRoleStash).Error("stash is damaged: it cannot vouch for its data and serves nothing; the other replicas of its shards serve, and the data distributor re-replicates them onto the pool's other stashes",
		"tag", sl.tag, "pool", pool, "file", file, "reason", reason)
}

// Start opens or creates the cluster in opts.Dir and serves it.
func Start(ctx context.Context, opts Options) (*Server, error) {
	if opts.Dir == "" {
		return nil, errors.New("server: Options.Dir is required")
	}
	if opts.Config == nil {
		return nil, errors.New("server: Options.Config is required")
	}
	if err := opts.Config.Validate(); err != nil {
		return nil, err
	}
	if err := checkAuth(opts.Config, opts.TLS != nil); err != nil {
		return nil, err
	}
	if opts.ListenAddr == "" {
		opts.ListenAddr = "127.0.0.1:0"
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	// An embedded cluster has one generation, 0, for its life.
	opts.Logger = serverLogger(opts.Logger, embeddedNode, func() uint64 { return 0 })
	total := 0
	for _, p := range opts.Config.Pools {
		total += p.Stashes
	}
	if total > MaxStashesPerProcess {
		return nil, fmt.Errorf("server: the configuration has %d stashes in all, more than the %d one process runs (each has its own engine, MVCC window and goroutines); use fewer stashes per pool", total, MaxStashesPerProcess)
	}
	for _, w := range opts.Config.Warnings() {
		opts.Logger.Warn("configuration: " + w)
	}
	opts.FS = fsys.Or(opts.FS)
	dirLock, legacy, err := lockDataDir(opts.FS, opts.Dir, opts.Config)
	if err != nil {
		return nil, err
	}
	s := newServer(opts)
	s.serverTLS = opts.TLS
	e := &embedded{s: s}
	s.link = e
	s.dirLock = dirLock
	s.legacyDir.Store(legacy)
	if err := e.start(ctx); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// start opens the log, the system stash and every pool's stashes over it,
// starts the roles of generation 0 and serves.
func (e *embedded) start(ctx context.Context) error {
	s := e.s
	specs := s.stashSpecs()
	tags := []kv.Tag{shardmap.SystemTag}
	for _, sp := range specs {
		tags = append(tags, sp.tag)
	}
	var err error
	lo := s.logOptions()
	lo.Replicas, lo.Tags = s.cfg.Log.Replicas, tags
	s.log, err = txlog.Open(lo)
	if err != nil {
		return fmt.Errorf("server: open log: %w", err)
	}
	s.replica.set(s.log)
	recovered := s.log.LastVersion()

	runCtx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel

	sys, err := s.startSystemStash(runCtx)
	if err != nil {
		return err
	}

	for _, sp := range specs {
		st, err := s.openStash(ctx, sp, e.stashDir(sp), localSource{s})
		if errors.Is(err, fsys.ErrDamaged) {
			// Reported and handled by its supervisor (stashDamaged):
			// the cluster starts, the stash serves nothing.
			st, err = s.failedStash(sp, err), nil
		}
		if err != nil {
			return err
		}
		// A stash that fails is reopened from its files; a dram stash
		// then starts empty at the log's end.
		reopen := func() (*stash.Stash, error) { return s.openStash(runCtx, sp, e.stashDir(sp), localSource{s}) }
		s.addStash(runCtx, sp.tag, st, reopen)
	}

	s.legacyDir.Store(false) // every stash has its ownership file now
	if err := s.startRoles(ctx, 0, recovered, sys, time.Now()); err != nil {
		return err
	}
	for _, sp := range specs {
		sl, _ := s.slot(sp.tag)
		sl.setOwned(s.tx.Load().commit.Shards().RangesOf(sp.tag))
	}

	lis, err := net.Listen("tcp", s.opts.ListenAddr)
	if err != nil {
		return fmt.Errorf("server: listen on %s: %w", s.opts.ListenAddr, err)
	}
	e.listener = lis
	s.warnIfExposed(lis)
	// One address for gRPC and the data path's frames protocol: the mux
	// terminates TLS (if any) and routes each connection by its first byte.
	if err := e.loadRoles(); err != nil {
		return err
	}
	gs := s.gw.open(raftnet.ServeClients(lis, s.opts.TLS))
	registerAdmin(gs, s, nil) // Admin.Auth; Kill is for nodes
	s.gw.serve()
	// The backup worker may now reach the cluster (in process, asClient).
	s.backupAddr.Store(new(lis.Addr().String()))
	if err := s.startHTTP(); err != nil {
		return err
	}
	s.logger.Info("distash cluster started", "addr", lis.Addr().String(), "dir", s.opts.Dir, "recovered_version", recovered, "pools", len(s.cfg.Pools))
	return nil
}

// localSource is the embedded cluster's own log, which its stashes pull
// from (stashSource).
type localSource struct{ s *Server }

func (l localSource) log() stash.Log { return l.s.log }

// start: every stash starts at the log's end if its engine has nothing.
func (l localSource) start(context.Context, stashSpec) (kv.Version, error) {
	return l.s.log.LastVersion(), nil
}

// holdsAfter: a Peek after a version below Gone fails.
func (l localSource) holdsAfter(_ context.Context, sp stashSpec, v kv.Version) (bool, error) {
	return v >= l.s.log.Gone(sp.tag), nil
}

// admit refuses a durable engine that came back older than what the log
// still holds for it: it lost data. An ephemeral one may restart empty (an
// ephemeral flash engine does).
func (l localSource) admit(_ context.Context, sp stashSpec, eng engine.Engine, dir string, volatile bool, _ string) (bool, error) {
	popped := l.s.log.Popped(sp.tag)
	if sp.pool.LocalLog || eng.Version() >= popped {
		return volatile, nil
	}
	if !sp.pool.Ephemeral() {
		return false, fmt.Errorf("server: stash %s-%d of durable pool %q is at version %d but the log dropped its versions up to %d: its data is lost (its files are in %s; restore them, or start from an empty data directory)",
			sp.pool.Name, sp.index, sp.pool.Name, eng.Version(), popped, dir)
	}
	return true, nil
}

func (l localSource) reportUsage(tag kv.Tag, used int64, applied kv.Version) {
	l.s.usage.Report(tag, used, applied)
}

func (l localSource) adoptOwnership() bool { return l.s.legacyDir.Load() }

// stashDir is the directory of the embedded cluster's stash sp.
func (e *embedded) stashDir(sp stashSpec) string {
	return filepath.Join(e.s.opts.Dir, "stash", fmt.Sprintf("%s-%d", sp.pool.Name, sp.index))
}
