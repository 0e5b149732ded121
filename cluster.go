package distash

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/protover"
	"github.com/distash/distash/internal/shardmap"
	"github.com/distash/distash/internal/wire"
)

// Where the client sends what. An embedded cluster is one address serving
// every role: the proxy below is that address and every stash is read
// through it. A multi-process cluster publishes, through its coordinators'
// View, the node running the stateless roles (read versions, commits, the
// shard map, the system stash) and the node serving each stash; the client
// swaps the proxy and the stash routes whole when the view changes, so
// requests read them without a lock.

// proxy is the node that answers read versions, commits and metadata
// requests, with the read-version batcher and commit stream bound to it.
type proxy struct {
	addr       string
	api        wire.DiStashClient
	node       *nodeConn // reads of the system stash (and every stash, embedded)
	grv        *grvBatcher
	commits    *commitStreamer
	stalled    func() // suspects p while a commit waits too long (DB.suspect)
	generation uint64
	// ctx ends when the proxy is replaced (or the DB closes): read-version
	// requests still waiting on it end then, as commits in flight on its
	// stream do, so none waits on a node the view no longer names.
	ctx    context.Context
	cancel context.CancelFunc
}

// retire ends what is in flight on p, which a view replaced: commits on
// its stream end with an unknown result, read-version requests with a
// retryable error.
func (p *proxy) retire() {
	p.cancel()
	p.commits.close()
	p.grv.stream.close()
}

// stashRoutes is which node serves each stash tag, from one view.
type stashRoutes struct {
	generation uint64
	byTag      map[uint32]stashRoute
}

// stashRoute is one stash's node; api is nil when no node serves it.
type stashRoute struct {
	pool    string
	addr    string
	api     wire.DiStashClient
	node    *nodeConn
	alive   bool // the controller heard from the node lately
	retired bool // replaced: it never serves again
}

const (
	// openTimeout bounds finding a server that answers, as it always did.
	openTimeout = 10 * time.Second
	// clusterOpenTimeout bounds Open's wait for a multi-process cluster to
	// publish its roles when ctx has no earlier deadline.
	clusterOpenTimeout = 60 * time.Second
	// viewAttemptTimeout bounds one View call to one coordinator, so an
	// address that swallows packets costs this much.
	viewAttemptTimeout = 3 * time.Second
	// minViewGap is the least time between two view refreshes.
	minViewGap = 50 * time.Millisecond
	// maxViewBackoff bounds the wait between View rounds while the cluster
	// forms or recovers.
	maxViewBackoff = time.Second
	// viewHedgeDelay is how long a View attempt goes unanswered before the
	// next coordinator is asked too: a coordinator that stopped answering
	// (paused, or forwarding to a controller that did) costs this much,
	// not viewAttemptTimeout.
	viewHedgeDelay = 250 * time.Millisecond
	// viewHedgedAttemptTimeout bounds one such attempt: a coordinator that
	// forwarded the call to a controller that stopped answering is asked
	// again in the next round, by when it may know the new controller.
	viewHedgedAttemptTimeout = time.Second

	// stallAfter is how long a read version or a commit may go unanswered
	// before the client suspects the node holding the roles stopped
	// answering with its connection open (paused, hung): it then asks the
	// coordinators for the view every stallRefresh while the request
	// waits, and when the view names another node (the log elected a new
	// leader, which claimed a new generation) the request ends, retryable,
	// and the transaction runs again there. Normally both take
	// milliseconds; a request slower than this only costs View calls.
	stallAfter   = time.Second
	stallRefresh = 250 * time.Millisecond
	// commitTimeout bounds one commit request, in case the view never
	// changes (no other node can take the roles): it then ends with
	// commit_unknown_result, and Transact runs the transaction again.
	commitTimeout = 10 * time.Second
	// metaTimeout bounds a metadata request to the proxy (the shard map,
	// the pools).
	metaTimeout = 5 * time.Second
	// readTimeout bounds one read of a stash. A stash answers a read at a
	// version it has not applied yet with future_version after waiting
	// for it for at most 1 s (stash.Options.FutureWait), and otherwise
	// reads its memory or its engine: 1.5 s is that wait plus room for the
	// engine, the network and a loaded machine. A read that takes longer
	// means a stash that stopped answering (paused, hung disk) with its
	// connection open: the replica is marked down like a failed one and
	// another replica serves the read.
	readTimeout = 1500 * time.Millisecond
)

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// conn returns the connection to addr, dialing it on first use (through
// the WithDialer function, if any). Every connection uses the DB's
// transport credentials; Close closes them all.
func (db *DB) conn(addr string) (*grpc.ClientConn, error) {
	db.connMu.Lock()
	defer db.connMu.Unlock()
	if db.closed {
		return nil, errors.New("distash: database closed")
	}
	if c, ok := db.conns[addr]; ok {
		return c, nil
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(db.creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20))}
	opts = append(opts, protover.This.DialOptions()...)
	if db.token != nil {
		opts = append(opts, grpc.WithPerRPCCredentials(db.token))
	}
	target := addr
	if db.dialer != nil {
		// passthrough: the dialer gets addr as it is, unresolved.
		target = "passthrough:///" + addr
		opts = append(opts, grpc.WithContextDialer(db.dialer))
	}
	c, err := grpc.NewClient(target, opts...)
	if err != nil {
		return nil, err
	}
	db.conns[addr] = c
	return c, nil
}

