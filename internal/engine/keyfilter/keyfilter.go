// Package keyfilter is a Bloom filter over an engine's keys, so that a Get
// of an absent key costs no device read (the lookups a storage hierarchy
// makes in every tier above the one that holds a key). Deleted keys stay in
// the filter (a false positive costs one read); the filter is rebuilt when
// the keys added outgrow the size it was made for.
package keyfilter

import (
	"sync"

	"github.com/bits-and-blooms/bloom/v3"
)

// FalsePositiveRate is the target rate at the filter's capacity.
const FalsePositiveRate = 0.01

// Filter is safe for concurrent use.
type Filter struct {
	mu       sync.RWMutex
	f        *bloom.BloomFilter // Protected by mu.
	capacity uint               // Protected by mu.
	added    uint               // Protected by mu.
}

// New returns a filter sized for expected keys (at least 1024).
func New(expected uint) *Filter {
	f := &Filter{}
	f.Reset(expected)
	return f
}

// Reset empties the filter and sizes it for expected keys.
func (f *Filter) Reset(expected uint) {
	expected = max(expected, 1024)
	f.mu.Lock()
	f.f = bloom.NewWithEstimates(expected, FalsePositiveRate)
	f.capacity, f.added = expected, 0
	f.mu.Unlock()
}

// Add records key. Call it before the key becomes visible to readers.
func (f *Filter) Add(key []byte) {
	f.mu.Lock()
	f.f.Add(key)
	f.added++
	f.mu.Unlock()
}

// MayContain reports whether key may be present; a false answer is certain.
func (f *Filter) MayContain(key []byte) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.f.Test(key)
}

// Full reports whether more keys were added than the filter was sized for,
// so its false-positive rate is above target: time to rebuild.
func (f *Filter) Full() bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.added > f.capacity
}
