package server

import (
	"testing"

	"github.com/distash/distash/config"
	"github.com/distash/distash/internal/engine/flash"
)

func TestEngineTuning(t *testing.T) {
	zero, mib := config.Size(0), config.MiB
	for _, tt := range []struct {
		name string
		pool config.Pool
		want any
	}{
		{"not flash", config.Pool{Engine: "pebble"}, nil},
		{"flash without settings", config.Pool{Engine: "flash"}, nil},
		{"unset keys keep defaults", config.Pool{Engine: "flash", Flash: &config.Flash{}}, flash.Config{}},
		{"0 disables, sizes pass through", config.Pool{Engine: "flash", Flash: &config.Flash{
			Cache: &zero, WriteBuffer: &mib, Segment: 2 * config.MiB, DirectIO: true}},
			flash.Config{CacheBytes: -1, WriteBufferBytes: 1 << 20, SegmentBytes: 2 << 20, DirectIO: true}},
	} {
		if got := engineTuning(tt.pool); got != tt.want {
			t.Errorf("%s: engineTuning = %#v, want %#v", tt.name, got, tt.want)
		}
	}
}
