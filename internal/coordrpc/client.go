package coordrpc

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/distash/distash/config"
	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/protover"
	"github.com/distash/distash/internal/wire"
)

// ClientOptions configure a Client.
type ClientOptions struct {
	// TLS, if set, secures every connection (mutual TLS: tlsconf.Client).
	TLS *tls.Config
	// Protocol is the protocol versions the client states (zero: this
	// binary's; tests act as another release with it).
	Protocol protover.Speaker
	// AttemptTimeout bounds one call to one coordinator, so an address
	// that swallows packets costs this much, not the caller's whole
	// deadline; default 3s (above the server's controller wait).
	AttemptTimeout time.Duration
	// Backoff is the pause after every coordinator failed, before the next
	// round; default 50ms.
	Backoff time.Duration
	// HedgeDelay is, for the calls that may be asked twice (View,
	// Heartbeat), how long an attempt goes unanswered before the next
	// coordinator is asked too; the first answer wins. Such attempts are
	// bounded by HedgedAttemptTimeout. So a coordinator that stopped
	// answering with its connection open (paused, or forwarding to a
	// controller that did) delays a heartbeat by HedgeDelay, not by
	// AttemptTimeout: a node's heartbeats reach the controller well within
	// its liveness timeout, and a view is found as soon as a live
	// coordinator can give it. Defaults 250ms and 1s.
	HedgeDelay           time.Duration
	HedgedAttemptTimeout time.Duration
	// Dialer, if set, opens the connections instead of TCP (an in-process
	// network in tests, a proxy): it gets a coordinator's address as listed.
	Dialer func(ctx context.Context, addr string) (net.Conn, error)
	// PerRPC, if set, are credentials every call presents (a bearer
	// token: distash.TokenCredentials).
	PerRPC credentials.PerRPCCredentials
}

// Client reaches the cluster controller through any coordinator.
type Client struct {
	addrs []string
	opts  ClientOptions

	mu     sync.Mutex
	conns  map[string]*grpc.ClientConn
	prefer string // the coordinator that answered last, or the leader hinted
	// slow holds, until when, the coordinators that lately let an attempt
	// time out or were beaten by another's answer: they are asked last.
	slow   map[string]time.Time
	closed bool
}

// slowFor is how long a coordinator that did not answer in time is asked
// after the others.
const slowFor = 5 * time.Second

// noteSlow makes addr be asked last for a while.
func (c *Client) noteSlow(addr string) {
	c.mu.Lock()
	if c.slow == nil {
		c.slow = map[string]time.Time{}
	}
	c.slow[addr] = time.Now().Add(slowFor)
	if c.prefer == addr {
		c.prefer = "" // likely the coordinator that stopped answering
	}
	c.mu.Unlock()
}

// NewClient returns a client of the coordinators in list ("a:1,b:2,c:3",
// the cluster string). It connects lazily: a dead address costs nothing
// until it is tried, and is skipped then.
func NewClient(list string, opts ClientOptions) (*Client, error) {
	var addrs []string
	for _, a := range strings.Split(list, ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, a)
		}
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("coordrpc: no coordinator in %q", list)
	}
	if opts.AttemptTimeout <= 0 {
		opts.AttemptTimeout = 3 * time.Second
	}
	if opts.Backoff <= 0 {
		opts.Backoff = 50 * time.Millisecond
	}
	if opts.HedgeDelay <= 0 {
		opts.HedgeDelay = 250 * time.Millisecond
	}
	if opts.HedgedAttemptTimeout <= 0 {
		opts.HedgedAttemptTimeout = min(time.Second, opts.AttemptTimeout)
	}
	return &Client{addrs: addrs, opts: opts, conns: make(map[string]*grpc.ClientConn)}, nil
}

// Close closes the client's connections.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	var err error
	for a, cc := range c.conns {
		err = errors.Join(err, cc.Close())
		delete(c.conns, a)
	}
	return err
}

func (c *Client) conn(addr string) (wire.CoordinatorClient, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, errors.New("coordrpc: client closed")
	}
	cc, ok := c.conns[addr]
	if !ok {
		var err error
		if cc, err = dial(addr, c.opts.TLS, c.opts.Dialer, c.opts.Protocol, perRPC(c.opts.PerRPC)...); err != nil {
			return nil, err
		}
		c.conns[addr] = cc
	}
	return wire.NewCoordinatorClient(cc), nil
}

