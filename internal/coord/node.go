package coord

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/distash/distash/internal/clock"
	"github.com/distash/distash/internal/fsys"
	"github.com/distash/distash/internal/raftstore"
)

// Options configure a coordinator Node.
type Options struct {
	// Addr is this coordinator's address as it appears in Coordinators:
	// its raft server id and the address its peers dial.
	Addr string
	// Coordinators lists every coordinator's address, Addr included. All
	// coordinators must be given the same list: a fresh directory
	// bootstraps the raft group with it.
	Coordinators []string
	// Dir holds the raft log, stable store and snapshots.
	Dir string
	// StreamLayer carries the raft RPCs: a raftnet.Mux's layer of kind
	// raftnet.KindCoord, advertising Addr (mutual TLS when the mux has it).
	// Start owns it: raft's transport closes it on Stop, as does Start if
	// it fails.
	StreamLayer raft.StreamLayer
	// NodeID is the registered node this coordinator runs in, if any: as
	// controller it counts itself alive, and Recover prefers it for the
	// stateless roles.
	NodeID string

	HeartbeatTimeout time.Duration // raft; default 1s
	ElectionTimeout  time.Duration // raft; default 1s
	RPCTimeout       time.Duration // raft RPC I/O; default 5s
	LivenessTimeout  time.Duration // a node unheard of for this long is dead; default 5s
	// Clock is what the coordinators decide by: liveness, the claims'
	// times, the leader's last contact (nil: the real clock). Raft keeps
	// real time, and so do the retries paced against it and the peers.
	Clock  clock.Clock
	Logger hclog.Logger // default: none

	// Probe asks the coordinator at addr what it tells of itself (its
	// raft id and configuration, coordrpc's local View); Join asks the
	// controller, through any coordinator, to make the coordinator at addr
	// a member under raft id (AddMember). With Probe set, a coordinator
	// without raft state takes a new raft id and joins as membership.go
	// says. Without (tests), a fresh directory bootstraps the group from
	// Coordinators with the addresses as raft ids, as if no coordinator
	// ever lost its directory.
	Probe func(ctx context.Context, addr string) (PeerInfo, error)
	Join  func(ctx context.Context, addr, raftID string) error
	// FS holds the raft id file and the raft store; nil: the operating
	// system's.
	FS fsys.FS
}

// NotLeaderError is returned by Apply on a coordinator that is not the
// cluster controller: callers forward the command to Leader ("" when no
// leader is known yet).
type NotLeaderError struct{ Leader string }

func (e *NotLeaderError) Error() string {
	if e.Leader == "" {
		return "coord: not the cluster controller, and no leader is known"
	}
	return "coord: not the cluster controller; the leader is " + e.Leader
}

// Leadership is a leadership-change notification.
type Leadership struct {
	Leader string // the raft leader's address, "" if none is known
	// Controller is true on the controller once its generation is
	// committed, with that Generation.
	Controller bool
	Generation uint64
}

// Node is one coordinator.
type Node struct {
	opts  Options
	id    string     // raft server id
	rmu   sync.Mutex // guards raft, which is nil until it starts (settle)
	raft  *raft.Raft
	conf  *raft.Config
	snaps raft.SnapshotStore
	fsm   *fsm
	store *raftstore.Store
	trans *raft.NetworkTransport
	obs   *raft.Observer
	live  *liveness

	done chan struct{}
	wg   sync.WaitGroup

	// genMu serialises the controller's read-then-commit of generations
	// (a term's first, RecruitLog, Claim, Recover, RecoveryDone), so two
	// never start from the same one.
	genMu sync.Mutex
	// memberMu serialises membership changes (AddMember).
	memberMu sync.Mutex

	mu      sync.Mutex
	term    *term // current leadership term, nil when not leader
	subs    map[chan Leadership]struct{}
	warns   []string
	stopped bool
}

// term is one leadership of this node.
type term struct {
	ready  chan struct{} // closed when its generation is committed
	lost   chan struct{} // closed when leadership ends
	gen    uint64
	cancel context.CancelFunc
	began  time.Time // when leadership began (liveness is known from a timeout later)
}

