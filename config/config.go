// Package config parses and validates a DiStash cluster configuration (TOML).
//
// A configuration names the pools of stashes: each with its key prefix,
// medium, mode, engine, number of stashes, replication degree and per-stash
// capacity. [Parse] and [Load] read a configuration, apply defaults and
// validate it; [Default] is the built-in demo configuration; [Config.Marshal]
// writes one back as TOML that Parse reads to the same value.
//
// # Keys
//
//	[cluster]
//	failure_wait = "60s"   # Go duration, >= 0, default 60s: how long the data
//	                       # distributor waits for a failed stash to return
//	                       # before re-replicating its shards
//	mvcc_window  = "5s"    # Go duration, 1s..1h, default 5s: how far back in
//	                       # time reads may go (older: transaction_too_old)
//	shard_bytes  = "250MiB" # size, >= 1KiB, default 250MiB: the data
//	                       # distributor splits a shard past it
//	dc_delay     = "0s"    # Go duration, 0..10s, default 0: one-way delay
//	                       # the transport adds between nodes of different
//	                       # --dc (emulated data centers)
//
//	[log]
//	replicas = 1           # raft replicas of the transaction log, 1..7,
//	                       # default 1; odd is recommended (2 is allowed but
//	                       # tolerates no more failures than 1)
//
//	[[pool]]               # one table per pool, at least one
//	name        = "cache"  # required, unique, only a-z 0-9 _ -
//	prefix      = "c/"     # required, non-empty; every key with this prefix
//	                       # lives in this pool; may not start with byte 0xff
//	                       # (system key space); no pool's prefix may be a
//	                       # prefix of another's
//	medium      = "dram"   # required: dram | ssd | hdd | nvm
//	mode        = "ephemeral"
//	                       # required: ephemeral (may evict when full) or
//	                       # durable (keeps every acknowledged write)
//	engine      = "memory" # required: memory | pebble | sqlite | flash
//	stashes     = 3        # number of stash instances, 1..1000, default 1
//	                       # (an embedded cluster runs at most
//	                       # server.MaxStashesPerProcess in all)
//	replication = 2        # replicas of each shard, 1..stashes, default 1
//	capacity    = "256MiB" # per stash, > 0, or "unlimited" (the default
//	                       # when absent); 0 is refused: it would hold nothing
//	eviction    = "lru"    # lru | camp, ephemeral pools only, default lru
//	recency     = false    # durable pools: stashes keep keys in access order (DB.ColdestKeys)
//	across_dcs  = false    # place each shard's replicas in distinct data centers
//
//	[pool.flash]           # optional, engine flash only; per stash
//	cache        = "8MiB"  # DRAM read cache, default 8MiB, "0" disables
//	write_buffer = "4MiB"  # recent log bytes kept in DRAM, default 4MiB, "0" disables
//	segment      = "64MiB" # log segment file size, default 64MiB, >= 1MiB
//	direct_io    = false   # read values with O_DIRECT
//	far_memory   = "5us"   # the index and key tree live in emulated memory of
//	                       # this latency (0..1ms); absent or "0" = DRAM. Reads
//	                       # are then served by user-level threads (docs/flash.md)
//	prefetch     = true    # with far_memory: prefetch and yield at each access, default true
//	lookup_threads = 64    # with far_memory: user-level threads per core, 1..4096;
//	                       # default max(64, 2*far_memory/250ns) (docs/flash.md)
//	io           = "uring" # with far_memory: uring | threads; default io_uring
//	                       # where the kernel allows it, else threads
//
//	[pool.pebble]          # optional, engine pebble only; per stash
//	cache        = "64MiB" # block cache, default 64MiB, at least 64KiB
//
//	[pool.device]          # optional: each stash emulates a device (docs/devices.md)
//	profile       = "none" # none | ssd | hdd | nvm, default none (the real device)
//	read_latency  = "80µs" # Go durations >= 0 overriding the profile's figures;
//	write_latency = "100µs" # on profile none they start from zero, so
//	sync_latency  = "1ms"  # read_latency = "1ms" alone emulates just that
//	iops          = 50000  # I/Os per second at most, 0 = no limit
//	bandwidth     = "500MB" # bytes per second at most, reads and writes share it
//	queue_depth   = 32     # I/Os in service at once, >= 1; default the profile's (1 for none)
//	                       # Not on engine sqlite (its files bypass the seam), nor
//	                       # on a DRAM pool without local_log = true.
//
// Unknown keys are errors (keys are case-sensitive). Problems are reported
// as [*FieldError] values naming the field, e.g.
//
//	pool[1] ("data").medium: "tape" is not one of dram, ssd, hdd, nvm
//
// and TOML errors as a [*TOMLError] with the line. [Config.Warnings] lists
// valid but doubtful settings (an even number of log replicas, an ephemeral
// pool without a capacity).
//
// Sizes are a whole number of bytes with an optional, case-insensitive unit:
// B, KB, MB, GB, TB, PB, EB (powers of 10) or KiB, MiB, GiB, TiB, PiB, EiB
// (powers of 2): "4096", "512KiB", "256MiB", "10GiB", "1GB". They may also be
// written as a plain TOML integer of bytes.
//
// Durations are Go duration strings: "500ms", "60s", "1m30s".
//
// # Combinations
//
// Medium dram requires engine memory and engine memory requires medium dram.
// A durable pool needs a non-volatile medium (ssd, hdd or nvm): a dram stash
// loses its data on restart. An ephemeral pool needs an engine that can evict
// (memory or flash; pebble and sqlite cannot). Only ephemeral pools have an
// eviction policy.
package config