// order is the coordinators to try: the preferred one first, those that
// lately did not answer in time last.
func (c *Client) order() []string {
	c.mu.Lock()
	p := c.prefer
	now := time.Now()
	isSlow := func(a string) bool { return now.Before(c.slow[a]) }
	out := make([]string, 0, len(c.addrs)+1)
	var late []string
	for _, a := range append([]string{p}, c.addrs...) {
		switch {
		case a == "" || slices.Contains(out, a) || slices.Contains(late, a):
		case isSlow(a):
			late = append(late, a)
		default:
			out = append(out, a)
		}
	}
	c.mu.Unlock()
	return append(out, late...)
}

func (c *Client) setPrefer(a string) {
	c.mu.Lock()
	c.prefer = a
	c.mu.Unlock()
}

// answer is what call needs of a response.
type answer interface {
	GetError() *wire.Error
	GetLeader() string
}

// call runs fn against the coordinators in turn until one answers with no
// error or a non-retryable one, following leader hints, in rounds until
// ctx ends. It returns the last failure if ctx ends first.
func call[R answer](ctx context.Context, c *Client, fn func(context.Context, wire.CoordinatorClient) (R, error)) (R, error) {
	var zero R
	var last error
	for {
		queue := c.order()
		tried := map[string]bool{}
		for len(queue) > 0 {
			addr := queue[0]
			queue = queue[1:]
			if tried[addr] {
				continue
			}
			tried[addr] = true
			cl, err := c.conn(addr)
			if err != nil {
				last = fmt.Errorf("coordrpc: %s: %w", addr, err)
				continue
			}
			actx, cancel := context.WithTimeout(ctx, c.opts.AttemptTimeout)
			resp, err := fn(actx, cl)
			timedOut := actx.Err() != nil
			cancel()
			if err != nil {
				// A dead or unreachable coordinator: the next one.
				last = fmt.Errorf("coordrpc: %s: %w", addr, err)
				if ctx.Err() != nil {
					return zero, last
				}
				if timedOut {
					c.noteSlow(addr)
				}
				continue
			}
			e := resp.GetError()
			if e == nil || !kv.Code(e.Code).Retryable() {
				c.setPrefer(addr)
				return resp, nil
			}
			last = fmt.Errorf("coordrpc: %s: %w", addr, &kv.Error{Code: kv.Code(e.Code), Detail: e.Detail})
			if l := resp.GetLeader(); l != "" && !tried[l] {
				queue = append([]string{l}, queue...)
			}
		}
		select {
		case <-ctx.Done():
			if last == nil {
				last = ctx.Err()
			}
			return zero, last
		case <-time.After(c.opts.Backoff):
		}
	}
}

