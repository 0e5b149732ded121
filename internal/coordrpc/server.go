// Package coordrpc is the coordinators' gRPC service (proto service
// Coordinator): how nodes register with the cluster controller and
// heartbeat it, and how nodes and clients find the roles of the current
// generation (issue 9, points 2 and 3).
//
//	srv := coordrpc.Register(grpcServer, node, coordrpc.ServerOptions{ClientTLS: cli})
//	defer srv.Close()
//
//	c, err := coordrpc.NewClient("a:1,b:2,c:3", coordrpc.ClientOptions{TLS: cli})
//	slot, tag, gen, err := c.Register(ctx, coordrpc.NodeRegistration{...})
//	go c.HeartbeatLoop(ctx, id, time.Second, nil)
//	v, err := c.View(ctx)
//	gen, err := c.Claim(ctx, id)                 // this node's log replica leads the log
//	err = c.RecoveryDone(ctx, id, gen, micros)  // and its recovery took that long
//	excluded, err := c.Exclude(ctx, []string{"10.0.0.5:4500"}) // admin calls
//	excluded, err = c.Include(ctx, nil)                        // every address
//	err = c.Configure(ctx, "", "failure_wait", "5s")           // or "data", "replication", "2"
//	err = c.Retire(ctx, tag)                    // the data distributor: no shard refers to tag
//
// Every coordinator answers every call. The controller (the raft leader,
// once its generation is committed) serves them itself; a follower
// forwards the call to it over a connection it keeps per leader address,
// with the request's hop count raised. A call that has been forwarded
// MaxHops times, or that finds no controller, is answered with a retryable
// connection_failed error and the leader's address when one is known: the
// Client then retries there or at the next coordinator. Forwarding rather
// than redirecting keeps callers simple, and View must come from the
// controller anyway, since liveness lives only in its memory.
//
// The log forms by itself: when a transaction node registers or
// heartbeats and no log replica is placed yet, the controller tries
// coord.Node.RecruitLog, which places them once the configuration's
// log.replicas transaction nodes are alive. The node whose log replica then
// becomes the log's raft leader calls Claim to take the stateless roles in
// a new generation, the epoch of its log appends, and RecoveryDone once it
// serves. View shows where everything is: roles, nodes, every stash slot
// with its tag (coord.State.SlotTags), node, locality and whether it is
// excluded or retired, the configuration, the settings in force
// (failure_wait, each pool's replication), the excluded addresses, and the
// last claim's time and recovery duration.
//
// Exclude, Include and Configure are admin calls any client may make (on a
// cluster served over mutual TLS, any client with a certificate the CA
// signed); Retire, like Register, Heartbeat, Claim and RecoveryDone, is for
// cluster nodes (the node restricts it, see server/gateway.go).
//
// The gRPC service is reached at the coordinator's address in the
// coordinators list: a node serves gRPC and the coordinators' raft on one
// address (internal/raftnet), so the raft leader's address is the
// controller's gRPC address.
package coordrpc

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/distash/distash/config"
	"github.com/distash/distash/internal/authz"
	"github.com/distash/distash/internal/coord"
	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/protover"
	"github.com/distash/distash/internal/wire"
)

// MaxHops bounds how many times a call is forwarded between coordinators:
// one is enough when they agree on the leader, the second covers a leader
// change in flight.
const MaxHops = 2

// Request limits, checked at the boundary.
const (
	MaxNameBytes   = 256     // id, address, pool, dc, zone, machine
	MaxConfigBytes = 1 << 20 // the configuration TOML
)

// controllerWait bounds how long a call waits on a coordinator for a
// controller to exist (an election, or a new leader's first generation)
// before it answers with a retryable error.
const controllerWait = 2 * time.Second

// ServerOptions configure the service on one coordinator.
type ServerOptions struct {
	// ClientTLS, if set, secures the connections on which this coordinator
	// forwards calls to the controller (mutual TLS: tlsconf.Client).
	ClientTLS *tls.Config
	// Dialer, if set, opens those connections instead of TCP (an
	// in-process network in tests): it gets the leader's address.
	Dialer func(ctx context.Context, addr string) (net.Conn, error)
	// Protocol is the protocol versions those connections state (zero:
	// this binary's).
	Protocol protover.Speaker
}

// Server is the Coordinator service on one coordinator.
type Server struct {
	wire.UnimplementedCoordinatorServer
	node *coord.Node
	opts ServerOptions

	mu     sync.Mutex
	conns  map[string]*grpc.ClientConn // to leaders, by address
	closed bool
}

