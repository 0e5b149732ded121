// Package distash is the client of DiStash, a transactional key-value store
// that governs data across pools of stashes (DRAM, SSD, HDD, NVM). One
// transaction reads and writes keys of any pools with strict
// serializability, so a DRAM cache and the SSD data it caches never drift
// apart.
//
//	db, err := distash.Open(ctx, "127.0.0.1:4500")
//	defer db.Close()
//	err = db.Transact(ctx, func(tr *distash.Tx) error {
//		v, err := tr.Get([]byte("c/user:1"))
//		...
//		tr.Set([]byte("d/user:1"), value)
//		return nil
//	})
//
// The cluster string lists addresses, "host:port[,host:port...]". For a
// multi-process cluster it is the coordinators' list ("a:4500,b:4500,
// c:4500"): the client asks any live coordinator for the cluster's view
// (the node running the stateless roles, which answers read versions,
// commits and the shard map, and the node serving each stash) and follows
// it as recoveries move the roles. For an embedded cluster
// (server.Start, or a single distash server process) it is the server's
// address; that one server serves every role. Open tells the two apart by
// asking the first address that answers for the view.
//
// Reads go straight to a stash that holds the key (the least loaded
// replica; a replica that failed or whose node is unreachable is avoided
// for a while); writes are buffered in the transaction and sent to a
// commit proxy at commit. A transaction sees its own writes. Transact
// retries on conflicts and other retryable errors (including a stateless
// node that failed or moved: wrong_node), with backoff, until ctx ends.
package distash

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/shardmap"
	"github.com/distash/distash/internal/wire"
)

// DB is a handle to a DiStash cluster. It is safe for concurrent use.
type DB struct {
	creds credentials.TransportCredentials
	tls   *tls.Config // WithTLS, for the frames streams; nil: plaintext
	// grpcDataPath: WithGRPCDataPath, reads and commits on gRPC streams.
	grpcDataPath bool
	// token: WithToken's bearer token, nil without.
	token  bearer
	dialer func(ctx context.Context, addr string) (net.Conn, error) // WithDialer; nil: TCP
	// coordinators is the cluster string's addresses in a multi-process
	// cluster; nil for an embedded one (one address serving every role).
	coordinators []string
	life         context.Context // ends at Close
	stop         context.CancelFunc

	connMu sync.Mutex
	conns  map[string]*grpc.ClientConn // one per address. Protected by connMu.
	nodes  map[string]*nodeConn        // one per address. Protected by connMu.
	closed bool                        // Protected by connMu.

	// proxy is the node answering read versions, commits and metadata;
	// stashes routes reads (nil in an embedded cluster: the proxy's node
	// serves every stash). Both are replaced whole, never changed in
	// place, so requests read them without a lock.
	proxy   atomic.Pointer[proxy]
	stashes atomic.Pointer[stashRoutes]
	// recent is the newest committed version the client learnt (from read
	// versions and commits) and recentAt when (unix ns): the read version
	// of transactions with SetRecentReadVersion.
	recent, recentAt atomic.Int64
	// racesWon and racesLost count first reads sent while their read
	// version was on its way (readRacingVersion) whose values were kept,
	// and those read again.
	racesWon, racesLost atomic.Int64
	// raceLosses counts the races lost in a row, raceSkips the first reads
	// that did not race because of them.
	raceLosses atomic.Int32
	raceSkips  atomic.Int64

	viewMu      sync.Mutex
	viewRunning chan struct{} // closed when the refresh in flight ends. Protected by viewMu.
	viewLast    time.Time     // when the last refresh ended. Protected by viewMu.
	viewPrefer  string        // the coordinator that answered last. Protected by viewMu.
	lastSuspect atomic.Int64  // unix ns of the last view refresh for a stalled request (suspect)

	pools []*Pool

	// shards is the client's copy of the shard map: which stashes hold
	// which keys. refreshShards replaces it whole and it is never changed
	// in place, so readers use it without a lock.
	shards atomic.Pointer[shardmap.Map]
	// shardsStale is set when a read chose among a team with a stash the
	// view calls retired: the map predates a replacement, so a read that
	// then fails reloads it (refreshShards clears it). Without it, a
	// client whose last good replica dies keeps asking that replica: a
	// retired one is never asked, so no wrong_shard_server answer ever
	// makes it reload the map.
	shardsStale atomic.Bool

	loadMu sync.RWMutex
	load   map[uint32]*stashLoad // Protected by loadMu.

	// dc is the client's data center (WithDC); localStashes the stashes
	// whose node is in it, from the last view (cluster_dc.go).
	dc           string
	localStashes atomic.Pointer[map[uint32]bool]
}

