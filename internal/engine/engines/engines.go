// Package engines opens a storage engine by name.
//
// The built-in engines are "memory", "pebble" and "sqlite". Other engines
// register themselves with Register from an init function, so that
// importing their package (for its side effect) is enough to make them
// available to Open; this package never has to import them, which also
// keeps an engine free to import this package without a cycle.
package engines

import (
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/distash/distash/internal/engine"
	"github.com/distash/distash/internal/engine/memory"
	pebbleengine "github.com/distash/distash/internal/engine/pebble"
	sqliteengine "github.com/distash/distash/internal/engine/sqlite"
	"github.com/distash/distash/internal/fsys"
	"github.com/distash/distash/internal/version"
)

// OpenFunc opens an engine with the given options.
type OpenFunc func(opts engine.Options) (engine.Engine, error)

var (
	mu       sync.RWMutex
	registry = map[string]OpenFunc{
		"memory": func(opts engine.Options) (engine.Engine, error) { return memory.Open(opts) },
		"pebble": func(opts engine.Options) (engine.Engine, error) { return pebbleengine.Open(opts) },
		"sqlite": func(opts engine.Options) (engine.Engine, error) { return sqliteengine.Open(opts) },
		// "flash" is registered by package internal/engine/flash itself:
		// its init calls engines.Register("flash", ...), and the binaries
		// that offer it import that package (blank import if need be).
	}
)

// Register makes an engine available to Open under name. It is meant to
// be called from the init function of the engine's package. It panics if
// name is empty, open is nil or name is already registered.
func Register(name string, open func(engine.Options) (engine.Engine, error)) {
	if name == "" || open == nil {
		panic("engines: Register with an empty name or a nil open function")
	}
	mu.Lock()
	defer mu.Unlock()
	if _, dup := registry[name]; dup {
		panic(fmt.Sprintf("engines: engine %q registered twice", name))
	}
	registry[name] = open
}

// Names returns the names of the registered engines, sorted.
func Names() []string {
	mu.RLock()
	defer mu.RUnlock()
	names := make([]string, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Open opens the engine registered under name with opts.
func Open(name string, opts engine.Options) (engine.Engine, error) {
	mu.RLock()
	open, ok := registry[name]
	mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("engines: unknown storage engine %q (known: %s)", name, strings.Join(Names(), ", "))
	}
	// An engine that keeps files states their format in a marker in its
	// directory (fsys.OpenFormat): a newer one is refused before the
	// engine reads a byte. Engines without files (memory) register none.
	kind := FormatKind(name)
	want, versioned := version.Formats()[kind]
	versioned = versioned && opts.Dir != ""
	var mark func() error
	if versioned {
		var err error
		if _, mark, err = fsys.OpenFormat(opts.FS, opts.Dir, kind, want, nil); err != nil {
			return nil, err
		}
	}
	e, err := open(opts)
	if err != nil {
		// Never hand back a typed nil pointer wrapped in a non-nil interface.
		return nil, err
	}
	if versioned {
		if err := mark(); err != nil {
			e.Close()
			return nil, err
		}
	}
	return e, nil
}

// FormatKind is the format kind (version.RegisterFormat) of the files of
// engine name; an engine that keeps files registers it, at version 1 for
// the files it wrote before format versions were stated.
func FormatKind(name string) string { return "engine-" + name }

func init() {
	version.RegisterFormat(FormatKind("pebble"), 1)
	version.RegisterFormat(FormatKind("sqlite"), 1)
}
