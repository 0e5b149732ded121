package server

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime/debug"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/distash/distash/config"
	"github.com/distash/distash/internal/budget"
	"github.com/distash/distash/internal/dd"
	"github.com/distash/distash/internal/frames"
	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/logentry"
	"github.com/distash/distash/internal/shardmap"
	"github.com/distash/distash/internal/stash"
	"github.com/distash/distash/internal/txlog"
	"github.com/distash/distash/internal/version"
	"github.com/distash/distash/internal/wire"
)

// service implements the gRPC API over the cluster's roles.
type service struct {
	wire.UnimplementedDiStashServer
	s *Server
}

func (v *service) GetReadVersion(ctx context.Context, _ *wire.GetReadVersionRequest) (*wire.GetReadVersionResponse, error) {
	r, err := v.s.roles()
	if err != nil {
		return &wire.GetReadVersionResponse{Error: wire.ErrorOf(err)}, nil
	}
	began := time.Now()
	rv, err := r.grv.GetReadVersion(ctx)
	v.s.metrics.grv.observe(time.Since(began))
	return &wire.GetReadVersionResponse{Version: int64(rv), Error: wire.ErrorOf(roleErr(err, false))}, nil
}

// roleErr maps an error of the GRV or commit proxy that is not a DiStash
// error yet (one of the log's or raft's: the role was deposed, or its
// node stops) to a retryable code the client acts on, never
// internal_error. A commit whose log append may have happened ends with
// commit_unknown_result; one that certainly did not reach the log (the
// log refused it: not the leader, a newer generation) and a read version
// the node cannot vouch for end with wrong_node, so the client asks the
// coordinators where the roles are now and runs the transaction again.
// Other errors pass unchanged.
func roleErr(err error, commit bool) error {
	if err == nil {
		return nil
	}
	var ke *kv.Error
	if errors.As(err, &ke) {
		return err
	}
	unknown := errors.Is(err, txlog.ErrCommitUnknown) || errors.Is(err, txlog.ErrClosed) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
	refused := errors.Is(err, txlog.ErrNotLeader) || errors.Is(err, logentry.ErrStaleEpoch) ||
		errors.Is(err, txlog.ErrNoLeader) || errors.Is(err, txlog.ErrPrevVersion) || errors.Is(err, txlog.ErrOutOfOrder)
	deposed := errors.Is(err, raft.ErrLeadershipLost) || errors.Is(err, raft.ErrNotLeader) ||
		errors.Is(err, raft.ErrRaftShutdown) || errors.Is(err, raft.ErrEnqueueTimeout) ||
		errors.Is(err, raft.ErrLeadershipTransferInProgress) || errors.Is(err, raft.ErrAbortedByRestore)
	switch {
	case commit && unknown:
		// Checked first: ErrCommitUnknown wraps raft's error of an
		// append that was submitted.
		return kv.Errorf(kv.CodeCommitUnknownResult, "%v", err)
	case commit && refused:
		return kv.Errorf(kv.CodeWrongNode, "the log refused the commit on this node (%v): ask the coordinators", err)
	case commit && deposed:
		return kv.Errorf(kv.CodeCommitUnknownResult, "%v", err)
	case !commit && (unknown || refused || deposed):
		return kv.Errorf(kv.CodeWrongNode, "this node cannot confirm that it leads the log (%v): ask the coordinators", err)
	}
	return err
}

func fromWireRanges(rs []*wire.KeyRange) []kv.KeyRange {
	out := make([]kv.KeyRange, len(rs))
	for i, r := range rs {
		out[i] = kv.KeyRange{Begin: r.Begin, End: r.End}
	}
	return out
}

func (v *service) Commit(ctx context.Context, req *wire.CommitRequest) (*wire.CommitResponse, error) {
	txn, err := fromWireCommit(req)
	if err != nil {
		return &wire.CommitResponse{Error: wire.ErrorOf(err)}, nil
	}
	r, err := v.s.roles()
	if err != nil {
		return &wire.CommitResponse{Error: wire.ErrorOf(err)}, nil
	}
	began := time.Now()
	cv, err := r.commit.Commit(ctx, txn)
	v.s.metrics.commit.observe(time.Since(began))
	return &wire.CommitResponse{Version: int64(cv), Error: wire.ErrorOf(roleErr(err, true))}, nil
}

