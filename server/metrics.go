package server

import (
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/distash/distash/internal/fsys/devfs"
	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/ratekeeper"
	"github.com/distash/distash/internal/shardmap"
)

// Prometheus metrics of a server (docs/metrics.md lists them). Each Server
// has its own registry, not the global default: tests run several servers
// in one process. Most figures already exist as the status's counters and
// sizes (stashes, the log, the commit proxy, the ratekeeper, the data
// distributor): a collector reads them at scrape time, so serving requests
// pays nothing for them. Only what no role counts is recorded as it
// happens: the latency of commits, read versions and reads, the sizes of
// commit batches and the recoveries of this node.

// latencyBuckets are the buckets of the latency histograms, in seconds:
// 50µs to about 26s, doubling.
var latencyBuckets = prometheus.ExponentialBuckets(50e-6, 2, 20)

// metrics holds a server's registry and the metrics recorded in code.
type metrics struct {
	reg *prometheus.Registry

	commit, grv latency
	reads       *prometheus.HistogramVec // per stash: pool, stash, medium, mode
	recentReads *recentHist              // every stash of this process
	batchSize   prometheus.Histogram
	recoveries  prometheus.Counter
	recoveryDur prometheus.Histogram
	// authRefused and auditActions: the audit log's counters (audit.go).
	authRefused, auditActions *prometheus.CounterVec
}

// stashLabels are the labels of per-stash metrics.
var stashLabels = []string{"pool", "stash", "medium", "mode"}

func newMetrics(s *Server) *metrics {
	m := &metrics{reg: prometheus.NewRegistry(), recentReads: &recentHist{}}
	m.commit = latency{recent: &recentHist{}, hist: prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "distash_commit_latency_seconds", Buckets: latencyBuckets,
		Help: "Time a commit request spends in the commit proxy of this node, from arrival to reply (every outcome).",
	})}
	m.grv = latency{recent: &recentHist{}, hist: prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "distash_grv_latency_seconds", Buckets: latencyBuckets,
		Help: "Time a read-version request spends in the GRV proxy of this node, ratekeeper throttling included.",
	})}
	m.reads = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "distash_stash_read_latency_seconds", Buckets: latencyBuckets,
		Help: "Time a stash takes to serve a read request (point reads of one request, or one range read), waiting for its version included.",
	}, stashLabels)
	m.batchSize = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "distash_commit_batch_size", Buckets: prometheus.ExponentialBuckets(1, 2, 11),
		Help: "Transactions per commit batch of the commit proxy of this node (batches that carry any).",
	})
	m.recoveries = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "distash_recoveries_total",
		Help: "Recoveries this node ran (an embedded cluster's start counts as one): each starts a generation's stateless roles.",
	})
	m.recoveryDur = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "distash_recovery_duration_seconds", Buckets: prometheus.ExponentialBuckets(0.01, 2, 14),
		Help: "Duration of the recoveries this node ran, from their start to serving.",
	})
	m.authRefused, m.auditActions = newAuditMetrics()
	m.reg.MustRegister(
		m.authRefused, m.auditActions,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.commit.hist.(prometheus.Collector), m.grv.hist.(prometheus.Collector), m.reads, m.batchSize,
		m.recoveries, m.recoveryDur,
		collector{s},
	)
	return m
}

// recovered records a recovery of this node that took d.
func (m *metrics) recovered(d time.Duration) {
	m.recoveries.Inc()
	m.recoveryDur.Observe(d.Seconds())
}

// stashReads returns the read latency of stash tag of pool (the system
// stash has none: its reads are the cluster's own).
func (s *Server) stashReads(tag kv.Tag, pool string) latency {
	if tag == shardmap.SystemTag {
		return latency{}
	}
	medium, mode := s.poolKind(pool)
	return latency{hist: s.metrics.reads.WithLabelValues(pool, tagLabel(tag), medium, mode), recent: s.metrics.recentReads}
}

// poolKind returns the medium and mode of pool, as labels.
func (s *Server) poolKind(pool string) (medium, mode string) {
	if p, ok := s.cfg.PoolByName(pool); ok {
		return p.Medium, p.Mode
	}
	return "", ""
}

func tagLabel(t kv.Tag) string { return strconv.FormatUint(uint64(t), 10) }