// Start opens (or creates) the coordinator's state in opts.Dir and joins
// the raft group.
func Start(opts Options) (n *Node, err error) {
	if opts.StreamLayer == nil {
		return nil, errors.New("coord: no raft stream layer")
	}
	var closers []func() error
	closers = append(closers, opts.StreamLayer.Close) // Start owns it from here
	defer func() {
		if err != nil {
			for i := len(closers) - 1; i >= 0; i-- {
				closers[i]()
			}
		}
	}()
	if !slices.Contains(opts.Coordinators, opts.Addr) {
		return nil, fmt.Errorf("coord: %s is not in the coordinators %v", opts.Addr, opts.Coordinators)
	}
	if a := opts.StreamLayer.Addr().String(); a != opts.Addr {
		return nil, fmt.Errorf("coord: the stream layer advertises %s, not this coordinator's address %s", a, opts.Addr)
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&opts.HeartbeatTimeout, time.Second)
	def(&opts.ElectionTimeout, time.Second)
	def(&opts.RPCTimeout, 5*time.Second)
	def(&opts.LivenessTimeout, 5*time.Second)
	opts.Clock = clock.Or(opts.Clock)
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	n = &Node{opts: opts, fsm: &fsm{state: &State{}}, live: newLiveness(opts.Clock, opts.LivenessTimeout),
		done: make(chan struct{}), subs: make(map[chan Leadership]struct{})}

	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, err
	}
	if err := checkFormat(opts.FS, opts.Dir); err != nil {
		return nil, err
	}
	if n.store, err = openStore(opts.FS, filepath.Join(opts.Dir, "raft")); err != nil {
		return nil, err
	}
	closers = append(closers, n.store.Close)
	snaps, err := raft.NewFileSnapshotStoreWithLogger(opts.Dir, 2, opts.Logger)
	if err != nil {
		return nil, fmt.Errorf("coord: snapshot store: %w", err)
	}
	n.trans = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: opts.StreamLayer, MaxPool: 3, Timeout: opts.RPCTimeout, Logger: opts.Logger,
	})
	closers = append(closers, n.trans.Close)

	conf := raft.DefaultConfig()
	conf.HeartbeatTimeout = opts.HeartbeatTimeout
	conf.ElectionTimeout = opts.ElectionTimeout
	conf.LeaderLeaseTimeout = min(opts.HeartbeatTimeout, opts.ElectionTimeout) / 2
	conf.Logger = opts.Logger
	conf.NoLegacyTelemetry = true

	has, err := raft.HasExistingState(n.store, n.store, snaps)
	if err != nil {
		return nil, fmt.Errorf("coord: %w", err)
	}
	if n.id, err = n.localID(has); err != nil {
		return nil, err
	}
	conf.LocalID = raft.ServerID(n.id)
	n.conf, n.snaps = conf, snaps
	switch {
	case has:
		err = n.startRaft(nil)
	case opts.Probe == nil:
		var cfg raft.Configuration
		for _, a := range opts.Coordinators {
			cfg.Servers = append(cfg.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(a), Address: raft.ServerAddress(a)})
		}
		err = n.startRaft(&cfg)
	default:
		n.wg.Add(1)
		go n.settle()
	}
	if err != nil {
		return nil, err
	}
	return n, nil
}

// startRaft starts the coordinator's raft, bootstrapping it with boot if
// not nil, unless the node is stopped.
func (n *Node) startRaft(boot *raft.Configuration) error {
	n.rmu.Lock()
	defer n.rmu.Unlock()
	n.mu.Lock()
	stopped := n.stopped
	n.mu.Unlock()
	if stopped {
		return nil
	}
	if boot != nil {
		if err := raft.BootstrapCluster(n.conf, n.store, n.store, n.snaps, n.trans, *boot); err != nil {
			n.opts.Logger.Error("coord: bootstrap", "error", err)
			return fmt.Errorf("coord: bootstrap: %w", err)
		}
	}
	r, err := raft.NewRaft(n.conf, n.fsm, n.store, n.store, n.snaps, n.trans)
	if err != nil {
		n.opts.Logger.Error("coord: start raft", "error", err)
		return fmt.Errorf("coord: %w", err)
	}
	obsCh := make(chan raft.Observation, 16)
	n.obs = raft.NewObserver(obsCh, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	})
	r.RegisterObserver(n.obs)
	n.raft = r
	n.wg.Add(1)
	go n.run(r, obsCh)
	return nil
}

// rf returns the raft, nil until it starts.
func (n *Node) rf() *raft.Raft {
	n.rmu.Lock()
	defer n.rmu.Unlock()
	return n.raft
}