import "time"

// Config is a whole cluster configuration.
type Config struct {
	Cluster Cluster `toml:"cluster"`
	Log     Log     `toml:"log"`
	Pools   []Pool  `toml:"pool"`
	// Auth is [auth]: identities and grants. Nil: trusted-network mode.
	Auth *Auth `toml:"auth"`
}

// Cluster holds cluster-wide settings.
type Cluster struct {
	// FailureWait is how long the data distributor waits for a failed stash
	// to return before re-replicating its shards. Default 60s.
	FailureWait Duration `toml:"failure_wait"`
	// MVCCWindow is how far back in time reads may go. Default 5s.
	MVCCWindow Duration `toml:"mvcc_window"`
	// ShardBytes is the size past which the data distributor splits a
	// shard. Default 250MiB (FoundationDB's order of magnitude).
	ShardBytes Size `toml:"shard_bytes"`
	// DCDelay is a one-way delay the transport adds between nodes of
	// different data centers (--dc), to emulate several on one machine.
	// Default 0.
	DCDelay Duration `toml:"dc_delay"`
}

// Log holds settings of the transaction log.
type Log struct {
	// Replicas is the number of raft replicas of the log. Default 1.
	Replicas int `toml:"replicas"`
}

// Pool is one pool of stashes.
type Pool struct {
	Name        string `toml:"name"`
	Prefix      string `toml:"prefix"`
	Medium      string `toml:"medium"`      // dram | ssd | hdd | nvm
	Mode        string `toml:"mode"`        // ephemeral | durable
	Engine      string `toml:"engine"`      // memory | pebble | sqlite | flash
	Stashes     int    `toml:"stashes"`     // number of stash instances
	Replication int    `toml:"replication"` // replicas of each shard, <= Stashes
	Capacity    Size   `toml:"capacity"`    // per stash; 0 = unlimited ("unlimited" in TOML)
	Eviction    string `toml:"eviction"`    // lru | camp (ephemeral pools only)
	// Recency makes the stashes of a durable pool keep their keys in access
	// order, for DB.ColdestKeys (a storage hierarchy's migrator demotes the
	// coldest). Ephemeral pools always keep it (their eviction order).
	Recency bool `toml:"recency"`
	// AcrossDCs places each shard's replicas in distinct data centers
	// (--dc) as far as the pool's stashes allow; otherwise they are spread
	// over zones only.
	AcrossDCs bool `toml:"across_dcs"`
	// LocalLog keeps the contents of each stash of a DRAM ephemeral pool
	// recoverable on its node's disk (a log of what it applies plus
	// periodic snapshots, internal/engine/locallog), so a stash that
	// restarts within failure_wait reloads them instead of starting empty
	// (docs/cluster.md, "A DRAM stash with a local log").
	LocalLog bool `toml:"local_log"`
	// Flash tunes the stashes of a pool whose engine is flash ([pool.flash]);
	// nil, like absent keys, keeps the engine's defaults.
	Flash *Flash `toml:"flash"`
	// Pebble tunes the stashes of a pool whose engine is pebble
	// ([pool.pebble]); nil keeps the engine's defaults.
	Pebble *Pebble `toml:"pebble"`
	// Device makes each stash of the pool emulate a device ([pool.device],
	// docs/devices.md); nil is profile "none", the real device.
	Device *Device `toml:"device"`
}

