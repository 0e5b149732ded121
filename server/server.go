// Package server starts a DiStash cluster embedded in one process: the
// transaction log, sequencer, resolver, GRV and commit proxies and one
// storage server per stash of every pool, with a gRPC endpoint that clients
// (package distash) and the CLI use.
//
//	cfg := config.Default()
//	srv, err := server.Start(ctx, server.Options{Dir: dir, Config: cfg})
//	defer srv.Stop()
//	db, err := distash.Open(ctx, srv.ClusterString())
//
// Everything durable lives under Options.Dir: the log's raft replicas, one
// directory per durable stash, the system stash (shard map) and the
// configuration the cluster was created with. Restarting on the same
// directory recovers the cluster: durable stashes come back with their data
// and catch up from the log; dram stashes come back empty.
//
// StartNode starts one node of a multi-process cluster instead, with the
// same runtime. Where to look:
//
//	server.go      Server: the runtime, its stash slots, Stop; clusterLink
//	embedded.go    the embedded cluster (Start): every role in this process
//	node.go        a node (StartNode): wiring, status, its clusterLink
//	txnnode.go     a transaction node: log replica, leadership, recovery
//	stashnode.go   a stash node: its stash over the remote log, rejoins
//	membership.go  registration, the log's placement and raft membership
//	roles.go       the stateless roles of a generation (both runtimes)
//	bootstrap.go   the shard map load and the recorded-config checks
//	gateway.go     the gRPC and frames servers, the node-only gate
//	service.go     the DiStash gRPC service
//	conns.go       a node's connections and controller view
package server

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/distash/distash"
	"github.com/distash/distash/config"
	"github.com/distash/distash/internal/clock"
	"github.com/distash/distash/internal/coord"
	"github.com/distash/distash/internal/engine"
	"github.com/distash/distash/internal/engine/flash"
	pebbleengine "github.com/distash/distash/internal/engine/pebble"
	"github.com/distash/distash/internal/farmem/ult"
	"github.com/distash/distash/internal/fsys"
	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/protover"
	"github.com/distash/distash/internal/proxy"
	"github.com/distash/distash/internal/stash"
	"github.com/distash/distash/internal/txlog"
	"github.com/distash/distash/internal/wire"
)

// Options configure an embedded cluster.
type Options struct {
	// Dir holds the cluster's files. Required.
	Dir string
	// Config is the cluster configuration. Required.
	Config *config.Config
	// ListenAddr is the gRPC address; default "127.0.0.1:0" (a free port).
	// Start logs a warning when it is not a loopback address and TLS is nil.
	ListenAddr string
	// TLS, if set, makes the gRPC endpoint serve TLS with this server-side
	// configuration; TLSConfigFromFiles builds one that requires client
	// certificates signed by a CA (mutual TLS). Nil: plaintext.
	TLS *tls.Config
	// Logger receives the cluster's logs; default slog.Default().
	Logger *slog.Logger
	// FlushInterval is how often stashes flush versions leaving the MVCC
	// window to their engines; default 100ms.
	FlushInterval time.Duration
	// Interceptor and StreamInterceptor, if set, wrap every gRPC call
	// (tests inject faults with them).
	Interceptor       grpc.UnaryServerInterceptor
	StreamInterceptor grpc.StreamServerInterceptor
	// HTTPAddr, if not "" or "off", is the address of the HTTP server:
	// Prometheus metrics at /metrics and the web console (http.go). Port
	// 0: any free port (see HTTPAddr).
	HTTPAddr string
	// HTTPOptional makes a failure to listen on HTTPAddr a warning rather
	// than an error (distash server's default address may be taken).
	HTTPOptional bool
	// Pprof serves Go's profiles at /debug/pprof/ on the HTTP server
	// (distash server --pprof; bench cpu profiles its nodes with it). Off
	// by default: a CPU profile costs the process while it runs.
	Pprof bool
	// FS is the file system every file under Dir goes through (package
	// internal/fsys); nil: the operating system's. Tests inject disk
	// faults with it.
	FS fsys.FS
	// Clock is the roles' clock (package internal/clock); nil: the real
	// one. Tests drive it by hand.
	Clock clock.Clock
	// Protocol is the range of protocol versions the process states and
	// accepts on every connection (internal/protover); the zero value is
	// this binary's. Tests only: a node acting as another release.
	Protocol protover.Speaker
	// Tuning holds settings that only tests change (the zero value: the
	// defaults), per server so that tests which change them can run in
	// parallel.
	Tuning Tuning
}

