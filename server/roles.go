package server

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distash/distash/config"
	"github.com/distash/distash/internal/dd"
	"github.com/distash/distash/internal/engine"
	"github.com/distash/distash/internal/engine/engines"
	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/logentry"
	"github.com/distash/distash/internal/logrpc"
	"github.com/distash/distash/internal/proxy"
	"github.com/distash/distash/internal/ratekeeper"
	"github.com/distash/distash/internal/resolver"
	"github.com/distash/distash/internal/sequencer"
	"github.com/distash/distash/internal/shardmap"
	"github.com/distash/distash/internal/stash"
	"github.com/distash/distash/internal/txlog"
)

// txRoles are the stateless transaction roles of one generation: the
// sequencer, resolver, commit and GRV proxies and the ratekeeper. An
// embedded cluster runs one set for its life; in a multi-process cluster
// the node whose log replica leads the log runs them, and drops them when
// it stops leading.
type txRoles struct {
	generation uint64 // 0 in an embedded cluster
	seq        *sequencer.Sequencer
	res        *resolver.Resolver
	commit     *proxy.CommitProxy
	grv        *proxy.GRVProxy
	rk         *ratekeeper.Ratekeeper
	dd         *dd.Distributor // the data distributor
	backup     *backupRole     // the backup worker (issue 23)

	recovered    kv.Version    // the log's end when they started: versions restart above it
	startedAt    time.Time     // when this node began the recovery that started them
	recoveryTime time.Duration // from the start of the recovery to serving

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// errNoRoles answers a request for a stateless role on a node that does
// not hold them (any more).
func (s *Server) errNoRoles() error {
	return kv.Errorf(kv.CodeWrongNode, "node %s holds no commit or GRV proxy now: ask the coordinators", s.Addr())
}

// roles returns the stateless roles this process holds, or a wrong_node
// error.
func (s *Server) roles() (*txRoles, error) {
	if r := s.tx.Load(); r != nil {
		return r, nil
	}
	return nil, s.errNoRoles()
}

func (s *Server) windowVersions() kv.Version {
	return kv.Version(s.cfg.Cluster.MVCCWindow.Duration.Microseconds())
}

// startSystemStash opens the system stash (the shard map and the recorded
// configuration) over the local log replica and runs it under supervision.
func (s *Server) startSystemStash(ctx context.Context) (*stash.Stash, error) {
	open := func() (*stash.Stash, error) {
		sysEng, err := engines.Open("pebble", engine.Options{Dir: filepath.Join(s.opts.Dir, "system"), FS: s.opts.FS})
		if err != nil {
			return nil, fmt.Errorf("server: open system stash: %w", err)
		}
		if gone := s.log.Gone(shardmap.SystemTag); sysEng.Version() < gone {
			// This process was away while the log dropped system
			// messages its stash had not made durable.
			if err := s.link.systemStashBehind(ctx, sysEng, gone); err != nil {
				sysEng.Close()
				return nil, err
			}
		}
		return stash.New(stash.Options{
			Tag: shardmap.SystemTag, Pool: "system", Engine: sysEng, Log: s.log,
			WindowVersions: s.windowVersions(), FlushInterval: s.opts.FlushInterval, Logger: s.roleLogger(logRoleStash), Clock: s.opts.Clock,
			OnDiskFull: s.link.systemDiskFull,
		}), nil
	}
	sys, err := open()
	if err != nil {
		return nil, err
	}
	s.addStash(ctx, shardmap.SystemTag, sys, open)
	sl, _ := s.slot(shardmap.SystemTag)
	sl.setOwned([]kv.KeyRange{shardmap.SystemRange})
	return sys, nil
}

// startRoles starts the stateless roles of generation gen at the log's
// recovered version: the sequencer hands out versions above it, the
// resolver knows no conflicts below it (older read versions are too old),
// and the commit proxy loads the shard map from the system stash once it
// has caught up. A new cluster gets its initial shard map and its
// configuration record here, in one transaction. began is when the
// recovery started (a node's began before it claimed the generation).
func (s *Server) startRoles(ctx context.Context, gen uint64, recovered kv.Version, sys *stash.Stash, began time.Time) (err error) {
	shards, fresh, hasConfigRecord, err := s.loadAndCheckShardMap(ctx, sys, recovered)
	if err != nil {
		return err
	}

	backupCfg, err := recoveredBackup(ctx, sys) // backup hook (issue 23)
	if err != nil {
		return err
	}

	r := &txRoles{generation: gen, recovered: recovered, startedAt: began}
	r.seq = sequencer.New(s.opts.Clock, recovered)
	r.res = resolver.NewAt(s.windowVersions(), recovered)
	r.rk = ratekeeper.New(func() ratekeeper.Sample { return s.rateSample(r) }, 100*time.Millisecond).WithClock(s.opts.Clock)
	r.commit = proxy.NewCommitProxy(proxy.CommitOptions{
		Pools: proxyPools(s.cfg), Sequencer: r.seq, Resolver: r.res, Log: s.log, Epoch: gen,
		Shards: shards, ShardsAt: recovered, Usage: s.usage, Logger: s.roleLogger(logRoleProxy),
		Throttle: r.rk, ObserveBatch: func(n int) { s.metrics.batchSize.Observe(float64(n)) },
		Backup: backupCfg, Clock: s.opts.Clock, Retired: s.tagRetired,
	})
	r.grv = proxy.NewGRVProxy(r.seq, r.rk)
	runCtx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.wg.Add(2)
	go func() {
		defer r.wg.Done()
		r.rk.Run(runCtx)
	}()
	go func() {
		defer r.wg.Done()
		r.commit.Run(runCtx)
	}()
	defer func() {
		if err != nil {
			r.stop()
		}
	}()

	if err := s.recordBootstrap(ctx, r, shards, fresh, hasConfigRecord); err != nil {
		return err
	}
	r.recoveryTime = time.Since(began)
	r.backup = s.startBackup(runCtx, r) // backup hook (issue 23)
	r.dd, _ = s.newDistributor(r)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		r.dd.Run(runCtx)
	}()
	// What the process adds to the roles before they serve (a node:
	// its loops that run with them).
	s.link.rolesStarting(r, func(loop func(context.Context)) {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			loop(runCtx)
		}()
	})
	s.tx.Store(r)
	s.metrics.recovered(r.recoveryTime)
	return nil
}

