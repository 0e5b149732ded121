//go:build !amd64

package farmem

// prefetchT0 is a no-op where the package has no assembly prefetch.
func prefetchT0(addr uintptr) {}

// HasPrefetch reports whether PrefetchLine issues a real prefetch instruction.
const HasPrefetch = false