func (v *service) Read(ctx context.Context, req *wire.ReadRequest) (*wire.ReadResponse, error) {
	if err := checkRead(req); err != nil {
		return &wire.ReadResponse{Error: wire.ErrorOf(err)}, nil
	}
	sl, ok := v.s.slot(kv.Tag(req.Stash))
	if !ok {
		return &wire.ReadResponse{Error: wire.ErrorOf(kv.Errorf(kv.CodeWrongShardServer, "no stash %d", req.Stash))}, nil
	}
	if err := sl.refused(); err != nil {
		return &wire.ReadResponse{Error: wire.ErrorOf(err)}, nil
	}
	began := time.Now()
	st := sl.get()
	at := readAt(st, req.Version, req.AtLatest)
	vals, present, err := st.Get(ctx, at, req.Keys)
	sl.reads.observe(time.Since(began))
	if err != nil {
		return &wire.ReadResponse{Error: wire.ErrorOf(err)}, nil
	}
	// The values in one allocation, not one each (a GetMulti's reply).
	resp := &wire.ReadResponse{Values: make([]*wire.Value, len(vals)), Version: int64(at)}
	vs := make([]wire.Value, len(vals))
	for i := range vals {
		vs[i].Present, vs[i].Value = present[i], vals[i]
		resp.Values[i] = &vs[i]
	}
	return resp, nil
}

// readAt is the version a read is served at: the one asked, or with
// atLatest the newest the stash has applied. Every applied version is
// committed (the stash applies what the log committed), so that is a
// consistent snapshot too; the client keeps it only if it is at least its
// read version, and the reply says which version it is.
func readAt(st *stash.Stash, asked int64, atLatest bool) kv.Version {
	if atLatest {
		return st.AppliedVersion()
	}
	return kv.Version(asked)
}

func (v *service) ReadRange(ctx context.Context, req *wire.ReadRangeRequest) (*wire.ReadRangeResponse, error) {
	if err := checkReadRange(req); err != nil {
		return &wire.ReadRangeResponse{Error: wire.ErrorOf(err)}, nil
	}
	sl, ok := v.s.slot(kv.Tag(req.Stash))
	if !ok {
		return &wire.ReadRangeResponse{Error: wire.ErrorOf(kv.Errorf(kv.CodeWrongShardServer, "no stash %d", req.Stash))}, nil
	}
	byteLimit := req.ByteLimit
	if byteLimit <= 0 {
		byteLimit = 1 << 20
	}
	if err := sl.refused(); err != nil {
		return &wire.ReadRangeResponse{Error: wire.ErrorOf(err)}, nil
	}
	began := time.Now()
	st := sl.get()
	at := readAt(st, req.Version, req.AtLatest)
	kvs, more, err := st.GetRange(ctx, at, req.Begin, req.End, int(req.Limit), byteLimit, req.Reverse)
	sl.reads.observe(time.Since(began))
	if err != nil {
		return &wire.ReadRangeResponse{Error: wire.ErrorOf(err)}, nil
	}
	resp := &wire.ReadRangeResponse{Kvs: make([]*wire.KeyValue, len(kvs)), More: more, Version: int64(at)}
	for i, p := range kvs {
		resp.Kvs[i] = &wire.KeyValue{Key: p.Key, Value: p.Value}
	}
	return resp, nil
}

