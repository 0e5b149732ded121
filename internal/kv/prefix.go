package kv

import (
	"bytes"
	"encoding/binary"
)

// KeyPrefixBytes is how many leading bytes of a key a KeyPrefix holds.
const KeyPrefixBytes = 32

// KeyPrefix is a key's first KeyPrefixBytes bytes, zero-padded, as four
// big-endian words. An ordered tree of keys (the resolver's) keeps it
// inline beside the key, so that most comparisons of a descent read
// neither the key's bytes nor a pointer to them. 32 bytes and
// not 16: keys of one table or client often share their first 16 or 20
// bytes (a pool's prefix and a table's name), and then every comparison
// followed the key pointer.
type KeyPrefix struct{ w0, w1, w2, w3 uint64 }

// PrefixOf returns the prefix of k.
func PrefixOf(k []byte) KeyPrefix {
	p := k
	if len(k) < KeyPrefixBytes {
		var b [KeyPrefixBytes]byte
		copy(b[:], k)
		p = b[:]
	}
	return KeyPrefix{binary.BigEndian.Uint64(p), binary.BigEndian.Uint64(p[8:]), binary.BigEndian.Uint64(p[16:]), binary.BigEndian.Uint64(p[24:])}
}

// LessKeys reports whether key a sorts before key b (as bytes.Compare),
// given their prefixes pa and pb. When the zero-padded prefixes differ they
// decide; when they are equal and one key has at most KeyPrefixBytes bytes,
// it is a prefix of the other (the other's bytes past it within the prefix
// are zeros), so the shorter key is the smaller. Small enough to inline
// into a tree's comparison function.
func LessKeys(pa *KeyPrefix, a []byte, pb *KeyPrefix, b []byte) bool {
	if pa.w0 != pb.w0 {
		return pa.w0 < pb.w0
	}
	return lessFrom8(pa, a, pb, b)
}

// lessFrom8 is LessKeys for keys whose first 8 bytes are equal.
func lessFrom8(pa *KeyPrefix, a []byte, pb *KeyPrefix, b []byte) bool {
	if pa.w1 != pb.w1 {
		return pa.w1 < pb.w1
	}
	if pa.w2 != pb.w2 {
		return pa.w2 < pb.w2
	}
	if pa.w3 != pb.w3 {
		return pa.w3 < pb.w3
	}
	if len(a) <= KeyPrefixBytes || len(b) <= KeyPrefixBytes {
		return len(a) < len(b)
	}
	return bytes.Compare(a[KeyPrefixBytes:], b[KeyPrefixBytes:]) < 0
}
