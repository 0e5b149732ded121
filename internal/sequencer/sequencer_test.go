package sequencer

import (
	"testing"
	"time"

	"github.com/distash/distash/internal/clock"
	"github.com/distash/distash/internal/kv"
)

func TestVersionsIncreaseWithClockAndWithoutIt(t *testing.T) {
	c := clock.NewManual(time.Unix(1000, 0))
	s := New(c, 0)
	prev, v := s.NextCommitVersion()
	if prev != 0 || v != kv.Version(1000*kv.VersionsPerSecond) {
		t.Fatalf("first version = (%d, %d)", prev, v)
	}
	// The clock stalls: versions still increase, chained by prev.
	for i := 0; i < 100; i++ {
		p, n := s.NextCommitVersion()
		if p != v || n <= v {
			t.Fatalf("step %d: (%d, %d) after %d", i, p, n, v)
		}
		v = n
	}
	c.Advance(2 * time.Second)
	_, n := s.NextCommitVersion()
	if n != kv.Version(1002*kv.VersionsPerSecond) {
		t.Fatalf("version after 2 s = %d", n)
	}
}

func TestRecoveredVersionIsAFloor(t *testing.T) {
	c := clock.NewManual(time.Unix(10, 0))
	s := New(c, 99_000_000_000)
	_, v := s.NextCommitVersion()
	if v != 99_000_000_001 {
		t.Fatalf("version after recovery = %d", v)
	}
	if s.CommittedVersion() != 99_000_000_000 {
		t.Fatal("committed version must start at the recovered version")
	}
}

func TestCommittedNeverGoesBack(t *testing.T) {
	s := New(clock.Real{}, 0)
	s.ReportCommitted(10)
	s.ReportCommitted(5)
	if s.CommittedVersion() != 10 {
		t.Fatalf("committed = %d", s.CommittedVersion())
	}
}