func (v *service) Locations(ctx context.Context, req *wire.LocationsRequest) (*wire.LocationsResponse, error) {
	if err := checkRange("range", req.Begin, req.End); err != nil {
		return &wire.LocationsResponse{Error: wire.ErrorOf(err)}, nil
	}
	r, err := v.s.roles()
	if err != nil {
		return &wire.LocationsResponse{Error: wire.ErrorOf(err)}, nil
	}
	resp := &wire.LocationsResponse{}
	shards := r.commit.Shards().Intersect(req.Begin, req.End)
	if v.s.auth != nil {
		shards = v.s.auth.visibleShards(ctx, shards)
	}
	for _, sh := range shards {
		ws := &wire.Shard{Begin: sh.Begin, End: sh.End, Pool: sh.Pool}
		for _, t := range sh.Team {
			ws.Stashes = append(ws.Stashes, uint32(t))
		}
		resp.Shards = append(resp.Shards, ws)
	}
	return resp, nil
}

func (v *service) poolInfos() []*wire.PoolInfo {
	var out []*wire.PoolInfo
	for _, p := range v.s.cfg.Pools {
		out = append(out, &wire.PoolInfo{
			Name: p.Name, Prefix: []byte(p.Prefix), Medium: p.Medium, Mode: p.Mode, Engine: p.Engine,
			Stashes: int32(p.Stashes), Replication: int32(p.Replication), CapacityBytes: int64(p.Capacity), Eviction: p.Eviction,
			Recency: p.Recency || p.Ephemeral(),
		})
	}
	return out
}

func (v *service) ClusterInfo(ctx context.Context, _ *wire.ClusterInfoRequest) (*wire.ClusterInfoResponse, error) {
	return &wire.ClusterInfoResponse{Pools: v.poolInfos(), MvccWindowMicros: v.s.cfg.Cluster.MVCCWindow.Microseconds()}, nil
}

func (v *service) Status(ctx context.Context, _ *wire.StatusRequest) (*wire.StatusResponse, error) {
	resp := &wire.StatusResponse{Pools: v.poolInfos(), Node: v.s.link.status(), Auth: authMode(v.s.auth)}
	resp.ProtocolMin, resp.ProtocolMax, resp.BuildVersion, resp.BuildCommit = v.s.speaks()
	// Recent latency percentiles (metrics.go): commits and read versions
	// where the roles run, reads over this process's stashes.
	now, m := time.Now(), v.s.metrics
	q := m.commit.recent.quantiles(now, 0.5, 0.99)
	resp.CommitP50Ms, resp.CommitP99Ms = q[0], q[1]
	q = m.grv.recent.quantiles(now, 0.5, 0.99)
	resp.GrvP50Ms, resp.GrvP99Ms = q[0], q[1]
	q = m.recentReads.quantiles(now, 0.5, 0.99)
	resp.ReadP50Ms, resp.ReadP99Ms = q[0], q[1]
	if r := v.s.tx.Load(); r != nil {
		c := r.commit.Counters()
		resp.CommittedVersion = int64(r.seq.CommittedVersion())
		resp.Commits, resp.Conflicts, resp.TooOld, resp.PoolFull, resp.CommitBatches = c.Commits, c.Conflicts, c.TooOld, c.PoolFull, c.Batches
		if rate, reason := r.rk.Status(); !math.IsInf(rate, 1) {
			resp.RateLimit, resp.RateLimitReason = rate, reason
		}
	}
	shares := map[kv.Tag]dd.StashSummary{}
	if r := v.s.tx.Load(); r != nil && r.dd != nil {
		pools, loads := r.dd.Status()
		shares = loads
		resp.Distribution = distributionStatus(v.s.cfg, pools)
		for tag, l := range loads {
			resp.StashShares = append(resp.StashShares, &wire.StashShare{Id: uint32(tag), Shards: int32(l.Shards), Fetching: int32(l.Fetching), Bytes: l.Bytes})
		}
		sort.Slice(resp.StashShares, func(i, j int) bool { return resp.StashShares[i].Id < resp.StashShares[j].Id })
	}
	if l := v.s.logReplica(); l != nil {
		ls := l.Stats()
		resp.Log = &wire.LogStatus{
			Replicas: int32(v.s.cfg.Log.Replicas), LastVersion: int64(ls.LastVersion),
			EntriesInMemory: int64(ls.Entries - ls.SpilledEntries), BytesInMemory: ls.Bytes - ls.Spilled, MinPopped: int64(ls.MinPopped),
			EntriesSpilled: int64(ls.SpilledEntries), BytesSpilled: ls.Spilled,
		}
	}
	for _, sl := range v.s.slots() {
		st := sl.get().Stats()
		if st.Pool == "system" {
			continue
		}
		ws := &wire.StashStatus{
			Id: uint32(st.Tag), Pool: st.Pool, Index: int32(st.Index), Keys: st.Keys, Bytes: st.Bytes,
			EngineBytes: st.EngineBytes, WindowBytes: st.WindowBytes, Hits: st.Hits, Misses: st.Misses,
			Evictions: st.Evictions, Version: int64(st.Applied), DurableVersion: int64(st.Durable),
			CapacityBytes: st.CapacityBytes, Reads: st.Reads, FilterNegatives: st.FilterNegatives,
		}
		if sh, ok := shares[st.Tag]; ok {
			ws.Shards, ws.Fetching = int32(sh.Shards), int32(sh.Fetching)
		}
		h := sl.healthNow()
		ws.Health, ws.LastError, ws.Restarts, ws.HealthSinceUnixMs = h.Health, h.LastErr, h.Restarts, h.Since.UnixMilli()
		ws.Node, ws.Address = v.s.link.stashNode()
		for _, c := range st.Engine {
			ws.EngineCounters = append(ws.EngineCounters, &wire.EngineCounter{Name: c.Name, Value: c.Value})
		}
		ws.LocalLog = localLogStatus(sl.get().Engine())
		ws.FarMemory = farMemoryStatus(sl.get().Engine())
		if d := v.s.deviceOf(st.Tag); d != nil {
			ws.Device = deviceStatus(d)
		}
		resp.Stashes = append(resp.Stashes, ws)
	}
	sort.SliceStable(resp.Stashes, func(i, j int) bool { return resp.Stashes[i].Id < resp.Stashes[j].Id })
	return resp, nil
}

