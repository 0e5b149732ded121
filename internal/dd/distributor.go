package dd

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/distash/distash/internal/clock"
	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/shardmap"
)

// StashInfo is what the distributor knows of a stash of the cluster.
type StashInfo struct {
	Tag      kv.Tag
	Pool     string
	DC, Zone string
	Address  string
	// Alive: the cluster controller (or, embedded, the process) hears
	// from it now.
	Alive bool
	// Excluded by an operator: its shards move off it.
	Excluded bool
	// Retired: replaced after a failure; it never serves again.
	Retired bool
	// RetiredAt: for a retired stash no slot holds any more, the address
	// its node was at (Address is then ""), if known.
	RetiredAt string
	// GivenUp: an operator declared it failed and gave up its data
	// (distash cli exclude --failed): a durable shard whose replicas are
	// all retired, one of them given up, starts empty instead of holding.
	GivenUp bool
}

// Metrics is a stash's answer about one range (see stash.RangeMetrics).
type Metrics struct {
	Bytes        int64
	SplitKey     []byte
	State        string // serving | fetching | copied | partial | none
	FetchedBytes int64
	// WriteRate is bytes written per second lately; WriteSplitKey halves it.
	WriteRate     float64
	WriteSplitKey []byte
	// Applied is the version the stash had applied when it answered: its
	// State reflects the shard map only once Applied reaches the map's
	// version (Env.Shards).
	Applied kv.Version
}

// Env is how the distributor sees and changes the cluster.
type Env interface {
	// Shards returns the shard map now (the distributor does not change it)
	// and a version at or past its last change: a stash that has applied
	// it knows every assignment of the map. A stash behind it may answer
	// from an older ownership (one it recovered after a restart, or a range
	// it has not yet been told to drop), which must not finish a move.
	Shards() (*shardmap.Map, kv.Version)
	// Stashes returns every stash of the cluster.
	Stashes() []StashInfo
	// Metrics asks stash tag about ranges.
	Metrics(ctx context.Context, tag kv.Tag, ranges []kv.KeyRange, splitKeys bool) ([]Metrics, error)
	// CommitShards commits a change of the shard map: the shards to set
	// and the shard keys (begins) to clear, in one transaction.
	CommitShards(ctx context.Context, set []shardmap.Shard, clear [][]byte) error
	// Retire tells the log and the controller that tag will never serve
	// again (no shard names it): the log stops keeping its entries.
	Retire(ctx context.Context, tag kv.Tag) error
}

// PoolSettings is what the distributor needs of a pool's configuration.
type PoolSettings struct {
	Name        string
	Prefix      []byte
	Replication int
	Ephemeral   bool
	AcrossDCs   bool
}

// Options configure a Distributor.
type Options struct {
	Env Env
	// Pools returns the pools with the replication in force now.
	Pools func() []PoolSettings
	// FailureWait returns how long a stash may be unreachable before its
	// shards are re-replicated.
	FailureWait func() time.Duration
	// ShardBytes is the size past which a shard splits.
	ShardBytes int64
	// WriteSplitRate is the write rate (bytes/s) past which a shard of at
	// least ShardBytes/8 splits; default ShardBytes per minute, at least
	// 256 KiB/s.
	WriteSplitRate float64
	// Interval between rounds; default 250ms.
	Interval time.Duration
	// MaxMoves is the number of moves in flight per pool; default 8.
	MaxMoves int
	// Imbalance is the fraction above the pool's mean bytes a stash may
	// hold before a shard moves off it; default 0.1.
	Imbalance float64
	Logger    *slog.Logger
	// Clock tells the time of rounds (how long a stash has been down);
	// default the system clock.
	Clock clock.Clock
}

