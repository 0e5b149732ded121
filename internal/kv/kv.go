// Package kv holds the vocabulary every DiStash role shares: versions, key
// ranges, mutations, stash tags and the numeric error codes that travel on the
// wire. It has no dependencies on other DiStash packages.
package kv

import (
	"bytes"
	"fmt"
)

// Version is a commit version. The sequencer hands out about 1e6 versions
// per second of wall time, so a version difference is roughly microseconds.
type Version int64

// VersionsPerSecond is how fast versions advance with wall time.
const VersionsPerSecond = 1_000_000

// Tag names one stash: every mutation carries the tags of the stashes that
// own its key, and each stash pulls only its own tag from the log.
type Tag uint32

// Limits, as FoundationDB's.
const (
	MaxKeyBytes         = 10_000
	MaxValueBytes       = 100_000
	MaxTransactionBytes = 10_000_000
)

// SystemPrefix starts the system key space (shard map, configuration).
var SystemPrefix = []byte{0xff}

// MutationType says what a mutation does to its key.
type MutationType uint8

const (
	// MutSet sets Key to Param.
	MutSet MutationType = iota + 1
	// MutClear removes Key.
	MutClear
	// MutClearRange removes every key in [Key, Param).
	MutClearRange
	// MutAdd adds the little-endian int64 Param to the key's value.
	MutAdd
	// MutMax stores the larger of the key's int64 value and Param.
	MutMax
	// MutMin stores the smaller of the key's int64 value and Param.
	MutMin
)

func (t MutationType) String() string {
	switch t {
	case MutSet:
		return "set"
	case MutClear:
		return "clear"
	case MutClearRange:
		return "clear_range"
	case MutAdd:
		return "add"
	case MutMax:
		return "max"
	case MutMin:
		return "min"
	}
	return fmt.Sprintf("mutation(%d)", uint8(t))
}

// IsAtomic reports whether the mutation reads the old value (add/max/min).
func (t MutationType) IsAtomic() bool { return t == MutAdd || t == MutMax || t == MutMin }

// Mutation is one write of a transaction. Cost is the recomputation cost a
// client attached with SetWithCost; camp eviction uses it, others ignore it.
type Mutation struct {
	Type  MutationType
	Key   []byte
	Param []byte // value for set, end key for clear_range, operand for atomics
	Cost  uint32
}

// Bytes is the mutation's size as counted against transaction limits.
func (m Mutation) Bytes() int { return len(m.Key) + len(m.Param) }

// KeyRange is the half-open interval [Begin, End).
type KeyRange struct {
	Begin, End []byte
}

// Contains reports whether k lies in r.
func (r KeyRange) Contains(k []byte) bool {
	return bytes.Compare(k, r.Begin) >= 0 && (r.End == nil || bytes.Compare(k, r.End) < 0)
}

// Intersects reports whether r and o share a key.
func (r KeyRange) Intersects(o KeyRange) bool {
	return bytes.Compare(r.Begin, o.End) < 0 && bytes.Compare(o.Begin, r.End) < 0
}

// KeyAfter returns the smallest key greater than k (k + 0x00).
func KeyAfter(k []byte) []byte {
	out := make([]byte, len(k)+1)
	copy(out, k)
	return out
}

// PointRange returns the range holding exactly k.
func PointRange(k []byte) KeyRange { return KeyRange{Begin: k, End: KeyAfter(k)} }

// PrefixEnd returns the first key after every key that starts with p
// (FoundationDB's strinc). It returns nil if p is empty or all 0xff.
func PrefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] != 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// KeyValue is one key and its value.
type KeyValue struct {
	Key, Value []byte
}