func (v *service) ShardMetrics(ctx context.Context, req *wire.ShardMetricsRequest) (*wire.ShardMetricsResponse, error) {
	sl, ok := v.s.slot(kv.Tag(req.Stash))
	if !ok {
		return &wire.ShardMetricsResponse{Error: wire.ErrorOf(kv.Errorf(kv.CodeWrongShardServer, "no stash %d here", req.Stash))}, nil
	}
	ranges := make([]kv.KeyRange, len(req.Ranges))
	for i, r := range req.Ranges {
		if err := checkRange("range", r.Begin, r.End); err != nil {
			return &wire.ShardMetricsResponse{Error: wire.ErrorOf(err)}, nil
		}
		ranges[i] = kv.KeyRange{Begin: r.Begin, End: r.End}
	}
	st := sl.get()
	resp := &wire.ShardMetricsResponse{AppliedVersion: int64(st.AppliedVersion())}
	for _, m := range st.Metrics(ranges, req.SplitKeys) {
		resp.Ranges = append(resp.Ranges, &wire.RangeMetrics{Bytes: m.Bytes, SplitKey: m.SplitKey, State: m.State, FetchedBytes: m.FetchedBytes,
			WriteBytesPerSec: m.WriteRate, WriteSplitKey: m.WriteSplitKey})
	}
	return resp, nil
}

// distributionStatus turns the data distributor's pools into status, in
// the configuration's pool order.
func distributionStatus(cfg *config.Config, pools map[string]dd.PoolStatus) []*wire.PoolDistribution {
	var out []*wire.PoolDistribution
	for _, p := range cfg.Pools {
		ps, ok := pools[p.Name]
		if !ok {
			continue
		}
		wd := &wire.PoolDistribution{Pool: ps.Pool, Shards: int32(ps.Shards), Teams: int32(ps.Teams), Replication: int32(ps.Replication),
			UnderReplicated: int32(ps.UnderReplicated), Moving: int32(ps.Moving), MovingBytesLeft: ps.MovingBytesLeft,
			Queued: int32(ps.Queued), Warning: ps.Warning, Bytes: ps.Bytes, MovesDone: ps.MovesDone,
			FailureWaitMs: ps.FailureWait.Milliseconds()}
		for i, r := range ps.Queue {
			rs := &wire.RelocationStatus{Begin: r.Begin, End: r.End, Reason: r.Reason, Priority: int32(r.Priority), InFlight: i < ps.InFlight, Bytes: r.Bytes}
			for _, t := range r.From {
				rs.From = append(rs.From, uint32(t))
			}
			for _, t := range r.To {
				rs.To = append(rs.To, uint32(t))
			}
			wd.Queue = append(wd.Queue, rs)
		}
		out = append(out, wd)
	}
	return out
}

