package main

import (
	"math"
	"testing"

	"github.com/distash/distash/config"
	"github.com/distash/distash/server"
)

func TestMemoryLimit(t *testing.T) {
	cfg := config.Default()
	unbounded := config.Default()
	unbounded.Pools[0].Capacity = 0
	t.Setenv("GOMEMLIMIT", "")
	for _, c := range []struct {
		flag  string
		cfg   *config.Config
		limit int64
		ok    bool
	}{
		{"auto", cfg, server.MemoryBudget(cfg), true},
		{"auto", unbounded, 0, false},
		{"off", cfg, math.MaxInt64, true},
		{"2GiB", cfg, 2 << 30, true},
	} {
		limit, ok, err := memoryLimit(c.flag, c.cfg)
		if err != nil || limit != c.limit || ok != c.ok {
			t.Errorf("memoryLimit(%q) = %d, %v, %v; want %d, %v", c.flag, limit, ok, err, c.limit, c.ok)
		}
	}
	for _, bad := range []string{"", "0", "lots", "-1GiB"} {
		if _, _, err := memoryLimit(bad, cfg); err == nil {
			t.Errorf("memoryLimit(%q) accepted", bad)
		}
	}
	t.Setenv("GOMEMLIMIT", "3GiB")
	if _, ok, err := memoryLimit("auto", cfg); ok || err != nil {
		t.Errorf("auto with GOMEMLIMIT set = %v, %v; want the runtime's limit kept", ok, err)
	}
}