// stashLoad tracks requests in flight and recent latency of one stash, to
// send reads to the least loaded replica.
type stashLoad struct {
	inflight  atomic.Int64
	latencyNs atomic.Int64 // moving average
	// downUntil (unix ns): the stash answered stash_unavailable, so reads
	// avoid it until then if another replica can serve.
	downUntil atomic.Int64
	// retired: the last view says the stash was replaced (it lost its
	// data, or was re-replicated away) and never serves again, while the
	// shard map may still name it until data distribution moves its
	// shards: reads go to another replica for as long as the view says so.
	retired atomic.Bool
}

// stashDownFor is how long a stash that answered stash_unavailable is
// avoided; its server restarts it within about this time.
const stashDownFor = 2 * time.Second

// markDown makes reads avoid stash id for a while.
func (db *DB) markDown(id uint32) {
	db.loadOf(id).downUntil.Store(time.Now().Add(stashDownFor).UnixNano())
}

// Open connects to a cluster. clusterString is "host:port[,host:port...]":
// the coordinators of a multi-process cluster, or the address of an
// embedded cluster's server. Open tries the addresses in order and uses the
// first that answers. Options: WithTLS, WithDialer, WithDC,
// WithGRPCDataPath.
func Open(ctx context.Context, clusterString string, opts ...Option) (*DB, error) {
	var o openOptions
	for _, opt := range opts {
		opt(&o)
	}
	creds := insecure.NewCredentials()
	if o.tls != nil {
		creds = credentials.NewTLS(o.tls)
	}
	var addrs []string
	for _, addr := range strings.Split(clusterString, ",") {
		if addr = strings.TrimSpace(addr); addr != "" {
			addrs = append(addrs, addr)
		}
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("distash: open %q: %w", clusterString, errors.New("empty cluster string"))
	}
	life, stop := context.WithCancel(context.Background())
	db := &DB{creds: creds, tls: o.tls, grpcDataPath: o.grpcDataPath, token: o.token, dialer: o.dialer, life: life, stop: stop, conns: map[string]*grpc.ClientConn{}, nodes: map[string]*nodeConn{}, load: map[uint32]*stashLoad{}, dc: o.dc}
	if err := db.open(ctx, addrs); err != nil {
		db.Close()
		return nil, fmt.Errorf("distash: open %q: %w", clusterString, err)
	}
	return db, nil
}

// open finds the cluster's roles and loads its pools and shard map.
func (db *DB) open(ctx context.Context, addrs []string) error {
	dctx, cancel := context.WithTimeout(ctx, openTimeout)
	addr, cluster, v, err := db.detect(dctx, addrs)
	cancel()
	if err != nil {
		return err
	}
	if !cluster {
		// An embedded cluster: addr serves every role, for good.
		p, err := db.newProxy(addr, 0)
		if err != nil {
			return err
		}
		db.proxy.Store(p)
		cctx, cancel := context.WithTimeout(ctx, openTimeout)
		defer cancel()
		return db.loadMetadata(cctx)
	}
	db.coordinators = addrs
	db.viewPrefer = addr
	cctx, cancel := context.WithTimeout(ctx, clusterOpenTimeout)
	defer cancel()
	if v.StatelessAddress != "" && fromWire(v.Error) == nil {
		if err := db.applyView(v); err != nil {
			return err
		}
	} else if err := db.awaitStateless(cctx); err != nil {
		return err
	}
	for {
		p := db.proxy.Load()
		err := db.loadMetadata(cctx)
		if err == nil || !(errors.Is(err, ErrConnectionFailed) || errors.Is(err, ErrWrongNode)) {
			return err
		}
		// The stateless node failed or moved: find it again.
		select {
		case <-db.refreshView(p):
		case <-cctx.Done():
			return err
		}
		if db.proxy.Load() == p && !sleepCtx(cctx, minViewGap) {
			return err
		}
	}
}