// Stop shuts the coordinator down; its directory keeps its state.
func (n *Node) Stop() error {
	n.mu.Lock()
	if n.stopped {
		n.mu.Unlock()
		return nil
	}
	n.stopped = true
	n.endTermLocked()
	n.mu.Unlock()
	close(n.done)
	var err error
	n.rmu.Lock() // a raft starting now sees stopped
	if n.raft != nil {
		n.raft.DeregisterObserver(n.obs)
		err = n.raft.Shutdown().Error()
	}
	n.rmu.Unlock()
	n.wg.Wait()
	if cerr := n.trans.Close(); err == nil {
		err = cerr
	}
	if cerr := n.store.Close(); err == nil {
		err = cerr
	}
	return err
}

// run follows raft's leadership signals and leader observations.
func (n *Node) run(r *raft.Raft, obs chan raft.Observation) {
	defer n.wg.Done()
	for {
		select {
		case <-n.done:
			return
		case <-obs:
			n.notify()
		case leader := <-r.LeaderCh():
			// Two trues in a row mean leadership was lost and regained:
			// either way the old term is over.
			n.mu.Lock()
			n.endTermLocked()
			if leader && !n.stopped {
				ctx, cancel := context.WithCancel(context.Background())
				t := &term{ready: make(chan struct{}), lost: make(chan struct{}), cancel: cancel, began: n.opts.Clock.Now()}
				n.term = t
				n.wg.Add(1)
				go n.lead(ctx, t)
			}
			n.mu.Unlock()
			n.notify()
		}
	}
}

func (n *Node) endTermLocked() {
	if n.term != nil {
		n.term.cancel()
		close(n.term.lost)
		n.term = nil
	}
}

// lead makes this node the cluster controller: before anything else it
// commits a new generation naming itself, so every generation has exactly
// one controller. Then it forms the log if it can.
func (n *Node) lead(ctx context.Context, t *term) {
	defer n.wg.Done()
	for ctx.Err() == nil {
		gen, err := n.startGeneration()
		if err == nil {
			n.mu.Lock()
			t.gen = gen
			close(t.ready)
			n.mu.Unlock()
			n.notify()
			if _, err := n.RecruitLog(ctx); err != nil {
				n.opts.Logger.Warn("coord: recruiting the log failed", "error", err)
			}
			return
		}
		n.opts.Logger.Warn("coord: starting a generation failed", "error", err)
		select {
		case <-ctx.Done():
		case <-time.After(n.opts.HeartbeatTimeout / 4):
		}
	}
}

// startGeneration commits the first generation of a leadership term: the
// roles stay as they were, only the controller changes. The log replicas
// are the log's raft membership, so they are sticky; the stateless roles
// stay with the node that claimed them until another claims them.
func (n *Node) startGeneration() (uint64, error) {
	n.genMu.Lock()
	defer n.genMu.Unlock()
	// The barrier makes the FSM apply every entry of earlier terms, so the
	// state read below is the latest.
	if err := n.rf().Barrier(n.opts.RPCTimeout).Error(); err != nil {
		return 0, err
	}
	st := n.fsm.current()
	if n.opts.NodeID != "" {
		n.live.heartbeat(n.opts.NodeID)
	}
	roles := st.Roles.clone()
	roles.Controller = n.opts.Addr
	res, err := n.apply(NewGeneration(st.Generation, roles), n.opts.RPCTimeout)
	return res.Generation, err
}

