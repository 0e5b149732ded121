package kv

import "encoding/binary"

// DecodeInt64 reads a little-endian int64; shorter values are zero-extended
// and longer ones truncated to 8 bytes, as FoundationDB's atomic ops do.
func DecodeInt64(b []byte) int64 {
	var buf [8]byte
	copy(buf[:], b)
	return int64(binary.LittleEndian.Uint64(buf[:]))
}

// EncodeInt64 writes v as 8 little-endian bytes.
func EncodeInt64(v int64) []byte {
	out := make([]byte, 8)
	binary.LittleEndian.PutUint64(out, uint64(v))
	return out
}

// ApplyAtomic computes the new value of a key after atomic operation t with
// the given operand, from its old value (present=false when absent). An absent
// key takes the operand, as in FoundationDB.
func ApplyAtomic(t MutationType, old []byte, present bool, operand []byte) []byte {
	if !present {
		return EncodeInt64(DecodeInt64(operand))
	}
	a, b := DecodeInt64(old), DecodeInt64(operand)
	switch t {
	case MutAdd:
		return EncodeInt64(a + b)
	case MutMax:
		if b > a {
			return EncodeInt64(b)
		}
		return EncodeInt64(a)
	case MutMin:
		if b < a {
			return EncodeInt64(b)
		}
		return EncodeInt64(a)
	}
	panic("kv: ApplyAtomic on non-atomic mutation " + t.String())
}
