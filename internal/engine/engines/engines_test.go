package engines_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/distash/distash/internal/engine"
	"github.com/distash/distash/internal/engine/engines"
	"github.com/distash/distash/internal/engine/memory"
	"github.com/distash/distash/internal/kv"
)

func TestOpenBuiltins(t *testing.T) {
	for _, name := range []string{"memory", "pebble", "sqlite"} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			e, err := engines.Open(name, engine.Options{Dir: dir})
			if err != nil {
				t.Fatal(err)
			}
			if err := e.Apply(&engine.Batch{Version: 7, Writes: []engine.Write{
				{Key: []byte("k"), Value: []byte("v")},
			}}); err != nil {
				t.Fatal(err)
			}
			if v, ok, err := e.Get([]byte("k")); err != nil || !ok || string(v) != "v" {
				t.Fatalf("Get = %q, %v, %v", v, ok, err)
			}
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
			if name == "memory" {
				return
			}
			e, err = engines.Open(name, engine.Options{Dir: dir})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			if e.Version() != 7 {
				t.Fatalf("Version after reopen = %d", e.Version())
			}
		})
	}
}

func TestOpenErrors(t *testing.T) {
	_, err := engines.Open("rocksdb", engine.Options{})
	if err == nil || !strings.Contains(err.Error(), `"rocksdb"`) || !strings.Contains(err.Error(), "memory") {
		t.Fatalf("Open of an unknown engine: %v", err)
	}
	if _, err := engines.Open("memory", engine.Options{Ephemeral: true, Eviction: "bogus"}); err == nil {
		t.Fatal("bad memory options accepted")
	}
	if _, err := engines.Open("pebble", engine.Options{}); err == nil {
		t.Fatal("pebble without a Dir accepted")
	}
}

// registered counts TestRegister runs, so that -count=N registers new names.
var registered atomic.Int32

func TestRegister(t *testing.T) {
	name := fmt.Sprintf("test-mem-%d", registered.Add(1))
	engines.Register(name, func(opts engine.Options) (engine.Engine, error) {
		opts.Ephemeral = true
		return memory.Open(opts)
	})
	e, err := engines.Open(name, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if err := e.Apply(&engine.Batch{Version: kv.Version(1)}); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, n := range engines.Names() {
		found = found || n == name
	}
	if !found {
		t.Fatalf("Names() = %v lacks %s", engines.Names(), name)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("registering a name twice did not panic")
		}
	}()
	engines.Register("memory", func(engine.Options) (engine.Engine, error) { return nil, nil })
}