// controlling waits until this node's current term has committed its
// generation and returns the term, or a *NotLeaderError.
func (n *Node) controlling(ctx context.Context) (*term, error) {
	n.mu.Lock()
	t := n.term
	n.mu.Unlock()
	if t == nil {
		return nil, &NotLeaderError{Leader: n.Leader()}
	}
	select {
	case <-t.ready:
		return t, nil
	case <-t.lost:
		return nil, &NotLeaderError{Leader: n.Leader()}
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// commitGeneration applies c, a command starting a generation, in term t,
// and makes its generation the term's. The caller holds genMu.
func (n *Node) commitGeneration(ctx context.Context, t *term, c Command) (uint64, error) {
	timeout := n.opts.RPCTimeout
	if d, ok := ctx.Deadline(); ok {
		if timeout = time.Until(d); timeout <= 0 {
			return 0, context.DeadlineExceeded
		}
	}
	res, err := n.apply(c, timeout)
	if err != nil {
		return 0, err
	}
	n.mu.Lock()
	if n.term == t {
		t.gen = res.Generation
	}
	n.mu.Unlock()
	n.notify()
	return res.Generation, nil
}

// RecruitLog forms the transaction log, on the controller (a
// *NotLeaderError elsewhere): while no log replica is placed and at least
// the configuration's log.replicas transaction nodes are alive, it commits
// a generation whose log replicas are that many of them, spread over zones
// as Recruit does, with no stateless roles yet (see Claim). It reports
// whether it did; false, nil when the log is formed already, or there are
// too few live transaction nodes or no configuration yet. The controller
// calls it when its term starts; the Coordinator service calls it when a
// transaction node registers or heartbeats.
func (n *Node) RecruitLog(ctx context.Context) (bool, error) {
	t, err := n.controlling(ctx)
	if err != nil {
		return false, err
	}
	n.genMu.Lock()
	defer n.genMu.Unlock()
	st := n.fsm.current()
	if len(st.Roles.LogReplicas) > 0 {
		return false, nil
	}
	cfg, err := st.ParsedConfig()
	if err != nil || cfg == nil {
		return false, err
	}
	live := 0
	for _, nd := range st.Nodes {
		if nd.Class == ClassTransaction && n.live.alive(nd.ID) {
			live++
		}
	}
	if live < cfg.Log.Replicas {
		return false, nil
	}
	r, warns, err := Recruit(st, n.live.alive, cfg.Log.Replicas, n.opts.NodeID)
	if err != nil {
		return false, err
	}
	n.mu.Lock()
	n.warns = warns
	n.mu.Unlock()
	if _, err := n.commitGeneration(ctx, t, NewGeneration(st.Generation, Roles{Controller: n.opts.Addr, LogReplicas: r.LogReplicas, LogIDs: r.LogIDs})); err != nil {
		return false, err
	}
	return true, nil
}

// Claim gives node id every stateless role (sequencer, GRV and commit
// proxy, resolver) in a new generation, which it returns, on the
// controller (a *NotLeaderError elsewhere). id must be a registered
// transaction node holding a log replica (else an error, wrapping
// ErrNotLogReplica when it holds none): the node whose log replica became
// the log's raft leader claims the roles, and the generation is the epoch
// its log appends carry. The claim's time is recorded in State.Recovery.
func (n *Node) Claim(ctx context.Context, id string) (uint64, error) {
	t, err := n.controlling(ctx)
	if err != nil {
		return 0, err
	}
	n.genMu.Lock()
	defer n.genMu.Unlock()
	st := n.fsm.current()
	if err := st.claimable(id); err != nil { // checked before a raft write
		return 0, err
	}
	return n.commitGeneration(ctx, t, Claim(st.Generation, n.opts.Addr, id, n.opts.Clock.Now().UnixMilli()))
}

// RecoveryDone records, on the controller (a *NotLeaderError elsewhere),
// that node id's recovery of generation gen took micros microseconds. It
// is ignored unless gen is the generation id claimed and id still holds
// the stateless roles (State.RecoveryAccepted).
func (n *Node) RecoveryDone(ctx context.Context, id string, gen uint64, micros int64) error {
	if _, err := n.controlling(ctx); err != nil {
		return err
	}
	n.genMu.Lock()
	defer n.genMu.Unlock()
	if !n.fsm.current().RecoveryAccepted(id, gen) {
		return nil
	}
	_, err := n.Apply(ctx, RecoveryDone(id, gen, micros))
	return err
}

// Recover starts a new generation with every role recruited anew from the
// nodes alive now (Recruit), on the controller (a *NotLeaderError
// elsewhere), and returns it with the recruitment's warnings. It replaces
// log replicas, which the log's raft membership does not follow yet: it is
// for tests and for a cluster whose log is not running; a running cluster
// forms its log with RecruitLog and moves the stateless roles with Claim.
func (n *Node) Recover(ctx context.Context) (uint64, []string, error) {
	t, err := n.controlling(ctx)
	if err != nil {
		return 0, nil, err
	}
	n.genMu.Lock()
	defer n.genMu.Unlock()
	st := n.fsm.current()
	if n.opts.NodeID != "" {
		n.live.heartbeat(n.opts.NodeID)
	}
	replicas := 1
	if cfg, err := st.ParsedConfig(); err == nil && cfg != nil {
		replicas = cfg.Log.Replicas
	}
	roles, warns, err := Recruit(st, n.live.alive, replicas, n.opts.NodeID)
	if err != nil {
		return 0, nil, err
	}
	roles.Controller = n.opts.Addr
	n.mu.Lock()
	n.warns = warns
	n.mu.Unlock()
	gen, err := n.commitGeneration(ctx, t, NewGeneration(st.Generation, roles))
	return gen, warns, err
}

// Apply applies c through raft on the controller and returns its result,
// once the controller's generation is committed. On another coordinator it
// returns a *NotLeaderError naming the leader.
func (n *Node) Apply(ctx context.Context, c Command) (Result, error) {
	if _, err := n.controlling(ctx); err != nil {
		return Result{Slot: -1}, err
	}
	timeout := n.opts.RPCTimeout
	if d, ok := ctx.Deadline(); ok {
		// raft takes a timeout of 0 or less as none at all.
		if timeout = time.Until(d); timeout <= 0 {
			return Result{Slot: -1}, context.DeadlineExceeded
		}
	}
	return n.apply(c, timeout)
}

func (n *Node) apply(c Command, timeout time.Duration) (Result, error) {
	res := Result{Slot: -1}
	b, err := encodeCommand(c)
	if err != nil {
		return res, err
	}
	r := n.rf()
	if r == nil {
		return res, &NotLeaderError{}
	}
	f := r.Apply(b, timeout)
	if err := f.Error(); err != nil {
		switch {
		case errors.Is(err, raft.ErrNotLeader):
			return res, &NotLeaderError{Leader: n.Leader()}
		case errors.Is(err, raft.ErrLeadershipLost):
			return res, fmt.Errorf("coord: leadership lost; %s may or may not have applied: %w", c.Op, err)
		}
		return res, fmt.Errorf("coord: %w", err)
	}
	a, ok := f.Response().(applied)
	if !ok {
		return res, fmt.Errorf("coord: unexpected FSM response %T", f.Response())
	}
	return a.res, a.err
}

// IsLeader reports whether this node is the raft leader (the controller
// once its generation is committed; see Controller).
func (n *Node) IsLeader() bool {
	r := n.rf()
	return r != nil && r.State() == raft.Leader
}

// Controller returns the generation this node controls, 0 when it is not
// the controller (or its generation is not committed yet).
func (n *Node) Controller() uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.controllerLocked()
}

func (n *Node) controllerLocked() uint64 {
	if n.term == nil {
		return 0
	}
	select {
	case <-n.term.ready:
		return n.term.gen
	default:
		return 0
	}
}

// Leader returns the leader's address, "" if none is known.
func (n *Node) Leader() string {
	r := n.rf()
	if r == nil {
		return ""
	}
	addr, _ := r.LeaderWithID()
	return string(addr)
}

// State returns a copy of this node's replicated state (on a follower it
// may lag the leader by what raft has not yet delivered).
func (n *Node) State() *State { return n.fsm.current() }

// Warnings returns the warnings of this node's last recruitment as
// controller (RecruitLog or Recover).
func (n *Node) Warnings() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.warns)
}

