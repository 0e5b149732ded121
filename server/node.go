package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/distash/distash/config"
	"github.com/distash/distash/internal/clock"
	"github.com/distash/distash/internal/coord"
	"github.com/distash/distash/internal/coordrpc"
	"github.com/distash/distash/internal/dcdelay"
	"github.com/distash/distash/internal/fsys"
	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/logrpc"
	"github.com/distash/distash/internal/protover"
	"github.com/distash/distash/internal/raftlog"
	"github.com/distash/distash/internal/raftnet"
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
	// Protocol: as Options.Protocol (tests only: a node acting as another
	// release).
	Protocol protover.Speaker
	// Interceptor, if set, wraps every gRPC call the node serves, the
	// coordinator's included (Options.Interceptor: tests inject faults).
	Interceptor grpc.UnaryServerInterceptor
	// Tuning: as Options.Tuning (tests only).
	Tuning Tuning
}

// node is the clusterLink of one node of a multi-process cluster: its id
// and registration, the coordinators (the one it runs, if it is one, and
// its client of them), its connections to other nodes and the
// controller's view (conns.go), and the part its class plays, a
// transactionNode (txnnode.go) or a stashNode (stashnode.go).
type node struct {
	s     *Server
	id    string
	opts  NodeOptions
	coord *coord.Node // nil unless a coordinator
	csrv  *coordrpc.Server
	cc    *coordrpc.Client
	// Exactly one of txn and stash is set, by the node's class.
	txn   *transactionNode
	stash *stashNode

	generation atomic.Uint64             // the latest the controller told us
	reg        coordrpc.NodeRegistration // what the node registered with
	logLast    atomic.Int64              // a stash node: the log's last version, as its last report's answer said
	views      viewCache                 // the controller's last view (conns.go)

	connMu sync.Mutex
	conns  map[string]*grpc.ClientConn // to other nodes, by address

	leaderMu   sync.Mutex
	leaderAddr string        // the log leader's node as last looked up ("" = ask again)
	leaderGen  uint64        // the generation leaderMoved stands for. Protected by leaderMu.
	moved      chan struct{} // closed when a newer generation is heard of (Moved). Protected by leaderMu.

	dcs *dcdelay.Table // the peers' data centers; nil without a DC delay (dcdelay.go)
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
	if err := checkAuth(opts.Config, opts.ServerTLS != nil); err != nil {
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
	dirLock, legacy, err := lockDataDir(opts.FS, opts.Dir, opts.Config)
	if err != nil {
		return nil, err
	}
	id, err := nodeID(opts.FS, opts.Dir)
	if err != nil {
		dirLock.Close()
		return nil, err
	}
	n := &node{id: id, opts: opts, conns: map[string]*grpc.ClientConn{}}
	logger := serverLogger(opts.Logger, id, n.generation.Load).With("class", opts.Class)
	s := newServer(Options{Dir: opts.Dir, Config: opts.Config, ListenAddr: opts.Listen, Logger: logger, FlushInterval: opts.FlushInterval,
		HTTPAddr: opts.HTTPAddr, Pprof: opts.Pprof, FS: opts.FS, Clock: opts.Clock, Protocol: opts.Protocol, Interceptor: opts.Interceptor,
		Tuning: opts.Tuning})
	s.dirLock = dirLock
	s.legacyDir.Store(legacy)
	s.serverTLS = opts.ServerTLS
	s.failed = make(chan error, 1)
	n.s, s.link = s, n
	if opts.Class == ClassStash {
		n.stash = &stashNode{s: s, n: n, slot: -1}
	} else {
		n.txn = &transactionNode{s: s, n: n}
	}
	n.setupDCDelay()
	if err := n.start(ctx); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// start wires the node: its listening address (raft and clients), the
// gateway, the coordinators (its own, if it is one, and its client of
// them), registration and heartbeats; then its class's part runs.
func (n *node) start(ctx context.Context) error {
	s := n.s
	o := n.opts
	runCtx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel

	var mux *raftnet.Mux
	var err error
	if o.Listener != nil {
		mux, err = raftnet.New(o.Listener, o.ServerTLS, o.ClientTLS)
	} else {
		mux, err = raftnet.Listen(o.Listen, o.ServerTLS, o.ClientTLS)
	}
	if err != nil {
		return fmt.Errorf("server: listen on %s: %w", o.Listen, err)
	}
	if o.Dialer != nil {
		mux.SetDialer(o.Dialer)
	}
	mux.OnRefused(func(remote net.Addr, err error) {
		s.logger.Warn("refused a raft connection: the peer is not a cluster node", "remote", remote.String(), "err", err)
	})
	gs := s.gw.open(mux, grpc.ChainUnaryInterceptor(n.nodeOnly), grpc.ChainStreamInterceptor(n.nodeOnlyStream))
	s.gw.framesGate = n.nodeOnlyStream
	if host, _, err := net.SplitHostPort(o.Listen); err == nil {
		if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
			s.warnTLS(o.ServerTLS, o.Listen)
		}
	}
	registerAdmin(gs, s, func(reason string) { s.fail(&KilledError{Reason: reason}) })
	logSvc := logrpc.NewService(&s.replica, s.report)
	wire.RegisterLogServer(gs, logSvc)
	s.gw.framesAlso = append(s.gw.framesAlso, framesService{&wire.Log_ServiceDesc, logSvc})
	// An attempt that waits on a coordinator that stopped answering
	// (paused, with its connection open) is abandoned after 1.5 s for the
	// next one: a new log leader's claim must not wait out the 3 s
	// default on the paused node, often the one that answered last. A
	// coordinator waiting for an election answers within 2 s; abandoning
	// it costs a retry, not a wrong answer.
	n.cc, err = coordrpc.NewClient(strings.Join(o.Coordinators, ","), coordrpc.ClientOptions{TLS: o.ClientTLS, Dialer: o.Dialer, Protocol: o.Protocol,
		AttemptTimeout: 1500 * time.Millisecond})
	if err != nil {
		return err
	}
	if slices.Contains(o.Coordinators, o.Listen) {
		n.coord, err = coord.Start(coord.Options{
			Addr: o.Listen, Coordinators: o.Coordinators, Dir: filepath.Join(o.Dir, "coord"),
			StreamLayer: mux.StreamLayer(streamCoord, o.Listen), NodeID: n.id,
			LivenessTimeout: o.LivenessTimeout, Clock: s.opts.Clock,
			Logger: raftlog.New(s.roleLogger(logRoleCoordinator), "coord"),
			Probe:  n.probeCoordinator, Join: n.cc.JoinCoordinators, FS: o.FS,
		})
		if err != nil {
			return fmt.Errorf("server: start the coordinator: %w", err)
		}
		n.csrv = coordrpc.Register(gs, n.coord, coordrpc.ServerOptions{ClientTLS: o.ClientTLS, Dialer: o.Dialer, Protocol: o.Protocol})
	}
	s.gw.serve()
	if err := s.startHTTP(); err != nil {
		return err
	}

	reg, err := n.registration()
	if err != nil {
		return err
	}
	n.reg = reg
	slot, tag, err := n.register(ctx, reg)
	if err != nil {
		return err
	}
	n.followDCs(runCtx)
	if s.auth != nil {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			n.followAuth(runCtx)
		}()
	}
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
		n.stash.assign(slot, tag)
		return n.stash.start(ctx, runCtx)
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		n.txn.run(runCtx)
	}()
	return nil
}