// latency is a latency histogram and the recent window status reads
// percentiles from. The zero value records nothing.
type latency struct {
	hist   prometheus.Observer
	recent *recentHist
}

func (l latency) observe(d time.Duration) {
	if l.hist == nil {
		return
	}
	l.hist.Observe(d.Seconds())
	l.recent.observe(d)
}

// recentHist counts latencies over the last recentSeconds seconds, for the
// percentiles status shows (a Prometheus histogram only grows). Each
// second has its slot of logarithmic buckets (4 per doubling, so a
// percentile is within 10%); a slot is cleared when its second comes
// round again. Recording is a few atomic operations: it runs on every
// commit and read.
type recentHist struct {
	mu    sync.Mutex // serializes clearing a slot
	slots [recentSeconds]recentSlot
}

const (
	recentSeconds = 10
	recentBuckets = 112 // 1µs * 2^(112/4): about 4.5 minutes
)

type recentSlot struct {
	sec    atomic.Int64 // the Unix second the counts are of
	counts [recentBuckets]atomic.Int64
}

func recentBucket(d time.Duration) int {
	us := float64(d) / float64(time.Microsecond)
	if us <= 1 {
		return 0
	}
	return min(int(4*math.Log2(us)), recentBuckets-1)
}

func (h *recentHist) observe(d time.Duration) { h.observeAt(time.Now(), d) }

func (h *recentHist) observeAt(now time.Time, d time.Duration) {
	sec := now.Unix()
	sl := &h.slots[sec%recentSeconds]
	if sl.sec.Load() != sec {
		h.mu.Lock()
		if sl.sec.Load() != sec {
			for i := range sl.counts {
				sl.counts[i].Store(0)
			}
			sl.sec.Store(sec)
		}
		h.mu.Unlock()
	}
	sl.counts[recentBucket(d)].Add(1)
}

// quantiles returns the latencies at quantiles qs (0 < q <= 1) of what was
// recorded in the last recentSeconds seconds, in milliseconds; zeros if
// nothing was.
func (h *recentHist) quantiles(now time.Time, qs ...float64) []float64 {
	out := make([]float64, len(qs))
	if h == nil {
		return out
	}
	var counts [recentBuckets]int64
	var total int64
	sec := now.Unix()
	for i := range h.slots {
		sl := &h.slots[i]
		if s := sl.sec.Load(); s > sec-recentSeconds && s <= sec {
			for b := range counts {
				n := sl.counts[b].Load()
				counts[b] += n
				total += n
			}
		}
	}
	if total == 0 {
		return out
	}
	for i, q := range qs {
		rank := int64(math.Ceil(q * float64(total)))
		var seen int64
		for b, n := range counts {
			seen += n
			if seen >= rank {
				// The bucket's geometric middle, in milliseconds.
				out[i] = math.Exp2((float64(b)+0.5)/4) / 1000
				break
			}
		}
	}
	return out
}

// collector reads the server's status figures at scrape time.
type collector struct{ s *Server }

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