// Address returns this coordinator's address.
func (n *Node) Address() string { return n.opts.Addr }

// Coordinators returns the coordinators list.
func (n *Node) Coordinators() []string { return slices.Clone(n.opts.Coordinators) }

// Heartbeat records that node id is alive now.
func (n *Node) Heartbeat(id string) { n.live.heartbeat(id) }

// Alive reports whether node id was heard from within the liveness timeout.
func (n *Node) Alive(id string) bool { return n.live.alive(id) }

// LivenessKnown reports whether this node leads and has led for at least
// the liveness timeout: a node it does not count alive then is silent, not
// merely unheard by a controller that just took over.
func (n *Node) LivenessKnown() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.term != nil && n.opts.Clock.Since(n.term.began) >= n.opts.LivenessTimeout
}

// LastSeen returns when node id was last heard from.
func (n *Node) LastSeen(id string) (time.Time, bool) { return n.live.lastSeen(id) }

// Subscribe returns a channel of leadership changes. It holds the latest
// one only: a slow reader misses intermediate changes, never the last.
// cancel ends the subscription.
func (n *Node) Subscribe() (ch <-chan Leadership, cancel func()) {
	c := make(chan Leadership, 1)
	n.mu.Lock()
	n.subs[c] = struct{}{}
	n.mu.Unlock()
	return c, func() {
		n.mu.Lock()
		delete(n.subs, c)
		n.mu.Unlock()
	}
}

func (n *Node) notify() {
	leader := n.Leader()
	// Computed and sent under one lock, so the last sent is the latest.
	n.mu.Lock()
	defer n.mu.Unlock()
	l := Leadership{Leader: leader}
	if g := n.controllerLocked(); g != 0 {
		l.Controller, l.Generation = true, g
	}
	for c := range n.subs {
		select { // replace an unread notification with the newer one
		case <-c:
		default:
		}
		c <- l
	}
}