func (db *DB) newProxy(addr string, generation uint64) (*proxy, error) {
	n, err := db.node(addr)
	if err != nil {
		return nil, err
	}
	api := n.api
	ctx, cancel := context.WithCancel(db.life)
	p := &proxy{addr: addr, api: api, node: n, commits: newCommitStreamer(api, n.frames, db.token), generation: generation, ctx: ctx, cancel: cancel}
	p.stalled = func() { db.suspect(p) }
	// The proxy in use when it stalls: p, or a copy of it for a newer
	// generation of the same node (applyView).
	p.grv = &grvBatcher{api: api, stream: newGRVStreamer(api, n.frames, db.token), ctx: ctx, stalled: func() { db.suspect(db.proxy.Load()) }}
	return p, nil
}

// suspect is called while a request to proxy p waits longer than
// stallAfter: it refreshes the view, at most every stallRefresh, so that
// a node that stopped answering is left as soon as the coordinators name
// another (applyView then retires p).
func (db *DB) suspect(p *proxy) {
	now := time.Now().UnixNano()
	last := db.lastSuspect.Load()
	if now-last < int64(stallRefresh) || !db.lastSuspect.CompareAndSwap(last, now) {
		return
	}
	db.refreshView(p)
}

// watchStall calls f after stallAfter and then every stallRefresh until
// the returned watch's stop is called: a request waiting on a node that
// may have stopped answering (a read-version batch; a commit's reply timer
// watches it, callWatched).
func watchStall(f func()) *stallWatch {
	w := &stallWatch{f: f}
	w.mu.Lock() // t is set before the first fire reads it
	w.t = time.AfterFunc(stallAfter, w.fire)
	w.mu.Unlock()
	return w
}

type stallWatch struct {
	f       func()
	mu      sync.Mutex
	stopped bool        // Protected by mu.
	t       *time.Timer // Protected by mu.
}

func (w *stallWatch) fire() {
	w.f()
	w.mu.Lock()
	if !w.stopped {
		w.t.Reset(stallRefresh)
	}
	w.mu.Unlock()
}

func (w *stallWatch) stop() {
	w.mu.Lock()
	w.stopped = true
	w.t.Stop()
	w.mu.Unlock()
}

// nodeConn is a DB's connection to one node: its client and the stream
// its reads share (ReadStream; unary Read if the node does not serve it).
type nodeConn struct {
	api      wire.DiStashClient
	frames   *framesDialer // the streams' transport (datapath.go)
	reads    *readStreamer
	noStream atomic.Bool // the node answered ReadStream with Unimplemented
}

// node returns the connection to the node at addr, made on first use.
func (db *DB) node(addr string) (*nodeConn, error) {
	c, err := db.conn(addr)
	if err != nil {
		return nil, err
	}
	db.connMu.Lock()
	defer db.connMu.Unlock()
	if n, ok := db.nodes[addr]; ok {
		return n, nil
	}
	api := wire.NewDiStashClient(c)
	fd := db.framesDialer(addr)
	n := &nodeConn{api: api, frames: fd, reads: newReadStreamer(api, fd, db.token)}
	db.nodes[addr] = n
	return n, nil
}

