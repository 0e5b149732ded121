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
package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/distash/distash/config"
	"github.com/distash/distash/internal/clock"
	"github.com/distash/distash/internal/engine"
	"github.com/distash/distash/internal/engine/flash"
	pebbleengine "github.com/distash/distash/internal/engine/pebble"
	"github.com/distash/distash/internal/farmem/ult"
	"github.com/distash/distash/internal/frames"
	"github.com/distash/distash/internal/fsys"
	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/proxy"
	"github.com/distash/distash/internal/raftnet"
	"github.com/distash/distash/internal/shardmap"
	"github.com/distash/distash/internal/stash"
	"github.com/distash/distash/internal/txlog"
	"github.com/distash/distash/internal/wire"
)

// MaxStashesPerProcess bounds the stashes of all pools that one embedded
// cluster runs: each holds an engine (a Pebble stash up to about 20 MiB of
// cache and memtable), an MVCC window and goroutines.
const MaxStashesPerProcess = 256

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
}

// Server is a running embedded cluster.
type Server struct {
	opts   Options
	cfg    *config.Config
	logger *slog.Logger

	log     *txlog.Log              // nil on a stash node of a multi-process cluster
	devices devices                 // the stashes' emulated devices ([pool.device])
	tx      atomic.Pointer[txRoles] // the stateless roles, while this process holds them
	// stashes and order: the stash slots (the stash in a slot changes on
	// restart). Fixed once an embedded cluster started; a cluster node adds
	// its slots while it serves, hence the lock.
	stashMu  sync.RWMutex
	stashes  map[kv.Tag]*stashSlot // Protected by stashMu.
	order    []kv.Tag              // Protected by stashMu: stash tags in pool order, system first.
	poolTags map[string][]kv.Tag
	// views caches the controller's view (cluster mode, distribution.go).
	views   viewCache
	usage   *proxy.UsageBoard // stashes report their live bytes here; the commit proxy reads it
	reports *reportBoard      // remote stashes' progress (multi-process cluster), for the ratekeeper
	node    *node             // the multi-process cluster's node; nil for an embedded cluster

	grpcServer *grpc.Server
	listener   net.Listener
	clientMux  *raftnet.Mux   // an embedded cluster's: gRPC and frames on listener
	frames     *frames.Server // the data path's streams over frames
	metrics    *metrics
	http       *httpServer // nil when HTTP is off

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
	// The lock comes before anything else touches the directory: a second
	// process started on it by mistake must change nothing.
	dirLock, err := fsys.LockDir(opts.FS, opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	legacy, err := checkConfigMatches(opts.FS, opts.Dir, opts.Config)
	if err != nil {
		dirLock.Close()
		return nil, err
	}
	s := newServer(opts)
	s.dirLock = dirLock
	s.legacyDir.Store(legacy)
	if err := s.start(ctx); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

func newServer(opts Options) *Server {
	opts.Clock = clock.Or(opts.Clock)
	s := &Server{opts: opts, cfg: opts.Config, logger: opts.Logger, stashes: map[kv.Tag]*stashSlot{},
		usage: proxy.NewUsageBoard(), reports: newReportBoard(), poolTags: shardmap.StashTags(opts.Config)}
	s.metrics = newMetrics(s)
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

// logMemoryBytes is txlog.Options.MemoryBytes of the logs this package
// opens (0: the log's default); tests shrink it to make the log force-pop
// a tag that does not pop (its HoldBytes follow from it).
var logMemoryBytes atomic.Int64

func (s *Server) start(ctx context.Context) error {
	specs := s.stashSpecs()
	tags := []kv.Tag{shardmap.SystemTag}
	for _, sp := range specs {
		tags = append(tags, sp.tag)
	}
	var err error
	s.log, err = txlog.Open(txlog.Options{
		Dir:         filepath.Join(s.opts.Dir, "log"),
		FS:          s.opts.FS,
		Clock:       s.opts.Clock,
		Replicas:    s.cfg.Log.Replicas,
		Tags:        tags,
		MemoryBytes: logMemoryBytes.Load(),
		Logger:      s.roleLogger(logRoleLog),
	})
	if err != nil {
		return fmt.Errorf("server: open log: %w", err)
	}
	recovered := s.log.LastVersion()
	windowVersions := s.windowVersions()

	runCtx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel

	sys, err := s.startSystemStash(runCtx)
	if err != nil {
		return err
	}

	for _, sp := range specs {
		st, err := s.openStash(sp, windowVersions, recovered)
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
		reopen := func() (*stash.Stash, error) { return s.openStash(sp, windowVersions, s.log.LastVersion()) }
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

	s.listener, err = net.Listen("tcp", s.opts.ListenAddr)
	if err != nil {
		return fmt.Errorf("server: listen on %s: %w", s.opts.ListenAddr, err)
	}
	s.warnIfExposed()
	// One address for gRPC and the data path's frames protocol: the mux
	// terminates TLS (if any) and routes each connection by its first byte.
	s.clientMux = raftnet.ServeClients(s.listener, s.opts.TLS)
	s.clientMux.OnRejected(s.logRejected)
	s.grpcServer = s.newGRPCServer(grpc.Creds(raftnet.GRPCCredentials()))
	wire.RegisterDiStashServer(s.grpcServer, &service{s: s})
	lis := s.clientMux.GRPCListener()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.grpcServer.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			s.logger.Error("grpc serve", "err", err)
		}
	}()
	s.startFrames(s.clientMux.FramesListener())
	if err := s.startHTTP(); err != nil {
		return err
	}
	s.logger.Info("distash cluster started", "addr", s.listener.Addr().String(), "dir", s.opts.Dir, "recovered_version", recovered, "pools", len(s.cfg.Pools))
	return nil
}

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

// wrapEngine, if set (by tests of this package), wraps every stash engine
// opened, to inject failures.
var wrapEngine func(pool string, index int, e engine.Engine) engine.Engine

func (s *Server) openStash(sp stashSpec, windowVersions, recovered kv.Version) (*stash.Stash, error) {
	dir := filepath.Join(s.opts.Dir, "stash", fmt.Sprintf("%s-%d", sp.pool.Name, sp.index))
	if !sp.pool.Volatile() || sp.pool.LocalLog {
		if err := fsys.Or(s.opts.FS).MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
	}
	stashFS := s.stashFS(sp)
	eng, err := s.openEngine(sp.pool, dir, stashFS)
	if err != nil {
		return nil, fmt.Errorf("server: open stash %s-%d: %w", sp.pool.Name, sp.index, err)
	}
	if wrapEngine != nil {
		eng = wrapEngine(sp.pool.Name, sp.index, eng)
	}
	volatile := sp.pool.Volatile()
	if sp.pool.LocalLog {
		// It catches up from what its local log holds if the log still
		// has every entry of its tag after it (a Peek after a version
		// below Gone fails), else it starts empty.
		eng, volatile, _, err = s.startLocalLog(sp, dir, eng, func(v kv.Version) (bool, error) { return v >= s.log.Gone(sp.tag), nil })
		if err != nil {
			return nil, err
		}
	} else if popped := s.log.Popped(sp.tag); eng.Version() < popped {
		// The engine came back older than what the log still holds for it:
		// it lost data (an ephemeral flash engine starts empty, for one).
		if !sp.pool.Ephemeral() {
			eng.Close()
			return nil, fmt.Errorf("server: stash %s-%d of durable pool %q is at version %d but the log dropped its versions up to %d: its data is lost (its files are in %s; restore them, or start from an empty data directory)",
				sp.pool.Name, sp.index, sp.pool.Name, eng.Version(), popped, dir)
		}
		volatile = true // an ephemeral pool may restart empty
	}
	return stash.New(stash.Options{
		Tag: sp.tag, Pool: sp.pool.Name, Index: sp.index, Engine: eng, Log: s.log, Clock: s.opts.Clock,
		Volatile: volatile, StartVersion: recovered, LocalLog: sp.pool.LocalLog,
		Ephemeral: sp.pool.Ephemeral(), TrackBytes: !sp.pool.Ephemeral(), CapacityBytes: int64(sp.pool.Capacity),
		TrackRecency:   sp.pool.Recency,
		WindowVersions: windowVersions, WindowBytes: windowBudget(sp.pool), FlushInterval: s.opts.FlushInterval, Logger: s.roleLogger(logRoleStash),
		ReportUsage: s.usage.Report,
		Dir:         dir, FS: stashFS, AdoptOwnership: s.legacyDir.Load(), Fetcher: fetcher{s}, SampleUnit: sampleUnit(s.cfg),
	}), nil
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

// loadShardMap reads the shard map from the system stash once it has caught
// up with the recovered log; a new cluster gets the initial map.
func (s *Server) loadShardMap(ctx context.Context, sys *stash.Stash, recovered kv.Version) (*shardmap.Map, bool, error) {
	if recovered > 0 {
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		for sys.AppliedVersion() < recovered {
			if err := sys.Failed(); err != nil {
				return nil, false, fmt.Errorf("server: the system stash failed: %w", err)
			}
			select {
			case <-rctx.Done():
				return nil, false, fmt.Errorf("server: system stash did not catch up with the log: %w", rctx.Err())
			case <-time.After(5 * time.Millisecond):
			}
		}
		v := sys.AppliedVersion()
		kvs, _, err := sys.GetRange(rctx, v, shardmap.KeyServersPrefix, kv.PrefixEnd(shardmap.KeyServersPrefix), 0, 0, false)
		if err != nil {
			return nil, false, fmt.Errorf("server: read the shard map: %w", err)
		}
		if len(kvs) > 0 {
			m := shardmap.New(nil)
			for _, p := range kvs {
				if _, err := m.Apply(kv.Mutation{Type: kv.MutSet, Key: p.Key, Param: p.Value}); err != nil {
					return nil, false, err
				}
			}
			return m, false, nil
		}
	}
	var specs []shardmap.PoolSpec
	for _, p := range s.cfg.Pools {
		specs = append(specs, shardmap.PoolSpec{Name: p.Name, Prefix: []byte(p.Prefix), Tags: s.poolTags[p.Name], Replication: p.Replication})
	}
	return shardmap.Initial(specs), true, nil
}

// ClusterString is the address clients pass to distash.Open.
func (s *Server) ClusterString() string {
	if s.node != nil {
		return strings.Join(s.node.opts.Coordinators, ",")
	}
	return s.listener.Addr().String()
}

// Config returns the cluster's configuration.
func (s *Server) Config() *config.Config { return s.cfg }

// Stop shuts the cluster down and closes its files. Safe to call twice.
func (s *Server) Stop() {
	s.stopOnce.Do(func() {
		s.stopHTTP()
		if s.frames != nil {
			s.frames.Stop()
		}
		if s.grpcServer != nil {
			s.grpcServer.Stop()
		}
		if s.clientMux != nil {
			s.clientMux.Close()
		}
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
		if s.node != nil {
			s.node.stop(s.logger)
		}
		if s.dirLock != nil {
			s.dirLock.Close()
		}
	})
}

const configFile = "cluster.toml"

// configKey is the system key holding the configuration the cluster was
// created with (TOML), written in the transaction that records the first
// shard map.
var configKey = []byte("\xff/conf/cluster")

// checkConfigMatches refuses to start a cluster on a directory whose
// cluster.toml records different pools, before anything is opened:
// changing pools is a reconfiguration, not supported yet. The record in
// the system key space is checked again once the log is recovered. A
// damaged file (checksum, length) is refused with an error naming it.
// legacy reports a file written before checksums: the directory was
// written by an older version.
func checkConfigMatches(f fsys.FS, dir string, cfg *config.Config) (legacy bool, err error) {
	path := filepath.Join(dir, configFile)
	data, legacy, err := fsys.ReadChecked(f, path)
	if errors.Is(err, fs.ErrNotExist) || os.IsNotExist(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("server: %w (it is the copy of the configuration the cluster was created with: restore it, or remove it and start with the same configuration)", err)
	}
	old, err := config.Parse(data)
	if err != nil {
		return false, fmt.Errorf("server: %s: %w", path, err)
	}
	if err := cfg.CheckSameCluster(old); err != nil {
		return false, fmt.Errorf("server: the cluster in %s: %w", dir, err)
	}
	return legacy, nil
}

// readConfigRecord returns the configuration recorded in the system key
// space, nil if there is none (a cluster created before it was recorded).
func readConfigRecord(ctx context.Context, sys *stash.Stash) (*config.Config, error) {
	vals, present, err := sys.Get(ctx, sys.AppliedVersion(), [][]byte{configKey})
	if err != nil {
		return nil, fmt.Errorf("server: read the recorded configuration: %w", err)
	}
	if !present[0] {
		return nil, nil
	}
	created, err := config.Parse(vals[0])
	if err != nil {
		return nil, fmt.Errorf("server: the recorded configuration (%q) does not parse: %w", configKey, err)
	}
	return created, nil
}

// checkShardsMatchPools checks that the shard map covers each pool's whole
// prefix with shards of that pool: a mutation the configuration accepts
// must have a stash to go to.
func checkShardsMatchPools(m *shardmap.Map, cfg *config.Config) error {
	for i, p := range cfg.Pools {
		begin, end := []byte(p.Prefix), kv.PrefixEnd([]byte(p.Prefix))
		at := begin
		for _, sh := range m.Intersect(begin, end) {
			if sh.Pool != p.Name || !bytes.Equal(sh.Begin, at) || len(sh.Team) == 0 {
				break
			}
			at = sh.End
		}
		if !bytes.Equal(at, end) {
			return fmt.Errorf("pool[%d] (%q) with prefix %q is not covered by the shard map from %.40q on: the configuration does not match the one the cluster was created with", i, p.Name, p.Prefix, at)
		}
	}
	return nil
}

// writeConfig writes cluster.toml durably and checksummed
// (fsys.WriteChecked).
func writeConfig(f fsys.FS, dir string, cfg *config.Config) error {
	data, err := cfg.Marshal()
	if err != nil {
		return err
	}
	return fsys.WriteChecked(f, filepath.Join(dir, configFile), data)
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
// replica (or before it opened). Safe from any goroutine: a node sets
// s.log in its own goroutine once the replicas are placed, and publishes
// it through node.log.
func (s *Server) logReplica() *txlog.Log {
	if s.node != nil {
		return s.node.log.get()
	}
	return s.log
}

// LogStats describes the transaction log.
func (s *Server) LogStats() txlog.Stats {
	if l := s.logReplica(); l != nil {
		return l.Stats()
	}
	return txlog.Stats{}
}