// Device is a pool's emulated device: a profile's figures (ssd, hdd, nvm;
// "none" starts from zero) with the keys set overriding them. Every stash
// of the pool gets its own device of these figures.
type Device struct {
	// Profile is none | ssd | hdd | nvm; Parse fills in "none".
	Profile      string    `toml:"profile"`
	ReadLatency  *Duration `toml:"read_latency,omitempty"`
	WriteLatency *Duration `toml:"write_latency,omitempty"`
	SyncLatency  *Duration `toml:"sync_latency,omitempty"`
	// IOPS is the I/Os per second the device completes at most (0: no
	// limit); Bandwidth the bytes per second, reads and writes together.
	IOPS      *int  `toml:"iops,omitempty"`
	Bandwidth *Size `toml:"bandwidth,omitempty"`
	// QueueDepth is how many I/Os are in service at once, >= 1; absent:
	// the profile's (1 for none).
	QueueDepth *int `toml:"queue_depth,omitempty"`
}

// DeviceProfiles are the values of [pool.device] profile.
var DeviceProfiles = []string{"none", "ssd", "hdd", "nvm"}

// Emulates reports whether the pool's stashes emulate a device: a profile
// other than none, or on none a latency, IOPS or bandwidth set above 0.
func (p Pool) Emulates() bool {
	d := p.Device
	if d == nil {
		return false
	}
	if d.Profile != "" && d.Profile != "none" {
		return true
	}
	pos := func(v *Duration) bool { return v != nil && v.Duration > 0 }
	return pos(d.ReadLatency) || pos(d.WriteLatency) || pos(d.SyncLatency) ||
		(d.IOPS != nil && *d.IOPS > 0) || (d.Bandwidth != nil && *d.Bandwidth > 0)
}

// Pebble holds the settings of the pebble engine.
type Pebble struct {
	// Cache is each stash's block cache; default 64MiB (the engine's
	// CacheBytes). A small one makes reads reach the device, as the media
	// benchmarks need when the data would otherwise fit in it.
	Cache *Size `toml:"cache,omitempty"`
}

// Flash holds the settings of the flash engine (docs/flash.md).
type Flash struct {
	// Cache is each stash's DRAM read cache; default 8MiB, "0" disables it.
	Cache *Size `toml:"cache,omitempty"`
	// WriteBuffer is how much of the log's most recent bytes each stash
	// keeps in DRAM to serve reads; default 4MiB, "0" disables it.
	WriteBuffer *Size `toml:"write_buffer,omitempty"`
	// Segment is the size of the log's segment files, the unit of
	// cleaning; default 64MiB, at least 1MiB.
	Segment Size `toml:"segment,omitzero"`
	// DirectIO reads values with O_DIRECT, bypassing the page cache, where
	// the file system allows it.
	DirectIO bool `toml:"direct_io,omitempty"`
	// FarMemory is the latency of the emulated microsecond-latency memory
	// that holds each stash's hash index and key tree; absent or "0" keeps
	// them in DRAM (reads take the plain path). With a latency, reads are
	// served by user-level threads on per-core schedulers (docs/flash.md).
	FarMemory *Duration `toml:"far_memory,omitempty"`
	// Prefetch makes each far-memory access prefetch its line and yield to
	// other lookups first; default true. Only with far_memory.
	Prefetch *bool `toml:"prefetch,omitempty"`
	// LookupThreads is the number of user-level threads per core serving
	// lookups; 0 means the default derived from far_memory
	// (flash.DefaultLookupThreads). Only with far_memory.
	LookupThreads int `toml:"lookup_threads,omitzero"`
	// IO is how the schedulers read the device: "uring" or "threads";
	// empty means io_uring where the kernel allows it, else threads. Only
	// with far_memory.
	IO string `toml:"io,omitempty"`
}

