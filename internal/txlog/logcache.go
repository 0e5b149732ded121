package txlog

import (
	"sync"

	"github.com/hashicorp/raft"
)

// Bounds of the raft log records a replica keeps in memory in front of its
// Pebble store (the most recent ones, which raft reads back to apply and to
// replicate them). raft.LogCache, used before, bounds only their number:
// 1024 records of commit batches of up to MaxTransactionBytes each, whose
// bytes the state machine's entries share, so a burst of large commits
// stayed in memory for minutes after every stash had popped it.
const (
	logCacheRecords = 1024
	// DefaultRaftCacheBytes is the default of Options.RaftCacheBytes.
	DefaultRaftCacheBytes = 32 << 20
	// logRecordOverhead is counted per record besides its data: the
	// raft.Log struct and its pointer.
	logRecordOverhead = 128
)

// logCache is a raft.LogStore that keeps the most recently stored records
// in memory, at most maxRecords of them and maxBytes of their data, and
// reads older ones from store.
type logCache struct {
	store      raft.LogStore
	maxRecords int
	maxBytes   int64

	mu     sync.RWMutex
	recent []*raft.Log // consecutive indexes, oldest first. Protected by mu.
	bytes  int64       // data of recent, with logRecordOverhead each. Protected by mu.
}

var _ raft.MonotonicLogStore = (*logCache)(nil)

func newLogCache(store raft.LogStore, maxRecords int, maxBytes int64) *logCache {
	return &logCache{store: store, maxRecords: maxRecords, maxBytes: maxBytes}
}

func recordBytes(l *raft.Log) int64 {
	return int64(len(l.Data)+len(l.Extensions)) + logRecordOverhead
}

func (c *logCache) GetLog(index uint64, l *raft.Log) error {
	c.mu.RLock()
	if n := len(c.recent); n > 0 {
		if first := c.recent[0].Index; index >= first && index-first < uint64(n) {
			*l = *c.recent[index-first]
			c.mu.RUnlock()
			return nil
		}
	}
	c.mu.RUnlock()
	return c.store.GetLog(index, l)
}

func (c *logCache) StoreLog(l *raft.Log) error { return c.StoreLogs([]*raft.Log{l}) }

// StoreLogs stores logs, then caches them (only once stored).
func (c *logCache) StoreLogs(logs []*raft.Log) error {
	if err := c.store.StoreLogs(logs); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, l := range logs {
		if n := len(c.recent); n > 0 && l.Index != c.recent[n-1].Index+1 {
			c.resetLocked() // a gap: keep the cache contiguous
		}
		c.recent = append(c.recent, l)
		c.bytes += recordBytes(l)
	}
	for len(c.recent) > 0 && (len(c.recent) > c.maxRecords || c.bytes > c.maxBytes) {
		c.bytes -= recordBytes(c.recent[0])
		c.recent[0] = nil
		c.recent = c.recent[1:]
	}
	return nil
}

func (c *logCache) resetLocked() {
	clear(c.recent)
	c.recent, c.bytes = nil, 0
}

func (c *logCache) FirstIndex() (uint64, error) { return c.store.FirstIndex() }

func (c *logCache) LastIndex() (uint64, error) { return c.store.LastIndex() }

// DeleteRange empties the cache, then deletes from the store.
func (c *logCache) DeleteRange(min, max uint64) error {
	c.mu.Lock()
	c.resetLocked()
	c.mu.Unlock()
	return c.store.DeleteRange(min, max)
}

// IsMonotonic reports what the store does.
func (c *logCache) IsMonotonic() bool {
	if m, ok := c.store.(raft.MonotonicLogStore); ok {
		return m.IsMonotonic()
	}
	return false
}
