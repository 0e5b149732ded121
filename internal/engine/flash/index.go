package flash

import (
	"unsafe"

	"github.com/distash/distash/internal/farmem"
)

// The hash index is the structure placed in far memory. It maps a key's
// 32-bit signature to the location of the key's entry in the log; a
// lookup reads the entry and compares keys, so signature collisions cost a
// read but are never wrong.
//
// Buckets are one 64-byte line each: four 16-byte slots
//
//	word 0: signature (low 32 bits) | entry length (high 32 bits)
//	word 1: segment id (low 32 bits) | offset in segment (high 32 bits)
//
// with signature 0 for an empty slot and 1 for a deleted one (signatures
// of keys are forced to at least 2). A key lives in the first bucket of
// its probe sequence (linear probing by bucket) with a free slot at the
// time it was inserted; slots fill in order, so a lookup stops at the first
// bucket with an empty slot. Deleted slots are reused by inserts and
// dropped when the table is rebuilt.
//
// A table is read under the engine's read lock and modified under its
// write lock; a rebuild replaces the table, which readers notice by
// comparing table pointers.
const (
	slotsPerBucket = 4
	wordsPerBucket = 8
	sigEmpty       = 0
	sigDeleted     = 1
	maxLoad        = 0.75 // of all slots, live and deleted
)

type loc struct {
	seg uint32
	off uint32
	n   uint32 // entry size, unpadded
}

func (l loc) word1() uint64 { return uint64(l.seg) | uint64(l.off)<<32 }

func sigOf(h uint64) uint32 { return uint32(h>>32) | 2 }

type table struct {
	raw   []uint64
	words []uint64 // 64-byte aligned, wordsPerBucket per bucket
	mask  uint64   // buckets - 1
	used  int      // live and deleted slots
	live  int
}

func newTable(buckets int) *table {
	n := 1
	for n < buckets {
		n <<= 1
	}
	raw := make([]uint64, n*wordsPerBucket+8)
	off := 0
	if a := uintptr(unsafe.Pointer(&raw[0])) % farmem.LineSize; a != 0 {
		off = int((farmem.LineSize - a) / 8)
	}
	return &table{raw: raw, words: raw[off : off+n*wordsPerBucket], mask: uint64(n - 1)}
}

func (t *table) buckets() int { return int(t.mask + 1) }

func (t *table) bucket(b uint64) []uint64 {
	return t.words[b*wordsPerBucket : (b+1)*wordsPerBucket : (b+1)*wordsPerBucket]
}

func (t *table) bucketPtr(b uint64) unsafe.Pointer {
	return unsafe.Pointer(&t.words[b*wordsPerBucket])
}

// full reports whether one more insert would pass the load limit.
func (t *table) full() bool {
	return float64(t.used+1) > maxLoad*float64(t.buckets()*slotsPerBucket)
}

// insert adds a slot for a key known to be absent. The caller rebuilds the
// table when it is full.
func (t *table) insert(h uint64, l loc) {
	sig := sigOf(h)
	for b, i := h&t.mask, uint64(0); i <= t.mask; b, i = (b+1)&t.mask, i+1 {
		bk := t.bucket(b)
		for s := 0; s < slotsPerBucket; s++ {
			w0 := bk[2*s]
			if w0 == sigEmpty || w0 == sigDeleted {
				if w0 == sigEmpty {
					t.used++
				}
				bk[2*s+1] = l.word1()
				bk[2*s] = uint64(sig) | uint64(l.n)<<32
				t.live++
				return
			}
		}
	}
	panic("flash: hash index full")
}

// find returns the bucket and slot holding the key with hash h at old.
func (t *table) find(h uint64, old loc) (uint64, int, bool) {
	sig := uint64(sigOf(h))
	w1 := old.word1()
	for b, i := h&t.mask, uint64(0); i <= t.mask; b, i = (b+1)&t.mask, i+1 {
		bk := t.bucket(b)
		for s := 0; s < slotsPerBucket; s++ {
			w0 := bk[2*s]
			if w0 == sigEmpty {
				return 0, 0, false
			}
			if w0&0xffffffff == sig && bk[2*s+1] == w1 {
				return b, s, true
			}
		}
	}
	return 0, 0, false
}

// update moves the key with hash h from old to l.
func (t *table) update(h uint64, old, l loc) bool {
	b, s, ok := t.find(h, old)
	if !ok {
		return false
	}
	bk := t.bucket(b)
	bk[2*s+1] = l.word1()
	bk[2*s] = uint64(sigOf(h)) | uint64(l.n)<<32
	return true
}

// remove deletes the key with hash h at old.
func (t *table) remove(h uint64, old loc) bool {
	b, s, ok := t.find(h, old)
	if !ok {
		return false
	}
	bk := t.bucket(b)
	bk[2*s] = sigDeleted
	bk[2*s+1] = 0
	t.live--
	return true
}

// candidates appends the locations in bucket b whose signature is sig and
// reports whether the bucket has an empty slot (the probe ends there).
func candidates(bk []uint64, sig uint32, out []loc) ([]loc, bool) {
	for s := 0; s < slotsPerBucket; s++ {
		w0 := bk[2*s]
		if w0 == sigEmpty {
			return out, true
		}
		if uint32(w0) == sig {
			w1 := bk[2*s+1]
			out = append(out, loc{seg: uint32(w1), off: uint32(w1 >> 32), n: uint32(w0 >> 32)})
		}
	}
	return out, false
}