// read sends req to the node: over its read stream, or as a unary call to
// a node that does not serve the stream.
func (n *nodeConn) read(ctx context.Context, timeout time.Duration, req *wire.ReadRequest) (*wire.ReadResponse, error) {
	if !n.noStream.Load() {
		resp, err := n.reads.callWithin(ctx, timeout, func(id uint64) *wire.ReadStreamRequest { return &wire.ReadStreamRequest{Id: id, Request: req} })
		if err == nil {
			return resp.Response, nil
		}
		if status.Code(err) != codes.Unimplemented {
			return nil, err
		}
		n.noStream.Store(true)
	}
	return unaryWithin(ctx, timeout, req, n.api.Read)
}

// unaryWithin makes the unary call call within timeout; its error is
// errCallTimeout when the timeout ended it, as callWithin tells a read
// that took too long.
func unaryWithin[Req, Resp any](ctx context.Context, timeout time.Duration, req Req,
	call func(context.Context, Req, ...grpc.CallOption) (Resp, error)) (Resp, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := call(ctx, req)
	if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("%w: %v", errCallTimeout, err)
	}
	return resp, err
}

// readRange reads a range on the node's read stream (unary if the node
// does not serve the stream).
func (n *nodeConn) readRange(ctx context.Context, timeout time.Duration, req *wire.ReadRangeRequest) (*wire.ReadRangeResponse, error) {
	if !n.noStream.Load() {
		resp, err := n.reads.callWithin(ctx, timeout, func(id uint64) *wire.ReadStreamRequest {
			return &wire.ReadStreamRequest{Id: id, RangeRequest: req}
		})
		if err == nil && resp.RangeResponse != nil {
			return resp.RangeResponse, nil
		}
		if err == nil { // a node of an older version: it read no range
			return unaryWithin(ctx, timeout, req, n.api.ReadRange)
		}
		if status.Code(err) != codes.Unimplemented {
			return nil, err
		}
		n.noStream.Store(true)
	}
	return unaryWithin(ctx, timeout, req, n.api.ReadRange)
}

// stashNode returns the connection to the node serving stash id: the
// proxy's node for the system stash and in an embedded cluster. A stash no
// live node serves is unavailable.
func (db *DB) stashNode(id uint32) (*nodeConn, error) {
	r := db.stashes.Load()
	if r == nil || id == uint32(shardmap.SystemTag) {
		return db.proxy.Load().node, nil
	}
	rt, ok := r.byTag[id]
	if !ok || rt.retired {
		// Replaced (its stash lost its data, or was re-replicated away):
		// the other replicas serve, and the shard map names (or soon
		// will) a new team, so the client reloads it.
		db.markDown(id)
		return nil, errorf(kv.CodeWrongShardServer, "stash %d is no longer in the cluster (view generation %d)", id, r.generation)
	}
	if rt.node == nil {
		return nil, errorf(kv.CodeStashUnavailable, "no node serves stash %d (view generation %d)", id, r.generation)
	}
	return rt.node, nil
}

// isTransportFailure reports whether err is an RPC that failed in transit
// (the node is down or unreachable), not a cancellation by the caller.
func isTransportFailure(ctx context.Context, err error) bool {
	st, ok := status.FromError(err)
	if !ok {
		return false
	}
	switch st.Code() {
	case codes.Unavailable:
		return true
	case codes.Canceled, codes.DeadlineExceeded:
		return ctx.Err() == nil
	}
	return false
}

// proxyFailed looks at an error of a request to proxy p: a transport
// failure (a deadline included), wrong_node or an unknown commit result
// means the roles may have moved, so the view is refreshed.
func (db *DB) proxyFailed(p *proxy, err error) {
	if errors.Is(err, ErrConnectionFailed) || errors.Is(err, ErrWrongNode) || errors.Is(err, ErrCommitUnknownResult) {
		db.refreshView(p)
	}
}

