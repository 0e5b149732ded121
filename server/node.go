package server

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/distash/distash/config"
	"github.com/distash/distash/internal/clock"
	"github.com/distash/distash/internal/coord"
	"github.com/distash/distash/internal/coordrpc"
	"github.com/distash/distash/internal/dcdelay"
	"github.com/distash/distash/internal/engine"
	"github.com/distash/distash/internal/fsys"
	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/logrpc"
	"github.com/distash/distash/internal/raftlog"
	"github.com/distash/distash/internal/raftnet"
	"github.com/distash/distash/internal/shardmap"
	"github.com/distash/distash/internal/stash"
	"github.com/distash/distash/internal/tlsconf"
	"github.com/distash/distash/internal/txlog"
	"github.com/distash/distash/internal/wire"
)

// Node classes (distash server --class).
const (
	ClassTransaction = coord.ClassTransaction
	ClassStash       = coord.ClassStash
)

// Stream kinds of the raft groups multiplexed on a node's address.
const (
	streamCoord = 'C'
	streamLog   = 'L'
)

// NodeOptions configure one node of a multi-process cluster.
type NodeOptions struct {
	// Dir holds the node's files: its id, the coordinator's raft state,
	// its log replica and system stash (transaction nodes), its stash's
	// engine (stash nodes).
	Dir    string
	Config *config.Config
	// Listen is the node's one address: gRPC for clients and nodes, and
	// the coordinators' and the log's raft, multiplexed.
	Listen string
	// Listener, if set, is already listening on Listen (an in-process
	// network in tests); the node owns it from then on. Default: the node
	// listens on Listen over TCP.
	Listener net.Listener
	// Dialer, if set, opens every connection the node makes to another
	// node (gRPC, raft) instead of TCP; it gets the address dialled as
	// given (a coordinator's, a node's Listen).
	Dialer func(ctx context.Context, addr string) (net.Conn, error)
	// Coordinators is the cluster string; a node whose Listen is in it is
	// a coordinator.
	Coordinators []string
	Class        string // ClassTransaction or ClassStash
	Pool         string // a stash node's pool
	DC, Zone     string
	Machine      string
	// ServerTLS and ClientTLS, both or neither, make every link mutual TLS.
	ServerTLS, ClientTLS *tls.Config
	Logger               *slog.Logger
	FlushInterval        time.Duration
	// HeartbeatInterval is how often the node tells the controller it is
	// alive; default 250ms.
	HeartbeatInterval time.Duration
	// LivenessTimeout is how long the controller waits before it counts a
	// silent node dead; default 2s.
	LivenessTimeout time.Duration
	// DCDelay, if > 0, is the one-way delay added to the node's
	// connections to nodes of other data centers (--dc-delay), in place of
	// the configuration's [cluster] dc_delay; < 0 turns the delay off.
	DCDelay time.Duration
	// HTTPAddr, if not "" or "off", is the address of the node's HTTP
	// server: its metrics at /metrics and the web console (http.go).
	HTTPAddr string
	// Pprof serves Go's profiles at /debug/pprof/ on the HTTP server
	// (Options.Pprof).
	Pprof bool
	// FS is the file system every file under Dir goes through (package
	// internal/fsys); nil: the operating system's.
	FS fsys.FS
	// Clock is the roles' clock (Options.Clock); nil: the real one.
	Clock clock.Clock
}

// node is the multi-process part of a Server.
type node struct {
	id    string
	logID string // a transaction node's log replica's raft id (logReplicaID)
	opts  NodeOptions
	mux   *raftnet.Mux
	coord *coord.Node // nil unless a coordinator
	csrv  *coordrpc.Server
	cc    *coordrpc.Client
	log   lazyLog

	generation atomic.Uint64 // the latest the controller told us
	slot       int           // a stash node's tag slot
	tag        kv.Tag
	// stashTag is tag, for goroutines other than the one that registers
	// (a damaged stash rejoins with a new tag while the node runs).
	stashTag atomic.Uint32
	reg      coordrpc.NodeRegistration // what the node registered with
	logc     *logrpc.Client            // a stash node's client of the log leader
	used     atomic.Int64              // a stash node's live bytes, as its stash last reported them
	logLast  atomic.Int64              // a stash node: the log's last version, as its last report's answer said

	connMu sync.Mutex
	conns  map[string]*grpc.ClientConn // to other nodes, by address

	leaderMu   sync.Mutex
	leaderAddr string        // the log leader's node as last looked up ("" = ask again)
	leaderGen  uint64        // the generation leaderMoved stands for. Protected by leaderMu.
	moved      chan struct{} // closed when a newer generation is heard of (Moved). Protected by leaderMu.

	failed chan error // receives the error that stops the node (once)

	dcs *dcdelay.Table // the peers' data centers; nil without a DC delay (dcdelay.go)
}

// fail reports an error the node cannot go on after (see Failed). A full
// disk says so, with the directory, rather than as one error among others.
func (s *Server) fail(err error) {
	if fsys.IsNoSpace(err) {
		err = fmt.Errorf("server: the disk holding %s is full: free space and restart this node: %w", s.opts.Dir, err)
	}
	s.logger.Error("node failed", "err", err)
	select {
	case s.node.failed <- err:
	default:
	}
}

// Failed receives the error that stopped a node of a multi-process cluster
// after it started (its log replica could not open, say): the process
// should stop, so that an operator or a supervisor sees it rather than a
// node that heartbeats and serves nothing. Nil (never ready) for an
// embedded cluster.
func (s *Server) Failed() <-chan error {
	if s.node == nil {
		return nil
	}
	return s.node.failed
}