// stop ends the roles: commits in flight end with an unknown result or a
// retryable error.
func (r *txRoles) stop() {
	r.cancel()
	r.wg.Wait()
}

// stopRoles drops the stateless roles this process holds, if any.
func (s *Server) stopRoles() {
	if r := s.tx.Swap(nil); r != nil {
		r.stop()
	}
}

// reportBoard keeps the last report of each stash of other processes, for
// the ratekeeper.
type reportBoard struct {
	mu      sync.Mutex
	reports map[kv.Tag]timedReport // Protected by mu.
}

type timedReport struct {
	logrpc.StashReport
	at time.Time
}

func newReportBoard() *reportBoard { return &reportBoard{reports: map[kv.Tag]timedReport{}} }

func (b *reportBoard) put(r logrpc.StashReport) {
	b.mu.Lock()
	b.reports[r.Tag] = timedReport{StashReport: r, at: time.Now()}
	b.mu.Unlock()
}

// reportFresh is how recent a stash's report must be for the ratekeeper to
// count it: a stash that stopped reporting is down, and a down stash must
// not throttle the cluster (its replicas serve its reads; it catches up
// when it returns). Stashes report every 200 ms: three missed reports and
// it no longer counts, well before the controller declares it dead (2 s),
// so a killed stash's growing lag does not throttle the cluster meanwhile.
const reportFresh = 750 * time.Millisecond

func (b *reportBoard) fresh() []logrpc.StashReport {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []logrpc.StashReport
	for _, r := range b.reports {
		if time.Since(r.at) < reportFresh {
			out = append(out, r.StashReport)
		}
	}
	return out
}

// report records a stash's report (the log service's Report handler).
func (s *Server) report(r logrpc.StashReport) {
	if r.Applied == 0 {
		// A stash that has applied nothing yet: a dram stash asking where
		// the log ends, to start there. It is not behind.
		return
	}
	s.usage.Report(r.Tag, r.UsedBytes, r.Applied)
	s.reports.put(r)
}