// Register serves the Coordinator service of node on s. Close the returned
// Server after s stops, to close its forwarding connections.
func Register(s *grpc.Server, node *coord.Node, opts ...ServerOptions) *Server {
	srv := &Server{node: node, conns: make(map[string]*grpc.ClientConn)}
	if len(opts) > 0 {
		srv.opts = opts[0]
	}
	wire.RegisterCoordinatorServer(s, srv)
	return srv
}

// Close closes the forwarding connections.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	var err error
	for a, c := range s.conns {
		err = errors.Join(err, c.Close())
		delete(s.conns, a)
	}
	return err
}

// errNoController is answered when no controller can be reached from here.
type errNoController struct {
	leader string // "" if unknown
	why    string
}

func (e *errNoController) Error() string { return e.why }

// route waits until this node is the controller (nil) or another node is
// the leader (its address, to forward to), at most controllerWait.
func (s *Server) route(ctx context.Context) (string, error) {
	deadline := time.Now().Add(controllerWait)
	for {
		if s.node.Controller() != 0 {
			return "", nil
		}
		// A leader whose generation is not committed yet is about to be
		// the controller: wait for it rather than forward to ourselves.
		if !s.node.IsLeader() {
			if l := s.node.Leader(); l != "" {
				return l, nil
			}
		}
		if time.Now().After(deadline) {
			return "", &errNoController{why: "coordrpc: no cluster controller yet (election in progress?)"}
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// forward returns a client of the leader at addr, or an error if the call
// may not be forwarded again.
func (s *Server) forward(addr string, hops uint32) (wire.CoordinatorClient, error) {
	if hops >= MaxHops {
		return nil, &errNoController{leader: addr, why: fmt.Sprintf("coordrpc: forwarded %d times without reaching the controller (coordinators disagree on the leader?)", hops)}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, &errNoController{leader: addr, why: "coordrpc: coordinator shutting down"}
	}
	c, ok := s.conns[addr]
	if !ok {
		var err error
		if c, err = dial(addr, s.opts.ClientTLS, s.opts.Dialer, s.opts.Protocol); err != nil {
			return nil, &errNoController{leader: addr, why: fmt.Sprintf("coordrpc: dial the controller %s: %v", addr, err)}
		}
		s.conns[addr] = c
	}
	return wire.NewCoordinatorClient(c), nil
}

// dial returns a connection to addr: over TCP, or through dialer if set,
// stating the protocol versions sp speaks.
func dial(addr string, cfg *tls.Config, dialer func(context.Context, string) (net.Conn, error), sp protover.Speaker, extra ...grpc.DialOption) (*grpc.ClientConn, error) {
	creds := insecure.NewCredentials()
	if cfg != nil {
		creds = credentials.NewTLS(cfg)
	}
	opts := append([]grpc.DialOption{grpc.WithTransportCredentials(creds)}, sp.DialOptions()...)
	opts = append(opts, extra...)
	target := addr
	if dialer != nil {
		// passthrough: the dialer gets addr as it is, unresolved.
		target = "passthrough:///" + addr
		opts = append(opts, grpc.WithContextDialer(dialer))
	}
	return grpc.NewClient(target, opts...)
}

// perRPC is the dial option presenting c with every call; none for nil.
func perRPC(c credentials.PerRPCCredentials) []grpc.DialOption {
	if c == nil {
		return nil
	}
	return []grpc.DialOption{grpc.WithPerRPCCredentials(c)}
}

// wireErr converts err for a response; leader is the hint sent with it.
func (s *Server) wireErr(err error) (e *wire.Error, leader, field string) {
	var nc *errNoController
	var nl *coord.NotLeaderError
	var fe *config.FieldError
	var ke *kv.Error
	switch {
	case errors.As(err, &nc):
		return &wire.Error{Code: int32(kv.CodeConnectionFailed), Detail: nc.why}, nc.leader, ""
	case errors.As(err, &nl):
		return &wire.Error{Code: int32(kv.CodeConnectionFailed), Detail: err.Error()}, nl.Leader, ""
	case errors.As(err, &ke):
		return wire.ErrorOf(ke), "", ""
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, raft.ErrLeadershipLost), errors.Is(err, raft.ErrNotLeader),
		errors.Is(err, raft.ErrRaftShutdown), errors.Is(err, raft.ErrEnqueueTimeout),
		errors.Is(err, raft.ErrAbortedByRestore), errors.Is(err, raft.ErrLeadershipTransferInProgress):
		// The controller could not decide: retrying is safe (registration
		// is idempotent; a repeated claim starts one more generation).
		return &wire.Error{Code: int32(kv.CodeConnectionFailed), Detail: err.Error()}, "", ""
	case errors.As(err, &fe):
		return &wire.Error{Code: int32(kv.CodeInvalidMutation), Detail: err.Error()}, "", fe.Field
	}
	// The state machine's refusals: a request the cluster cannot accept.
	return &wire.Error{Code: int32(kv.CodeInvalidMutation), Detail: err.Error()}, "", ""
}

func invalid(format string, args ...any) error {
	return kv.Errorf(kv.CodeInvalidMutation, format, args...)
}

// controllerClient returns nil when this node is the controller, else a
// client of the controller to forward a call that has made hops hops,
// with its address.
func (s *Server) controllerClient(ctx context.Context, hops uint32) (wire.CoordinatorClient, string, error) {
	leader, err := s.route(ctx)
	if err != nil || leader == "" {
		return nil, "", err
	}
	c, err := s.forward(leader, hops)
	return c, leader, err
}

// forwardFailed is the error of a forwarded call that got no answer.
func forwardFailed(leader string, err error) error {
	return &errNoController{leader: leader, why: fmt.Sprintf("coordrpc: forward to the controller %s: %v", leader, err)}
}

// handle is the frame of every Coordinator call but a local View. The
// request is checked (check: nil or an invalid field), then forwarded to
// the controller when this coordinator is not it (forward, with the hop
// count raised), else served here (serve). Every error, of any step, is
// answered in the response that failed builds (the error, the leader's
// address when known, the configuration field at fault), never as a gRPC
// error: the Client reads the leader hint from it and retries there.
func handle[Resp any](ctx context.Context, s *Server, hops uint32, failed func(e *wire.Error, leader, field string) Resp,
	check func() error, forward func(wire.CoordinatorClient) (Resp, error), serve func() (Resp, error)) (Resp, error) {
	fail := func(err error) (Resp, error) {
		e, leader, field := s.wireErr(err)
		return failed(e, leader, field), nil
	}
	if err := check(); err != nil {
		return fail(err)
	}
	c, leader, err := s.controllerClient(ctx, hops)
	if err != nil {
		return fail(err)
	}
	if c != nil {
		resp, err := forward(c)
		if err != nil {
			return fail(forwardFailed(leader, err))
		}
		return resp, nil
	}
	resp, err := serve()
	if err != nil {
		return fail(err)
	}
	return resp, nil
}

// apply serves a call that changes the controller's state: cmd is applied
// through raft, then done answers.
func apply[Resp any](ctx context.Context, s *Server, cmd coord.Command, done func() Resp) (Resp, error) {
	if _, err := s.node.Apply(ctx, cmd); err != nil {
		var zero Resp
		return zero, err
	}
	return done(), nil
}

// Register registers a node with the controller.
func (s *Server) Register(ctx context.Context, req *wire.RegisterRequest) (*wire.RegisterResponse, error) {
	var info coord.NodeInfo
	var cfg *config.Config
	return handle(ctx, s, req.GetHops(),
		func(e *wire.Error, leader, field string) *wire.RegisterResponse {
			return &wire.RegisterResponse{Slot: -1, Error: e, Leader: leader, ConfigField: field}
		},
		func() (err error) { info, cfg, err = checkRegister(req); return err },
		func(c wire.CoordinatorClient) (*wire.RegisterResponse, error) {
			fwd := proto.Clone(req).(*wire.RegisterRequest)
			fwd.Hops++
			return c.Register(ctx, fwd)
		},
		func() (*wire.RegisterResponse, error) { return s.register(ctx, req, info, cfg) })
}

// register registers a node on the controller.
func (s *Server) register(ctx context.Context, req *wire.RegisterRequest, info coord.NodeInfo, cfg *config.Config) (*wire.RegisterResponse, error) {
	// The stored configuration never changes once set (first write wins),
	// so a node's is checked against it here without a raft write; only
	// the first node's goes through raft.
	if st := s.node.State(); st.Config != "" {
		created, err := st.ParsedConfig()
		if err != nil {
			return nil, fmt.Errorf("coordrpc: the cluster's stored configuration: %w", err)
		}
		if err := cfg.CheckSameCluster(created); err != nil {
			return nil, fmt.Errorf("node %q: configuration differs from the cluster's: %w", req.Id, err)
		}
	} else if _, err := s.node.Apply(ctx, coord.SetConfig(req.Config)); err != nil {
		return nil, err
	}
	res, err := s.node.Apply(ctx, coord.RegisterStash(info, req.Empty))
	if err != nil {
		return nil, err
	}
	// Registering is a sign of life: the node need not wait for its first
	// heartbeat to be recruited.
	s.node.Heartbeat(info.ID)
	if info.Class == coord.ClassTransaction {
		if formed, err := s.node.RecruitLog(ctx); err == nil && formed {
			res.Generation = s.node.State().Generation
		}
		// A failure leaves the log to the next registration or heartbeat.
	}
	return &wire.RegisterResponse{Slot: int32(res.Slot), Tag: res.Tag, Generation: res.Generation}, nil
}

// checkID checks a request that names a node by its id.
func checkID(missing bool, what, id string) error {
	if missing {
		return invalid("%s request missing", what)
	}
	return checkName("node id", id, true)
}

// Heartbeat records that a registered node is alive.
func (s *Server) Heartbeat(ctx context.Context, req *wire.HeartbeatRequest) (*wire.HeartbeatResponse, error) {
	return handle(ctx, s, req.GetHops(),
		func(e *wire.Error, leader, _ string) *wire.HeartbeatResponse {
			return &wire.HeartbeatResponse{Error: e, Leader: leader}
		},
		func() error { return checkID(req == nil, "heartbeat", req.GetId()) },
		func(c wire.CoordinatorClient) (*wire.HeartbeatResponse, error) {
			return c.Heartbeat(ctx, &wire.HeartbeatRequest{Id: req.Id, Hops: req.Hops + 1})
		},
		func() (*wire.HeartbeatResponse, error) {
			st := s.node.State()
			n, ok := st.Nodes[req.Id]
			if !ok {
				// Refused so that a node the cluster forgot registers again,
				// rather than heartbeating into the void.
				return nil, invalid("node %q is not registered: register it first", req.Id)
			}
			s.node.Heartbeat(req.Id)
			if n.Class == coord.ClassTransaction && len(st.Roles.LogReplicas) == 0 {
				// A new controller learns who is alive from heartbeats: the log
				// may form now.
				if formed, err := s.node.RecruitLog(ctx); err == nil && formed {
					st = s.node.State()
				}
			}
			return &wire.HeartbeatResponse{Generation: st.Generation}, nil
		})
}

// Claim gives the stateless roles to a transaction node holding a log
// replica, in a new generation (coord.Node.Claim).
func (s *Server) Claim(ctx context.Context, req *wire.ClaimRequest) (*wire.ClaimResponse, error) {
	return handle(ctx, s, req.GetHops(),
		func(e *wire.Error, leader, _ string) *wire.ClaimResponse {
			return &wire.ClaimResponse{Error: e, Leader: leader}
		},
		func() error { return checkID(req == nil, "claim", req.GetId()) },
		func(c wire.CoordinatorClient) (*wire.ClaimResponse, error) {
			return c.Claim(ctx, &wire.ClaimRequest{Id: req.Id, Hops: req.Hops + 1})
		},
		func() (*wire.ClaimResponse, error) {
			gen, err := s.node.Claim(ctx, req.Id)
			if err != nil {
				return nil, err
			}
			s.node.Heartbeat(req.Id) // a sign of life too
			return &wire.ClaimResponse{Generation: gen}, nil
		})
}

// RecoveryDone records how long a claimer's recovery took
// (coord.Node.RecoveryDone; a stale report is ignored, not refused).
func (s *Server) RecoveryDone(ctx context.Context, req *wire.RecoveryDoneRequest) (*wire.RecoveryDoneResponse, error) {
	return handle(ctx, s, req.GetHops(),
		func(e *wire.Error, leader, _ string) *wire.RecoveryDoneResponse {
			return &wire.RecoveryDoneResponse{Error: e, Leader: leader}
		},
		func() error {
			if err := checkID(req == nil, "recovery_done", req.GetId()); err != nil {
				return err
			}
			if req.Generation == 0 {
				return invalid("node %q: recovery_done without a generation", req.Id)
			}
			if req.Micros < 0 {
				return invalid("node %q: recovery of %d microseconds", req.Id, req.Micros)
			}
			return nil
		},
		func(c wire.CoordinatorClient) (*wire.RecoveryDoneResponse, error) {
			fwd := proto.Clone(req).(*wire.RecoveryDoneRequest)
			fwd.Hops++
			return c.RecoveryDone(ctx, fwd)
		},
		func() (*wire.RecoveryDoneResponse, error) {
			if err := s.node.RecoveryDone(ctx, req.Id, req.Generation, req.Micros); err != nil {
				return nil, err
			}
			return &wire.RecoveryDoneResponse{}, nil
		})
}

// View returns the controller's view of the cluster, or with Local this
// coordinator's own (never forwarded).
func (s *Server) View(ctx context.Context, req *wire.ViewRequest) (*wire.ViewResponse, error) {
	if req.GetLocal() {
		return s.localView(), nil
	}
	return handle(ctx, s, req.GetHops(),
		func(e *wire.Error, leader, _ string) *wire.ViewResponse {
			return &wire.ViewResponse{Error: e, Leader: leader}
		},
		func() error {
			if req == nil {
				return invalid("view request missing")
			}
			return nil
		},
		func(c wire.CoordinatorClient) (*wire.ViewResponse, error) {
			return c.View(ctx, &wire.ViewRequest{Hops: req.Hops + 1})
		},
		func() (*wire.ViewResponse, error) { return s.view(s.node.State()), nil })
}

// localView is this coordinator's own view, never forwarded: its copy of
// the state and its raft membership (a probe between coordinators, or
// status when no controller answers).
func (s *Server) localView() *wire.ViewResponse {
	r := s.view(s.node.State())
	info := s.node.Info()
	r.Local, r.RaftState, r.RaftId = true, info.HasState, info.RaftID
	r.ControllerHere = s.node.Controller() != 0
	if t := s.node.LastContact(); !t.IsZero() {
		r.LeaderContactUnixMs = t.UnixMilli()
	}
	return r
}

// coordinators lists the configured coordinators and the raft members,
// alive as this coordinator's liveness says (the controller's is live).
func (s *Server) coordinators(st *coord.State) []*wire.CoordinatorMember {
	self := s.node.Address()
	alive := func(addr string) (bool, int64) {
		if addr == self {
			return true, time.Now().UnixMilli()
		}
		var ok bool
		var last int64
		for id, n := range st.Nodes {
			if n.Addr != addr {
				continue
			}
			ok = ok || s.node.Alive(id)
			if t, seen := s.node.LastSeen(id); seen {
				last = max(last, t.UnixMilli())
			}
		}
		return ok, last
	}
	var out []*wire.CoordinatorMember
	byAddr := map[string]*wire.CoordinatorMember{}
	for _, a := range s.node.Coordinators() {
		m := &wire.CoordinatorMember{Address: a, Configured: true}
		byAddr[a] = m
		out = append(out, m)
	}
	for _, m := range s.node.Members() {
		cm := byAddr[m.Addr]
		if cm == nil || cm.RaftId != "" {
			cm = &wire.CoordinatorMember{Address: m.Addr}
			out = append(out, cm)
		}
		cm.RaftId, cm.Voter = m.ID, m.Voter
	}
	for _, m := range out {
		m.Alive, m.LastSeenUnixMs = alive(m.Address)
	}
	return out
}

func (s *Server) view(st *coord.State) *wire.ViewResponse {
	r := &wire.ViewResponse{
		AnsweredBy:      s.node.Address(),
		Coordinators:    s.coordinators(st),
		LogBootstrapIds: st.LogBootstrap,
		Config:          st.Config,
		Generation:      st.Generation,
		Controller:      st.Roles.Controller,
		Sequencer:       st.Roles.Sequencer,
		GrvProxies:      st.Roles.GRVProxies,
		CommitProxies:   st.Roles.CommitProxies,
		Resolver:        st.Roles.Resolver,
		LogReplicas:     st.Roles.LogReplicas,
	}
	if n, ok := st.Nodes[st.Roles.Sequencer]; ok {
		r.StatelessAddress = n.Addr
	}
	for i := range st.Roles.LogReplicas {
		r.LogIds = append(r.LogIds, st.Roles.LogID(i))
	}
	ids := make([]string, 0, len(st.Nodes))
	for id := range st.Nodes {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		n := st.Nodes[id]
		cn := &wire.ClusterNode{Id: n.ID, Address: n.Addr, Class: n.Class, Pool: n.Pool,
			Dc: n.DC, Zone: n.Zone, Machine: n.Machine, Alive: s.node.Alive(id), LogId: n.LogID}
		if t, ok := s.node.LastSeen(id); ok {
			cn.LastSeenUnixMs = t.UnixMilli()
		}
		r.Nodes = append(r.Nodes, cn)
	}
	pools := make([]string, 0, len(st.Tags))
	for p := range st.Tags {
		pools = append(pools, p)
	}
	sort.Strings(pools)
	for _, p := range pools {
		r.Slots = append(r.Slots, &wire.PoolSlots{Pool: p, Nodes: st.Tags[p]})
	}
	// Every stash slot, in the configuration's pool order, with its tag.
	if cfg, err := st.ParsedConfig(); err == nil && cfg != nil {
		for _, p := range cfg.Pools {
			for i, tag := range st.SlotTags[p.Name] {
				loc := &wire.StashLocation{Tag: tag, Pool: p.Name, Slot: int32(i), Retired: st.TagRetired(tag), GivenUp: st.TagGivenUp(tag)}
				if held := st.Tags[p.Name]; i < len(held) && held[i] != "" {
					n := st.Nodes[held[i]]
					loc.Node, loc.Address, loc.Dc, loc.Zone = held[i], n.Addr, n.DC, n.Zone
					loc.Alive = s.node.Alive(held[i])
					loc.Excluded = st.IsExcluded(n.Addr)
				}
				r.Stashes = append(r.Stashes, loc)
			}
			r.Replication = append(r.Replication, &wire.PoolReplication{Pool: p.Name, Replication: int32(st.PoolReplication(cfg, p.Name))})
		}
		// Retired tags no slot holds any more (replaced stashes): listed
		// so the data distributor knows they will not return.
		inSlot := map[uint32]bool{}
		for _, loc := range r.Stashes {
			inSlot[loc.Tag] = true
		}
		for _, tag := range st.Retired {
			if !inSlot[tag] {
				r.Stashes = append(r.Stashes, &wire.StashLocation{Tag: tag, Slot: -1, Retired: true, RetiredAt: st.RetiredAt[tag], GivenUp: st.TagGivenUp(tag)})
			}
		}
		r.FailureWaitMs = st.FailureWait(cfg).Milliseconds()
		r.FailureWaitSet = st.FailureWaitMs != nil
	}
	r.Excluded, r.Failed = st.Excluded, st.Failed
	if rec := st.Recovery; rec != nil {
		r.LastRecoveryUnixMs, r.LastRecoveryMicros = rec.ClaimedUnixMs, rec.Micros
	}
	return r
}

// Exclude excludes addresses (coord.Exclude).
func (s *Server) Exclude(ctx context.Context, req *wire.ExcludeRequest) (*wire.ExcludeResponse, error) {
	return handle(ctx, s, req.GetHops(),
		func(e *wire.Error, leader, _ string) *wire.ExcludeResponse {
			return &wire.ExcludeResponse{Error: e, Leader: leader}
		},
		func() error { return checkAddrs(req == nil, "exclude", req.GetAddresses()) },
		func(c wire.CoordinatorClient) (*wire.ExcludeResponse, error) {
			return c.Exclude(ctx, &wire.ExcludeRequest{Addresses: req.Addresses, Hops: req.Hops + 1, Failed: req.Failed})
		},
		func() (*wire.ExcludeResponse, error) {
			cmd, live := coord.Exclude(req.Addresses), []string(nil)
			if req.Failed {
				// A stash whose node the controller hears from is not
				// gone: it keeps its tag and data. A controller that just
				// took over has not heard from every node yet.
				if !s.node.LivenessKnown() {
					return &wire.ExcludeResponse{Error: wire.ErrorOf(kv.Errorf(kv.CodeProcessBehind, "exclude --failed: the controller took over less than its liveness timeout ago, so it cannot yet tell a stash that is gone from one it has not heard from; try again in a few seconds"))}, nil
				}
				var down []uint32
				down, live = s.node.State().DownSlotTags(req.Addresses, s.node.Alive)
				cmd = coord.ExcludeFailed(req.Addresses, down)
			}
			return apply(ctx, s, cmd, func() *wire.ExcludeResponse {
				st := s.node.State()
				return &wire.ExcludeResponse{Excluded: st.Excluded, Failed: st.Failed, Alive: live}
			})
		})
}

// Include includes addresses again (coord.Include).
func (s *Server) Include(ctx context.Context, req *wire.IncludeRequest) (*wire.IncludeResponse, error) {
	return handle(ctx, s, req.GetHops(),
		func(e *wire.Error, leader, _ string) *wire.IncludeResponse {
			return &wire.IncludeResponse{Error: e, Leader: leader}
		},
		func() error { return checkAddrs(req == nil, "include", req.GetAddresses()) },
		func(c wire.CoordinatorClient) (*wire.IncludeResponse, error) {
			return c.Include(ctx, &wire.IncludeRequest{Addresses: req.Addresses, Hops: req.Hops + 1})
		},
		func() (*wire.IncludeResponse, error) {
			return apply(ctx, s, coord.Include(req.Addresses),
				func() *wire.IncludeResponse { return &wire.IncludeResponse{Excluded: s.node.State().Excluded} })
		})
}

// Configure changes a live setting (coord.Configure, coord.ConfigurePool).
func (s *Server) Configure(ctx context.Context, req *wire.ConfigureRequest) (*wire.ConfigureResponse, error) {
	return handle(ctx, s, req.GetHops(),
		func(e *wire.Error, leader, _ string) *wire.ConfigureResponse {
			return &wire.ConfigureResponse{Error: e, Leader: leader}
		},
		func() error {
			if req == nil {
				return invalid("configure request missing")
			}
			for _, f := range []struct{ what, v string }{{"key", req.Key}, {"value", req.Value}, {"pool", req.Pool}} {
				if err := checkName(f.what, f.v, f.what == "key"); err != nil {
					return err
				}
			}
			return nil
		},
		func(c wire.CoordinatorClient) (*wire.ConfigureResponse, error) {
			return c.Configure(ctx, &wire.ConfigureRequest{Key: req.Key, Value: req.Value, Pool: req.Pool, Hops: req.Hops + 1})
		},
		func() (*wire.ConfigureResponse, error) {
			return apply(ctx, s, coord.ConfigurePool(req.Pool, req.Key, req.Value),
				func() *wire.ConfigureResponse { return &wire.ConfigureResponse{} })
		})
}

// Auth lists or changes the cluster's roles (coord.Auth): a list is
// answered by the controller too, so that it is the state every change
// went to.
func (s *Server) Auth(ctx context.Context, req *wire.AuthRequest) (*wire.AuthResponse, error) {
	answer := func() *wire.AuthResponse {
		roles, enabled := s.node.State().AuthRoles()
		return &wire.AuthResponse{Roles: authz.ToWire(roles), Enabled: enabled}
	}
	return handle(ctx, s, req.GetHops(),
		func(e *wire.Error, leader, _ string) *wire.AuthResponse {
			return &wire.AuthResponse{Error: e, Leader: leader}
		},
		func() error {
			if req == nil {
				return invalid("auth request missing")
			}
			return nil
		},
		func(c wire.CoordinatorClient) (*wire.AuthResponse, error) {
			fwd := proto.Clone(req).(*wire.AuthRequest)
			fwd.Hops++
			return c.Auth(ctx, fwd)
		},
		func() (*wire.AuthResponse, error) {
			if req.Op == "list" || req.Op == "" {
				return answer(), nil
			}
			ch := coord.AuthChange{Op: req.Op, Role: req.Role, Identity: req.Identity, Define: authz.FromWire(req.Define)}
			return apply(ctx, s, coord.Auth(ch), answer)
		})
}

// Retire retires a tag (coord.Retire): the data distributor's call.
func (s *Server) Retire(ctx context.Context, req *wire.RetireRequest) (*wire.RetireResponse, error) {
	return handle(ctx, s, req.GetHops(),
		func(e *wire.Error, leader, _ string) *wire.RetireResponse {
			return &wire.RetireResponse{Error: e, Leader: leader}
		},
		func() error {
			switch {
			case req == nil:
				return invalid("retire request missing")
			case req.Tag == 0:
				return invalid("retire: tag missing (tag 0 is the system stash's)")
			}
			return nil
		},
		func(c wire.CoordinatorClient) (*wire.RetireResponse, error) {
			return c.Retire(ctx, &wire.RetireRequest{Tag: req.Tag, Hops: req.Hops + 1})
		},
		func() (*wire.RetireResponse, error) {
			return apply(ctx, s, coord.Retire(req.Tag), func() *wire.RetireResponse { return &wire.RetireResponse{} })
		})
}

// JoinCoordinators makes a coordinator without raft state a member of the
// coordinators' group under its new raft id (coord.Node.AddMember).
func (s *Server) JoinCoordinators(ctx context.Context, req *wire.JoinCoordinatorsRequest) (*wire.JoinCoordinatorsResponse, error) {
	return handle(ctx, s, req.GetHops(),
		func(e *wire.Error, leader, _ string) *wire.JoinCoordinatorsResponse {
			return &wire.JoinCoordinatorsResponse{Error: e, Leader: leader}
		},
		func() error {
			if req == nil {
				return invalid("join_coordinators request missing")
			}
			if err := checkName("address", req.Address, true); err != nil {
				return err
			}
			return checkName("raft id", req.RaftId, true)
		},
		func(c wire.CoordinatorClient) (*wire.JoinCoordinatorsResponse, error) {
			return c.JoinCoordinators(ctx, &wire.JoinCoordinatorsRequest{Address: req.Address, RaftId: req.RaftId, Hops: req.Hops + 1})
		},
		func() (*wire.JoinCoordinatorsResponse, error) {
			if err := s.node.AddMember(ctx, req.Address, req.RaftId); err != nil {
				return nil, err
			}
			return &wire.JoinCoordinatorsResponse{}, nil
		})
}

// SetLogReplicas records the log's raft membership after a change
// (coord.SetLogReplicas): the call of the node leading the log.
func (s *Server) SetLogReplicas(ctx context.Context, req *wire.SetLogReplicasRequest) (*wire.SetLogReplicasResponse, error) {
	return handle(ctx, s, req.GetHops(),
		func(e *wire.Error, leader, _ string) *wire.SetLogReplicasResponse {
			return &wire.SetLogReplicasResponse{Error: e, Leader: leader}
		},
		func() error {
			if req == nil {
				return invalid("set_log_replicas request missing")
			}
			if len(req.Replicas) > 16 || len(req.Ids) > 16 {
				return invalid("set_log_replicas: %d replicas (limit 16)", len(req.Replicas))
			}
			for _, v := range append(slices.Clone(req.Replicas), req.Ids...) {
				if err := checkName("log replica", v, true); err != nil {
					return err
				}
			}
			return nil
		},
		func(c wire.CoordinatorClient) (*wire.SetLogReplicasResponse, error) {
			return c.SetLogReplicas(ctx, &wire.SetLogReplicasRequest{Replicas: req.Replicas, Ids: req.Ids, Hops: req.Hops + 1})
		},
		func() (*wire.SetLogReplicasResponse, error) {
			return apply(ctx, s, coord.SetLogReplicas(req.Replicas, req.Ids),
				func() *wire.SetLogReplicasResponse { return &wire.SetLogReplicasResponse{} })
		})
}

// checkAddrs checks an exclude or include request: it bounds the
// addresses; the controller checks their form.
func checkAddrs(missing bool, what string, addrs []string) error {
	if missing {
		return invalid("%s request missing", what)
	}
	if len(addrs) > coord.MaxExcludeAddrs {
		return invalid("%d addresses (limit %d)", len(addrs), coord.MaxExcludeAddrs)
	}
	for _, a := range addrs {
		if err := checkName("address", a, true); err != nil {
			return err
		}
	}
	return nil
}

// checkName refuses an over-long name, or an empty one when required.
func checkName(what, v string, required bool) error {
	if required && v == "" {
		return invalid("%s missing", what)
	}
	if len(v) > MaxNameBytes {
		return invalid("%s of %d bytes (limit %d)", what, len(v), MaxNameBytes)
	}
	return nil
}

// checkRegister checks a registration at the boundary and converts it.
// The cluster-dependent checks (the pool exists, a free slot, the same
// configuration) are the controller's.
func checkRegister(req *wire.RegisterRequest) (coord.NodeInfo, *config.Config, error) {
	var info coord.NodeInfo
	if req == nil {
		return info, nil, invalid("register request missing")
	}
	for _, f := range []struct {
		what     string
		v        string
		required bool
	}{
		{"node id", req.Id, true}, {"address", req.Address, true}, {"class", req.Class, true},
		{"pool", req.Pool, req.Class == coord.ClassStash},
		{"dc", req.Dc, false}, {"zone", req.Zone, false}, {"machine", req.Machine, false},
		{"log id", req.LogId, false}, {"incarnation", req.Incarnation, false},
	} {
		if err := checkName(f.what, f.v, f.required); err != nil {
			return info, nil, fmt.Errorf("node %q: %w", req.Id, err)
		}
	}
	if _, _, err := net.SplitHostPort(req.Address); err != nil {
		return info, nil, invalid("node %q: address %q is not host:port: %v", req.Id, req.Address, err)
	}
	switch req.Class {
	case coord.ClassStash:
	case coord.ClassTransaction:
		if req.Pool != "" {
			return info, nil, invalid("node %q: a transaction node has no pool (got %q)", req.Id, req.Pool)
		}
	default:
		return info, nil, invalid("node %q: class %q is not %s or %s", req.Id, req.Class, coord.ClassTransaction, coord.ClassStash)
	}
	if req.Config == "" {
		return info, nil, invalid("node %q: configuration missing", req.Id)
	}
	if len(req.Config) > MaxConfigBytes {
		return info, nil, invalid("node %q: configuration of %d bytes (limit %d)", req.Id, len(req.Config), MaxConfigBytes)
	}
	cfg, err := config.Parse([]byte(req.Config))
	if err != nil {
		return info, nil, fmt.Errorf("node %q: configuration: %w", req.Id, err)
	}
	info = coord.NodeInfo{ID: req.Id, Addr: req.Address, Class: req.Class, Pool: req.Pool,
		DC: req.Dc, Zone: req.Zone, Machine: req.Machine, LogID: req.LogId, Incarnation: req.Incarnation}
	if info.LogID != "" && req.Class != coord.ClassTransaction {
		return info, nil, invalid("node %q: a %s node has no log replica (log id %q)", req.Id, req.Class, req.LogId)
	}
	return info, cfg, nil
}