// readStash runs read, a request to stash id's node that must end within
// the timeout it is given (readTimeout; errCallTimeout if not), and tracks
// its load. A read the stash did not answer in time (while ctx goes on)
// fails as connection_failed, with the replica marked down: the caller
// reads another.
func (db *DB) readStash(ctx context.Context, id uint32, read func(ctx context.Context, timeout time.Duration) error) error {
	t := db.track(id)
	err := read(ctx, readTimeout)
	t.done()
	if errors.Is(err, errCallTimeout) && ctx.Err() == nil {
		// As a failed replica: avoided for a while, and the view asked
		// again (the controller may count its node dead by now).
		db.markDown(id)
		db.refreshView(nil)
		return errorf(kv.CodeConnectionFailed, "stash %d did not answer within %v: %v", id, readTimeout, err)
	}
	return err
}

// readFailed handles a failed read from stash id: a stash that is
// unavailable, no longer on the node asked, or unreachable is avoided for
// a while (another replica serves), and a possibly moved stash makes the
// client ask the coordinators again. It returns err as a DiStash error.
func (db *DB) readFailed(ctx context.Context, id uint32, err error) error {
	transport := isTransportFailure(ctx, err)
	err = transportErr(err)
	switch {
	case errors.Is(err, ErrStashUnavailable):
		db.markDown(id)
		db.refreshView(nil)
	case transport, errors.Is(err, ErrWrongNode):
		db.markDown(id)
		db.refreshView(nil)
	case errors.Is(err, ErrWrongShardServer):
		// The caller refreshes the shard map; in a multi-process cluster
		// the stash may also have moved to another node.
		db.refreshView(nil)
	}
	return err
}

// readRetryable reports whether a read that failed with err should be sent
// again to another replica (the failed one was marked down).
func readRetryable(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	return errors.Is(err, ErrStashUnavailable) || errors.Is(err, ErrWrongNode) || errors.Is(err, ErrConnectionFailed)
}

// refreshView asks the coordinators for the current view, unless a refresh
// is in flight already or (stale not nil) the roles moved to another node
// since stale failed, and returns a channel closed when the refresh ends.
// Refreshes run at least minViewGap apart; one runs until the view names
// a stateless node, or the DB closes. An embedded cluster has no view.
func (db *DB) refreshView(stale *proxy) <-chan struct{} {
	if db.coordinators == nil {
		return closedChan
	}
	db.viewMu.Lock()
	defer db.viewMu.Unlock()
	if db.viewRunning != nil {
		return db.viewRunning
	}
	if cur := db.proxy.Load(); stale != nil && cur != nil && cur.addr != stale.addr {
		return closedChan // another node holds the roles already
	}
	done := make(chan struct{})
	db.viewRunning = done
	wait := minViewGap - time.Since(db.viewLast)
	go func() {
		defer func() {
			db.viewMu.Lock()
			db.viewRunning = nil
			db.viewLast = time.Now()
			db.viewMu.Unlock()
			close(done)
		}()
		if !sleepCtx(db.life, wait) {
			return
		}
		_ = db.awaitStateless(db.life)
	}()
	return done
}

// awaitView waits for the view refresh in flight, if any, or ctx.
func (db *DB) awaitView(ctx context.Context) {
	db.viewMu.Lock()
	ch := db.viewRunning
	db.viewMu.Unlock()
	if ch == nil {
		return
	}
	select {
	case <-ch:
	case <-ctx.Done():
	}
}

// awaitStateless asks the coordinators, with backoff, until a view names
// the stateless node, and applies it.
func (db *DB) awaitStateless(ctx context.Context) error {
	backoff := minViewGap
	for {
		v, err := db.fetchView(ctx)
		if err == nil && v.StatelessAddress != "" {
			return db.applyView(v)
		}
		if err == nil {
			err = fmt.Errorf("cluster has no stateless node yet (generation %d)", v.Generation)
		} else if !retryable(err) && ctx.Err() == nil {
			return err
		}
		if !sleepCtx(ctx, backoff) {
			return fmt.Errorf("%w (waiting for the cluster's roles: %v)", ctx.Err(), err)
		}
		backoff = min(backoff*2, maxViewBackoff)
	}
}