func (v *service) Coldest(ctx context.Context, req *wire.ColdestRequest) (*wire.ColdestResponse, error) {
	if err := checkColdest(req); err != nil {
		return &wire.ColdestResponse{Error: wire.ErrorOf(err)}, nil
	}
	if _, ok := v.s.cfg.PoolByName(req.Pool); !ok {
		return &wire.ColdestResponse{Error: wire.ErrorOf(kv.Errorf(kv.CodeUnknownPool, "no pool named %q", req.Pool))}, nil
	}
	// The pool's stashes in this process (in a multi-process cluster the
	// client asks each node; tags there are given out as stashes join).
	var tags []kv.Tag
	for _, sl := range v.s.slots() {
		if sl.tag != shardmap.SystemTag && sl.get().Pool() == req.Pool {
			tags = append(tags, sl.tag)
		}
	}
	n := int(req.Limit)
	if n <= 0 {
		n = 100
	}
	// Each stash's coldest keys, interleaved so every stash's coldest come
	// first; a key replicated on several stashes appears once.
	var lists [][][]byte
	for _, t := range tags {
		sl, here := v.s.slot(t)
		if !here {
			continue // in a multi-process cluster, on another node (the client asks each)
		}
		keys, ok := sl.get().Coldest(n)
		if !ok {
			return &wire.ColdestResponse{Error: wire.ErrorOf(kv.Errorf(kv.CodeUnsupported, "pool %q keeps no recency order (ephemeral pools do; set recency = true for a durable pool)", req.Pool))}, nil
		}
		lists = append(lists, keys)
	}
	seen := map[string]bool{}
	resp := &wire.ColdestResponse{}
	for i := 0; len(resp.Keys) < n; i++ {
		progressed := false
		for _, l := range lists {
			if i < len(l) {
				progressed = true
				if !seen[string(l[i])] {
					seen[string(l[i])] = true
					resp.Keys = append(resp.Keys, l[i])
				}
			}
		}
		if !progressed {
			break
		}
	}
	if len(resp.Keys) > n {
		resp.Keys = resp.Keys[:n]
	}
	return resp, nil
}

// Bounds of the requests a commit stream holds, received and not yet
// answered: past either, the stream receives nothing more until replies go
// out (gRPC's flow control then holds the client back), so one client
// pipelining commits cannot make the server hold them all. Variables so
// that tests can lower them.
var (
	streamMaxRequests       = 1024
	streamMaxBytes    int64 = 64 << 20 // in requestMemory's unit
)

// wireItemMemory is the memory of a decoded wire.Mutation or wire.KeyRange
// besides its key and value bytes: the message struct, the pointer to it and
// its separately allocated byte fields (measured: 259 bytes for a mutation
// and its conflict range with 5-byte keys).
const wireItemMemory = 128

// requestMemory estimates the memory a received commit request holds.
func requestMemory(req *wire.CommitRequest) int64 {
	n := int64(len(req.GetMutations())+len(req.GetReadConflicts())+len(req.GetWriteConflicts())) * wireItemMemory
	for _, m := range req.GetMutations() {
		n += int64(len(m.GetKey()) + len(m.GetParam()))
	}
	for _, rs := range [][]*wire.KeyRange{req.GetReadConflicts(), req.GetWriteConflicts()} {
		for _, r := range rs {
			n += int64(len(r.GetBegin()) + len(r.GetEnd()))
		}
	}
	return n
}

