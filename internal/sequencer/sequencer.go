// Package sequencer hands out commit versions and tracks the latest
// committed version, as FoundationDB's master does.
//
// Versions advance with wall time, about kv.VersionsPerSecond per second, so
// that the MVCC window (5 s) is a version distance, and strictly increase
// even if the clock stalls or steps back. The commit proxy asks for one
// version per commit batch; the previous version it returns lets the log
// check that batches arrive in order with none missing.
package sequencer

import (
	"sync"

	"github.com/distash/distash/internal/clock"
	"github.com/distash/distash/internal/kv"
)

// Sequencer hands out commit versions. Safe for concurrent use.
type Sequencer struct {
	clock clock.Clock

	mu        sync.Mutex
	last      kv.Version // last version handed out. Protected by mu.
	chain     kv.Version // version the next batch chains from (the log's last). Protected by mu.
	committed kv.Version // latest version durable in the log and acknowledged. Protected by mu.
}

// New returns a sequencer whose versions follow recovered, the last version
// known to be in the log (0 for a new cluster), on clock c (nil: the real
// clock).
func New(c clock.Clock, recovered kv.Version) *Sequencer {
	return &Sequencer{clock: clock.Or(c), last: recovered, chain: recovered, committed: recovered}
}

// NextCommitVersion returns the previous version handed out and a new,
// larger one.
func (s *Sequencer) NextCommitVersion() (prev, v kv.Version) {
	s.mu.Lock()
	defer s.mu.Unlock()
	prev = s.chain
	v = kv.Version(s.clock.Now().UnixMicro())
	if v <= s.last {
		v = s.last + 1
	}
	s.last, s.chain = v, v
	return prev, v
}

// Resync makes the next batch chain from logLast, the log's last committed
// version, after an append whose outcome was unknown. Versions keep
// increasing past every version handed out.
func (s *Sequencer) Resync(logLast kv.Version) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.chain = logLast
	if logLast > s.committed {
		s.committed = logLast
	}
}

// ReportCommitted records that every version up to v is durable and
// acknowledged. Reports may arrive late; the committed version never goes back.
func (s *Sequencer) ReportCommitted(v kv.Version) {
	s.mu.Lock()
	if v > s.committed {
		s.committed = v
	}
	s.mu.Unlock()
}

// CommittedVersion is the read version handed to new transactions: every
// commit acknowledged before this call is visible at it.
func (s *Sequencer) CommittedVersion() kv.Version {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.committed
}

// LastVersion is the last version handed out.
func (s *Sequencer) LastVersion() kv.Version {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}