// hedgedCall is call for a request that may be asked of several
// coordinators at once (it changes nothing, or nothing twice): an attempt
// unanswered after HedgeDelay does not hold the next one back. The first
// answer with no error or a non-retryable one wins; the others are
// cancelled. Rounds repeat until ctx ends.
func hedgedCall[R answer](ctx context.Context, c *Client, fn func(context.Context, wire.CoordinatorClient) (R, error)) (R, error) {
	var zero R
	type result struct {
		addr string
		resp R
		err  error
	}
	var last error
	for {
		actx, cancel := context.WithCancel(ctx)
		results := make(chan result)
		queue := c.order()
		tried, answered := map[string]bool{}, map[string]bool{}
		started := map[string]time.Time{}
		pending := 0
		ask := func() {
			for len(queue) > 0 {
				addr := queue[0]
				queue = queue[1:]
				if tried[addr] {
					continue
				}
				tried[addr] = true
				cl, err := c.conn(addr)
				if err != nil {
					last = fmt.Errorf("coordrpc: %s: %w", addr, err)
					continue
				}
				started[addr] = time.Now()
				pending++
				go func() {
					a, acancel := context.WithTimeout(actx, c.opts.HedgedAttemptTimeout)
					resp, err := fn(a, cl)
					acancel()
					select {
					case results <- result{addr, resp, err}:
					case <-actx.Done():
					}
				}()
				return
			}
		}
		ask()
		hedge := time.NewTimer(c.opts.HedgeDelay)
		var won *result
	round:
		for pending > 0 && won == nil {
			select {
			case <-ctx.Done():
				// The attempts end with ctx, without a word.
				break round
			case <-hedge.C:
				ask()
				hedge.Reset(c.opts.HedgeDelay)
				continue
			case r := <-results:
				pending--
				answered[r.addr] = true
				switch {
				case r.err != nil:
					last = fmt.Errorf("coordrpc: %s: %w", r.addr, r.err)
					if status.Code(r.err) == codes.DeadlineExceeded && ctx.Err() == nil {
						c.noteSlow(r.addr)
					}
				case r.resp.GetError() == nil || !kv.Code(r.resp.GetError().Code).Retryable():
					won = &r
					continue
				default:
					e := r.resp.GetError()
					last = fmt.Errorf("coordrpc: %s: %w", r.addr, &kv.Error{Code: kv.Code(e.Code), Detail: e.Detail})
					if l := r.resp.GetLeader(); l != "" && !tried[l] {
						queue = append([]string{l}, queue...)
					}
				}
				if ctx.Err() == nil {
					ask() // a failed answer: the next coordinator at once
				}
			}
		}
		hedge.Stop()
		cancel()
		if won != nil {
			// The coordinators asked before the winner that have not
			// answered yet are slower than it: ask them last for a while.
			for addr := range tried {
				if addr != won.addr && !answered[addr] && started[addr].Before(started[won.addr]) {
					c.noteSlow(addr)
				}
			}
			c.setPrefer(won.addr)
			return won.resp, nil
		}
		select {
		case <-ctx.Done():
			if last == nil {
				last = ctx.Err()
			}
			return zero, last
		case <-time.After(c.opts.Backoff):
		}
	}
}

// NodeRegistration is what a node tells the controller about itself.
type NodeRegistration struct {
	ID, Addr, Class, Pool, DC, Zone, Machine string
	Config                                   string // the node's configuration TOML
	// Empty: a stash node whose stash starts with no data (a dram stash,
	// or a durable one on a fresh directory); see coord.RegisterStash.
	Empty bool
	// LogID: a transaction node's log replica's raft server id.
	LogID string
	// Incarnation: chosen by the node process when it starts, the same in
	// every registration it sends (retries included), so that a retry of
	// a registration the controller applied but whose answer was lost
	// gets the same slot and tag (coord.RegisterStash).
	Incarnation string
}

// Register registers a node and returns its tag slot and tag (-1 and 0
// for a transaction node) and the current generation. A configuration
// that differs from the cluster's is refused with an error wrapping a
// *config.FieldError naming the first differing field.
func (c *Client) Register(ctx context.Context, r NodeRegistration) (slot int, tag uint32, generation uint64, err error) {
	req := &wire.RegisterRequest{Id: r.ID, Address: r.Addr, Class: r.Class, Pool: r.Pool,
		Dc: r.DC, Zone: r.Zone, Machine: r.Machine, Config: r.Config, Empty: r.Empty, LogId: r.LogID, Incarnation: r.Incarnation}
	resp, err := call(ctx, c, func(ctx context.Context, cl wire.CoordinatorClient) (*wire.RegisterResponse, error) {
		return cl.Register(ctx, req)
	})
	if err != nil {
		return -1, 0, 0, err
	}
	if resp.Error != nil {
		ke := &kv.Error{Code: kv.Code(resp.Error.Code), Detail: resp.Error.Detail}
		if resp.ConfigField != "" {
			return -1, 0, 0, &configError{ke, &config.FieldError{Field: resp.ConfigField, Msg: ke.Detail}}
		}
		return -1, 0, 0, ke
	}
	return int(resp.Slot), resp.Tag, resp.Generation, nil
}

// configError is a refused configuration: errors.As finds both the code
// and the field at fault.
type configError struct {
	err   *kv.Error
	field *config.FieldError
}

func (e *configError) Error() string { return e.err.Error() }

// Unwrap is the code's single chain, which kv.CodeOf follows; As finds the
// field.
func (e *configError) Unwrap() error { return e.err }

func (e *configError) As(target any) bool {
	if p, ok := target.(**config.FieldError); ok {
		*p = e.field
		return true
	}
	return false
}

