package proxy

import (
	"context"
	"sync"
	"time"

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
	confirm  *confirmer
}

// NewGRVProxy returns a GRV proxy; throttle may be nil.
func NewGRVProxy(seq *sequencer.Sequencer, throttle Throttle) *GRVProxy {
	return &GRVProxy{seq: seq, throttle: throttle}
}

// WithConfirm makes every read version wait for a call of confirm that
// started after the request arrived, and fail with its error. In a
// multi-process cluster confirm checks that this node's log replica still
// leads a quorum: a deposed proxy, whose committed version may be older
// than the new generation's commits, then hands out no read version.
// Concurrent requests share one confirmation. It returns g.
func (g *GRVProxy) WithConfirm(confirm func(ctx context.Context) error) *GRVProxy {
	g.confirm = &confirmer{fn: confirm}
	return g
}

// GetReadVersion returns a read version for a new transaction.
func (g *GRVProxy) GetReadVersion(ctx context.Context) (kv.Version, error) {
	if g.throttle != nil {
		if err := g.throttle.Wait(ctx); err != nil {
			return 0, err
		}
	}
	if g.confirm != nil {
		if err := g.confirm.do(ctx); err != nil {
			return 0, err
		}
	}
	return g.seq.CommittedVersion(), nil
}

// confirmTimeout bounds one confirmation round.
const confirmTimeout = 2 * time.Second

// confirmer coalesces confirmations: at most one runs at a time, and the
// requests that arrive while it runs share the next one, which starts
// after they arrived (a round that started before a request arrived proves
// nothing about the time of the request).
type confirmer struct {
	fn func(ctx context.Context) error

	mu      sync.Mutex
	next    *confirmRound // Protected by mu: collects the waiters of the next round.
	running bool          // Protected by mu.
}

type confirmRound struct {
	done chan struct{}
	err  error
}

func (c *confirmer) do(ctx context.Context) error {
	c.mu.Lock()
	if c.next == nil {
		c.next = &confirmRound{done: make(chan struct{})}
	}
	r := c.next
	if !c.running {
		c.running = true
		go c.loop()
	}
	c.mu.Unlock()
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *confirmer) loop() {
	for {
		c.mu.Lock()
		r := c.next
		c.next = nil
		if r == nil {
			c.running = false
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), confirmTimeout)
		r.err = c.fn(ctx)
		cancel()
		close(r.done)
	}
}
