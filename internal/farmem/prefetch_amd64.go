package farmem

// prefetchT0 issues PREFETCHT0 on addr: a hint that never faults, so a
// stale or unmapped address is harmless.
//
//go:noescape
func prefetchT0(addr uintptr)

// HasPrefetch reports whether PrefetchLine issues a real prefetch instruction.
const HasPrefetch = true
