package dcdelay

import (
	"context"
	"net"
	"sync"
	"time"
)

// DialFunc opens a connection to addr (grpc.WithContextDialer's and
// raftnet.Mux.SetDialer's shape).
type DialFunc = func(ctx context.Context, addr string) (net.Conn, error)

// TCP dials addr over TCP.
func TCP(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}

// Dialer returns a dial function that opens connections with base (TCP if
// nil) and wraps each one with the delay delayFor(addr) gives when it is
// dialled; a connection whose delay is 0 (a peer in the same data
// center) is returned as base opened it.
func Dialer(base DialFunc, delayFor func(addr string) time.Duration) DialFunc {
	if base == nil {
		base = TCP
	}
	return func(ctx context.Context, addr string) (net.Conn, error) {
		c, err := base(ctx, addr)
		if err != nil {
			return nil, err
		}
		return Wrap(c, delayFor(addr)), nil
	}
}

// Table knows the data center of each address it was told of, and the
// delay between data centers: DelayFor(addr) is the delay when addr's data
// center is known and differs from the table's own, and 0 otherwise. It
// is safe for concurrent use.
type Table struct {
	self  string
	delay time.Duration

	mu  sync.RWMutex
	dcs map[string]string // address -> data center. Protected by mu.
}

// NewTable returns a table for a node in data center self, delay d away
// from every other data center.
func NewTable(self string, d time.Duration) *Table {
	return &Table{self: self, delay: d, dcs: map[string]string{}}
}

// Delay is the table's delay between data centers.
func (t *Table) Delay() time.Duration { return t.delay }

// Learn records that addr is in data center dc ("" forgets it).
func (t *Table) Learn(addr, dc string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if dc == "" {
		delete(t.dcs, addr)
		return
	}
	t.dcs[addr] = dc
}

// DC returns addr's data center, if known.
func (t *Table) DC(addr string) (string, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	dc, ok := t.dcs[addr]
	return dc, ok
}

// DelayFor is the one-way delay to addr: the table's delay if addr is in
// another data center, 0 if it is in the table's own or not known yet.
func (t *Table) DelayFor(addr string) time.Duration {
	if dc, ok := t.DC(addr); ok && dc != t.self {
		return t.delay
	}
	return 0
}

// Dialer returns a dial function that opens connections with base (TCP if
// nil) and delays those to other data centers. A connection to an address
// known to be in the table's own data center is not wrapped; one to an
// address whose data center is not known yet is wrapped and undelayed
// until the table learns it (a node dials the coordinators before it has
// seen any view), so long-lived connections get their delay too.
func (t *Table) Dialer(base DialFunc) DialFunc {
	if base == nil {
		base = TCP
	}
	return func(ctx context.Context, addr string) (net.Conn, error) {
		c, err := base(ctx, addr)
		if err != nil || t.delay <= 0 {
			return c, err
		}
		if dc, ok := t.DC(addr); ok && dc == t.self {
			return c, nil
		}
		return WrapFunc(c, func() time.Duration { return t.DelayFor(addr) }), nil
	}
}