// loadMetadata reads the pools and the shard map from the proxy.
func (db *DB) loadMetadata(ctx context.Context) error {
	p := db.proxy.Load()
	ictx, cancel := context.WithTimeout(ctx, metaTimeout)
	defer cancel()
	info, err := p.api.ClusterInfo(ictx, &wire.ClusterInfoRequest{}, grpc.WaitForReady(db.coordinators == nil))
	if err != nil {
		err = transportErr(err)
		db.proxyFailed(p, err)
		return err
	}
	pools := make([]*Pool, 0, len(info.Pools))
	for _, p := range info.Pools {
		pools = append(pools, &Pool{name: p.Name, prefix: p.Prefix, info: p})
	}
	db.pools = pools
	return db.refreshShards(ctx)
}

// Close releases the connections.
func (db *DB) Close() error {
	db.stop()
	if p := db.proxy.Load(); p != nil {
		p.retire()
	}
	db.connMu.Lock()
	defer db.connMu.Unlock()
	db.closed = true
	var err error
	for addr, n := range db.nodes {
		n.reads.close()
		delete(db.nodes, addr)
	}
	for addr, c := range db.conns {
		err = errors.Join(err, c.Close())
		delete(db.conns, addr)
	}
	return err
}

// refreshShards reloads the shard map from the proxy. A failed reload
// leaves the map marked stale, so the next failed read tries again.
func (db *DB) refreshShards(ctx context.Context) (err error) {
	db.shardsStale.Store(false)
	defer func() {
		if err != nil {
			db.shardsStale.Store(true)
		}
	}()
	p := db.proxy.Load()
	lctx, cancel := context.WithTimeout(ctx, metaTimeout)
	defer cancel()
	resp, err := p.api.Locations(lctx, &wire.LocationsRequest{Begin: []byte{}, End: []byte{0xff, 0xff}})
	if err != nil {
		err = transportErr(err)
		db.proxyFailed(p, err)
		return err
	}
	if err := fromWire(resp.Error); err != nil {
		db.proxyFailed(p, err)
		return err
	}
	shards := make([]shardmap.Shard, 0, len(resp.Shards))
	for _, s := range resp.Shards {
		team := make([]kv.Tag, len(s.Stashes))
		for i, id := range s.Stashes {
			team[i] = kv.Tag(id)
		}
		shards = append(shards, shardmap.Shard{Begin: s.Begin, End: s.End, Pool: s.Pool, Team: team})
	}
	db.shards.Store(shardmap.New(shards))
	return nil
}

func (db *DB) loadOf(id uint32) *stashLoad {
	// Every read asks: a shared lock, the exclusive one only for a stash
	// not seen before.
	db.loadMu.RLock()
	l, ok := db.load[id]
	db.loadMu.RUnlock()
	if ok {
		return l
	}
	db.loadMu.Lock()
	defer db.loadMu.Unlock()
	if l, ok = db.load[id]; !ok {
		l = &stashLoad{}
		db.load[id] = l
	}
	return l
}