// StartNode starts one node of a multi-process cluster (distash server
// --coordinators): it joins the coordinators, registers with the cluster
// controller, and plays its class's roles. It returns once the node is
// registered; a transaction node's log replica and roles start as soon as
// enough transaction nodes have joined.
func StartNode(ctx context.Context, opts NodeOptions) (*Server, error) {
	s, err := startNode(ctx, opts)
	if err != nil && opts.Listener != nil {
		opts.Listener.Close() // the node owns it, even when it fails to start
	}
	return s, err
}

func startNode(ctx context.Context, opts NodeOptions) (*Server, error) {
	if opts.Dir == "" || opts.Config == nil || opts.Listen == "" || len(opts.Coordinators) == 0 {
		return nil, errors.New("server: a node needs Dir, Config, Listen and Coordinators")
	}
	if err := opts.Config.Validate(); err != nil {
		return nil, err
	}
	switch opts.Class {
	case ClassTransaction:
		if opts.Pool != "" {
			return nil, fmt.Errorf("server: --pool %q is for stash nodes; a transaction node has no pool", opts.Pool)
		}
	case ClassStash:
		if _, ok := opts.Config.PoolByName(opts.Pool); !ok {
			var names []string
			for _, p := range opts.Config.Pools {
				names = append(names, p.Name)
			}
			return nil, fmt.Errorf("server: --pool %q: no such pool in the configuration (pools: %s)", opts.Pool, strings.Join(names, ", "))
		}
	default:
		return nil, fmt.Errorf("server: --class %q: want %s or %s", opts.Class, ClassTransaction, ClassStash)
	}
	if (opts.ServerTLS == nil) != (opts.ClientTLS == nil) {
		return nil, errors.New("server: TLS needs both a server and a client configuration")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.HeartbeatInterval <= 0 {
		opts.HeartbeatInterval = 250 * time.Millisecond
	}
	if opts.LivenessTimeout <= 0 {
		opts.LivenessTimeout = 2 * time.Second
	}
	opts.FS = fsys.Or(opts.FS)
	// The lock comes before anything else: a second process started on a
	// running node's directory by mistake must exit without touching the
	// directory or the cluster's records of the node.
	dirLock, err := fsys.LockDir(opts.FS, opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	legacy, err := checkConfigMatches(opts.FS, opts.Dir, opts.Config)
	if err != nil {
		dirLock.Close()
		return nil, err
	}
	id, err := nodeID(opts.FS, opts.Dir)
	if err != nil {
		dirLock.Close()
		return nil, err
	}
	n := &node{id: id, opts: opts, conns: map[string]*grpc.ClientConn{}, slot: -1, failed: make(chan error, 1)}
	logger := serverLogger(opts.Logger, id, n.generation.Load).With("class", opts.Class)
	s := newServer(Options{Dir: opts.Dir, Config: opts.Config, ListenAddr: opts.Listen, Logger: logger, FlushInterval: opts.FlushInterval,
		HTTPAddr: opts.HTTPAddr, Pprof: opts.Pprof, FS: opts.FS, Clock: opts.Clock})
	s.dirLock = dirLock
	s.legacyDir.Store(legacy)
	n.log.holds = func() bool { return s.tx.Load() != nil }
	n.setupDCDelay()
	s.node = n
	if err := s.startNode(ctx); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// nodeIDFile holds a node's id in its directory.
const nodeIDFile = "node-id"

// nodeID returns the node's id, kept in its directory across restarts (a
// restarted stash node gets its slot back by it), checksummed. A damaged
// file is refused with an error naming it: a node that took a new id
// would come back as another node (a log replica the cluster no longer
// knows, a stash in a new slot).
func nodeID(f fsys.FS, dir string) (string, error) {
	path := filepath.Join(dir, nodeIDFile)
	b, _, err := fsys.ReadChecked(f, path)
	if raw, rerr := fsys.ReadFile(f, path); rerr == nil && len(raw) == 0 {
		// Written without checksums and cut short as it was created:
		// the node never registered with it.
		err = fs.ErrNotExist
	}
	if err == nil {
		id := strings.TrimSpace(string(b))
		if id != "" && !strings.ContainsAny(id, " \t\n") {
			return id, nil
		}
		err = fsys.Damaged(path, "holds %q, not a node id", b)
	}
	if !errors.Is(err, fs.ErrNotExist) && !os.IsNotExist(err) {
		return "", fmt.Errorf("server: this node's id: %w (restore the file; removing it makes the node join as a new one)", err)
	}
	var r [6]byte
	if _, err := rand.Read(r[:]); err != nil {
		return "", err
	}
	id := "n-" + hex.EncodeToString(r[:])
	if err := fsys.WriteChecked(f, path, []byte(id+"\n")); err != nil {
		return "", err
	}
	return id, nil
}

func (s *Server) startNode(ctx context.Context) error {
	n := s.node
	o := n.opts
	runCtx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel

	var err error
	if o.Listener != nil {
		n.mux, err = raftnet.New(o.Listener, o.ServerTLS, o.ClientTLS)
	} else {
		n.mux, err = raftnet.Listen(o.Listen, o.ServerTLS, o.ClientTLS)
	}
	if err != nil {
		return fmt.Errorf("server: listen on %s: %w", o.Listen, err)
	}
	if o.Dialer != nil {
		n.mux.SetDialer(o.Dialer)
	}
	n.mux.OnRejected(s.logRejected)
	n.mux.OnRefused(func(remote net.Addr, err error) {
		s.logger.Warn("refused a raft connection: the peer is not a cluster node", "remote", remote.String(), "err", err)
	})
	// TLS, if any, ends in the mux; its credentials show handlers the
	// peer's certificate.
	s.grpcServer = s.newGRPCServer(grpc.Creds(raftnet.GRPCCredentials()), grpc.ChainUnaryInterceptor(s.nodeOnly))
	if host, _, err := net.SplitHostPort(o.Listen); err == nil {
		if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
			s.warnTLS(o.ServerTLS, o.Listen)
		}
	}
	wire.RegisterDiStashServer(s.grpcServer, &service{s: s})
	registerAdmin(s.grpcServer, func(reason string) { s.fail(&KilledError{Reason: reason}) })
	logrpc.Register(s.grpcServer, &n.log, s.report)
	// An attempt that waits on a coordinator that stopped answering
	// (paused, with its connection open) is abandoned after 1.5 s for the
	// next one: a new log leader's claim must not wait out the 3 s
	// default on the paused node, often the one that answered last. A
	// coordinator waiting for an election answers within 2 s; abandoning
	// it costs a retry, not a wrong answer.
	n.cc, err = coordrpc.NewClient(strings.Join(o.Coordinators, ","), coordrpc.ClientOptions{TLS: o.ClientTLS, Dialer: o.Dialer,
		AttemptTimeout: 1500 * time.Millisecond})
	if err != nil {
		return err
	}
	if slices.Contains(o.Coordinators, o.Listen) {
		n.coord, err = coord.Start(coord.Options{
			Addr: o.Listen, Coordinators: o.Coordinators, Dir: filepath.Join(o.Dir, "coord"),
			StreamLayer: n.mux.StreamLayer(streamCoord, o.Listen), NodeID: n.id,
			LivenessTimeout: o.LivenessTimeout, Clock: s.opts.Clock,
			Logger: raftlog.New(s.roleLogger(logRoleCoordinator), "coord"),
			Probe:  n.probeCoordinator, Join: n.cc.JoinCoordinators, FS: o.FS,
		})
		if err != nil {
			return fmt.Errorf("server: start the coordinator: %w", err)
		}
		n.csrv = coordrpc.Register(s.grpcServer, n.coord, coordrpc.ServerOptions{ClientTLS: o.ClientTLS, Dialer: o.Dialer})
	}
	s.startFrames(n.mux.FramesListener())
	lis := n.mux.GRPCListener()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.grpcServer.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			s.logger.Error("grpc serve", "err", err)
		}
	}()
	if err := s.startHTTP(); err != nil {
		return err
	}

	cfgText, err := s.cfg.Marshal()
	if err != nil {
		return err
	}
	reg := coordrpc.NodeRegistration{ID: n.id, Addr: o.Listen, Class: o.Class, Pool: o.Pool,
		DC: o.DC, Zone: o.Zone, Machine: o.Machine, Config: string(cfgText)}
	if o.Class == ClassStash {
		reg.Empty = s.stashStartsEmpty()
	} else if n.logID, err = logReplicaID(o.FS, o.Dir, n.id); err != nil {
		return err
	} else {
		reg.LogID = n.logID
	}
	n.reg = reg
	if err := s.register(ctx, reg); err != nil {
		return err
	}
	s.followDCs(runCtx)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		n.cc.HeartbeatLoop(runCtx, n.id, o.HeartbeatInterval, func(gen uint64, err error) {
			if err == nil {
				n.generation.Store(gen)
				n.newGeneration(gen)
			}
		})
	}()

	if o.Class == ClassStash {
		n.logc = logrpc.NewLeaderClient(n, s.roleLogger(logRoleStash))
		err := s.startStashNode(runCtx)
		if errors.Is(err, errTagTrimmed) {
			err = s.rejoinAsNewStash(ctx, runCtx, reg, err)
		}
		if err != nil {
			return err
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.reportLoop(runCtx, n.logc)
		}()
		return nil
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.runTransactionNode(runCtx)
	}()
	return nil
}

