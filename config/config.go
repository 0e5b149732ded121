// Package config parses and validates a DiStash cluster configuration (TOML).
//
// A configuration names the pools of stashes: each with its key prefix,
// medium, mode, engine, number of stashes, replication degree and per-stash
// capacity. See Default for the built-in configuration and the README for
// every key.
package config

import "time"

// Config is a whole cluster configuration.
type Config struct {
	Cluster Cluster `toml:"cluster"`
	Log     Log     `toml:"log"`
	Pools   []Pool  `toml:"pool"`
}

// Cluster holds cluster-wide settings.
type Cluster struct {
	// FailureWait is how long the data distributor waits for a failed stash
	// to return before re-replicating its shards. Default 60s.
	FailureWait Duration `toml:"failure_wait"`
	// MVCCWindow is how far back in time reads may go. Default 5s.
	MVCCWindow Duration `toml:"mvcc_window"`
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
	Capacity    Size   `toml:"capacity"`    // per stash
	Eviction    string `toml:"eviction"`    // lru | camp (ephemeral pools only)
}

// Ephemeral reports whether the pool may evict.
func (p Pool) Ephemeral() bool { return p.Mode == "ephemeral" }

// Volatile reports whether the pool's stashes lose their data on restart.
func (p Pool) Volatile() bool { return p.Medium == "dram" }

// Duration is a time.Duration written as a Go duration string ("60s").
type Duration struct{ time.Duration }

// Size is a byte count written as "256MiB", "10GiB", "512KiB", "1000" (bytes), "1GB" (10^9).
type Size int64