// Tuning is what tests shrink or inject in one server; nothing outside
// tests sets it (no flag or TOML key maps to it).
type Tuning struct {
	// WindowBytes, if > 0, is every stash's MVCC window budget in place
	// of the pool's (a stash that cannot flush then falls behind soon).
	WindowBytes int64
	// DistributionInterval, if > 0, is the data distributor's round (and
	// how often a transaction node refreshes the log's tag set) in place
	// of 250ms.
	DistributionInterval time.Duration
	// LogMemoryBytes, if > 0, is txlog.Options.MemoryBytes of the log
	// replica (its HoldBytes follow from it, unless LogHoldBytes is set): a
	// small one makes the log spill, and force-pop, a tag that does not pop.
	LogMemoryBytes int64
	// LogHoldBytes, if > 0, is txlog.Options.HoldBytes of the log replica.
	LogHoldBytes int64
	// LogTrailingLogs, if > 0, is txlog.Options.TrailingLogs of the log
	// replica (raft records kept behind a snapshot, default 1024): a small
	// one lets a test drop records from the raft logs with few commits.
	LogTrailingLogs uint64
	// WrapEngine, if set, wraps every stash engine opened (pool, and the
	// stash's index in its pool: its slot on a stash node), to inject
	// faults.
	WrapEngine func(pool string, index int, e engine.Engine) engine.Engine
}

// Server is a running process of a DiStash cluster: an embedded cluster
// (Start), which runs every role in this process, or one node of a
// multi-process cluster (StartNode). Both are the same runtime: a gateway
// (gateway.go), stash slots under supervision (supervise.go), the
// transaction roles while this process holds them (roles.go) over its log
// replica, and a clusterLink to the rest of the cluster, which is where
// they differ (embedded.go; node.go with txnnode.go and stashnode.go).
type Server struct {
	opts   Options
	cfg    *config.Config
	logger *slog.Logger
	// retiredTags are the tags the controller's view calls retired, as of
	// the roles' last look (keepLogTags; nil embedded, where none is).
	retiredTags atomic.Pointer[map[kv.Tag]bool]
	// link is how this process reaches the rest of its cluster: *embedded
	// or *node.
	link clusterLink

	// log is this process's log replica, set by the goroutine that opens
	// it (nil on a stash node); replica publishes it to the others.
	log     *txlog.Log
	replica lazyLog
	devices devices                 // the stashes' emulated devices ([pool.device])
	tx      atomic.Pointer[txRoles] // the stateless roles, while this process holds them
	// stashes and order: the stash slots (the stash in a slot changes on
	// restart). Fixed once an embedded cluster started; a cluster node adds
	// its slots while it serves, hence the lock.
	stashMu  sync.RWMutex
	stashes  map[kv.Tag]*stashSlot // Protected by stashMu.
	order    []kv.Tag              // Protected by stashMu: stash tags in pool order, system first.
	poolTags map[string][]kv.Tag
	usage    *proxy.UsageBoard // stashes report their live bytes here; the commit proxy reads it
	reports  *reportBoard      // remote stashes' progress (multi-process cluster), for the ratekeeper

	gw   gateway
	auth *auth // authorization ([auth]); nil: trusted-network mode
	// serverTLS is the gRPC port's server TLS (nil: plaintext); with
	// [auth] the HTTP port serves it too.
	serverTLS *tls.Config
	metrics   *metrics
	http      *httpServer // nil when HTTP is off
	// failed receives the error that stops a node (fail); nil, never
	// ready, for an embedded cluster.
	failed chan error
	// backupAddr is the embedded cluster's address once it serves (backup
	// hook, issue 23).
	backupAddr atomic.Pointer[string]

	cancel   context.CancelFunc
	wg       sync.WaitGroup
	stopOnce sync.Once
	// dirLock holds Dir for this process (fsys.LockDir); released last in
	// Stop.
	dirLock io.Closer
	// legacyDir: Dir was written by a version before checksummed metadata
	// files (its cluster.toml, or a stash node's stash-tag, has no
	// header), which kept a stash's ownership file only once it had moved
	// a shard: a missing one is written, not counted as damage. Only as
	// the stashes first open: from then on they have one.
	legacyDir atomic.Bool
}

