package server

import (
	"github.com/distash/distash/config"
	pebbleengine "github.com/distash/distash/internal/engine/pebble"
	"github.com/distash/distash/internal/proxy"
	"github.com/distash/distash/internal/stash"
	"github.com/distash/distash/internal/txlog"
)

// windowBudget is the MVCC window budget (stash.Options.WindowBytes) of a
// stash of pool p: the stash default, or for an ephemeral pool with a
// capacity half of it (a small cache keeps a small window too) and at least
// 256 KiB.
func windowBudget(p config.Pool) int64 {
	b := int64(stash.DefaultWindowBytes)
	if p.Ephemeral() && p.Capacity > 0 {
		b = max(min(int64(p.Capacity)/2, b), 256<<10)
	}
	return b
}

// windowBudget is the window budget of this server's stashes of pool p:
// Tuning.WindowBytes if a test set it, else the pool's.
func (s *Server) windowBudget(p config.Pool) int64 {
	if n := s.opts.Tuning.WindowBytes; n > 0 {
		return n
	}
	return windowBudget(p)
}

// otherMemory is what MemoryBudget allows for everything it does not count
// one by one: transactions on their way in (each commit stream holds up to
// 64 MiB), the resolver's conflict history (the writes of about three MVCC
// windows), Pebble's memtables, reads in flight, the runtime.
const otherMemory = 512 << 20

// MemoryBudget returns the memory a cluster running cfg is expected to hold
// at most: the sum of its bounded parts (docs/architecture.md, "Memory
// bounds") — the resident capacity of every memory-engine stash, every
// stash's MVCC window budget, the log's in-memory entries and raft cache per
// replica, the commit proxy's queued transactions — plus otherMemory. It is
// 0 when a memory-engine pool has no capacity: nothing bounds it.
// distash server uses it as the Go runtime's soft memory limit.
func MemoryBudget(cfg *config.Config) int64 {
	n := int64(otherMemory + stash.DefaultWindowBytes) // the system stash's window
	for _, p := range cfg.Pools {
		per := windowBudget(p)
		switch p.Engine {
		case "memory":
			if p.Capacity <= 0 {
				return 0
			}
			per += int64(p.Capacity)
		case "pebble":
			per += pebbleengine.CacheBytes + pebbleengine.MemtableReserve // each stash's block cache and memtables
			if p.Pebble != nil && p.Pebble.Cache != nil {
				per += int64(*p.Pebble.Cache) - pebbleengine.CacheBytes
			}
		}
		n += per * int64(p.Stashes)
	}
	replicas := int64(max(cfg.Log.Replicas, 1))
	n += replicas * (txlog.SpillFactor*txlog.DefaultMemoryBytes + txlog.DefaultRaftCacheBytes)
	return n + proxy.DefaultMaxQueuedBytes
}