// register registers the node with the cluster controller, waiting for
// it, and takes the slot, tag and generation it gives.
func (s *Server) register(ctx context.Context, reg coordrpc.NodeRegistration) error {
	n := s.node
	coords := strings.Join(n.opts.Coordinators, ",")
	for {
		rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
		slot, tag, gen, err := n.cc.Register(rctx, reg)
		rcancel()
		if err == nil {
			n.slot = slot
			n.tag = kv.Tag(tag)
			n.stashTag.Store(tag)
			n.generation.Store(gen)
			break
		}
		var fe *config.FieldError
		var ke *kv.Error
		if errors.As(err, &fe) || errors.As(err, &ke) && !ke.Code.Retryable() {
			return fmt.Errorf("server: the cluster refused this node: %w", err)
		}
		if ctx.Err() != nil {
			return fmt.Errorf("server: register with the coordinators %s: %w", coords, err)
		}
		s.logger.Info("waiting for the cluster controller", "coordinators", coords, "last_error", err)
	}
	s.logger.Info("node registered", "addr", n.opts.Listen, "slot", n.slot)
	return nil
}

// rejoinAsNewStash handles errTagTrimmed (cause): this durable stash node
// holds nothing but cannot catch up from the log, which dropped entries
// of its tag (it force-pops a tag whose stash stays away, even one that
// never started). Nothing is lost on it, so rather than fail it retires
// the tag and registers again: the controller gives its slot a fresh
// tag, the data distributor re-replicates the old tag's shards at once,
// and the stash joins as a new one, owning nothing until shards move to
// it. (A durable stash that has data and finds its tag trimmed lost
// writes: it keeps failing, for an operator.) A damaged stash rejoins the
// same way (rejoinDamaged), its data dropped.
func (s *Server) rejoinAsNewStash(ctx, runCtx context.Context, reg coordrpc.NodeRegistration, cause error) error {
	n := s.node
	old := n.tag
	if p, ok := s.cfg.PoolByName(n.opts.Pool); ok && p.LocalLog && !errors.Is(cause, fsys.ErrDamaged) {
		s.logger.Warn("this dram stash cannot use its local log: it retires its tag and joins as a new, empty stash, as a dram stash without one does; the data distributor re-replicates the tag's shards",
			"tag", old, "slot", n.slot, "pool", n.opts.Pool, "err", cause)
	} else if errors.Is(cause, fsys.ErrDamaged) {
		s.logger.Warn("this stash cannot vouch for its data: it retires its tag, drops the data and joins as a new stash; the data distributor re-replicates the tag's shards from their healthy replicas",
			"tag", old, "slot", n.slot, "pool", n.opts.Pool, "err", cause)
	} else {
		s.logger.Warn("this durable stash is empty and the log dropped entries of its tag, so it cannot catch up: it retires the tag and joins as a new stash; the data distributor re-replicates the tag's shards",
			"tag", old, "slot", n.slot, "pool", n.opts.Pool, "err", cause)
	}
	for {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := n.cc.Retire(rctx, uint32(old))
		cancel()
		if err == nil {
			break
		}
		var ke *kv.Error
		if (errors.As(err, &ke) && !ke.Code.Retryable()) || ctx.Err() != nil {
			return fmt.Errorf("server: retire tag %d of a stash that cannot catch up: %w", old, err)
		}
		s.logger.Info("waiting for the cluster controller to retire the tag", "tag", old, "last_error", err)
		time.Sleep(200 * time.Millisecond)
	}
	// The stash directory holds no data of the old tag (or none to
	// trust): without its tag file it is set up as a new stash's
	// (adoptStashTag removes what is left).
	fsy := fsys.Or(s.opts.FS)
	if err := fsy.Remove(filepath.Join(s.opts.Dir, stashTagFile)); err != nil && !errors.Is(err, fs.ErrNotExist) && !os.IsNotExist(err) {
		return err
	}
	if err := fsys.SyncDir(fsy, s.opts.Dir); err != nil {
		return err
	}
	reg.Empty = true
	if err := s.register(ctx, reg); err != nil {
		return err
	}
	s.logger.Info("joining as a new stash", "old_tag", old, "tag", n.tag, "slot", n.slot)
	return s.startStashNode(runCtx)
}

