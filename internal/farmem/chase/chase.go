// Package chase is the paper's microbenchmark as a workload for user-level
// threads: each operation follows a chain of M pointers through far memory
// (one 64-byte line each, prefetched and yielded on before each access when
// prefetching is on) and then reads one 4 KiB block of a file.
package chase

import (
	"os"
	"time"
	"unsafe"

	"github.com/distash/distash/internal/farmem"
	"github.com/distash/distash/internal/farmem/ult"
)

// Item is one link of the chain, a whole cache line.
type Item struct {
	Next uint64
	_    [farmem.LineSize - 8]byte
}

// Chain is a random cyclic permutation of items, 64-byte aligned.
type Chain struct {
	Items []Item
}

// NewChain returns a chain of n items forming one random cycle (Sattolo's
// algorithm), so a walk never revisits an item before it has seen them all.
func NewChain(n int, seed uint64) *Chain {
	if n < 2 {
		n = 2
	}
	raw := make([]Item, n+1)
	off := 0
	if a := uintptr(unsafe.Pointer(&raw[0])) % farmem.LineSize; a != 0 {
		// Items are line-sized, so the slice is already line aligned in
		// practice; keep the check for allocators that do otherwise.
		off = 1
	}
	items := raw[off : off+n]
	perm := make([]uint32, n)
	for i := range perm {
		perm[i] = uint32(i)
	}
	x := seed | 1
	rnd := func(k int) int { // xorshift64*
		x ^= x >> 12
		x ^= x << 25
		x ^= x >> 27
		return int((x * 2685821657736338717) % uint64(k))
	}
	for i := n - 1; i > 0; i-- {
		j := rnd(i)
		perm[i], perm[j] = perm[j], perm[i]
	}
	for i := 0; i < n; i++ {
		items[perm[i]].Next = uint64(perm[(i+1)%n])
	}
	return &Chain{Items: items}
}

// Workload is the microbenchmark's operation.
type Workload struct {
	Chain *Chain
	// M is the mean number of pointers followed per operation; with
	// Fluctuate an operation follows M-1, M or M+1 (as the paper's
	// microbenchmark, to keep threads from moving in lockstep).
	M         int
	Fluctuate bool
	// Prefetch makes each access a prefetch, a yield and then the access;
	// without it each access stalls the core.
	Prefetch bool
	// Compute is spent before each access (T_mem beyond the chase's own work).
	Compute time.Duration
	// File, if set, is read once per operation: BlockSize bytes at a block
	// chosen by the chase's last pointer, among Blocks blocks.
	File      *os.File
	Blocks    int64
	BlockSize int
	// IOPre and IOPost are spent before submitting and after completing
	// the read (T_io_pre and T_io_post beyond the read's own cost).
	IOPre, IOPost time.Duration
}

// AlignedBuffer returns a size-byte buffer aligned to 4 KiB, as O_DIRECT
// reads need.
func AlignedBuffer(size int) []byte {
	const align = 4096
	raw := make([]byte, size+align)
	off := int(uintptr(unsafe.Pointer(&raw[0])) % align)
	if off != 0 {
		off = align - off
	}
	return raw[off : off+size : off+size]
}

// Body runs operations on t until the run ends.
func (w *Workload) Body(t *ult.Task) {
	items := w.Chain.Items
	n := uint64(len(items))
	rng := t.Rand()
	var buf []byte
	if w.File != nil {
		buf = AlignedBuffer(w.BlockSize)
	}
	for t.Running() {
		p := uint64(rng.Int63n(int64(n)))
		m := w.M
		if w.Fluctuate && m > 0 {
			m += rng.Intn(3) - 1
		}
		for i := 0; i < m; i++ {
			t.Compute(w.Compute)
			it := &items[p]
			if w.Prefetch {
				t.Prefetch(unsafe.Pointer(it), farmem.LineSize)
			}
			t.Access(unsafe.Pointer(it), farmem.LineSize)
			p = it.Next
		}
		if w.File != nil {
			t.Compute(w.IOPre)
			off := int64(p%uint64(w.Blocks)) * int64(w.BlockSize)
			if _, err := t.ReadAt(w.File, buf, off); err != nil {
				panic(err)
			}
			t.Compute(w.IOPost)
		}
		t.EndOp()
	}
}