// The collector's metrics. Stash metrics carry stashLabels; the stash
// label is the stash's id (status's ID; its tag in the log).
var (
	descStashKeys      = desc("distash_stash_keys", "Live keys of the stash at its newest version.", stashLabels...)
	descStashBytes     = desc("distash_stash_bytes", "Live key and value bytes of the stash at its newest version.", stashLabels...)
	descStashEngine    = desc("distash_stash_engine_bytes", "Bytes the stash's engine holds (an ephemeral pool: within its capacity).", stashLabels...)
	descStashCapacity  = desc("distash_stash_capacity_bytes", "Capacity of the stash (its pool's capacity per stash); 0 = unbounded.", stashLabels...)
	descStashWindow    = desc("distash_stash_mvcc_window_bytes", "Memory of the stash's MVCC window (versions not yet flushed to its engine).", stashLabels...)
	descStashWindowLim = desc("distash_stash_mvcc_window_limit_bytes", "Memory budget of the stash's MVCC window.", stashLabels...)
	descStashReads     = desc("distash_stash_reads_total", "Reads the stash served: keys of point reads, and range reads.", stashLabels...)
	descStashHits      = desc("distash_stash_hits_total", "Point reads that found their key (ephemeral pools count them).", stashLabels...)
	descStashMisses    = desc("distash_stash_misses_total", "Point reads that did not find their key (ephemeral pools count them).", stashLabels...)
	descStashEvictions = desc("distash_stash_evictions_total", "Keys the stash's engine evicted to stay within its capacity.", stashLabels...)
	descStashFilterNeg = desc("distash_stash_filter_negatives_total", "Reads of absent keys a Bloom filter answered without reading the engine.", stashLabels...)
	descStashApplied   = desc("distash_stash_applied_version", "Newest version the stash applied from the log.", stashLabels...)
	descStashDurable   = desc("distash_stash_durable_version", "Newest version the stash's engine holds durably.", stashLabels...)
	descStashLag       = desc("distash_stash_version_lag_seconds", "How far the stash's applied version is behind the log's last version (versions are microseconds).", stashLabels...)
	descStashHealthy   = desc("distash_stash_healthy", "1 while the stash serves, 0 while it restarts or after it failed.", stashLabels...)
	descStashRestarts  = desc("distash_stash_restarts_total", "Restarts of the stash after failures.", stashLabels...)
	descStashHealth    = desc("distash_stash_health", "The stash's health (value 1): healthy, restarting, failed, disk_full or damaged.", append(slices.Clone(stashLabels), "health")...)

	// Of a stash's emulated device ([pool.device]); absent without one.
	descDevBusy    = desc("distash_stash_device_busy_ratio", "Fraction of about the last 10 s during which the stash's emulated device had an I/O in service (iostat %util).", stashLabels...)
	descDevQueue   = desc("distash_stash_device_queue_length", "I/Os waiting or in service at the stash's emulated device now.", stashLabels...)
	descDevIO      = desc("distash_stash_device_io_seconds", "Latency of the I/Os of the stash's emulated device, queueing included, by op (read, write, sync).", append(slices.Clone(stashLabels), "op")...)
	descDevRead    = desc("distash_stash_device_read_bytes_total", "Bytes read from the stash's emulated device.", stashLabels...)
	descDevWritten = desc("distash_stash_device_written_bytes_total", "Bytes written to the stash's emulated device.", stashLabels...)

	// Of a flash stash whose index is in far memory (far_memory > 0).
	descFarLookups    = desc("distash_stash_far_memory_lookups_total", "Reads served by the stash's far-memory lookups (a point read per key, a range read each).", stashLabels...)
	descFarAccesses   = desc("distash_stash_far_memory_accesses_total", "Far-memory lines the stash's lookups accessed.", stashLabels...)
	descFarPrefetches = desc("distash_stash_far_memory_prefetches_total", "Prefetches the stash's lookups issued to far memory.", stashLabels...)
	descFarStall      = desc("distash_stash_far_memory_stall_seconds_total", "Time the stash's scheduler cores stalled on far memory.", stashLabels...)
	descFarDevice     = desc("distash_stash_far_memory_device_reads_total", "Device reads the stash's lookups waited for.", stashLabels...)
	descFarLookupsNow = desc("distash_stash_far_memory_lookups", "Lookups of the stash in progress now, by state (runnable, waiting, queued).", append(slices.Clone(stashLabels), "state")...)

	descPoolInfo     = desc("distash_pool_info", "The pools of the configuration (value 1).", "pool", "medium", "mode", "engine")
	descPoolShards   = desc("distash_pool_shards", "Shards of the pool (data distributor).", "pool")
	descPoolTeams    = desc("distash_pool_teams", "Teams of the pool's stashes (data distributor).", "pool")
	descPoolRepl     = desc("distash_pool_replication", "Replicas of each shard of the pool in force.", "pool")
	descPoolUnder    = desc("distash_pool_under_replicated_shards", "Shards of the pool with fewer live replicas than its replication.", "pool")
	descPoolMoving   = desc("distash_pool_moving_shards", "Shards of the pool being moved now.", "pool")
	descPoolLeft     = desc("distash_pool_moving_remaining_bytes", "Estimated bytes the pool's moves in flight still have to copy.", "pool")
	descPoolQueued   = desc("distash_pool_queued_moves", "Moves of the pool waiting in the relocation queue.", "pool")
	descPoolMoves    = desc("distash_pool_moves_total", "Moves of the pool done by the data distributor of the current generation.", "pool")
	descPoolEstBytes = desc("distash_pool_estimated_bytes", "Estimated bytes of the pool (one replica), from the stashes' samples.", "pool")

	descCommits     = desc("distash_commits_total", "Transactions committed by the commit proxy of this node (current generation).")
	descConflicts   = desc("distash_commit_conflicts_total", "Transactions that failed with a conflict (current generation).")
	descTooOld      = desc("distash_commit_too_old_total", "Transactions whose read version was too old to commit (current generation).")
	descPoolFull    = desc("distash_commit_pool_full_total", "Transactions refused because a durable pool was full (current generation).")
	descBatches     = desc("distash_commit_batches_total", "Commit batches, empty ones (version advances) included (current generation).")
	descQueued      = desc("distash_commit_proxy_queued_bytes", "Memory of the transactions the commit proxy holds, from arrival to reply.")
	descCommitted   = desc("distash_committed_version", "Latest committed version (the read version handed out).")
	descRateLimit   = desc("distash_ratekeeper_limit_transactions_per_second", "Transactions per second the ratekeeper allows; 0 = unlimited.")
	descRateReason  = desc("distash_ratekeeper_reason", "Why the ratekeeper limits (value 1): none, stash_lag, fetch_lag, mvcc_window, capacity, recovering, log_held.", "reason")
	descLastRecover = desc("distash_last_recovery_duration_seconds", "Duration of the recovery that started the stateless roles this node holds.")

	descLogLast     = desc("distash_log_last_version", "Last version of the log replica of this node.")
	descLogEntries  = desc("distash_log_entries", "Log entries the replica holds in memory (not popped by every stash).")
	descLogBytes    = desc("distash_log_bytes", "Encoded bytes of the log entries the replica holds.")
	descLogMemory   = desc("distash_log_memory_bytes", "Memory of the log entries the replica holds in memory, their per-stash index included.")
	descLogSpilled  = desc("distash_log_spilled_bytes", "Encoded bytes of the log entries the replica spilled to disk.")
	descLogPopped   = desc("distash_log_min_popped_version", "Lowest version popped over every stash: the log holds what comes after.")
	descLogHeldEnt  = desc("distash_log_held_entries", "Log entries held for one stash (tag): after its popped version.", "stash")
	descLogHeldByte = desc("distash_log_held_bytes", "Encoded bytes of the log entries held for one stash (tag).", "stash")

	descNodeInfo = desc("distash_node_info", "This node (value 1): its id (\"embedded\" for an embedded cluster), class, pool, data center and zone.",
		"node", "class", "pool", "dc", "zone")
	descNodeRole       = desc("distash_node_role", "The roles this node holds now (value 1 each).", "role")
	descNodeGeneration = desc("distash_node_generation", "The latest generation this node knows.")
)

