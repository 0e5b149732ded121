package server

import (
	"testing"
	"time"

	"github.com/distash/distash/config"
	"github.com/distash/distash/internal/engine/flash"
	pebbleengine "github.com/distash/distash/internal/engine/pebble"
	"github.com/distash/distash/internal/farmem/ult"
)

func TestEngineTuning(t *testing.T) {
	zero, mib := config.Size(0), config.MiB
	for _, tt := range []struct {
		name string
		pool config.Pool
		want any
	}{
		{"pebble without settings", config.Pool{Engine: "pebble"}, nil},
		{"pebble block cache", config.Pool{Engine: "pebble", Pebble: &config.Pebble{Cache: &mib}}, pebbleengine.Tuning{CacheBytes: 1 << 20}},
		{"flash without settings", config.Pool{Engine: "flash"}, nil},
		{"unset keys keep defaults", config.Pool{Engine: "flash", Flash: &config.Flash{}}, flash.Config{}},
		{"0 disables, sizes pass through", config.Pool{Engine: "flash", Flash: &config.Flash{
			Cache: &zero, WriteBuffer: &mib, Segment: 2 * config.MiB, DirectIO: true}},
			flash.Config{CacheBytes: -1, WriteBufferBytes: 1 << 20, SegmentBytes: 2 << 20, DirectIO: true}},
		{"far memory with defaults", config.Pool{Engine: "flash", Flash: &config.Flash{FarMemory: &config.Duration{Duration: 5 * time.Microsecond}}},
			flash.Config{FarMemory: 5 * time.Microsecond}},
		{"far memory keys", config.Pool{Engine: "flash", Flash: &config.Flash{FarMemory: &config.Duration{Duration: time.Microsecond},
			Prefetch: new(false), LookupThreads: 7, IO: "threads"}},
			flash.Config{FarMemory: time.Microsecond, NoPrefetch: true, LookupThreads: 7, IO: ult.IOThreads}},
		{"far memory 0 is DRAM", config.Pool{Engine: "flash", Flash: &config.Flash{FarMemory: &config.Duration{}}}, flash.Config{}},
	} {
		if got := engineTuning(tt.pool); got != tt.want {
			t.Errorf("%s: engineTuning = %#v, want %#v", tt.name, got, tt.want)
		}
	}
}
