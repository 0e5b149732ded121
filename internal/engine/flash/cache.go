package flash

import (
	"sync"
	"unsafe"

	"github.com/distash/distash/internal/farmem"
)

// readCache caches entries read from the log, keyed by their location. A
// location is never reused (segment ids only grow), so a cached entry can
// never be stale: an overwrite writes a new location and the old one ages
// out. The cache is set associative: a set's eight tags (the locations)
// fill one 64-byte line, which is what a lookup touches in far memory
// when the cache is placed there; the entries' bytes live in ordinary Go
// memory and, when far, cost one access per line copied. Replacement is
// CLOCK within a set, within a byte budget per set.
type readCache struct {
	far    bool
	mask   uint64
	budget int64 // bytes per set

	rawTags []uint64
	tags    []uint64 // waysPerSet per set, 64-byte aligned; 0 = empty
	ents    []cacheEntry
	ref     []bool
	hand    []uint8
	used    []int64
	locks   []sync.Mutex // striped by set
}

const (
	waysPerSet   = 8
	cacheStripes = 256
	avgCached    = 512 // bytes per entry the set count is sized for
)

type cacheEntry struct {
	data []byte // key followed by value
	klen int
}

func newReadCache(bytes int64, far bool) *readCache {
	if bytes <= 0 {
		return nil
	}
	sets := 1
	for int64(sets*waysPerSet*avgCached) < bytes {
		sets <<= 1
	}
	c := &readCache{
		far:    far,
		mask:   uint64(sets - 1),
		budget: bytes / int64(sets),
		ents:   make([]cacheEntry, sets*waysPerSet),
		ref:    make([]bool, sets*waysPerSet),
		hand:   make([]uint8, sets),
		used:   make([]int64, sets),
		locks:  make([]sync.Mutex, cacheStripes),
	}
	c.rawTags = make([]uint64, sets*waysPerSet+8)
	off := 0
	if a := uintptr(unsafe.Pointer(&c.rawTags[0])) % farmem.LineSize; a != 0 {
		off = int((farmem.LineSize - a) / 8)
	}
	c.tags = c.rawTags[off : off+sets*waysPerSet]
	return c
}

func cacheKey(l loc) uint64 { return uint64(l.seg)<<32 | uint64(l.off) }

func (c *readCache) set(k uint64) uint64 {
	k *= 0x9e3779b97f4a7c15
	return (k >> 20) & c.mask
}

// get returns the key and value cached for l. The slices are shared and
// must not be modified.
func (c *readCache) get(ctx farmem.Ctx, l loc) (key, value []byte, ok bool) {
	k := cacheKey(l)
	s := c.set(k)
	line := unsafe.Pointer(&c.tags[s*waysPerSet])
	if c.far { // fetch the line before taking the lock (see GetCtx)
		ctx.Prefetch(line, farmem.LineSize)
		ctx.Access(line, farmem.LineSize)
	}
	mu := &c.locks[s%cacheStripes]
	mu.Lock()
	var e cacheEntry
	for w := uint64(0); w < waysPerSet; w++ {
		if c.tags[s*waysPerSet+w] == k {
			e = c.ents[s*waysPerSet+w]
			c.ref[s*waysPerSet+w] = true
			ok = true
			break
		}
	}
	mu.Unlock()
	if !ok {
		return nil, nil, false
	}
	if c.far && len(e.data) > 0 {
		ctx.Prefetch(unsafe.Pointer(&e.data[0]), uintptr(len(e.data)))
		ctx.Access(unsafe.Pointer(&e.data[0]), uintptr(len(e.data)))
	}
	return e.data[:e.klen], e.data[e.klen:], true
}

// put caches key and value (copied) for l.
func (c *readCache) put(l loc, key, value []byte) {
	size := int64(len(key) + len(value))
	if size > c.budget {
		return
	}
	data := make([]byte, 0, len(key)+len(value))
	data = append(append(data, key...), value...)
	k := cacheKey(l)
	s := c.set(k)
	mu := &c.locks[s%cacheStripes]
	mu.Lock()
	defer mu.Unlock()
	base := s * waysPerSet
	for w := uint64(0); w < waysPerSet; w++ {
		if c.tags[base+w] == k {
			return
		}
	}
	// Evict with CLOCK until the entry fits and a way is free.
	for tries := 0; tries < 4*waysPerSet; tries++ {
		free := -1
		for w := 0; w < waysPerSet; w++ {
			if c.tags[base+uint64(w)] == 0 {
				free = w
				break
			}
		}
		if free >= 0 && c.used[s]+size <= c.budget {
			i := base + uint64(free)
			c.tags[i] = k
			c.ents[i] = cacheEntry{data: data, klen: len(key)}
			c.ref[i] = false
			c.used[s] += size
			return
		}
		h := uint64(c.hand[s])
		c.hand[s] = uint8((h + 1) % waysPerSet)
		i := base + h
		if c.tags[i] == 0 {
			continue
		}
		if c.ref[i] {
			c.ref[i] = false
			continue
		}
		c.used[s] -= int64(len(c.ents[i].data))
		c.tags[i] = 0
		c.ents[i] = cacheEntry{}
	}
}