var allDescs = []*prometheus.Desc{
	descStashKeys, descStashBytes, descStashEngine, descStashCapacity, descStashWindow, descStashWindowLim,
	descStashReads, descStashHits, descStashMisses, descStashEvictions, descStashFilterNeg, descStashApplied,
	descStashDurable, descStashLag, descStashHealthy, descStashRestarts, descStashHealth,
	descDevBusy, descDevQueue, descDevIO, descDevRead, descDevWritten,
	descFarLookups, descFarAccesses, descFarPrefetches, descFarStall, descFarDevice, descFarLookupsNow,
	descPoolInfo, descPoolShards, descPoolTeams, descPoolRepl, descPoolUnder, descPoolMoving, descPoolLeft,
	descPoolQueued, descPoolMoves, descPoolEstBytes,
	descCommits, descConflicts, descTooOld, descPoolFull, descBatches, descQueued, descCommitted, descRateLimit,
	descRateReason, descLastRecover,
	descLogLast, descLogEntries, descLogBytes, descLogMemory, descLogSpilled, descLogPopped, descLogHeldEnt, descLogHeldByte,
	descNodeInfo, descNodeRole, descNodeGeneration,
}

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range allDescs {
		ch <- d
	}
}

// emit sends one sample; a bad label value (not UTF-8, say) makes an
// invalid metric, which fails the scrape's gathering, not the process.
func emit(ch chan<- prometheus.Metric, d *prometheus.Desc, t prometheus.ValueType, v float64, labels ...string) {
	m, err := prometheus.NewConstMetric(d, t, v, labels...)
	if err != nil {
		m = prometheus.NewInvalidMetric(d, err)
	}
	ch <- m
}

