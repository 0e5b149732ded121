package memory_test

import (
	"fmt"
	"testing"

	"github.com/distash/distash/internal/engine"
	"github.com/distash/distash/internal/engine/enginetest"
	"github.com/distash/distash/internal/engine/memory"
	"github.com/distash/distash/internal/kv"
)

func open(t *testing.T, opts engine.Options) engine.Engine {
	t.Helper()
	e, err := memory.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestConformance(t *testing.T) {
	enginetest.Run(t, open, nil, nil)
}

// TestConformanceEphemeralUnlimited runs the suite on ephemeral engines
// without a capacity: they keep an eviction order but never evict.
func TestConformanceEphemeralUnlimited(t *testing.T) {
	for _, pol := range []string{"lru", "camp"} {
		t.Run(pol, func(t *testing.T) {
			enginetest.Run(t, func(t *testing.T, opts engine.Options) engine.Engine {
				opts.Ephemeral, opts.Eviction = true, pol
				return open(t, opts)
			}, nil, nil)
		})
	}
}

func TestEphemeral(t *testing.T) {
	enginetest.RunEphemeral(t, open, nil)
}

func TestDurableNeverEvicts(t *testing.T) {
	e := open(t, engine.Options{CapacityBytes: 100, Eviction: "lru"})
	defer e.Close()
	for i := 0; i < 100; i++ {
		if err := e.Apply(&engine.Batch{Version: kv.Version(i + 1), Writes: []engine.Write{
			enginetest.Set(fmt.Sprintf("k%02d", i), "0123456789"),
		}}); err != nil {
			t.Fatal(err)
		}
	}
	if s := e.Stats(); s.Keys != 100 || s.Bytes != 1300 || s.Evictions != 0 {
		t.Fatalf("Stats = %+v; want 100 keys, 1300 bytes, no evictions", s)
	}
}

func TestUnknownEviction(t *testing.T) {
	if _, err := memory.Open(engine.Options{Ephemeral: true, Eviction: "fifo"}); err == nil {
		t.Fatal("Open accepted an unknown eviction policy")
	}
}

func TestClosed(t *testing.T) {
	enginetest.RunClosed(t, open(t, engine.Options{}), memory.ErrClosed)
}

func keys(ks [][]byte) []string {
	out := make([]string, len(ks))
	for i, k := range ks {
		out[i] = string(k)
	}
	return out
}

func TestColdest(t *testing.T) {
	for _, pol := range []string{"lru", "camp"} {
		t.Run(pol, func(t *testing.T) {
			e, err := memory.Open(engine.Options{Ephemeral: true, Eviction: pol, CapacityBytes: 1 << 20})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			for i, k := range []string{"a", "b", "c", "d"} {
				if err := e.Apply(&engine.Batch{Version: kv.Version(i + 1), Writes: []engine.Write{
					{Key: []byte(k), Value: []byte("123"), Cost: 1},
				}}); err != nil {
					t.Fatal(err)
				}
			}
			if got := fmt.Sprint(keys(e.Coldest(10))); got != "[a b c d]" {
				t.Fatalf("Coldest(10) = %s; want [a b c d]", got)
			}
			e.Get([]byte("a")) // a becomes the hottest
			if got := fmt.Sprint(keys(e.Coldest(2))); got != "[b c]" {
				t.Fatalf("Coldest(2) after reading a = %s; want [b c]", got)
			}
			if got := e.Coldest(0); len(got) != 0 {
				t.Fatalf("Coldest(0) = %q", got)
			}
		})
	}
	// camp: a costly pair is colder than nothing of the same size... it
	// is hotter than cheap ones.
	e, _ := memory.Open(engine.Options{Ephemeral: true, Eviction: "camp"})
	defer e.Close()
	e.Apply(&engine.Batch{Version: 1, Writes: []engine.Write{
		{Key: []byte("dear"), Value: []byte("xx"), Cost: 100},
		{Key: []byte("cheap"), Value: []byte("x"), Cost: 1},
	}})
	if got := fmt.Sprint(keys(e.Coldest(2))); got != "[cheap dear]" {
		t.Fatalf("camp Coldest = %s; want [cheap dear]", got)
	}
	// Without an eviction order there is nothing to report.
	d, _ := memory.Open(engine.Options{})
	defer d.Close()
	d.Apply(&engine.Batch{Version: 1, Writes: []engine.Write{enginetest.Set("k", "v")}})
	if got := d.Coldest(1); got != nil {
		t.Fatalf("Coldest of a durable engine = %q; want nil", got)
	}
}

func BenchmarkApply(b *testing.B) {
	for _, c := range []struct {
		name string
		opts engine.Options
	}{
		{"durable", engine.Options{}},
		{"lru", engine.Options{Ephemeral: true, Eviction: "lru", CapacityBytes: 4 << 20}},
		{"camp", engine.Options{Ephemeral: true, Eviction: "camp", CapacityBytes: 4 << 20}},
	} {
		b.Run(c.name, func(b *testing.B) {
			e, err := memory.Open(c.opts)
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			enginetest.BenchmarkApply(b, e)
		})
	}
}

func BenchmarkGet(b *testing.B) {
	for _, c := range []struct {
		name string
		opts engine.Options
	}{
		{"durable", engine.Options{}},
		{"lru", engine.Options{Ephemeral: true, Eviction: "lru", CapacityBytes: 4 << 20}},
		{"camp", engine.Options{Ephemeral: true, Eviction: "camp", CapacityBytes: 4 << 20}},
	} {
		b.Run(c.name, func(b *testing.B) {
			e, err := memory.Open(c.opts)
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			enginetest.BenchmarkGet(b, e)
		})
	}
}