// CommitStream commits each request as it arrives, concurrently, and sends
// each reply with its request's id (see serveStream).
func (v *service) CommitStream(stream wire.DiStash_CommitStreamServer) error {
	return serveStream(v, stream, "CommitStream",
		func(req *wire.CommitStreamRequest) int64 { return requestMemory(req.GetRequest()) },
		func(ctx context.Context, req *wire.CommitStreamRequest) *wire.CommitStreamResponse {
			if err := v.s.authorize(ctx, wire.DiStash_CommitStream_FullMethodName, req); err != nil {
				return &wire.CommitStreamResponse{Id: req.Id, Response: &wire.CommitResponse{Error: wire.ErrorOf(err)}}
			}
			resp, _ := v.Commit(ctx, req.GetRequest())
			return &wire.CommitStreamResponse{Id: req.Id, Response: resp}
		})
}

// ReadStream serves each read (point or range) as it arrives, concurrently,
// and sends each reply with its request's id (see serveStream).
func (v *service) ReadStream(stream wire.DiStash_ReadStreamServer) error {
	return serveStream(v, stream, "ReadStream",
		func(req *wire.ReadStreamRequest) int64 {
			n := int64(64)
			for _, k := range req.GetRequest().GetKeys() {
				n += int64(len(k))
			}
			if r := req.GetRangeRequest(); r != nil {
				n += int64(len(r.Begin) + len(r.End))
			}
			return n
		},
		func(ctx context.Context, req *wire.ReadStreamRequest) *wire.ReadStreamResponse {
			if err := v.s.authorize(ctx, wire.DiStash_ReadStream_FullMethodName, req); err != nil {
				if req.GetRangeRequest() != nil {
					return &wire.ReadStreamResponse{Id: req.Id, RangeResponse: &wire.ReadRangeResponse{Error: wire.ErrorOf(err)}}
				}
				return &wire.ReadStreamResponse{Id: req.Id, Response: &wire.ReadResponse{Error: wire.ErrorOf(err)}}
			}
			if r := req.GetRangeRequest(); r != nil {
				resp, _ := v.ReadRange(ctx, r)
				return &wire.ReadStreamResponse{Id: req.Id, RangeResponse: resp}
			}
			if req.GetRequest() == nil { // a hostile client's: Read would dereference it
				return &wire.ReadStreamResponse{Id: req.Id, Response: &wire.ReadResponse{Error: wire.ErrorOf(invalid("read stream request without a read"))}}
			}
			resp, _ := v.Read(ctx, req.GetRequest())
			return &wire.ReadStreamResponse{Id: req.Id, Response: resp}
		})
}

// ReadVersionStream serves each read-version request as it arrives,
// concurrently, and sends each reply with its request's id (see
// serveStream): the data path's read versions without a unary call each.
func (v *service) ReadVersionStream(stream wire.DiStash_ReadVersionStreamServer) error {
	return serveStream(v, stream, "ReadVersionStream",
		func(*wire.ReadVersionStreamRequest) int64 { return 64 },
		func(ctx context.Context, req *wire.ReadVersionStreamRequest) *wire.ReadVersionStreamResponse {
			if err := v.s.authorize(ctx, wire.DiStash_ReadVersionStream_FullMethodName, req); err != nil {
				return &wire.ReadVersionStreamResponse{Id: req.Id, Response: &wire.GetReadVersionResponse{Error: wire.ErrorOf(err)}}
			}
			resp, _ := v.GetReadVersion(ctx, req.GetRequest())
			return &wire.ReadVersionStreamResponse{Id: req.Id, Response: resp}
		})
}

// errStreamStopping ends the receiving side of a stream whose handler is
// returning.
var errStreamStopping = errors.New("stream handler stopping")

// idStreamServer is a bidirectional stream of requests and replies that
// carry ids, as a handler sees it.
type idStreamServer[Req, Resp any] interface {
	Recv() (Req, error)
	Send(Resp) error
	Context() context.Context
}