func gauge(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labels ...string) {
	emit(ch, d, prometheus.GaugeValue, v, labels...)
}

func counter(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labels ...string) {
	emit(ch, d, prometheus.CounterValue, v, labels...)
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	c.collectNode(ch)
	for _, p := range s.cfg.Pools {
		gauge(ch, descPoolInfo, 1, p.Name, p.Medium, p.Mode, p.Engine)
	}
	// The log's last version, for the stashes' lag: this process's replica,
	// or (a stash node) what the log's node last answered its report.
	var logLast kv.Version
	if l := s.logReplica(); l != nil {
		c.collectLog(ch)
		logLast = l.LastVersion()
	} else {
		logLast = s.link.reportedLogLast()
	}
	c.collectStashes(ch, logLast)
	if r := s.tx.Load(); r != nil {
		c.collectRoles(ch, r)
	}
}

func (c collector) collectNode(ch chan<- prometheus.Metric) {
	s := c.s
	ns := s.link.status()
	if ns == nil {
		// An embedded cluster holds every role, for its one generation.
		gauge(ch, descNodeInfo, 1, embeddedNode, "embedded", "", "", "")
		gauge(ch, descNodeGeneration, 0)
		for _, role := range []string{"log", "sequencer", "grv_proxy", "commit_proxy", "resolver", "ratekeeper", "distributor", "stash"} {
			gauge(ch, descNodeRole, 1, role)
		}
		return
	}
	gauge(ch, descNodeInfo, 1, ns.Id, ns.Class, ns.Pool, ns.Dc, ns.Zone)
	gauge(ch, descNodeGeneration, float64(ns.Generation))
	for _, role := range ns.Roles {
		gauge(ch, descNodeRole, 1, role)
	}
}

func (c collector) collectStashes(ch chan<- prometheus.Metric, logLast kv.Version) {
	s := c.s
	for _, sl := range s.slots() {
		if sl.tag == shardmap.SystemTag {
			continue
		}
		st := sl.get().Stats()
		medium, mode := s.poolKind(st.Pool)
		l := []string{st.Pool, tagLabel(st.Tag), medium, mode}
		gauge(ch, descStashKeys, float64(st.Keys), l...)
		gauge(ch, descStashBytes, float64(st.Bytes), l...)
		gauge(ch, descStashEngine, float64(st.EngineBytes), l...)
		gauge(ch, descStashCapacity, float64(st.CapacityBytes), l...)
		gauge(ch, descStashWindow, float64(st.WindowBytes), l...)
		gauge(ch, descStashWindowLim, float64(st.WindowLimitBytes), l...)
		counter(ch, descStashReads, float64(st.Reads), l...)
		counter(ch, descStashHits, float64(st.Hits), l...)
		counter(ch, descStashMisses, float64(st.Misses), l...)
		counter(ch, descStashEvictions, float64(st.Evictions), l...)
		counter(ch, descStashFilterNeg, float64(st.FilterNegatives), l...)
		gauge(ch, descStashApplied, float64(st.Applied), l...)
		gauge(ch, descStashDurable, float64(st.Durable), l...)
		if logLast > 0 {
			gauge(ch, descStashLag, float64(max(0, logLast-st.Applied))/kv.VersionsPerSecond, l...)
		}
		h := sl.healthNow()
		healthy := 0.0
		if h.Health == HealthHealthy {
			healthy = 1
		}
		gauge(ch, descStashHealthy, healthy, l...)
		gauge(ch, descStashHealth, 1, append(slices.Clone(l), h.Health)...)
		counter(ch, descStashRestarts, float64(h.Restarts), l...)
		if d := s.deviceOf(st.Tag); d != nil {
			collectDevice(ch, d, l)
		}
		if f := farMemoryStatus(sl.get().Engine()); f != nil {
			counter(ch, descFarLookups, float64(f.Lookups), l...)
			counter(ch, descFarAccesses, float64(f.Accesses), l...)
			counter(ch, descFarPrefetches, float64(f.Prefetches), l...)
			counter(ch, descFarStall, float64(f.StallNs)/1e9, l...)
			counter(ch, descFarDevice, float64(f.DeviceReads), l...)
			for _, n := range []struct {
				state string
				v     int64
			}{{"runnable", f.Runnable}, {"waiting", f.Waiting}, {"queued", f.Queued}} {
				gauge(ch, descFarLookupsNow, float64(n.v), append(slices.Clone(l), n.state)...)
			}
		}
	}
}

