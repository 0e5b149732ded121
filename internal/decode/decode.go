// Package decode reads the hand-encoded binary records that come from disk
// (the log's raft commands and snapshots, the raft store's records): every
// count and length is checked against the bytes that remain, the first
// error is kept and later reads return zero values, so a decoder never
// panics on damaged input and checks for an error once at the end.
package decode

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Reader decodes B from offset Off, remembering the first error.
type Reader struct {
	B   []byte
	Off int
	// Corrupt is the error every failure wraps (the caller's ErrCorrupt).
	Corrupt error
	// What names the field being read, for the error message; decoders set
	// it before each field (a constant string, so it costs nothing).
	What string
	err  error
}

// Err is the first failure, nil if none.
func (r *Reader) Err() error { return r.err }

// Fail records a failure at the current offset, unless one came before.
func (r *Reader) Fail(format string, args ...any) {
	if r.err != nil {
		return
	}
	msg := fmt.Sprintf(format, args...)
	if r.What != "" {
		msg = r.What + ": " + msg
	}
	r.err = fmt.Errorf("%w: %s at offset %d", r.Corrupt, msg, r.Off)
}

// varintFail reports why binary.Uvarint or binary.Varint returned n <= 0.
func (r *Reader) varintFail(n int) {
	if n == 0 {
		r.Fail("truncated varint")
	} else {
		r.Fail("varint overflows 64 bits")
	}
}

// Remaining is the number of bytes not read yet.
func (r *Reader) Remaining() int { return len(r.B) - r.Off }

// Byte reads one byte.
func (r *Reader) Byte() byte {
	if r.err != nil {
		return 0
	}
	if r.Off >= len(r.B) {
		r.Fail("truncated")
		return 0
	}
	c := r.B[r.Off]
	r.Off++
	return c
}

// Uvarint reads an unsigned varint.
func (r *Reader) Uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.B[r.Off:])
	if n <= 0 {
		r.varintFail(n)
		return 0
	}
	r.Off += n
	return v
}

// Uint32 reads an unsigned varint that must fit in 32 bits.
func (r *Reader) Uint32() uint32 {
	v := r.Uvarint()
	if v > math.MaxUint32 {
		r.Fail("value %d overflows uint32", v)
		return 0
	}
	return uint32(v)
}

// Varint reads a signed varint.
func (r *Reader) Varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.B[r.Off:])
	if n <= 0 {
		r.varintFail(n)
		return 0
	}
	r.Off += n
	return v
}

// bytes returns the next n bytes, aliasing the input (capacity clipped so an
// append by a reader never overwrites the neighbours). nil for n == 0.
func (r *Reader) Bytes(n uint64) []byte {
	if r.err != nil {
		return nil
	}
	if n > uint64(r.Remaining()) {
		r.Fail("length %d exceeds the %d bytes left", n, r.Remaining())
		return nil
	}
	if n == 0 {
		return nil
	}
	s := r.B[r.Off : r.Off+int(n) : r.Off+int(n)]
	r.Off += int(n)
	return s
}

// count reads an element count and checks that at least min bytes per
// element remain, so corrupt counts cannot cause huge allocations.
func (r *Reader) Count(min int) int {
	n := r.Uvarint()
	if r.err != nil {
		return 0
	}
	if n > uint64(r.Remaining()/min) {
		r.Fail("count %d too large for %d bytes left", n, r.Remaining())
		return 0
	}
	return int(n)
}
