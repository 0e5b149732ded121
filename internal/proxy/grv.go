package proxy

import (
	"context"

	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/sequencer"
)

// Throttle limits the rate of new transactions (Ratekeeper's lever).
type Throttle interface {
	Wait(ctx context.Context) error
}

// GRVProxy hands out read versions: the latest committed version, so a new
// transaction sees every commit acknowledged before it started (strict
// serializability). Read-version requests wait on the throttle.
type GRVProxy struct {
	seq      *sequencer.Sequencer
	throttle Throttle
}

// NewGRVProxy returns a GRV proxy; throttle may be nil.
func NewGRVProxy(seq *sequencer.Sequencer, throttle Throttle) *GRVProxy {
	return &GRVProxy{seq: seq, throttle: throttle}
}

// GetReadVersion returns a read version for a new transaction.
func (g *GRVProxy) GetReadVersion(ctx context.Context) (kv.Version, error) {
	if g.throttle != nil {
		if err := g.throttle.Wait(ctx); err != nil {
			return 0, err
		}
	}
	return g.seq.CommittedVersion(), nil
}