// clusterLink is how a Server reaches the rest of its cluster: all that
// an embedded cluster (embedded.go), which runs every role in this
// process, and a node of a multi-process cluster (node.go), which finds
// the others through the coordinators, do differently. The roles, the
// stashes, their supervision, bootstrap and the gateway are the same code.
type clusterLink interface {
	addr() string          // the address this process serves on
	clusterString() string // what clients pass to distash.Open
	// asClient is how a role of this process (the backup worker) opens a
	// client of its cluster: "" until the process serves.
	asClient() (cluster string, opts []distash.Option)
	nodeID() string // "" for an embedded cluster
	// view returns the controller's view at most maxAge old, or the last
	// one if the controller does not answer; nil if there is none (an
	// embedded cluster has no controller).
	view(maxAge time.Duration) *wire.ViewResponse
	// connTo returns a connection to the node at addr.
	connTo(addr string) (*grpc.ClientConn, error)
	// retire has the controller retire a stash's tag (the data
	// distributor's dd.Env.Retire, after the log popped it).
	retire(ctx context.Context, tag kv.Tag) error
	// status describes this node in status; nil for an embedded cluster.
	status() *wire.NodeStatus
	// stashNode names the node serving this process's stashes in status
	// ("", "": not shown).
	stashNode() (id, addr string)
	// reportedLogLast is the log's last version for a process that holds
	// no log replica (the stashes' lag in metrics).
	reportedLogLast() kv.Version
	// clusterStatus is the whole cluster's status (the web console); own
	// answers for this process.
	clusterStatus(ctx context.Context, own func(context.Context) (*wire.StatusResponse, error)) (*wire.StatusResponse, error)
	// stashDamaged handles a damaged stash other than the system stash,
	// once it is marked damaged (supervise.go).
	stashDamaged(ctx context.Context, sl *stashSlot, pool, file, reason string, err error)
	// systemStashBehind brings the system stash's engine up to gone, the
	// version up to which the log dropped the system tag's messages.
	systemStashBehind(ctx context.Context, eng engine.Engine, gone kv.Version) error
	// systemDiskFull is the system stash's stash.Options.OnDiskFull.
	systemDiskFull(err error)
	// rolesStarting readies the roles r of a generation before they
	// serve; run runs a loop with them until they stop.
	rolesStarting(r *txRoles, run func(loop func(context.Context)))
	// authChange lists or changes the cluster's roles (Admin.Auth,
	// authlive.go).
	authChange(ctx context.Context, req *wire.AuthRequest) (*wire.AuthResponse, error)
	// stop ends what the link runs, after the roles and stashes stopped.
	stop()
}

func newServer(opts Options) *Server {
	opts.Clock = clock.Or(opts.Clock)
	s := &Server{opts: opts, cfg: opts.Config, logger: opts.Logger, stashes: map[kv.Tag]*stashSlot{},
		usage: proxy.NewUsageBoard(), reports: newReportBoard(), poolTags: coord.StashTags(opts.Config)}
	s.replica.holds = func() bool { return s.tx.Load() != nil }
	s.gw.s = s
	s.metrics = newMetrics(s)
	s.auth = newAuth(s, opts.Config)
	return s
}

// stashSpec describes one stash to open.
type stashSpec struct {
	tag   kv.Tag
	pool  config.Pool
	index int
}

func (s *Server) stashSpecs() []stashSpec {
	var specs []stashSpec
	for _, p := range s.cfg.Pools {
		for i, tag := range s.poolTags[p.Name] {
			specs = append(specs, stashSpec{tag: tag, pool: p, index: i})
		}
	}
	return specs
}

// logOptions are the options of this process's log replica that both
// runtimes share: its directory, file system, clock and logger, and the
// tests' tuning.
func (s *Server) logOptions() txlog.Options {
	return txlog.Options{
		Dir: filepath.Join(s.opts.Dir, "log"), FS: s.opts.FS, Clock: s.opts.Clock, Logger: s.roleLogger(logRoleLog),
		MemoryBytes: s.opts.Tuning.LogMemoryBytes, HoldBytes: s.opts.Tuning.LogHoldBytes, TrailingLogs: s.opts.Tuning.LogTrailingLogs,
		MayDrop: s.logMayDrop,
	}
}

// tagRetired is the commit proxy's Retired: whether the controller's view
// (as keepLogTags last saw it) calls tag retired.
func (s *Server) tagRetired(tag kv.Tag) bool {
	m := s.retiredTags.Load()
	return m != nil && (*m)[tag]
}