// pickReplica chooses the team member with the least expected wait:
// requests in flight times recent latency, ties broken at random.
// Stashes marked down come last: they are asked only when every replica
// is, and then the one marked down longest ago first (a retired one
// last of all), so that retries
// rotate among them (a dead node fails fast, and would otherwise look the
// least loaded). With WithDC only the replicas in the client's data center
// are considered, if one of them is not marked down (preferLocal).
func (db *DB) pickReplica(team []kv.Tag) uint32 {
	id, _ := db.pick(team)
	return id
}

// pickFor is pickReplica for a read of shard s (or of the part of it a
// range read asks for). When the view calls every stash of its team
// retired, no replica is left to serve it (the data distributor holds such
// a durable shard; its data is lost unless restored from a backup): the
// read fails with stash_unavailable, retryable like the commit proxy's
// refusal of a write to it, so a read with a stale map retries with the
// map reloaded.
func (db *DB) pickFor(s shardmap.Shard) (uint32, error) {
	id, allRetired := db.pick(s.Team)
	if allRetired {
		return 0, errorf(kv.CodeStashUnavailable, "keys [%.60q, %.60q) of pool %q are in a shard with no replica left: every stash that held it (%v) was retired; its data is lost unless restored from a backup", s.Begin, s.End, s.Pool, s.Team)
	}
	return id, nil
}

// pick is pickReplica, and reports whether every member it considered is
// retired (preferLocal keeps a subset only if one of them is not).
func (db *DB) pick(team []kv.Tag) (best uint32, allRetired bool) {
	team = db.preferLocal(team)
	allRetired = true
	best = uint32(team[0])
	bestScore, bestDown, bestUntil := int64(-1), true, int64(0)
	off := rand.IntN(len(team))
	now := time.Now().UnixNano()
	for i := range team {
		id := uint32(team[(i+off)%len(team)])
		l := db.loadOf(id)
		lat := l.latencyNs.Load()
		if lat == 0 {
			lat = 100_000
		}
		score := (l.inflight.Load() + 1) * lat
		until := l.downUntil.Load()
		if l.retired.Load() {
			until = math.MaxInt64 // after every replica that may come back
			if !db.shardsStale.Load() {
				db.shardsStale.Store(true)
			}
		} else {
			allRetired = false
		}
		down := until > now
		if bestScore < 0 || (bestDown && !down) ||
			(!down && !bestDown && score < bestScore) ||
			(down && bestDown && until < bestUntil) {
			best, bestScore, bestDown, bestUntil = id, score, down, until
		}
	}
	return best, allRetired
}

// tracked is a request to a stash in flight (DB.track); done ends it.
// A value, not a closure: one allocation less per read.
type tracked struct {
	l     *stashLoad
	start time.Time
}

// track records a request to stash id; call done on the result when done.
func (db *DB) track(id uint32) tracked {
	l := db.loadOf(id)
	l.inflight.Add(1)
	return tracked{l: l, start: time.Now()}
}

func (t tracked) done() {
	t.l.inflight.Add(-1)
	ns := time.Since(t.start).Nanoseconds()
	old := t.l.latencyNs.Load()
	if old == 0 {
		t.l.latencyNs.Store(ns)
	} else {
		t.l.latencyNs.Store(old + (ns-old)/8)
	}
}

// poolFor returns the pool whose prefix covers key.
func (db *DB) poolFor(key []byte) (*Pool, bool) {
	for _, p := range db.pools {
		if bytes.HasPrefix(key, p.prefix) {
			return p, true
		}
	}
	return nil, false
}

// Pool returns the pool with the given name.
func (db *DB) Pool(name string) (*Pool, error) {
	for _, p := range db.pools {
		if p.name == name {
			return p, nil
		}
	}
	names := make([]string, len(db.pools))
	for i, p := range db.pools {
		names[i] = p.name
	}
	return nil, errorf(kv.CodeUnknownPool, "no pool named %q (pools: %s)", name, strings.Join(names, ", "))
}

// Pools returns every pool of the cluster, in configuration order.
func (db *DB) Pools() []*Pool { return append([]*Pool(nil), db.pools...) }