// rateSample is what the ratekeeper of roles r watches: the stashes of
// this process and the reports of the others, with the capacity of those
// of durable pools that have one, and whether each is fetching a shard.
//
// A report names no pool (the Report RPC carries none): its pool is that of
// the shards its tag serves or fetches in the commit proxy's shard map, or
// else the one poolTags gives the tag. A stash is fetching while the map
// names it a destination of a move.
func (s *Server) rateSample(r *txRoles) ratekeeper.Sample {
	smp := ratekeeper.Sample{Committed: r.seq.CommittedVersion(), Commits: r.commit.Counters().Commits}
	durable := make(map[string]int64, len(s.cfg.Pools)) // durable pool -> capacity per stash (0: unlimited)
	for _, p := range s.cfg.Pools {
		if !p.Ephemeral() {
			durable[p.Name] = int64(p.Capacity)
		}
	}
	poolOf := map[kv.Tag]string{}
	for pool, tags := range s.poolTags {
		for _, t := range tags {
			poolOf[t] = pool
		}
	}
	fetching := map[kv.Tag]bool{}
	teams := map[string][]kv.Tag{}
	for _, sh := range r.commit.Shards().Shards() {
		for _, t := range sh.Team {
			poolOf[t] = sh.Pool
		}
		for _, t := range sh.Dest {
			poolOf[t], fetching[t] = sh.Pool, true
		}
		if sh.Pool != "system" {
			teams[fmt.Sprint(sh.Team)] = sh.Team
		}
	}
	for _, t := range teams {
		smp.Teams = append(smp.Teams, t)
	}
	smp.Replication = map[string]int{}
	for _, p := range s.cfg.Pools {
		smp.Replication[p.Name] = p.Replication
	}
	if v := s.viewWithin(time.Second); v != nil {
		for _, pr := range v.Replication {
			if pr.Replication > 0 {
				smp.Replication[pr.Pool] = int(pr.Replication)
			}
		}
	}
	for _, sl := range s.slots() {
		h := sl.healthNow()
		if !h.running() {
			continue // failed, damaged or restarting: applies nothing, like a stash that is down
		}
		st := sl.get()
		applied, wb, wl := st.Pressure()
		ss := ratekeeper.StashSample{Tag: sl.tag, Pool: st.Pool(), Applied: applied, WindowBytes: wb, WindowLimitBytes: wl, Fetching: fetching[sl.tag]}
		if h.Health == HealthDiskFull {
			ss.Unhealthy = HealthDiskFull
		}
		if capacity, ok := durable[ss.Pool]; ok {
			// Durable stashes track their live bytes: Usage is cheap.
			ss.UsedBytes, _ = st.Usage()
			ss.CapacityBytes = capacity
		}
		smp.Stashes = append(smp.Stashes, ss)
	}
	for _, rep := range s.reports.fresh() {
		ss := ratekeeper.StashSample{Tag: rep.Tag, Pool: poolOf[rep.Tag], Applied: rep.Applied, UsedBytes: rep.UsedBytes,
			WindowBytes: rep.WindowBytes, WindowLimitBytes: rep.WindowLimitBytes, Fetching: fetching[rep.Tag]}
		ss.CapacityBytes = durable[ss.Pool]
		smp.Stashes = append(smp.Stashes, ss)
	}
	if tag, ok := s.log.Withheld(); ok {
		smp.LogWithheld = ratekeeper.LogWithheldReason(tag, poolOf[tag], s.log.Stats().HeldBytes())
	}
	return smp
}

// logMayDrop is the log's Options.MayDrop: its hold bound may force-pop a
// stash that stopped popping unless that would lose writes no other copy
// holds, i.e. the stash is in a durable pool and a shard whose team names
// it has no other live replica (an ephemeral pool's stash starts empty
// anyway; a durable one with a live teammate is rebuilt from it). Without
// the roles (no shard map in this process) it keeps everything.
func (s *Server) logMayDrop(tag kv.Tag) bool {
	r := s.tx.Load()
	if r == nil {
		return false
	}
	// The data distributor's view of the stashes, from a view at most a
	// second old (as lastView's), so that a flush rarely asks the
	// coordinators itself.
	alive := map[kv.Tag]bool{}
	for _, st := range (&distEnv{s: s, r: r, interval: time.Second}).Stashes() {
		alive[st.Tag] = st.Alive && !st.Retired
	}
	for _, sh := range r.commit.Shards().Shards() {
		if !slices.Contains(sh.Team, tag) {
			continue
		}
		if p, ok := s.cfg.PoolByName(sh.Pool); !ok || p.Ephemeral() {
			continue
		}
		if !slices.ContainsFunc(sh.Team, func(m kv.Tag) bool { return m != tag && alive[m] }) {
			return false
		}
	}
	return true
}

// proxyPools is what the commit proxy needs of cfg's pools: their prefixes
// and the capacity of a durable pool's stashes.
func proxyPools(cfg *config.Config) []proxy.Pool {
	pools := make([]proxy.Pool, len(cfg.Pools))
	for i, p := range cfg.Pools {
		pools[i] = proxy.Pool{Name: p.Name, Prefix: p.Prefix}
		if !p.Ephemeral() {
			pools[i].Capacity = int64(p.Capacity)
		}
	}
	return pools
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

func (l *lazyLog) get() *txlog.Log { return l.p.Load() }

func (l *lazyLog) Peek(ctx context.Context, tag kv.Tag, after kv.Version, maxBytes int) ([]logentry.Message, kv.Version, error) {
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