// Distributor is the data distributor of a cluster: for every pool it
// keeps each shard on R live stashes in distinct zones, splits shards that
// grow past ShardBytes and merges small neighbours, re-replicates the
// shards of stashes that stayed unreachable for the failure wait, drains
// excluded stashes and balances bytes over the pool's stashes. It changes
// the shard map only by transactions (Env.CommitShards); a move adds the
// destinations to the shard (Dest: they fetch it while receiving its new
// writes), then, once every destination serves it, makes the new team
// the shard's team.
type Distributor struct {
	opts Options

	mu        sync.Mutex
	moves     map[string]*Move        // by shard begin. Protected by mu.
	downSince map[kv.Tag]time.Time    // Protected by mu.
	retired   map[kv.Tag]bool         // retired by this distributor. Protected by mu.
	failedAt  map[kv.Tag]string       // tags seen failed, with their pool. Protected by mu.
	status    map[string]*PoolStatus  // Protected by mu.
	stashLoad map[kv.Tag]StashSummary // Protected by mu.
	done      map[string]int64        // moves finished, per pool. Protected by mu.
}

// PoolStatus is the distributor's view of a pool, for status.
type PoolStatus struct {
	Pool            string
	Shards, Teams   int
	Replication     int
	UnderReplicated int
	Moving          int
	MovingBytesLeft int64
	Queue           []Relocation // in flight first (InFlight), then queued
	InFlight        int
	Queued          int
	Warning         string
	Bytes           int64
	MovesDone       int64
	FailureWait     time.Duration
}

// StashSummary is a stash's share of its pool.
type StashSummary struct {
	Shards   int
	Fetching int
	Bytes    int64
}

// New returns a distributor; Run it.
func New(opts Options) *Distributor {
	if opts.Interval <= 0 {
		opts.Interval = 250 * time.Millisecond
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	lim := opts.limits().withDefaults()
	opts.ShardBytes, opts.WriteSplitRate, opts.MaxMoves, opts.Imbalance = lim.ShardBytes, lim.WriteSplitRate, lim.MaxMoves, lim.Imbalance
	return &Distributor{opts: opts, moves: map[string]*Move{}, downSince: map[kv.Tag]time.Time{},
		done: map[string]int64{}, retired: map[kv.Tag]bool{}, failedAt: map[kv.Tag]string{}, status: map[string]*PoolStatus{}, stashLoad: map[kv.Tag]StashSummary{}}
}

func (o *Options) limits() Limits {
	return Limits{ShardBytes: o.ShardBytes, WriteSplitRate: o.WriteSplitRate, MaxMoves: o.MaxMoves, Imbalance: o.Imbalance}
}

// withDefaults fills the limits left zero.
func (l Limits) withDefaults() Limits {
	if l.MaxMoves <= 0 {
		l.MaxMoves = 8
	}
	if l.Imbalance <= 0 {
		l.Imbalance = 0.1
	}
	if l.ShardBytes <= 0 {
		l.ShardBytes = 250 << 20
	}
	if l.WriteSplitRate <= 0 {
		// A shard's worth a minute, but at least 256 KiB/s: a few writes a
		// second to a small shard do not make it split.
		l.WriteSplitRate = max(float64(l.ShardBytes)/60, 256<<10)
	}
	return l
}

// Run runs rounds until ctx ends: every Interval, or five times as often
// while moves are in flight, so that a move is finished soon after its
// copy is done rather than a whole interval later.
func (d *Distributor) Run(ctx context.Context) {
	wait := d.opts.Interval
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		if err := d.Tick(ctx); err != nil && ctx.Err() == nil {
			d.opts.Logger.Warn("data distributor round failed", "err", err)
		}
		wait = d.opts.Interval
		if d.moving() {
			wait = max(d.opts.Interval/5, time.Millisecond)
		}
	}
}

// moving reports whether a move is in flight.
func (d *Distributor) moving() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.moves) > 0
}

// Status returns the status of every pool, and every stash's share.
func (d *Distributor) Status() (map[string]PoolStatus, map[kv.Tag]StashSummary) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[string]PoolStatus, len(d.status))
	for k, v := range d.status {
		out[k] = *v
	}
	loads := make(map[kv.Tag]StashSummary, len(d.stashLoad))
	for k, v := range d.stashLoad {
		loads[k] = v
	}
	return out, loads
}
