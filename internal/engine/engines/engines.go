// Package engines opens a storage engine by its configuration name.
package engines

import (
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/distash/distash/internal/engine"
	"github.com/distash/distash/internal/engine/memory"
	pebbleengine "github.com/distash/distash/internal/engine/pebble"
)

var (
	mu       sync.RWMutex
	registry = map[string]func(engine.Options) (engine.Engine, error){
		"memory": func(o engine.Options) (engine.Engine, error) { return memory.Open(o) },
		"pebble": func(o engine.Options) (engine.Engine, error) { return pebbleengine.Open(o) },
	}
)

// Register makes an engine available under name (engines in other packages
// call it from init).
func Register(name string, open func(engine.Options) (engine.Engine, error)) {
	mu.Lock()
	defer mu.Unlock()
	registry[name] = open
}

// Open opens the engine called name.
func Open(name string, opts engine.Options) (engine.Engine, error) {
	mu.RLock()
	open, ok := registry[name]
	mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("engines: unknown engine %q (known: %s)", name, strings.Join(Names(), ", "))
	}
	return open(opts)
}

// Names lists the registered engines.
func Names() []string {
	mu.RLock()
	defer mu.RUnlock()
	var out []string
	for n := range registry {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
