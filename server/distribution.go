package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/distash/distash/internal/dd"
	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/proxy"
	"github.com/distash/distash/internal/shardmap"
	"github.com/distash/distash/internal/stash"
	"github.com/distash/distash/internal/wire"
)

// The data distributor runs with the stateless roles (on the node whose
// log replica leads, or in the embedded process). distEnv is how it sees
// the cluster: the commit proxy's shard map, the stashes (this process's
// slots, or the controller's view of a multi-process cluster), their
// metrics (local calls or the ShardMetrics RPC) and shard map commits
// through the commit proxy.
type distEnv struct {
	s        *Server
	r        *txRoles
	interval time.Duration // the distributor's round
}

// ddInterval is the data distributor's round: 250ms unless a test shortens
// it (Tuning.DistributionInterval).
func (s *Server) ddInterval() time.Duration {
	if d := s.opts.Tuning.DistributionInterval; d > 0 {
		return d
	}
	return 250 * time.Millisecond
}

func (s *Server) newDistributor(r *txRoles) (*dd.Distributor, *distEnv) {
	env := &distEnv{s: s, r: r, interval: s.ddInterval()}
	d := dd.New(dd.Options{
		Env: env, Pools: env.pools, FailureWait: env.failureWait,
		ShardBytes: int64(s.cfg.Cluster.ShardBytes), Interval: env.interval, Logger: s.roleLogger(logRoleDistributor),
	})
	return d, env
}

// clusterView returns a view of the controller at most one round old
// (cluster mode; nil embedded).
func (e *distEnv) clusterView() *wire.ViewResponse { return e.s.viewWithin(e.interval) }

func (e *distEnv) pools() []dd.PoolSettings {
	var out []dd.PoolSettings
	repl := map[string]int{}
	if v := e.clusterView(); v != nil {
		for _, pr := range v.Replication {
			repl[pr.Pool] = int(pr.Replication)
		}
	}
	for _, p := range e.s.cfg.Pools {
		r := p.Replication
		if n, ok := repl[p.Name]; ok && n > 0 {
			r = n
		}
		out = append(out, dd.PoolSettings{Name: p.Name, Prefix: []byte(p.Prefix), Replication: r, Ephemeral: p.Ephemeral(), AcrossDCs: p.AcrossDCs})
	}
	return out
}

func (e *distEnv) failureWait() time.Duration {
	if v := e.clusterView(); v != nil {
		return time.Duration(v.FailureWaitMs) * time.Millisecond // the value in force
	}
	return e.s.cfg.Cluster.FailureWait.Duration
}

// Shards implements dd.Env.
func (e *distEnv) Shards() (*shardmap.Map, kv.Version) { return e.r.commit.ShardsAt() }

// Stashes implements dd.Env.
func (e *distEnv) Stashes() []dd.StashInfo {
	if v := e.clusterView(); v != nil {
		var out []dd.StashInfo
		for _, sl := range v.Stashes {
			if sl.Node == "" && !sl.Retired {
				continue // a slot no node ever held
			}
			out = append(out, dd.StashInfo{Tag: kv.Tag(sl.Tag), Pool: sl.Pool, DC: sl.Dc, Zone: sl.Zone, Address: sl.Address,
				Alive: sl.Alive, Excluded: sl.Excluded, Retired: sl.Retired, RetiredAt: sl.RetiredAt, GivenUp: sl.GivenUp})
		}
		return out
	}
	var out []dd.StashInfo
	for _, sl := range e.s.slots() {
		if sl.tag == shardmap.SystemTag {
			continue
		}
		h := sl.healthNow()
		// A damaged stash serves nothing: down, and re-replicated after
		// the failure wait, unless it holds the only replica (it refuses
		// its reads, and there is nothing to copy from).
		alive := h.Health != HealthFailed && (h.Health != HealthDamaged || sl.refused() != nil)
		out = append(out, dd.StashInfo{Tag: sl.tag, Pool: sl.get().Pool(), Alive: alive})
	}
	return out
}