// stop ends what the node runs besides the cluster roles (after them);
// the gateway closes the listening address after it.
func (n *node) stop() {
	if n.coord != nil {
		if err := n.coord.Stop(); err != nil {
			n.s.logger.Warn("stop the coordinator", "err", err)
		}
	}
	if n.csrv != nil {
		n.csrv.Close()
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

func (n *node) addr() string          { return n.opts.Listen }
func (n *node) clusterString() string { return strings.Join(n.opts.Coordinators, ",") }
func (n *node) nodeID() string        { return n.id }

// stashNode names this node as the one serving its stashes (status).
func (n *node) stashNode() (id, addr string) { return n.id, n.opts.Listen }

// reportedLogLast is the log's last version as the stash's last report
// heard it: a stash node holds no log replica.
func (n *node) reportedLogLast() kv.Version { return kv.Version(n.logLast.Load()) }

// retire has the controller retire tag: its node gets a new tag if it
// ever returns.
func (n *node) retire(ctx context.Context, tag kv.Tag) error {
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	return n.cc.Retire(cctx, uint32(tag))
}

// status describes this node.
func (n *node) status() *wire.NodeStatus {
	s := n.s
	o := n.opts
	ns := &wire.NodeStatus{Id: n.id, Address: o.Listen, Class: o.Class, Pool: o.Pool, Dc: o.DC, Zone: o.Zone,
		Machine: o.Machine, Generation: n.generation.Load()}
	if n.coord != nil {
		ns.Roles = append(ns.Roles, "coordinator")
		if n.coord.Controller() != 0 {
			ns.Roles = append(ns.Roles, "controller")
		}
	}
	if l := s.logReplica(); l != nil {
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
	ns.ProtocolMin, ns.ProtocolMax, ns.BuildVersion, ns.BuildCommit = s.speaks()
	return ns
}
