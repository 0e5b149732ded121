// Package dcdelay emulates the distance between data centers on one
// machine: a net.Conn wrapper that delivers every byte a one-way delay
// after it was sent, in each direction, without limiting throughput (a
// link of delay d carries back-to-back messages d apart from their
// sending, not d apart from each other), and dialers that wrap only the
// connections that cross data centers.
//
// Only the side that dials wraps its connections: its writes reach the
// peer d later, and what the peer sends reaches it d later, so every
// connection gets d each way (a round trip of 2d) whichever end sends.
//
//	dial := dcdelay.Dialer(base, func(addr string) time.Duration {
//		if dcOf(addr) != myDC {
//			return 30 * time.Millisecond
//		}
//		return 0 // same data center: the connection is not wrapped
//	})
package dcdelay

import (
	"net"
	"os"
	"sync"
	"time"
)

// MaxQueued bounds the bytes a Conn holds in flight in each direction
// (written but not yet sent, received but not yet delivered): past it
// Write blocks and the reader stops reading (TCP's flow control then
// slows the peer), so throughput is at most MaxQueued per delay, 1.6 GB/s
// at 20ms.
const MaxQueued = 32 << 20

// lingerGrace bounds how long Close lets the connection send what was
// written before it, past the last write's due time.
const lingerGrace = time.Second

// readChunk is the size of the reader's reads of the underlying conn.
const readChunk = 32 << 10

// chunk is bytes in flight and when they are due at the other end; a
// received chunk with err set is the underlying conn's read error (EOF),
// delivered in order, after the bytes before it.
type chunk struct {
	data []byte
	due  time.Time
	err  error
}

// Conn is a connection whose bytes arrive a delay after they are sent, in
// both directions. Write queues the bytes and returns at once; a goroutine
// sends them to the underlying conn when due. Another goroutine reads the
// underlying conn and hands the bytes to Read a delay after they arrived.
// Deadlines act on Read and Write as on a net.Conn; they are not passed to
// the underlying conn. Close stops Read and Write at once, sends what was
// written before it when due (as TCP sends its buffer after close), then
// closes the underlying conn.
type Conn struct {
	net.Conn
	delay func() time.Duration

	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every change. Protected by mu.
	out     []chunk       // written, not yet sent. Protected by mu.
	outN    int           // bytes in out. Protected by mu.
	in      []chunk       // received, not yet read. Protected by mu.
	inN     int           // bytes in in. Protected by mu.
	werr    error         // the underlying conn's write error. Protected by mu.
	closed  bool          // Protected by mu.
	rdl     time.Time     // read deadline. Protected by mu.
	wdl     time.Time     // write deadline. Protected by mu.
	done    chan struct{} // closed when both goroutines have ended
}

// Wrap returns c with delay d added to each direction; d <= 0 returns c.
func Wrap(c net.Conn, d time.Duration) net.Conn {
	if d <= 0 {
		return c
	}
	return WrapFunc(c, func() time.Duration { return d })
}

// WrapFunc returns c with delay() added to each direction. delay is asked
// for each write and each read of the underlying conn, so the delay may
// change during the connection's life (it may be 0); bytes stay in order
// (a chunk never overtakes the one before it).
func WrapFunc(c net.Conn, delay func() time.Duration) *Conn {
	dc := &Conn{Conn: c, delay: delay, changed: make(chan struct{}), done: make(chan struct{})}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); dc.sendLoop() }()
	go func() { defer wg.Done(); dc.recvLoop() }()
	go func() { wg.Wait(); close(dc.done) }()
	return dc
}

// Done is closed once the connection's goroutines have ended (after Close
// and the underlying conn's close).
func (c *Conn) Done() <-chan struct{} { return c.done }

// broadcast wakes every waiter. Call with mu held.
func (c *Conn) broadcast() {
	close(c.changed)
	c.changed = make(chan struct{})
}

func (c *Conn) due() time.Time {
	d := c.delay()
	if d < 0 {
		d = 0
	}
	return time.Now().Add(d)
}

// wait blocks until ch is closed or until t (if not zero); it reports
// false if t passed.
func wait(ch <-chan struct{}, t time.Time) bool {
	if t.IsZero() {
		<-ch
		return true
	}
	d := time.Until(t)
	if d <= 0 {
		return false
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ch:
		return true
	case <-tm.C:
		return false
	}
}

// earliest returns the earlier of two times, zero meaning none.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// Write queues b to be sent a delay from now and returns len(b), unless
// the connection is closed, an earlier send failed, or MaxQueued bytes
// are in flight until the write deadline.
func (c *Conn) Write(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		switch {
		case c.closed:
			return 0, net.ErrClosed
		case c.werr != nil:
			return 0, c.werr
		case !c.wdl.IsZero() && !time.Now().Before(c.wdl):
			return 0, os.ErrDeadlineExceeded
		}
		if c.outN == 0 || c.outN+len(b) <= MaxQueued {
			break
		}
		ch, dl := c.changed, c.wdl
		c.mu.Unlock()
		wait(ch, dl)
		c.mu.Lock()
	}
	due := c.due()
	if n := len(c.out); n > 0 && c.out[n-1].due.After(due) {
		due = c.out[n-1].due // in order, whatever the delay did
	}
	c.out = append(c.out, chunk{data: append([]byte(nil), b...), due: due})
	c.outN += len(b)
	c.broadcast()
	return len(b), nil
}