// Pool is a pool of stashes: every key with its prefix lives in it.
type Pool struct {
	name   string
	prefix []byte
	info   *wire.PoolInfo
}

// Name is the pool's name.
func (p *Pool) Name() string { return p.name }

// Prefix is the pool's key prefix.
func (p *Pool) Prefix() []byte { return append([]byte(nil), p.prefix...) }

// Key returns prefix+k: the key k inside the pool.
func (p *Pool) Key(k []byte) []byte {
	out := make([]byte, 0, len(p.prefix)+len(k))
	return append(append(out, p.prefix...), k...)
}

// Range returns the pool's whole key range [prefix, prefixEnd).
func (p *Pool) Range() (begin, end []byte) { return p.Prefix(), kv.PrefixEnd(p.prefix) }

// Medium is the pool's medium: dram, ssd, hdd or nvm.
func (p *Pool) Medium() string { return p.info.Medium }

// Ephemeral reports whether the pool may evict.
func (p *Pool) Ephemeral() bool { return p.info.Mode == "ephemeral" }

// Durable reports whether the pool keeps every acknowledged write.
func (p *Pool) Durable() bool { return p.info.Mode == "durable" }

// Engine is the pool's storage engine.
func (p *Pool) Engine() string { return p.info.Engine }

// CapacityBytes is the per-stash capacity (0: unlimited).
func (p *Pool) CapacityBytes() int64 { return p.info.CapacityBytes }

// Stashes is the number of stashes in the pool.
func (p *Pool) Stashes() int { return int(p.info.Stashes) }

// KeepsRecency reports whether the pool's stashes keep their keys in access
// order, so that ColdestKeys works: ephemeral pools (their eviction order)
// and durable pools configured with recency = true.
func (p *Pool) KeepsRecency() bool { return p.info.Recency }

// Replication is the pool's replication degree.
func (p *Pool) Replication() int { return int(p.info.Replication) }

// CreateTransaction starts a transaction under manual control: call
// Commit, and retry yourself on retryable errors.
func (db *DB) CreateTransaction(ctx context.Context) (*Tx, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	tr := newTx(ctx, db)
	// Nothing would run it again with a fresh read version when its reads
	// cannot be checked: SetRecentReadVersion does not apply.
	tr.freshOnly = true
	return tr, nil
}

// Transact runs fn in a transaction and commits it, retrying the whole
// function on retryable errors (conflicts, too-old read versions, unknown
// commit results) with exponential backoff until ctx ends. fn may run
// several times: it must not have side effects outside the transaction.
func (db *DB) Transact(ctx context.Context, fn func(tr *Tx) error) error {
	return db.run(ctx, fn, true)
}

// ReadTransact runs fn in a transaction without committing it, retrying on
// retryable errors. All reads see one consistent snapshot.
func (db *DB) ReadTransact(ctx context.Context, fn func(tr *Tx) error) error {
	return db.run(ctx, fn, false)
}

// learnVersion records v, a committed version (a read version handed out,
// or a commit's version), for SetRecentReadVersion.
func (db *DB) learnVersion(v kv.Version) {
	now := time.Now().UnixNano()
	for {
		old := db.recent.Load()
		if int64(v) < old {
			return
		}
		if int64(v) == old || db.recent.CompareAndSwap(old, int64(v)) {
			db.recentAt.Store(now)
			return
		}
	}
}

// recentVersion returns the newest committed version the client knows if
// it learnt it within RecentReadVersionAge.
func (db *DB) recentVersion() (kv.Version, bool) {
	v, at := db.recent.Load(), db.recentAt.Load()
	if v == 0 || time.Now().UnixNano()-at > recentReadVersionAge.Load() {
		return 0, false
	}
	return kv.Version(v), true
}

// firstBackoff bounds the wait before Transact's first retry.
const firstBackoff = 2 * time.Millisecond

// MaxBackoff bounds the wait between retries of Transact.
const MaxBackoff = time.Second