// Metrics implements dd.Env.
func (e *distEnv) Metrics(ctx context.Context, tag kv.Tag, ranges []kv.KeyRange, splitKeys bool) ([]dd.Metrics, error) {
	if sl, ok := e.s.slot(tag); ok {
		st := sl.get()
		applied := st.AppliedVersion() // before: the answer is at least this current
		return toDDMetrics(st.Metrics(ranges, splitKeys), applied), nil
	}
	addr := e.s.stashAddress(tag)
	if addr == "" {
		return nil, fmt.Errorf("no address for stash %d", tag)
	}
	c, err := e.s.link.connTo(addr)
	if err != nil {
		return nil, err
	}
	req := &wire.ShardMetricsRequest{Stash: uint32(tag), SplitKeys: splitKeys}
	for _, r := range ranges {
		req.Ranges = append(req.Ranges, &wire.KeyRangeMsg{Begin: r.Begin, End: r.End})
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := wire.NewDiStashClient(c).ShardMetrics(cctx, req)
	if err != nil {
		return nil, err
	}
	if err := resp.Error.Err(); err != nil {
		return nil, err
	}
	out := make([]dd.Metrics, len(resp.Ranges))
	for i, m := range resp.Ranges {
		out[i] = dd.Metrics{Bytes: m.Bytes, SplitKey: m.SplitKey, State: m.State, FetchedBytes: m.FetchedBytes,
			WriteRate: m.WriteBytesPerSec, WriteSplitKey: m.WriteSplitKey, Applied: kv.Version(resp.AppliedVersion)}
	}
	return out, nil
}

func toDDMetrics(ms []stash.RangeMetrics, applied kv.Version) []dd.Metrics {
	out := make([]dd.Metrics, len(ms))
	for i, m := range ms {
		out[i] = dd.Metrics{Bytes: m.Bytes, SplitKey: m.SplitKey, State: m.State, FetchedBytes: m.FetchedBytes,
			WriteRate: m.WriteRate, WriteSplitKey: m.WriteSplitKey, Applied: applied}
	}
	return out
}

// CommitShards implements dd.Env.
func (e *distEnv) CommitShards(ctx context.Context, set []shardmap.Shard, clear [][]byte) error {
	txn := proxy.Txn{ReadVersion: e.r.seq.CommittedVersion()}
	for _, sh := range set {
		k, v := shardmap.Encode(sh)
		txn.Mutations = append(txn.Mutations, kv.Mutation{Type: kv.MutSet, Key: k, Param: v})
		txn.WriteConflicts = append(txn.WriteConflicts, kv.PointRange(k))
	}
	for _, b := range clear {
		k := shardmap.Key(b)
		txn.Mutations = append(txn.Mutations, kv.Mutation{Type: kv.MutClear, Key: k})
		txn.WriteConflicts = append(txn.WriteConflicts, kv.PointRange(k))
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := e.r.commit.CommitSystem(cctx, txn)
	return err
}

// Retire implements dd.Env: the log drops what it keeps for tag, and the
// controller gives its node a new tag if it ever returns.
func (e *distEnv) Retire(ctx context.Context, tag kv.Tag) error {
	e.s.log.Pop(tag, e.s.log.LastVersion())
	return e.s.link.retire(ctx, tag)
}

// lastView returns a view at most a second old (nil if none could be had).
func (s *Server) lastView() *wire.ViewResponse { return s.viewWithin(time.Second) }

// viewWithin returns the controller's view at most maxAge old, or the
// last one if the controller does not answer (nil if none could be had,
// and always for an embedded cluster).
func (s *Server) viewWithin(maxAge time.Duration) *wire.ViewResponse { return s.link.view(maxAge) }

// stashAddress returns the address of the node serving tag, from the
// latest view (cluster mode).
func (s *Server) stashAddress(tag kv.Tag) string {
	v := s.lastView()
	if v == nil {
		return ""
	}
	for _, sl := range v.Stashes {
		if kv.Tag(sl.Tag) == tag {
			return sl.Address
		}
	}
	return ""
}

// fetcher copies a moving shard's range from a source stash: this
// process's slot, or over gRPC (ReadRange) from the node serving it.
type fetcher struct{ s *Server }

func (f fetcher) FetchRange(ctx context.Context, from []kv.Tag, begin, end []byte, v kv.Version, byteLimit int64) ([]kv.KeyValue, bool, error) {
	var errs []error
	// Live replicas first: a dead one costs a timeout.
	order := slices.Clone(from)
	if view := f.s.lastView(); view != nil {
		alive := map[kv.Tag]bool{}
		for _, sl := range view.Stashes {
			alive[kv.Tag(sl.Tag)] = sl.Alive
		}
		slices.SortStableFunc(order, func(a, b kv.Tag) int {
			switch {
			case alive[a] && !alive[b]:
				return -1
			case alive[b] && !alive[a]:
				return 1
			}
			return 0
		})
	}
	for _, t := range order {
		if sl, ok := f.s.slot(t); ok {
			kvs, more, err := sl.get().GetRange(ctx, v, begin, end, 0, byteLimit, false)
			if err == nil {
				return kvs, more, nil
			}
			errs = append(errs, err)
			continue
		}
		addr := f.s.stashAddress(t)
		if addr == "" {
			errs = append(errs, fmt.Errorf("no address for stash %d", t))
			continue
		}
		c, err := f.s.link.connTo(addr)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		resp, err := wire.NewDiStashClient(c).ReadRange(cctx, &wire.ReadRangeRequest{Stash: uint32(t), Version: int64(v), Begin: begin, End: end, ByteLimit: byteLimit})
		cancel()
		if err == nil {
			err = resp.Error.Err()
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		kvs := make([]kv.KeyValue, len(resp.Kvs))
		for i, p := range resp.Kvs {
			kvs[i] = kv.KeyValue{Key: p.Key, Value: p.Value}
		}
		return kvs, resp.More, nil
	}
	if len(errs) == 0 {
		return nil, false, kv.Errorf(kv.CodeStashUnavailable, "no source for the range")
	}
	// A kv.Error keeps the fetch retrying; the first one says why.
	var ke *kv.Error
	for _, err := range errs {
		if errors.As(err, &ke) {
			return nil, false, err
		}
	}
	return nil, false, kv.Errorf(kv.CodeStashUnavailable, "fetch from %v: %v", from, errors.Join(errs...))
}

// Distribution returns the data distributor's status of every pool, nil on
// a node that does not hold the stateless roles.
func (s *Server) Distribution() map[string]dd.PoolStatus {
	r := s.tx.Load()
	if r == nil || r.dd == nil {
		return nil
	}
	pools, _ := r.dd.Status()
	return pools
}