// collectDevice emits the metrics of a stash's emulated device, labelled l.
func collectDevice(ch chan<- prometheus.Metric, d *devfs.Device, l []string) {
	st := d.Stats()
	gauge(ch, descDevBusy, d.BusyFraction(deviceBusyWindow), l...)
	gauge(ch, descDevQueue, float64(st.QueueLength), l...)
	counter(ch, descDevRead, float64(st.ReadBytes), l...)
	counter(ch, descDevWritten, float64(st.WrittenBytes), l...)
	for _, op := range []struct {
		name string
		h    devfs.Histogram
	}{{"read", st.ReadLatency}, {"write", st.WriteLatency}, {"sync", st.SyncLatency}} {
		// Every other bound of the device's histogram: 5 a decade, 1 µs
		// to 10 s, exact cumulative counts.
		buckets := map[float64]uint64{}
		for i, b := range op.h.Buckets() {
			if i%2 == 0 {
				buckets[b.UpperBound.Seconds()] = b.Count
			}
		}
		m, err := prometheus.NewConstHistogram(descDevIO, op.h.Count, op.h.Sum.Seconds(), buckets, append(slices.Clone(l), op.name)...)
		if err != nil {
			m = prometheus.NewInvalidMetric(descDevIO, err)
		}
		ch <- m
	}
}

func (c collector) collectLog(ch chan<- prometheus.Metric) {
	l := c.s.logReplica()
	st := l.Stats()
	gauge(ch, descLogLast, float64(st.LastVersion))
	gauge(ch, descLogEntries, float64(st.Entries))
	gauge(ch, descLogBytes, float64(st.Bytes))
	gauge(ch, descLogMemory, float64(st.Memory))
	gauge(ch, descLogSpilled, float64(st.Spilled))
	gauge(ch, descLogPopped, float64(st.MinPopped))
	for tag, h := range l.Held() {
		gauge(ch, descLogHeldEnt, float64(h.Entries), tagLabel(tag))
		gauge(ch, descLogHeldByte, float64(h.Bytes), tagLabel(tag))
	}
}

func (c collector) collectRoles(ch chan<- prometheus.Metric, r *txRoles) {
	cs := r.commit.Counters()
	counter(ch, descCommits, float64(cs.Commits))
	counter(ch, descConflicts, float64(cs.Conflicts))
	counter(ch, descTooOld, float64(cs.TooOld))
	counter(ch, descPoolFull, float64(cs.PoolFull))
	counter(ch, descBatches, float64(cs.Batches))
	gauge(ch, descQueued, float64(r.commit.QueuedBytes()))
	gauge(ch, descCommitted, float64(r.seq.CommittedVersion()))
	gauge(ch, descLastRecover, r.recoveryTime.Seconds())
	rate, reason := r.rk.Status()
	if math.IsInf(rate, 1) {
		rate = 0
	}
	gauge(ch, descRateLimit, rate)
	gauge(ch, descRateReason, 1, ratekeeper.ReasonKind(reason))
	if r.dd == nil {
		return
	}
	pools, _ := r.dd.Status()
	for _, p := range c.s.cfg.Pools {
		ps, ok := pools[p.Name]
		if !ok {
			continue
		}
		gauge(ch, descPoolShards, float64(ps.Shards), p.Name)
		gauge(ch, descPoolTeams, float64(ps.Teams), p.Name)
		gauge(ch, descPoolRepl, float64(ps.Replication), p.Name)
		gauge(ch, descPoolUnder, float64(ps.UnderReplicated), p.Name)
		gauge(ch, descPoolMoving, float64(ps.Moving), p.Name)
		gauge(ch, descPoolLeft, float64(ps.MovingBytesLeft), p.Name)
		gauge(ch, descPoolQueued, float64(ps.Queued), p.Name)
		counter(ch, descPoolMoves, float64(ps.MovesDone), p.Name)
		gauge(ch, descPoolEstBytes, float64(ps.Bytes), p.Name)
	}
}