// fetchView asks the coordinators for the view, the one that answered
// last first, following leader hints; one round. A coordinator that has
// not answered within viewHedgeDelay is not waited for alone: the next one
// is asked too, and the first good answer wins, so a coordinator that
// stopped answering with its connection open delays a refresh by that
// much, not by viewHedgedAttemptTimeout.
func (db *DB) fetchView(ctx context.Context) (*wire.ViewResponse, error) {
	db.viewMu.Lock()
	prefer := db.viewPrefer
	db.viewMu.Unlock()
	queue := make([]string, 0, len(db.coordinators)+1)
	if prefer != "" {
		queue = append(queue, prefer)
	}
	for _, a := range db.coordinators {
		if a != prefer {
			queue = append(queue, a)
		}
	}
	type answer struct {
		addr string
		v    *wire.ViewResponse
		err  error
	}
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	answers := make(chan answer)
	tried := map[string]bool{}
	pending := 0
	var last error
	// ask starts a View call to the next coordinator not asked yet.
	ask := func() (bool, error) {
		for len(queue) > 0 {
			addr := queue[0]
			queue = queue[1:]
			if tried[addr] {
				continue
			}
			tried[addr] = true
			c, err := db.conn(addr)
			if err != nil {
				return false, err
			}
			pending++
			go func() {
				cctx, cancel := context.WithTimeout(actx, viewHedgedAttemptTimeout)
				v, err := wire.NewCoordinatorClient(c).View(cctx, &wire.ViewRequest{})
				cancel()
				select {
				case answers <- answer{addr, v, err}:
				case <-actx.Done():
				}
			}()
			return true, nil
		}
		return false, nil
	}
	if _, err := ask(); err != nil {
		return nil, err
	}
	hedge := time.NewTimer(viewHedgeDelay)
	defer hedge.Stop()
	for pending > 0 {
		select {
		case <-ctx.Done():
			// The attempts end with ctx, without a word.
			if last == nil {
				last = ctx.Err()
			}
			return nil, transportErr(last)
		case <-hedge.C:
			if _, err := ask(); err != nil {
				return nil, err
			}
			hedge.Reset(viewHedgeDelay)
			continue
		case a := <-answers:
			pending--
			if a.err != nil {
				last = transportErr(fmt.Errorf("coordinator %s: %w", a.addr, a.err))
				if ctx.Err() != nil {
					return nil, last
				}
			} else if e := fromWire(a.v.Error); e != nil {
				last = e
				if !retryable(e) {
					return nil, e
				}
				if l := a.v.Leader; l != "" && !tried[l] {
					queue = append([]string{l}, queue...)
				}
			} else {
				db.viewMu.Lock()
				db.viewPrefer = a.addr
				db.viewMu.Unlock()
				return a.v, nil
			}
			// A failed answer: the next coordinator at once.
			if _, err := ask(); err != nil {
				return nil, err
			}
		}
	}
	if last == nil {
		last = errorf(kv.CodeConnectionFailed, "no coordinator answered")
	}
	return nil, last
}

// applyView switches the proxy and the stash routes to view v. A view older
// than the one in use is ignored.
func (db *DB) applyView(v *wire.ViewResponse) error {
	cur := db.proxy.Load()
	if cur != nil && v.Generation < cur.generation {
		return nil
	}
	switch {
	case cur != nil && cur.addr == v.StatelessAddress && cur.generation != v.Generation:
		// The same node in a newer generation (a new controller, or the
		// node claimed the roles again): its streams and requests stay.
		// What its old roles held in flight, they answered as they
		// stopped.
		p := *cur
		p.generation = v.Generation
		db.proxy.Store(&p)
	case cur == nil || cur.addr != v.StatelessAddress:
		p, err := db.newProxy(v.StatelessAddress, v.Generation)
		if err != nil {
			return err
		}
		db.proxy.Store(p)
		if cur != nil {
			// Commits in flight to the old proxy end with an unknown
			// result, read-version requests with a retryable error.
			cur.retire()
		}
	}
	routes := &stashRoutes{generation: v.Generation, byTag: make(map[uint32]stashRoute, len(v.Stashes))}
	for _, s := range v.Stashes {
		rt := stashRoute{pool: s.Pool, addr: s.Address, alive: s.Alive, retired: s.Retired}
		db.loadOf(s.Tag).retired.Store(s.Retired)
		if s.Address != "" {
			n, err := db.node(s.Address)
			if err != nil {
				return err
			}
			rt.api, rt.node = n.api, n
			if !s.Alive {
				// Counted dead by the controller: read other replicas
				// first, as from one that failed. Still reachable when
				// none can serve: a controller that just took over
				// counts every node dead until it heartbeats, and a node
				// may be cut off from the controller, not from clients.
				db.markDown(s.Tag)
			}
		}
		routes.byTag[s.Tag] = rt
	}
	db.noteDCs(v)
	db.stashes.Store(routes)
	return nil
}