// Heartbeat tells the controller node id is alive and returns the current
// generation.
func (c *Client) Heartbeat(ctx context.Context, id string) (uint64, error) {
	resp, err := hedgedCall(ctx, c, func(ctx context.Context, cl wire.CoordinatorClient) (*wire.HeartbeatResponse, error) {
		return cl.Heartbeat(ctx, &wire.HeartbeatRequest{Id: id})
	})
	if err != nil {
		return 0, err
	}
	return resp.Generation, resp.Error.Err()
}

// View returns the controller's view of the cluster.
func (c *Client) View(ctx context.Context) (*wire.ViewResponse, error) {
	resp, err := hedgedCall(ctx, c, func(ctx context.Context, cl wire.CoordinatorClient) (*wire.ViewResponse, error) {
		return cl.View(ctx, &wire.ViewRequest{})
	})
	if err != nil {
		return nil, err
	}
	if err := resp.Error.Err(); err != nil {
		return nil, err
	}
	return resp, nil
}

// Claim asks the controller for a new generation in which node id, a
// transaction node holding a log replica (the one whose replica leads the
// log), holds every stateless role; it returns that generation, the epoch
// of the node's log appends. A node holding no log replica is refused with
// an invalid_mutation error.
func (c *Client) Claim(ctx context.Context, id string) (uint64, error) {
	resp, err := call(ctx, c, func(ctx context.Context, cl wire.CoordinatorClient) (*wire.ClaimResponse, error) {
		return cl.Claim(ctx, &wire.ClaimRequest{Id: id})
	})
	if err != nil {
		return 0, err
	}
	if err := resp.Error.Err(); err != nil {
		return 0, err
	}
	return resp.Generation, nil
}

// RecoveryDone tells the controller that node id's recovery of the
// generation it claimed took micros microseconds (shown by View). A report
// for a generation the node no longer holds is ignored.
func (c *Client) RecoveryDone(ctx context.Context, id string, generation uint64, micros int64) error {
	resp, err := call(ctx, c, func(ctx context.Context, cl wire.CoordinatorClient) (*wire.RecoveryDoneResponse, error) {
		return cl.RecoveryDone(ctx, &wire.RecoveryDoneRequest{Id: id, Generation: generation, Micros: micros})
	})
	if err != nil {
		return err
	}
	return resp.Error.Err()
}

// Exclude asks the controller to exclude addrs ("host:port"): the data
// distributor moves the shards of the stashes there onto others. It
// returns every excluded address after the call. A malformed address is
// refused with an invalid_mutation error naming it.
func (c *Client) Exclude(ctx context.Context, addrs []string) ([]string, error) {
	resp, err := call(ctx, c, func(ctx context.Context, cl wire.CoordinatorClient) (*wire.ExcludeResponse, error) {
		return cl.Exclude(ctx, &wire.ExcludeRequest{Addresses: addrs})
	})
	if err != nil {
		return nil, err
	}
	if err := resp.Error.Err(); err != nil {
		return nil, err
	}
	return resp.Excluded, nil
}

// ExcludeFailed declares the stashes at addrs gone for good
// (coord.ExcludeFailed): they are excluded, their tags retired and their
// data given up, except where the controller hears from the stash node
// (alive: those keep their tags and data; only tags retired there before
// are given up). A controller of a release before exclude --failed would
// only exclude them, and is refused here.
func (c *Client) ExcludeFailed(ctx context.Context, addrs []string) (alive []string, err error) {
	resp, err := call(ctx, c, func(ctx context.Context, cl wire.CoordinatorClient) (*wire.ExcludeResponse, error) {
		return cl.Exclude(ctx, &wire.ExcludeRequest{Addresses: addrs, Failed: true})
	})
	if err != nil {
		return nil, err
	}
	if err := resp.Error.Err(); err != nil {
		return nil, err
	}
	for _, a := range addrs {
		if !slices.Contains(resp.Failed, a) {
			return nil, fmt.Errorf("coordrpc: the controller excluded %s but did not declare it failed: it runs a release without exclude --failed; upgrade the coordinators, then run it again", a)
		}
	}
	return resp.Alive, nil
}

// Include includes addrs again; none, or the one address "all", include
// every excluded address. It returns the excluded addresses left.
func (c *Client) Include(ctx context.Context, addrs []string) ([]string, error) {
	resp, err := call(ctx, c, func(ctx context.Context, cl wire.CoordinatorClient) (*wire.IncludeResponse, error) {
		return cl.Include(ctx, &wire.IncludeRequest{Addresses: addrs})
	})
	if err != nil {
		return nil, err
	}
	if err := resp.Error.Err(); err != nil {
		return nil, err
	}
	return resp.Excluded, nil
}

