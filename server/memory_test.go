package server

import (
	"testing"

	"github.com/distash/distash/config"
)

func TestMemoryBudget(t *testing.T) {
	const mib = 1 << 20
	// cache: 2 stashes of 64 MiB resident and 32 MiB of window; data: 2
	// windows of 64 MiB, 2 block caches of 64 MiB and 2 × 2 memtables of 4 MiB; the system stash's
	// window; the log's 2 × 256 MiB of entries (past it they spill) and
	// 32 MiB of raft cache; the proxy's 256 MiB; 512 MiB more.
	want := int64(2*(64+32)+2*(64+64+8)+64+512+32+256+512) * mib
	if got := MemoryBudget(config.Default()); got != want {
		t.Fatalf("MemoryBudget(Default()) = %d MiB; want %d MiB", got/mib, want/mib)
	}
	cfg := config.Default()
	cfg.Pools[0].Capacity = 0 // unlimited
	if got := MemoryBudget(cfg); got != 0 {
		t.Fatalf("MemoryBudget with an unlimited memory pool = %d; want 0 (no bound)", got)
	}
}