// detect finds the first address that answers, in rounds until ctx ends: a
// node of a multi-process cluster answers View (cluster is true, v its
// answer, which may be an error or name no stateless node yet); an
// embedded server does not serve the Coordinator service.
func (db *DB) detect(ctx context.Context, addrs []string) (addr string, cluster bool, v *wire.ViewResponse, err error) {
	backoff := minViewGap
	var last error
	for {
		for _, a := range addrs {
			c, err := db.conn(a)
			if err != nil {
				return "", false, nil, err
			}
			actx, cancel := context.WithTimeout(ctx, viewAttemptTimeout)
			v, err := wire.NewCoordinatorClient(c).View(actx, &wire.ViewRequest{})
			cancel()
			if err == nil {
				return a, true, v, nil
			}
			if status.Code(err) == codes.Unimplemented {
				return a, false, nil, nil
			}
			last = fmt.Errorf("%s: %w", a, err)
		}
		if !sleepCtx(ctx, backoff) {
			if last == nil {
				last = ctx.Err()
			}
			return "", false, nil, last
		}
		backoff = min(backoff*2, maxViewBackoff)
	}
}

// coldestCluster is ColdestKeys in a multi-process cluster: each stash
// node answers for its own stash only, so the client asks every stash of
// the pool and interleaves their lists as an embedded server does: each
// stash's coldest first, each key once, at most n.
func (db *DB) coldestCluster(ctx context.Context, routes *stashRoutes, pool *Pool, n int) ([][]byte, error) {
	if n <= 0 {
		n = 100
	}
	var tags []uint32
	for tag, rt := range routes.byTag {
		if rt.pool == pool.name {
			tags = append(tags, tag)
		}
	}
	sort.Slice(tags, func(i, j int) bool { return tags[i] < tags[j] })
	var apis []wire.DiStashClient
	seenAddr := map[string]bool{}
	for _, tag := range tags {
		rt := routes.byTag[tag]
		if rt.api == nil || !rt.alive || seenAddr[rt.addr] {
			continue
		}
		seenAddr[rt.addr] = true
		apis = append(apis, rt.api)
	}
	if len(apis) == 0 {
		return nil, errorf(kv.CodeStashUnavailable, "no live stash of pool %q", pool.name)
	}
	lists := make([][][]byte, len(apis))
	errs := make([]error, len(apis))
	var wg sync.WaitGroup
	for i, api := range apis {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, metaTimeout)
			resp, err := api.Coldest(cctx, &wire.ColdestRequest{Pool: pool.name, Limit: int32(n)})
			cancel()
			if err != nil {
				if isTransportFailure(ctx, err) {
					db.refreshView(nil)
				}
				errs[i] = transportErr(err)
				return
			}
			if err := fromWire(resp.Error); err != nil {
				errs[i] = err
				return
			}
			lists[i] = resp.Keys
		})
	}
	wg.Wait()
	answered := 0
	var unreachable error
	for _, err := range errs {
		switch {
		case err == nil:
			answered++
		case errors.Is(err, ErrConnectionFailed) || errors.Is(err, ErrStashUnavailable) || errors.Is(err, ErrWrongNode):
			// Its keys are on other replicas, or come back with the node.
			unreachable = err
		default:
			return nil, err
		}
	}
	if answered == 0 {
		return nil, unreachable
	}
	return mergeColdest(lists, n), nil
}

// mergeColdest interleaves lists (round i takes each list's i-th key),
// skipping keys already taken, up to n keys.
func mergeColdest(lists [][][]byte, n int) [][]byte {
	seen := map[string]bool{}
	var out [][]byte
	for i := 0; len(out) < n; i++ {
		progressed := false
		for _, l := range lists {
			if i < len(l) {
				progressed = true
				if !seen[string(l[i])] {
					seen[string(l[i])] = true
					out = append(out, l[i])
				}
			}
		}
		if !progressed {
			break
		}
	}
	if len(out) > n {
		out = out[:n]
	}
	return out
}

// sleepCtx waits d, or less if ctx ends first (then it returns false).
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