// stop ends what the node runs besides the cluster roles (after them).
func (n *node) stop(logger *slog.Logger) {
	if n.coord != nil {
		if err := n.coord.Stop(); err != nil {
			logger.Warn("stop the coordinator", "err", err)
		}
	}
	if n.csrv != nil {
		n.csrv.Close()
	}
	if n.mux != nil {
		n.mux.Close()
	}
	if n.cc != nil {
		n.cc.Close()
	}
	n.connMu.Lock()
	for a, c := range n.conns {
		c.Close()
		delete(n.conns, a)
	}
	n.connMu.Unlock()
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

// Addr is the address the server serves on.
func (s *Server) Addr() string {
	if s.node != nil {
		return s.node.opts.Listen
	}
	if s.listener != nil {
		return s.listener.Addr().String()
	}
	return s.opts.ListenAddr
}

// NodeID is the node's id in a multi-process cluster, "" for an embedded
// cluster.
func (s *Server) NodeID() string {
	if s.node == nil {
		return ""
	}
	return s.node.id
}

// startStashNode opens the node's stash: its tag follows from its pool and
// the slot the controller gave it; it pulls its tag from the log leader's
// node and serves reads. A stash whose files are damaged is set up failed
// (stash.NewFailed): its supervisor reports it and has it rebuilt.
func (s *Server) startStashNode(ctx context.Context) error {
	n := s.node
	slot, tag := n.slot, n.tag // a damaged stash's rejoin changes them from its supervisor
	if slot < 0 || tag == 0 {
		return fmt.Errorf("server: the controller gave slot %d, tag %d of pool %q", slot, tag, n.opts.Pool)
	}
	p, _ := s.cfg.PoolByName(n.opts.Pool)
	pool := *p
	sp := stashSpec{tag: tag, pool: pool, index: slot}
	legacy, err := s.adoptStashTag(pool, tag)
	if err != nil && !errors.Is(err, fsys.ErrDamaged) {
		return err
	}
	// Only the first open adopts a directory of an older version: from
	// then on it has its ownership file.
	adopt := legacy || s.legacyDir.Swap(false)
	atStart := true
	open := func() (*stash.Stash, error) {
		st, err := s.openRemoteStash(ctx, sp, n.logc, adopt, atStart)
		adopt, atStart = false, false
		return st, err
	}
	var st *stash.Stash
	if err != nil {
		st = s.failedStash(sp, err)
	} else if st, err = open(); errors.Is(err, fsys.ErrDamaged) {
		st = s.failedStash(sp, err)
	} else if err != nil {
		return err
	} else if legacy {
		// Written before checksums: from now on with one.
		if err := s.writeStashTag(tag); err != nil {
			st.Close()
			return err
		}
	}
	s.addStash(ctx, tag, st, open)
	// A stash of the cluster's first shard map starts with its part of it
	// (shardmap.Initial); one that has ownership of its own keeps it, and a
	// new stash owns nothing until the data distributor moves shards to it.
	var specs []shardmap.PoolSpec
	for _, p := range s.cfg.Pools {
		specs = append(specs, shardmap.PoolSpec{Name: p.Name, Prefix: []byte(p.Prefix), Tags: s.poolTags[p.Name], Replication: p.Replication})
	}
	sl, _ := s.slot(tag)
	sl.setOwned(shardmap.Initial(specs).RangesOf(tag))
	s.logger.Info("stash node serving", "pool", pool.Name, "slot", slot, "tag", tag)
	return nil
}

// failedStash is the stash of sp that failed as it opened with err.
func (s *Server) failedStash(sp stashSpec, err error) *stash.Stash {
	return stash.NewFailed(stash.Options{Tag: sp.tag, Pool: sp.pool.Name, Index: sp.index, CapacityBytes: int64(sp.pool.Capacity),
		TrackBytes: !sp.pool.Ephemeral(), Logger: s.roleLogger(logRoleStash), Clock: s.opts.Clock}, err)
}

// rejoinDamaged replaces a stash node's damaged stash (sl) with a new,
// empty one, but only once it holds no last copy: the controller's view
// must show that its pool keeps more than one replica, and the shard map
// that every shard of its tag has another replica alive. Until then it
// waits (its reads answer stash_unavailable, so clients use the other
// replicas); with replication 1 it refuses its shards' reads instead
// (refuseDamaged). The old stash stays in status, damaged, for
// replacedKeep after the new one started.
func (s *Server) rejoinDamaged(ctx context.Context, sl *stashSlot, cause error) {
	n := s.node
	pool := n.opts.Pool
	lastWhy := ""
	for {
		why := ""
		if v := s.viewWithin(time.Second); v == nil {
			why = "the controller's view is not known"
		} else if r := s.poolReplication(pool); r <= 1 {
			s.refuseDamaged(sl, pool, r, cause)
			return
		} else if m, err := s.remoteShardMap(ctx); err != nil {
			why = fmt.Sprintf("the shard map cannot be read (%v)", err)
		} else {
			live := map[kv.Tag]bool{}
			for _, loc := range v.Stashes {
				live[kv.Tag(loc.Tag)] = loc.Alive && !loc.Retired
			}
			for _, sh := range m.Shards() {
				if !slices.Contains(sh.Team, sl.tag) {
					continue
				}
				if !slices.ContainsFunc(sh.Team, func(t kv.Tag) bool { return t != sl.tag && live[t] }) {
					why = fmt.Sprintf("shard [%q, %q) has no other live replica (team %v)", sh.Begin, sh.End, sh.Team)
					break
				}
			}
		}
		if why == "" {
			break
		}
		if why != lastWhy {
			lastWhy = why
			s.logger.Warn("a damaged stash keeps its data until every shard it holds has another live replica", "tag", sl.tag, "pool", pool, "waiting_for", why)
			sl.mu.Lock()
			sl.lastErr = fmt.Sprintf("%v (kept until it holds no last copy: %s)", cause, why)
			sl.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
	if err := s.rejoinAsNewStash(ctx, ctx, n.reg, cause); err != nil {
		if ctx.Err() == nil {
			s.fail(fmt.Errorf("server: replace the damaged stash %d: %w", sl.tag, err))
		}
		return
	}
	sl.mu.Lock()
	sl.lastErr = fmt.Sprintf("%v (replaced by stash %d, rebuilt from the healthy replicas)", cause, n.stashTag.Load())
	sl.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		select {
		case <-ctx.Done():
		case <-time.After(replacedKeep):
			s.removeSlot(sl.tag)
		}
	}()
}

// remoteShardMap reads the shard map from the system stash of the node
// holding the stateless roles, at a read version it gives.
func (s *Server) remoteShardMap(ctx context.Context) (*shardmap.Map, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	v := s.viewWithin(time.Second)
	if v == nil || v.StatelessAddress == "" {
		return nil, errors.New("no node holds the stateless roles")
	}
	conn, err := s.node.connTo(v.StatelessAddress)
	if err != nil {
		return nil, err
	}
	api := wire.NewDiStashClient(conn)
	grv, err := api.GetReadVersion(ctx, &wire.GetReadVersionRequest{})
	if err == nil {
		err = grv.Error.Err()
	}
	if err != nil {
		return nil, err
	}
	m := shardmap.New(nil)
	begin, end := shardmap.KeyServersPrefix, kv.PrefixEnd(shardmap.KeyServersPrefix)
	for {
		rr, err := api.ReadRange(ctx, &wire.ReadRangeRequest{Stash: uint32(shardmap.SystemTag), Version: grv.Version,
			Begin: begin, End: end, ReadSystemKeys: true})
		if err == nil {
			err = rr.Error.Err()
		}
		if err != nil {
			return nil, err
		}
		for _, p := range rr.Kvs {
			if _, err := m.Apply(kv.Mutation{Type: kv.MutSet, Key: p.Key, Param: p.Value}); err != nil {
				return nil, err
			}
		}
		if !rr.More || len(rr.Kvs) == 0 {
			return m, nil
		}
		begin = kv.KeyAfter(rr.Kvs[len(rr.Kvs)-1].Key)
	}
}

// replacedKeep is how long a replaced damaged stash stays in status.
var replacedKeep = time.Minute

// errTagTrimmed is openRemoteStash's error for a durable stash that holds
// nothing while the log dropped entries of its tag: it cannot catch up.
var errTagTrimmed = errors.New("server: an empty durable stash cannot catch up: the log dropped entries of its tag")

// openRemoteStash opens a stash node's engine and stash over the remote
// log. A dram stash starts empty at the log's current end; a durable one
// at its engine's version, and if that is empty, only if the log still
// holds its tag's entries from the start (else errTagTrimmed). A dram
// stash with a local log starts at the version it reloads if the log
// still holds its tag's entries after it; if not, it starts empty: when
// the node starts (atStart) by rejoining as a new stash (errTagTrimmed),
// as a dram stash without a local log does, and on a restart by its
// supervisor on the same tag.
func (s *Server) openRemoteStash(ctx context.Context, sp stashSpec, logc *logrpc.Client, adoptOwnership, atStart bool) (*stash.Stash, error) {
	dir := filepath.Join(s.opts.Dir, "stash")
	if !sp.pool.Volatile() || sp.pool.LocalLog {
		if err := fsys.Or(s.opts.FS).MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
	}
	var start kv.Version
	if sp.pool.Volatile() {
		err := s.untilLogAnswers(ctx, "where a dram stash starts", func(ctx context.Context) (err error) {
			start, err = logc.Report(ctx, logrpc.StashReport{Tag: sp.tag})
			return err
		})
		if err != nil {
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
		var why string
		eng, volatile, why, err = s.startLocalLog(sp, dir, eng, func(v kv.Version) (bool, error) {
			err := s.untilLogAnswers(ctx, "whether a dram stash's local log can catch up", func(ctx context.Context) error {
				last, err := logc.Report(ctx, logrpc.StashReport{Tag: sp.tag})
				if err == nil && last > v {
					_, _, err = logc.Peek(ctx, sp.tag, v, 1)
				}
				return err
			})
			if errors.Is(err, txlog.ErrTrimmed) {
				return false, nil
			}
			return err == nil, err
		})
		if err != nil {
			return nil, err
		}
		if why != "" && atStart {
			eng.Close()
			return nil, fmt.Errorf("%w: %s", errTagTrimmed, why)
		}
	}
	if !sp.pool.Volatile() && eng.Version() == 0 && eng.Stats().Keys == 0 {
		// Asked now, while the stash has nothing to lose, rather than
		// found by its pull loop, which fails the stash for good.
		if err := s.peekFromStart(ctx, sp.tag, logc); err != nil {
			eng.Close()
			if errors.Is(err, txlog.ErrTrimmed) {
				return nil, fmt.Errorf("%w: %w", errTagTrimmed, err)
			}
			return nil, err
		}
	}
	return stash.New(stash.Options{
		Tag: sp.tag, Pool: sp.pool.Name, Index: sp.index, Engine: eng, Log: logc, Clock: s.opts.Clock,
		Volatile: volatile, StartVersion: start, LocalLog: sp.pool.LocalLog,
		Ephemeral: sp.pool.Ephemeral(), TrackBytes: !sp.pool.Ephemeral(), CapacityBytes: int64(sp.pool.Capacity),
		TrackRecency:   sp.pool.Recency,
		WindowVersions: s.windowVersions(), WindowBytes: windowBudget(sp.pool), FlushInterval: s.opts.FlushInterval, Logger: s.roleLogger(logRoleStash),
		ReportUsage: func(_ kv.Tag, used int64, _ kv.Version) { s.node.used.Store(used) },
		Dir:         dir, FS: stashFS, AdoptOwnership: adoptOwnership, Fetcher: fetcher{s}, SampleUnit: sampleUnit(s.cfg),
	}), nil
}

// peekFromStart asks the log for tag's entries from its start: nil if it
// has them all, an error wrapping txlog.ErrTrimmed if it dropped some.
func (s *Server) peekFromStart(ctx context.Context, tag kv.Tag, logc *logrpc.Client) error {
	return s.untilLogAnswers(ctx, "whether a new durable stash can catch up", func(ctx context.Context) error {
		last, err := logc.Report(ctx, logrpc.StashReport{Tag: tag})
		if err == nil && last > 0 {
			// A log with versions answers at once (a Peek after its
			// end would wait for the next one).
			_, _, err = logc.Peek(ctx, tag, 0, 1)
		}
		return err
	})
}

// untilLogAnswers calls ask (2 s each) until the log answers it: nil, or
// txlog.ErrTrimmed, which it returns; other errors (the log's node not
// there yet, or elsewhere) are waited out until ctx ends. what names the
// wait in the log line.
func (s *Server) untilLogAnswers(ctx context.Context, what string, ask func(ctx context.Context) error) error {
	for {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := ask(rctx)
		cancel()
		if err == nil || errors.Is(err, txlog.ErrTrimmed) {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		s.logger.Info("waiting for the log to learn "+what, "err", err)
		time.Sleep(200 * time.Millisecond)
	}
}

// reportLoop pushes the stash's usage and progress to the log leader's
// node, where the commit proxy and the ratekeeper use them.
func (s *Server) reportLoop(ctx context.Context, logc *logrpc.Client) {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		tag := kv.Tag(s.node.stashTag.Load())
		sl, ok := s.slot(tag)
		if !ok || !sl.healthNow().running() {
			// A stash that does not apply the log (failed, damaged,
			// restarting) does not report, like a stash whose node is
			// down: it must not hold the ratekeeper back.
			continue
		}
		applied, wb, wl := sl.get().Pressure()
		used := s.node.used.Load()
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		if last, err := logc.Report(rctx, logrpc.StashReport{Tag: tag, UsedBytes: used, Applied: applied, WindowBytes: wb, WindowLimitBytes: wl}); err == nil {
			s.node.logLast.Store(int64(last)) // the stash's lag behind the log (metrics)
		}
		cancel()
	}
}

// Conn implements logrpc.Leader: the log leader's node is the one holding
// the stateless roles (it leads the log), as the controller's view says.
func (n *node) Conn(ctx context.Context) (grpc.ClientConnInterface, error) {
	n.leaderMu.Lock()
	addr := n.leaderAddr
	n.leaderMu.Unlock()
	for addr == "" {
		vctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		v, err := n.cc.View(vctx)
		cancel()
		if err == nil && v.StatelessAddress != "" {
			addr = v.StatelessAddress
			n.leaderMu.Lock()
			n.leaderAddr = addr
			n.leaderMu.Unlock()
			break
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = ctx.Err()
			}
			return nil, fmt.Errorf("server: find the log leader: %w", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
	return n.connTo(addr)
}

// Failed implements logrpc.Leader.
func (n *node) Failed(grpc.ClientConnInterface) {
	n.leaderMu.Lock()
	n.leaderAddr = ""
	n.leaderMu.Unlock()
}

// Moved implements logrpc.Mover: the channel is closed when the node
// hears of a newer generation (its heartbeat's answer), which is how it
// learns that the log's leader, and with it the node serving the log, may
// have moved. A stash's peek in flight to the old node is then sent again
// to the node the view names, instead of waiting out PeekTimeout on a
// node that may have stopped answering.
func (n *node) Moved() <-chan struct{} {
	n.leaderMu.Lock()
	defer n.leaderMu.Unlock()
	if n.moved == nil {
		n.moved = make(chan struct{})
	}
	return n.moved
}

// newGeneration notes generation gen from the controller: a newer one than
// the node's log client knows makes it look the log's leader up again.
func (n *node) newGeneration(gen uint64) {
	n.leaderMu.Lock()
	defer n.leaderMu.Unlock()
	if gen <= n.leaderGen {
		return
	}
	first := n.leaderGen == 0
	n.leaderGen = gen
	if first {
		return // the generation the node started in
	}
	n.leaderAddr = ""
	if n.moved != nil {
		close(n.moved)
		n.moved = nil
	}
}

// connTo returns the node's connection to addr.
func (n *node) connTo(addr string) (*grpc.ClientConn, error) {
	n.connMu.Lock()
	defer n.connMu.Unlock()
	if c, ok := n.conns[addr]; ok {
		return c, nil
	}
	creds := insecure.NewCredentials()
	if n.opts.ClientTLS != nil {
		creds = credentials.NewTLS(n.opts.ClientTLS)
	}
	dopts := []grpc.DialOption{grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20))}
	target := addr
	if n.opts.Dialer != nil {
		target = "passthrough:///" + addr
		dopts = append(dopts, grpc.WithContextDialer(n.opts.Dialer))
	}
	c, err := grpc.NewClient(target, dopts...)
	if err != nil {
		return nil, err
	}
	n.conns[addr] = c
	return c, nil
}

// runTransactionNode waits until the controller placed the log replicas;
// on one of them it opens the local replica and the system stash, then
// follows the log's leadership: the leader's node claims a new generation
// and runs the stateless roles.
func (s *Server) runTransactionNode(ctx context.Context) {
	n := s.node
	peers, join, err := s.logPlacement(ctx)
	if err != nil {
		return
	}
	trans := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: n.mux.StreamLayer(streamLog, n.opts.Listen), MaxPool: 4, Timeout: 5 * time.Second,
		Logger: hclog.NewNullLogger(),
	})
	// No fixed tag set: stash tags are given out as stashes join, so the
	// node holding the roles sets it (keepLogTags); until then the set
	// replicated in the log (or, on a new cluster, none: nothing is
	// dropped) holds.
	l, err := txlog.Open(txlog.Options{
		Dir: filepath.Join(s.opts.Dir, "log"), FS: s.opts.FS, Clock: s.opts.Clock, Logger: s.roleLogger(logRoleLog), MemoryBytes: logMemoryBytes.Load(),
		Network: &txlog.NetworkOptions{LocalID: n.logID, Peers: peers, Transport: trans, Join: join},
	})
	if err != nil {
		trans.Close()
		s.fail(fmt.Errorf("server: open the log replica: %w", err))
		return
	}
	s.log = l
	n.log.set(l)
	for {
		_, err := s.startSystemStash(ctx)
		if err == nil {
			break
		}
		s.logger.Error("open the system stash; retrying", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
	s.logger.Info("log replica running", "peers", peers, "joined", join)
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		held := s.tx.Load()
		switch {
		case !l.IsLeader() && held != nil:
			s.roleLogger(logRoleSequencer).Warn("lost the log's leadership: dropping the stateless roles", "roles_generation", held.generation)
			s.stopRoles()
		case l.IsLeader() && (held == nil || n.generation.Load() > held.generation):
			// Newly leader, or a later generation was started elsewhere
			// (a deposed node's late claim): claim one that names us.
			if held != nil {
				s.stopRoles()
			}
			if err := s.recoverAsLeader(ctx); err != nil && ctx.Err() == nil {
				s.roleLogger(logRoleSequencer).Warn("recovery failed; retrying", "err", err)
			}
		}
	}
}

// recoverAsLeader starts a new generation on this node, whose log replica
// leads: the controller records it (its number is the epoch the log
// fences older proxies with), the log begins it and reports the highest
// durable version, and the stateless roles start above that.
func (s *Server) recoverAsLeader(ctx context.Context) error {
	n := s.node
	began := time.Now()
	sys, _ := s.stash(shardmap.SystemTag)
	if err := sys.Failed(); err != nil {
		// This node cannot serve the shard map: let another replica lead
		// the log (and take the roles) while the stash is rebuilt.
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		terr := s.log.TransferLeadership(tctx)
		cancel()
		return fmt.Errorf("the system stash has failed (%v): handed the log's leadership on (%v)", err, terr)
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	gen, err := n.cc.Claim(cctx, n.id)
	cancel()
	if err != nil {
		return fmt.Errorf("claim a generation: %w", err)
	}
	n.generation.Store(max(n.generation.Load(), gen))
	bctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	recovered, err := s.log.BeginGeneration(bctx, gen)
	cancel()
	if err != nil {
		return fmt.Errorf("begin generation %d in the log: %w", gen, err)
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = s.startRoles(rctx, gen, recovered, sys, began)
	cancel()
	if err != nil {
		return fmt.Errorf("start the roles of generation %d: %w", gen, err)
	}
	r := s.tx.Load()
	s.roleLogger(logRoleSequencer).Info("recovered: serving as sequencer, proxies and resolver",
		"recovered_version", recovered, "recovery", r.recoveryTime)
	dctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := n.cc.RecoveryDone(dctx, n.id, gen, r.recoveryTime.Microseconds()); err != nil {
		s.logger.Warn("report the recovery to the controller", "err", err)
	}
	return nil
}

// rebuildSystemStash refills a transaction node's system engine from the
// system stash of the node holding the stateless roles, at a read version
// of that node: the local log no longer holds the system messages after
// eng's version (the log dropped them up to gone while this node was
// away), so the stash could not catch up from it. The copy replaces the
// engine's system keys in one batch at that version, and the stash then
// follows the local log from there.
func (s *Server) rebuildSystemStash(ctx context.Context, eng engine.Engine, gone kv.Version) error {
	n := s.node
	was := eng.Version()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	v, err := n.cc.View(ctx)
	if err != nil {
		return fmt.Errorf("server: rebuild the system stash: ask the coordinators: %w", err)
	}
	from := v.StatelessAddress
	if from == "" || from == n.opts.Listen {
		return fmt.Errorf("server: the system stash is at version %d but the log dropped system messages up to %d, and no other node holds the roles to copy it from", eng.Version(), gone)
	}
	conn, err := n.connTo(from)
	if err != nil {
		return err
	}
	api := wire.NewDiStashClient(conn)
	grv, err := api.GetReadVersion(ctx, &wire.GetReadVersionRequest{})
	if err == nil {
		err = grv.Error.Err()
	}
	if err != nil {
		return fmt.Errorf("server: rebuild the system stash from %s: read version: %w", from, err)
	}
	rv := kv.Version(grv.Version)
	if rv < gone {
		return fmt.Errorf("server: rebuild the system stash from %s: its read version %d is below what the log dropped (%d)", from, rv, gone)
	}
	b := &engine.Batch{Version: rv, Writes: []engine.Write{{Key: shardmap.SystemRange.Begin, End: shardmap.SystemRange.End}}}
	begin := shardmap.SystemRange.Begin
	for {
		rr, err := api.ReadRange(ctx, &wire.ReadRangeRequest{Stash: uint32(shardmap.SystemTag), Version: int64(rv),
			Begin: begin, End: shardmap.SystemRange.End, ReadSystemKeys: true})
		if err == nil {
			err = rr.Error.Err()
		}
		if err != nil {
			return fmt.Errorf("server: rebuild the system stash from %s: read: %w", from, err)
		}
		for _, p := range rr.Kvs {
			b.Writes = append(b.Writes, engine.Write{Key: p.Key, Value: p.Value})
		}
		if !rr.More || len(rr.Kvs) == 0 {
			break
		}
		begin = append(append([]byte(nil), rr.Kvs[len(rr.Kvs)-1].Key...), 0)
	}
	if err := eng.Apply(b); err != nil {
		return fmt.Errorf("server: rebuild the system stash: %w", err)
	}
	s.logger.Warn("system stash rebuilt from another node: the log had dropped system messages it had not made durable",
		"from", from, "version", rv, "keys", len(b.Writes)-1, "was_at", was, "gone", gone)
	return nil
}

// nodeStatus describes this node (nil for an embedded cluster).
func (s *Server) nodeStatus() *wire.NodeStatus {
	n := s.node
	if n == nil {
		return nil
	}
	o := n.opts
	ns := &wire.NodeStatus{Id: n.id, Address: o.Listen, Class: o.Class, Pool: o.Pool, Dc: o.DC, Zone: o.Zone,
		Machine: o.Machine, Generation: n.generation.Load()}
	if n.coord != nil {
		ns.Roles = append(ns.Roles, "coordinator")
		if n.coord.Controller() != 0 {
			ns.Roles = append(ns.Roles, "controller")
		}
	}
	if l := n.log.get(); l != nil {
		ns.Roles = append(ns.Roles, "log")
		if l.IsLeader() {
			ns.Roles = append(ns.Roles, "log_leader")
		}
		ns.LogDurableVersion = int64(l.LastVersion())
	}
	if r := s.tx.Load(); r != nil {
		ns.Roles = append(ns.Roles, "sequencer", "grv_proxy", "commit_proxy", "resolver", "ratekeeper")
		ns.RecoveryMicros = r.recoveryTime.Microseconds()
		ns.RecoveredVersion = int64(r.recovered)
		ns.RecoveryUnixMs = r.startedAt.UnixMilli()
	}
	if o.Class == ClassStash {
		ns.Roles = append(ns.Roles, "stash")
	}
	return ns
}

// lazyLog is the log service of a node: it serves stashes only while the
// node holds the stateless roles, i.e. while its log replica leads and its
// generation has begun (a follower's log may lag the leader's, and pops
// must reach the leader); other calls are refused with wrong_node and the
// stash asks the coordinators again.
type lazyLog struct {
	p     atomic.Pointer[txlog.Log]
	holds func() bool
}

// Serving implements logrpc.Gate.
func (l *lazyLog) Serving() error {
	if l.get() == nil || l.holds == nil || !l.holds() {
		return kv.Errorf(kv.CodeWrongNode, "this node does not lead the log now")
	}
	return nil
}

func (l *lazyLog) set(lg *txlog.Log) { l.p.Store(lg) }
func (l *lazyLog) get() *txlog.Log   { return l.p.Load() }

func (l *lazyLog) Peek(ctx context.Context, tag kv.Tag, after kv.Version, maxBytes int) ([]txlog.Message, kv.Version, error) {
	lg := l.get()
	if lg == nil {
		return nil, after, kv.Errorf(kv.CodeWrongNode, "this node holds no log replica")
	}
	return lg.Peek(ctx, tag, after, maxBytes)
}

// OverMemoryBudget implements logrpc.MemoryBudgeted.
func (l *lazyLog) OverMemoryBudget() bool {
	lg := l.get()
	return lg != nil && lg.OverMemoryBudget()
}

func (l *lazyLog) Pop(tag kv.Tag, upTo kv.Version) {
	if lg := l.get(); lg != nil {
		lg.Pop(tag, upTo)
	}
}

func (l *lazyLog) LastVersion() kv.Version {
	if lg := l.get(); lg != nil {
		return lg.LastVersion()
	}
	return 0
}