// MaxConflictBackoff bounds the wait before a retry after a conflict
// (ErrNotCommitted). A conflict means another transaction committed: the
// cluster is making progress, and the retry need only give that commit
// room, not wait out an outage. Letting conflicts grow the wait to
// MaxBackoff put a transaction that lost a hot key a few times in a row
// to sleep for up to a second: in YCSB workload A (zipfian keys, 64
// threads) the threads then spent a third of their time asleep while the
// machine was half idle (docs/benchmarks.md, "Conflicts back off less").
const MaxConflictBackoff = 128 * time.Millisecond

// retryWait returns how long to wait before the retry after err, given
// the backoff so far, and the backoff for the retry after that: a random
// wait in [backoff/2, backoff], the backoff doubling up to MaxBackoff, or
// up to MaxConflictBackoff while the retries are for conflicts.
func retryWait(backoff time.Duration, err error) (wait, next time.Duration) {
	if errors.Is(err, ErrNotCommitted) {
		backoff = min(backoff, MaxConflictBackoff)
	}
	return backoff/2 + rand.N(backoff/2+1), min(backoff*2, MaxBackoff)
}

func (db *DB) run(ctx context.Context, fn func(tr *Tx) error, commit bool) error {
	backoff := firstBackoff
	fresh := !commit // a read-only transaction's reads are never checked by a commit
	for {
		tr := newTx(ctx, db)
		tr.freshOnly = fresh
		err := fn(tr)
		if err == nil && commit {
			err = tr.Commit()
		}
		tr.mu.Lock()
		usedRecent := tr.usedRecent
		tr.mu.Unlock()
		if usedRecent && err != nil && (errors.Is(err, errRecentUnchecked) || !retryable(err)) {
			// The attempt read at a recent version, and nothing checked
			// what it read: its outcome may rest on a version older than
			// the transaction's start. Run it again with a fresh one.
			fresh = true
			continue
		}
		if err == nil {
			return nil
		}
		if !retryable(err) {
			return err
		}
		// A conflict after reading at a recent version: retry with a
		// fresh one.
		fresh = fresh || usedRecent
		if errors.Is(err, ErrWrongShardServer) || db.shardsStale.Load() && readRetryable(ctx, err) {
			if rerr := db.refreshShards(ctx); rerr != nil && ctx.Err() == nil && !retryable(rerr) {
				return rerr
			}
		}
		// A failure that moved the roles started a view refresh: retry on
		// the new view.
		db.awaitView(ctx)
		var wait time.Duration
		wait, backoff = retryWait(backoff, err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("distash: %w (last error: %v)", ctx.Err(), err)
		case <-time.After(wait):
		}
	}
}

// Int64 decodes an 8-byte little-endian value written by Add, Max or Min
// (shorter values are zero-extended). Nil decodes as 0.
func Int64(b []byte) int64 { return kv.DecodeInt64(b) }

// EncodeInt64 returns v as the 8-byte little-endian value Add, Max and Min use.
func EncodeInt64(v int64) []byte { return kv.EncodeInt64(v) }

// ColdestKeys returns up to n keys of an ephemeral pool in its stashes'
// eviction order, coldest first: the keys the pool would evict next. A
// storage hierarchy demotes these to the next tier. Keys written within the
// last MVCC window are not included. Pools whose engine keeps no recency
// order (durable pools) return an error.
func (db *DB) ColdestKeys(ctx context.Context, pool *Pool, n int) ([][]byte, error) {
	if routes := db.stashes.Load(); routes != nil {
		return db.coldestCluster(ctx, routes, pool, n)
	}
	cctx, cancel := context.WithTimeout(ctx, metaTimeout)
	defer cancel()
	resp, err := db.proxy.Load().api.Coldest(cctx, &wire.ColdestRequest{Pool: pool.name, Limit: int32(n)})
	if err != nil {
		return nil, err
	}
	if err := fromWire(resp.Error); err != nil {
		return nil, err
	}
	return resp.Keys, nil
}