// sendLoop sends the queued chunks to the underlying conn when due; after
// Close it sends what is left, then closes the underlying conn.
func (c *Conn) sendLoop() {
	defer c.Conn.Close()
	lingering := false
	for {
		c.mu.Lock()
		if c.closed && (len(c.out) == 0 || c.werr != nil) {
			c.mu.Unlock()
			return
		}
		if c.closed && !lingering {
			lingering = true
			c.Conn.SetWriteDeadline(c.out[len(c.out)-1].due.Add(lingerGrace))
		}
		if len(c.out) == 0 || c.werr != nil {
			ch := c.changed
			c.mu.Unlock()
			<-ch
			continue
		}
		now := time.Now()
		if d := c.out[0].due; d.After(now) {
			ch := c.changed
			c.mu.Unlock()
			wait(ch, d)
			continue
		}
		// Send every due chunk in one go.
		var bufs net.Buffers
		n := 0
		for n < len(c.out) && !c.out[n].due.After(now) {
			bufs = append(bufs, c.out[n].data)
			n++
		}
		c.mu.Unlock()
		_, err := bufs.WriteTo(c.Conn)
		c.mu.Lock()
		for _, ch := range c.out[:n] {
			c.outN -= len(ch.data)
		}
		k := copy(c.out, c.out[n:])
		clear(c.out[k:])
		c.out = c.out[:k]
		if err != nil {
			c.werr = err
			c.out, c.outN = nil, 0
		}
		c.broadcast()
		c.mu.Unlock()
	}
}

// recvLoop reads the underlying conn and queues what it reads, due a
// delay later, until a read fails (the error is queued too) or the
// connection is closed.
func (c *Conn) recvLoop() {
	buf := make([]byte, readChunk)
	for {
		c.mu.Lock()
		for !c.closed && c.inN >= MaxQueued {
			ch := c.changed
			c.mu.Unlock()
			<-ch
			c.mu.Lock()
		}
		closed := c.closed
		c.mu.Unlock()
		if closed {
			return
		}
		n, err := c.Conn.Read(buf)
		c.mu.Lock()
		if n > 0 || err != nil {
			due := c.due()
			if k := len(c.in); k > 0 && c.in[k-1].due.After(due) {
				due = c.in[k-1].due
			}
			ch := chunk{due: due, err: err}
			if n > 0 {
				ch.data = append([]byte(nil), buf[:n]...)
				c.inN += n
			}
			c.in = append(c.in, ch)
			c.broadcast()
		}
		c.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// Read returns bytes that have arrived: received at least a delay ago.
func (c *Conn) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		if c.closed {
			return 0, net.ErrClosed
		}
		now := time.Now()
		n := 0
		for n < len(b) && len(c.in) > 0 && !c.in[0].due.After(now) {
			h := &c.in[0]
			if len(h.data) == 0 {
				if n > 0 {
					break // the error comes with the next Read
				}
				return 0, h.err
			}
			k := copy(b[n:], h.data)
			n += k
			c.inN -= k
			if h.data = h.data[k:]; len(h.data) == 0 && h.err == nil {
				c.in[0] = chunk{}
				c.in = c.in[1:]
			}
		}
		if n > 0 {
			c.broadcast() // the reader may be waiting for room
			return n, nil
		}
		if !c.rdl.IsZero() && !now.Before(c.rdl) {
			return 0, os.ErrDeadlineExceeded
		}
		var next time.Time
		if len(c.in) > 0 {
			next = c.in[0].due
		}
		ch, until := c.changed, earliest(next, c.rdl)
		c.mu.Unlock()
		wait(ch, until)
		c.mu.Lock()
	}
}

// Close makes Read and Write fail at once; what was written before it is
// still sent when due (within a second more), then the underlying conn is
// closed.
func (c *Conn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return net.ErrClosed
	}
	c.closed = true
	if len(c.out) == 0 || c.werr != nil {
		// Nothing to send: unblock the reader's Read now.
		c.Conn.Close()
	}
	c.broadcast()
	return nil
}

// SetDeadline sets the read and write deadlines.
func (c *Conn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.rdl, c.wdl = t, t
	c.broadcast()
	c.mu.Unlock()
	return nil
}

// SetReadDeadline sets the deadline of Read.
func (c *Conn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.rdl = t
	c.broadcast()
	c.mu.Unlock()
	return nil
}

// SetWriteDeadline sets the deadline of Write, which blocks only while
// MaxQueued bytes are in flight.
func (c *Conn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	c.wdl = t
	c.broadcast()
	c.mu.Unlock()
	return nil
}
