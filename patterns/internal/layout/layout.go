// Package layout holds the key layout helpers the patterns share: a stable
// hash, the spreading of a pattern's keys over a pool's shards, and the
// fastest-first order of media.
//
// DiStash's initial shard map splits each pool's key space at evenly spaced
// values of the first byte after the pool prefix, one shard per stash. A
// pattern that put its namespace right after the prefix would land every key
// in one shard, on one stash (team). So the patterns write their keys as
//
//	pool prefix | spread byte | namespace | kind | ...
//
// where the spread byte comes from a stable hash of the key (the same in
// every process and every release).
package layout

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
)

// Hash is a stable 64-bit hash of b: FNV-1a, then the finalizer of
// MurmurHash3 (fmix64) so that every output bit depends on every input bit
// (FNV-1a alone leaves the top byte nearly constant for short keys that
// differ in their last bytes, which would put them all on one stash).
func Hash(b []byte) uint64 {
	h := fnv.New64a()
	h.Write(b)
	x := h.Sum64()
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}

// SpreadByte is the byte that places key among a pool's shards.
func SpreadByte(key []byte) byte { return byte(Hash(key) >> 56) }

// Key returns prefix | spread | ns | parts..., a new slice.
func Key(prefix []byte, spread byte, ns string, parts ...[]byte) []byte {
	n := len(prefix) + 1 + len(ns)
	for _, p := range parts {
		n += len(p)
	}
	out := make([]byte, 0, n)
	out = append(out, prefix...)
	out = append(out, spread)
	out = append(out, ns...)
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// PrefixEnd returns the first key after every key with prefix p (nil when p
// is all 0xff bytes, which never happens for a pool key).
func PrefixEnd(p []byte) []byte {
	out := append([]byte(nil), p...)
	for i := len(out) - 1; i >= 0; i-- {
		if out[i] != 0xff {
			out[i]++
			return out[:i+1]
		}
	}
	return nil
}

// KeyAfter returns the smallest key greater than k.
func KeyAfter(k []byte) []byte { return append(append(make([]byte, 0, len(k)+1), k...), 0) }

// AppendUvarint appends x as a uvarint.
func AppendUvarint(b []byte, x uint64) []byte { return binary.AppendUvarint(b, x) }

// AppendBytes appends a length-prefixed b: no encoded value is a prefix of
// another, so a range scan over AppendBytes(nil, k) finds only k's entries.
func AppendBytes(dst, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

// ReadBytes decodes a length-prefixed byte string from b and returns it and
// the rest of b.
func ReadBytes(b []byte) ([]byte, []byte, error) {
	n, w := binary.Uvarint(b)
	if w <= 0 || uint64(len(b)-w) < n {
		return nil, nil, fmt.Errorf("layout: malformed length-prefixed bytes")
	}
	return b[w : w+int(n)], b[w+int(n):], nil
}

// mediumRank orders media fastest first.
var mediumRank = map[string]int{"dram": 0, "nvm": 1, "ssd": 2, "hdd": 3}

// MediumRank returns the position of medium in the order dram < nvm < ssd <
// hdd (fastest first), and false for an unknown medium.
func MediumRank(medium string) (int, bool) {
	r, ok := mediumRank[medium]
	return r, ok
}

// MediaOrder is the fastest-first order of media, for error messages.
const MediaOrder = "dram < nvm < ssd < hdd"