// serveStream answers each request of stream as it arrives, concurrently,
// and sends each reply as soon as it is ready (handle puts the request's
// id in it). If a reply cannot be sent the stream ends, so the client
// fails every request in flight on it instead of waiting for a reply that
// will not come. At most streamMaxRequests requests and streamMaxBytes of
// them (memory tells a request's size) are in flight. Requests go to
// workers that live as long as the stream, started as concurrency needs
// them, so a request does not pay for a new goroutine and its stack's
// growth.
func serveStream[Req, Resp any](v *service, stream idStreamServer[Req, Resp], name string, memory func(Req) int64, handle func(context.Context, Req) Resp) error {
	// Requests in flight keep the stream's context: when the client closes
	// its side they still finish and reply. Idle workers stop at return.
	ctx := stream.Context()
	// A frames stream takes concurrent sends, which then share writes; a
	// gRPC stream one at a time.
	concurrent := frames.SendsConcurrently(ctx)
	idle := make(chan struct{})
	var sendMu sync.Mutex
	var wg sync.WaitGroup
	sendFailed := make(chan error, 1)
	type request struct {
		req Req
		mem int64 // memory(req), taken from mem until the reply is sent
	}
	recvDone := make(chan error, 1)
	slots := make(chan struct{}, streamMaxRequests)
	mem := budget.New(streamMaxBytes)
	serve := func(r request) {
		defer func() {
			mem.Release(r.mem)
			<-slots
		}()
		// A panic here would end the process: no interceptor covers
		// goroutines a handler starts.
		defer func() {
			if p := recover(); p != nil {
				v.s.logger.Error("panic in "+name, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
				select {
				case sendFailed <- status.Error(codes.Internal, "internal error in "+name):
				default:
				}
			}
		}()
		resp := handle(ctx, r.req)
		var err error
		if concurrent {
			err = stream.Send(resp)
		} else {
			sendMu.Lock()
			err = stream.Send(resp)
			sendMu.Unlock()
		}
		if err != nil {
			select {
			case sendFailed <- err:
			default:
			}
		}
	}
	// The receiving goroutine hands each request straight to an idle
	// worker, or starts one: one goroutine switch per request, not two.
	// Workers are started under spawnMu until the handler stops, so that
	// its wg.Wait sees every one.
	work := make(chan request)
	var spawnMu sync.Mutex
	stopping := false // Protected by spawnMu.
	dispatch := func(r request) bool {
		select {
		case work <- r: // an idle worker takes it
			return true
		default:
		}
		spawnMu.Lock()
		defer spawnMu.Unlock()
		if stopping {
			return false
		}
		wg.Add(1)
		go func(r request) {
			defer wg.Done()
			for {
				serve(r)
				select {
				case r = <-work:
				case <-idle:
					return
				}
			}
		}(r)
		return true
	}
	go func() {
		for {
			req, err := stream.Recv()
			if err != nil {
				recvDone <- err
				return
			}
			r := request{req: req, mem: memory(req)}
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				recvDone <- ctx.Err()
				return
			}
			if err := mem.Acquire(ctx, r.mem); err != nil {
				<-slots
				recvDone <- err
				return
			}
			if !dispatch(r) {
				mem.Release(r.mem)
				<-slots
				recvDone <- errStreamStopping
				return
			}
		}
	}()
	defer func() {
		spawnMu.Lock()
		stopping = true
		spawnMu.Unlock()
		close(idle) // idle workers stop; busy ones finish their request
		wg.Wait()
	}()
	select {
	case err := <-sendFailed:
		return err
	case err := <-recvDone:
		if status.Code(err) == codes.Internal {
			// A request that does not decode (gRPC's codec, or a
			// malformed frame): the stream ends without a reply, the
			// server goes on serving.
			v.s.logger.Warn(name+": request refused, stream closed", "err", err)
		}
		return nil // the client closed the stream or it broke
	}
}

// speaks is the protocol range this process states (Options.Protocol: the
// binary's, or a test's) and its build, for status.
func (s *Server) speaks() (lo, hi int32, build, commit string) {
	l, h := s.opts.Protocol.Range()
	b := version.Current()
	return int32(l), int32(h), b.Version, b.ShortCommit()
}