// FarMemoryLatency returns the far-memory latency of f, 0 for DRAM.
func (f *Flash) FarMemoryLatency() time.Duration {
	if f == nil || f.FarMemory == nil {
		return 0
	}
	return f.FarMemory.Duration
}

// MaxFarMemory bounds [Flash.FarMemory]: the emulated memory is
// microsecond-latency memory, and a lookup's core spins for it.
const MaxFarMemory = time.Millisecond

// MaxLookupThreads bounds [Flash.LookupThreads].
const MaxLookupThreads = 4096

// Unlimited is how a configuration spells a capacity without a limit.
const Unlimited = "unlimited"

// MaxStashesPerPool bounds a pool's stashes: each is a storage server with
// its own engine, window and goroutines.
const MaxStashesPerPool = 1000

// MinPebbleCache is the smallest [Pebble.Cache] accepted.
const MinPebbleCache = 64 << 10

// MinFlashSegment is the smallest [Flash.Segment] accepted.
const MinFlashSegment = 1 << 20

// Ephemeral reports whether the pool may evict.
func (p Pool) Ephemeral() bool { return p.Mode == "ephemeral" }

// Volatile reports whether the pool's stashes lose their data on restart
// (a dram pool; with LocalLog they may recover it from the local log).
func (p Pool) Volatile() bool { return p.Medium == "dram" }

// Duration is a time.Duration written as a Go duration string ("60s").
type Duration struct{ time.Duration }

// Size is a byte count written as "256MiB", "10GiB", "512KiB", "1000" (bytes), "1GB" (10^9).
type Size int64

// Default values applied by Parse to keys that are absent.
const (
	DefaultFailureWait = 60 * time.Second
	DefaultMVCCWindow  = 5 * time.Second
	DefaultShardBytes  = 250 << 20
	DefaultLogReplicas = 1
	DefaultStashes     = 1
	DefaultReplication = 1
	DefaultEviction    = "lru"
)

// Allowed values of the enumerated pool keys, in the order error messages
// list them.
var (
	media     = []string{"dram", "ssd", "hdd", "nvm"}
	modes     = []string{"ephemeral", "durable"}
	engines   = []string{"memory", "pebble", "sqlite", "flash"}
	evictions = []string{"lru", "camp"}
)

// Default returns the built-in demo configuration: a "cache" pool (prefix
// "c/", DRAM, ephemeral, in-memory engine, LRU eviction, 64MiB per stash) and
// a "data" pool (prefix "d/", SSD, durable, Pebble, 1GiB per stash), each of
// 2 stashes with replication 2, one log replica.
func Default() *Config {
	return &Config{
		Cluster: Cluster{
			FailureWait: Duration{DefaultFailureWait},
			MVCCWindow:  Duration{DefaultMVCCWindow},
			ShardBytes:  DefaultShardBytes,
		},
		Log: Log{Replicas: DefaultLogReplicas},
		Pools: []Pool{
			{
				Name:        "cache",
				Prefix:      "c/",
				Medium:      "dram",
				Mode:        "ephemeral",
				Engine:      "memory",
				Stashes:     2,
				Replication: 2,
				Capacity:    64 * MiB,
				Eviction:    "lru",
			},
			{
				Name:        "data",
				Prefix:      "d/",
				Medium:      "ssd",
				Mode:        "durable",
				Engine:      "pebble",
				Stashes:     2,
				Replication: 2,
				Capacity:    1 * GiB,
			},
		},
	}
}

// PoolForKey returns the pool whose prefix is a prefix of key. In a valid
// configuration prefixes do not overlap, so there is at most one.
func (c *Config) PoolForKey(key []byte) (*Pool, bool) {
	for i := range c.Pools {
		p := c.Pools[i].Prefix
		if p != "" && len(key) >= len(p) && string(key[:len(p)]) == p {
			return &c.Pools[i], true
		}
	}
	return nil, false
}

// PoolByName returns the pool named name.
func (c *Config) PoolByName(name string) (*Pool, bool) {
	for i := range c.Pools {
		if c.Pools[i].Name == name {
			return &c.Pools[i], true
		}
	}
	return nil, false
}