// Configure changes a live setting: pool "" and key "failure_wait" with a
// duration ("5s") or "default"; or a pool, key "replication" and 1 to the
// pool's number of slots, or "default". Invalid settings are refused with
// an invalid_mutation error naming what is wrong; nothing changes then.
func (c *Client) Configure(ctx context.Context, pool, key, value string) error {
	resp, err := call(ctx, c, func(ctx context.Context, cl wire.CoordinatorClient) (*wire.ConfigureResponse, error) {
		return cl.Configure(ctx, &wire.ConfigureRequest{Pool: pool, Key: key, Value: value})
	})
	if err != nil {
		return err
	}
	return resp.Error.Err()
}

// Auth sends req (a list or a change of the cluster's roles) to the
// controller and returns its answer: the roles after the call.
func (c *Client) Auth(ctx context.Context, req *wire.AuthRequest) (*wire.AuthResponse, error) {
	resp, err := call(ctx, c, func(ctx context.Context, cl wire.CoordinatorClient) (*wire.AuthResponse, error) {
		return cl.Auth(ctx, req)
	})
	if err != nil {
		return nil, err
	}
	if err := resp.Error.Err(); err != nil {
		return nil, err
	}
	return resp, nil
}

// Retire retires tag: the data distributor calls it once no shard refers
// to the tag. The node whose slot has it gets a fresh tag when it
// registers next. A tag never given is refused; retiring one again is not.
func (c *Client) Retire(ctx context.Context, tag uint32) error {
	resp, err := call(ctx, c, func(ctx context.Context, cl wire.CoordinatorClient) (*wire.RetireResponse, error) {
		return cl.Retire(ctx, &wire.RetireRequest{Tag: tag})
	})
	if err != nil {
		return err
	}
	return resp.Error.Err()
}

// Probe asks the coordinator at addr, and only it, for its own view
// (ViewRequest.local): its copy of the state and its raft membership.
func (c *Client) Probe(ctx context.Context, addr string) (*wire.ViewResponse, error) {
	cl, err := c.conn(addr)
	if err != nil {
		return nil, err
	}
	resp, err := cl.View(ctx, &wire.ViewRequest{Local: true})
	if err != nil {
		return nil, err
	}
	if err := resp.Error.Err(); err != nil {
		return nil, err
	}
	return resp, nil
}

// JoinCoordinators asks the controller to make the coordinator at addr,
// which has no raft state, a member under raftID (the member that had
// addr leaves the group).
func (c *Client) JoinCoordinators(ctx context.Context, addr, raftID string) error {
	resp, err := call(ctx, c, func(ctx context.Context, cl wire.CoordinatorClient) (*wire.JoinCoordinatorsResponse, error) {
		return cl.JoinCoordinators(ctx, &wire.JoinCoordinatorsRequest{Address: addr, RaftId: raftID})
	})
	if err != nil {
		return err
	}
	return resp.Error.Err()
}

// SetLogReplicas tells the controller the log's raft membership after a
// change: node ids and their raft ids, parallel.
func (c *Client) SetLogReplicas(ctx context.Context, replicas, ids []string) error {
	resp, err := call(ctx, c, func(ctx context.Context, cl wire.CoordinatorClient) (*wire.SetLogReplicasResponse, error) {
		return cl.SetLogReplicas(ctx, &wire.SetLogReplicasRequest{Replicas: replicas, Ids: ids})
	})
	if err != nil {
		return err
	}
	return resp.Error.Err()
}

// HeartbeatLoop heartbeats node id every interval until ctx ends. After
// each heartbeat it calls report, if not nil, with the generation or the
// error (a node re-registers on a not-registered error, and looks up the
// roles again when the generation changes).
func (c *Client) HeartbeatLoop(ctx context.Context, id string, interval time.Duration, report func(generation uint64, err error)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		// Each heartbeat must end before the next is due, or a slow
		// controller would pile them up.
		hctx, cancel := context.WithTimeout(ctx, max(interval, c.opts.AttemptTimeout))
		g, err := c.Heartbeat(hctx, id)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if report != nil {
			report(g, err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