// engineTuning returns the engine-specific settings of pool p's stashes
// (engine.Options.Tuning), nil for the engine's defaults.
func engineTuning(p config.Pool) any {
	if p.Engine == "pebble" && p.Pebble != nil {
		var t pebbleengine.Tuning
		if p.Pebble.Cache != nil {
			t.CacheBytes = int64(*p.Pebble.Cache)
		}
		return t
	}
	if p.Engine != "flash" || p.Flash == nil {
		return nil
	}
	f := p.Flash
	c := flash.Config{SegmentBytes: int64(f.Segment), DirectIO: f.DirectIO}
	// In the configuration 0 disables the cache or the buffer; in
	// flash.Config 0 means the default and a negative size disables.
	bytesOrOff := func(s *config.Size) int64 {
		if s == nil {
			return 0
		}
		if *s == 0 {
			return -1
		}
		return int64(*s)
	}
	c.CacheBytes = bytesOrOff(f.Cache)
	c.WriteBufferBytes = bytesOrOff(f.WriteBuffer)
	if lat := f.FarMemoryLatency(); lat > 0 {
		c.FarMemory = lat
		c.NoPrefetch = f.Prefetch != nil && !*f.Prefetch
		c.LookupThreads = f.LookupThreads
		switch f.IO {
		case "uring":
			c.IO = ult.IOUring
		case "threads":
			c.IO = ult.IOThreads
		}
	}
	return c
}

// sampleUnit is the stashes' byte sample unit: fine enough that a shard
// at the split size holds a few hundred samples.
func sampleUnit(cfg *config.Config) int64 {
	return max(int64(cfg.Cluster.ShardBytes)/500, 1)
}

// addStash runs st in a new slot under supervision (see supervise).
func (s *Server) addStash(ctx context.Context, tag kv.Tag, st *stash.Stash, reopen func() (*stash.Stash, error)) {
	sl := newSlot(tag, st, reopen)
	sl.reads = s.stashReads(tag, st.Pool())
	s.stashMu.Lock()
	s.stashes[tag] = sl
	s.order = append(s.order, tag)
	s.stashMu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.supervise(ctx, sl)
	}()
}

// removeSlot drops the slot of tag (a replaced stash) from this process.
func (s *Server) removeSlot(tag kv.Tag) {
	s.stashMu.Lock()
	defer s.stashMu.Unlock()
	delete(s.stashes, tag)
	for i, t := range s.order {
		if t == tag {
			s.order = append(s.order[:i], s.order[i+1:]...)
			break
		}
	}
}

// stash returns the stash serving tag now.
func (s *Server) stash(tag kv.Tag) (*stash.Stash, bool) {
	sl, ok := s.slot(tag)
	if !ok {
		return nil, false
	}
	return sl.get(), true
}

// slot returns the stash slot of tag in this process.
func (s *Server) slot(tag kv.Tag) (*stashSlot, bool) {
	s.stashMu.RLock()
	defer s.stashMu.RUnlock()
	sl, ok := s.stashes[tag]
	return sl, ok
}

// slots returns this process's stash slots in pool order, system first.
func (s *Server) slots() []*stashSlot {
	s.stashMu.RLock()
	defer s.stashMu.RUnlock()
	out := make([]*stashSlot, len(s.order))
	for i, t := range s.order {
		out[i] = s.stashes[t]
	}
	return out
}

// CompactStashes compacts the engines of this process's stashes of pool
// that can be (engine.Compactor), one after another: for benchmarks that
// measure reads of data at rest from the same shape in every run.
func (s *Server) CompactStashes(pool string) error {
	for _, sl := range s.slots() {
		st := sl.get()
		if st.Stats().Pool != pool {
			continue
		}
		if c, ok := st.Engine().(engine.Compactor); ok {
			if err := c.Compact(); err != nil {
				return fmt.Errorf("compact stash %d of pool %q: %w", sl.tag, pool, err)
			}
		}
	}
	return nil
}

// ClusterString is the address clients pass to distash.Open.
func (s *Server) ClusterString() string { return s.link.clusterString() }

// Addr is the address the server serves on.
func (s *Server) Addr() string { return s.link.addr() }

// NodeID is the node's id in a multi-process cluster, "" for an embedded
// cluster.
func (s *Server) NodeID() string { return s.link.nodeID() }

// fail reports an error the node cannot go on after (see Failed). A full
// disk says so, with the directory, rather than as one error among others.
func (s *Server) fail(err error) {
	if fsys.IsNoSpace(err) {
		err = fmt.Errorf("server: the disk holding %s is full: free space and restart this node: %w", s.opts.Dir, err)
	}
	s.logger.Error("node failed", "err", err)
	select {
	case s.failed <- err:
	default:
	}
}

// Failed receives the error that stopped a node of a multi-process cluster
// after it started (its log replica could not open, say): the process
// should stop, so that an operator or a supervisor sees it rather than a
// node that heartbeats and serves nothing. Nil (never ready) for an
// embedded cluster.
func (s *Server) Failed() <-chan error { return s.failed }

// Config returns the cluster's configuration.
func (s *Server) Config() *config.Config { return s.cfg }

// Stop shuts the cluster down and closes its files. Safe to call twice.
func (s *Server) Stop() {
	s.stopOnce.Do(func() {
		s.stopHTTP()
		s.gw.stop()
		s.stopRoles()
		if s.cancel != nil {
			s.cancel()
		}
		s.wg.Wait()
		for _, sl := range s.slots() {
			if err := sl.get().Close(); err != nil {
				s.logger.Warn("close stash", "tag", sl.tag, "err", err)
			}
		}
		if s.log != nil {
			if err := s.log.Close(); err != nil {
				s.logger.Warn("close log", "err", err)
			}
		}
		s.link.stop()
		s.gw.close()
		if s.dirLock != nil {
			s.dirLock.Close()
		}
	})
}

// StashStats describes one stash of a running cluster.
type StashStats struct {
	Tag                      uint32
	Pool                     string
	Index                    int
	Keys, Bytes              int64 // live pairs at the newest version
	EngineBytes, WindowBytes int64 // held by the engine (ephemeral: within capacity) and by the MVCC window
	Hits, Misses, Evictions  int64
	FilterNegatives          int64 // absent-key reads answered by a Bloom filter
	Reads                    int64
	AppliedVersion           int64
	DurableVersion           int64
	CapacityBytes            int64
	Health                   string // HealthHealthy, HealthRestarting, HealthFailed, HealthDiskFull or HealthDamaged
	Restarts                 int64  // restarts after failures
	LastError                string // what stopped it last, "" if it never failed
	// LocalLog is the stash's local log (a pool with local_log), nil if none.
	LocalLog *wire.LocalLogStatus
	// FarMemory are the counters of a flash stash serving reads from far
	// memory (far_memory > 0), nil otherwise.
	FarMemory *ult.ServeStats
}

// Stashes returns the statistics of every stash, in pool order.
func (s *Server) Stashes() []StashStats {
	var out []StashStats
	for _, sl := range s.slots() {
		st := sl.get().Stats()
		if st.Pool == "system" {
			continue
		}
		h := sl.healthNow()
		out = append(out, StashStats{
			Health: h.Health, Restarts: h.Restarts, LastError: h.LastErr,
			Tag: uint32(st.Tag), Pool: st.Pool, Index: st.Index, Keys: st.Keys, Bytes: st.Bytes,
			EngineBytes: st.EngineBytes, WindowBytes: st.WindowBytes, Hits: st.Hits, Misses: st.Misses,
			Evictions: st.Evictions, FilterNegatives: st.FilterNegatives, Reads: st.Reads, AppliedVersion: int64(st.Applied), DurableVersion: int64(st.Durable),
			CapacityBytes: st.CapacityBytes, LocalLog: localLogStatus(sl.get().Engine()),
			FarMemory: serveStats(sl.get().Engine()),
		})
	}
	return out
}

// SnapshotLog makes this process's log replicas take a raft snapshot now
// and compact their raft logs (raft also does so on its own, every 4096
// records); for tests and operators. Nil on a node without a log replica.
func (s *Server) SnapshotLog() error {
	if l := s.logReplica(); l != nil {
		return l.Snapshot()
	}
	return nil
}

// logReplica returns this process's log, nil on a node without a log
// replica (or before it opened). Safe from any goroutine: a transaction
// node sets s.log in its own goroutine once the replicas are placed, and
// publishes it through s.replica.
func (s *Server) logReplica() *txlog.Log { return s.replica.get() }

// LogStats describes the transaction log.
func (s *Server) LogStats() txlog.Stats {
	if l := s.logReplica(); l != nil {
		return l.Stats()
	}
	return txlog.Stats{}
}

// failedStash is the stash of sp that failed as it opened with err.
func (s *Server) failedStash(sp stashSpec, err error) *stash.Stash {
	return stash.NewFailed(stash.Options{Tag: sp.tag, Pool: sp.pool.Name, Index: sp.index, CapacityBytes: int64(sp.pool.Capacity),
		TrackBytes: !sp.pool.Ephemeral(), Logger: s.roleLogger(logRoleStash), Clock: s.opts.Clock}, err)
}
