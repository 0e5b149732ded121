package distash

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/distash/distash/internal/wire"
)

// bidiStream is a bidirectional stream as the client sees it: gRPC's, or a
// frames stream (datapath.go).
type bidiStream[S, R any] interface {
	Send(S) error
	Recv() (R, error)
}

// idStreamer sends requests over one long-lived stream, matching
// replies by id, which saves the per-request HTTP/2 stream setup (and the
// server's goroutine) of unary calls. When the stream breaks, every request
// in flight on it fails (a commit's outcome is then unknown) and the next
// request opens a new stream. Commits and reads use one each per node.
//
// With a token source (WithTokenSource), a stream carries the token it
// was opened with (gRPC's metadata, frames' open frame) for its whole
// life: when the source gives another token, the next request opens a
// new stream, and the old one is closed once its requests in flight are
// answered.
type idStreamer[S, R any] struct {
	open  func(context.Context) (bidiStream[S, R], error)
	id    func(R) uint64
	token bearer // nil: no token

	mu     sync.Mutex
	cur    *idStream[S, R] // nil until opened, and after it broke. Protected by mu.
	nextID uint64          // Protected by mu.

	chans replyChans[R]
}

type idStream[S, R any] struct {
	st     bidiStream[S, R]
	sendMu sync.Mutex // gRPC allows one sender at a time on a stream
	// concurrent: st's Send may be called concurrently (a frames stream).
	concurrent bool
	cancel     context.CancelFunc
	token      string            // the token it was opened with
	pending    map[uint64]chan R // Protected by idStreamer.mu.
	err        error             // why it broke, if Recv said. Protected by idStreamer.mu.
	retired    bool              // replaced (a new token): closed when pending empties. Protected by idStreamer.mu.
	// breakIt breaks the stream: made once per stream for the sends'
	// context.AfterFunc, not once per request.
	breakIt func()
}

// errStreamBroken is what the requests in flight on a stream that broke
// get: Unavailable, like a connection that failed.
var errStreamBroken = status.Error(codes.Unavailable, "stream to the node broke")

// errCallTimeout is what a request of callWithin gets when its timeout
// passed first: the node did not answer in time.
var errCallTimeout = errors.New("the node did not answer within the request's timeout")

// callWithin sends the request build makes with a fresh id and waits for
// its reply; with timeout > 0 the wait ends after timeout with
// errCallTimeout. The timeout costs no context and no allocation on the
// hot path (a pooled timer): a read's own deadline, of every read. Opening
// the stream, when it must, ends after timeout too; so does a send that
// blocks (a frames stream's writes have a deadline of their own; a gRPC
// stream is broken by a timer).
func (c *idStreamer[S, R]) callWithin(ctx context.Context, timeout time.Duration, build func(id uint64) S) (R, error) {
	return c.callWatched(ctx, timeout, nil, build)
}

// callWatched is callWithin that also calls stall, on a goroutine of its
// own, once the reply is stallAfter late and then every stallRefresh until
// it comes (a commit suspects its node: DB.suspect). The reply's one
// pooled timer serves the stall watch too: a watch with a timer of its own
// cost 2% of a single-key commit's CPU.
func (c *idStreamer[S, R]) callWatched(ctx context.Context, timeout time.Duration, stall func(), build func(id uint64) S) (R, error) {
	var zero R
	var deadline time.Time
	if timeout > 0 {
		// From the call's start: waiting for another caller's opening
		// of the stream counts.
		deadline = time.Now().Add(timeout)
	}
	var tok string
	if c.token != nil {
		var err error
		if tok, err = c.token(ctx); err != nil {
			return zero, status.Error(codes.Unauthenticated, "distash: the token source: "+err.Error())
		}
	}
	ch := c.chans.get()
	c.mu.Lock()
	if c.cur != nil && c.cur.token != tok {
		c.retireLocked(c.cur)
	}
	if c.cur == nil {
		// The stream outlives this call, but opening it waits for the
		// connection, which a node that accepts connections and answers
		// nothing (paused) would hold for gRPC's connect timeout (20 s):
		// the opening ends with the caller's ctx.
		// The stream lives as long as sctx: the timeout cancels it, not
		// a context derived from it, if the opening takes too long.
		sctx, cancel := context.WithCancel(context.Background())
		stop := context.AfterFunc(ctx, cancel)
		var expire *time.Timer
		if timeout > 0 {
			left := time.Until(deadline)
			if left <= 0 {
				cancel()
				stop()
				c.mu.Unlock()
				return zero, errCallTimeout
			}
			expire = time.AfterFunc(left, cancel)
		}
		st, err := c.open(sctx)
		if !stop() && err == nil {
			err = ctx.Err() // ctx ended while it opened: sctx is cancelled
		}
		if expire != nil && !expire.Stop() && ctx.Err() == nil {
			err = errCallTimeout // sctx is cancelled
		}
		if err != nil {
			cancel()
			c.mu.Unlock()
			return zero, err
		}
		_, concurrent := st.(interface{ concurrentSend() })
		s := &idStream[S, R]{st: st, cancel: cancel, token: tok, pending: map[uint64]chan R{}, concurrent: concurrent}
		s.breakIt = func() {
			c.mu.Lock()
			c.breakLocked(s)
			c.mu.Unlock()
		}
		c.cur = s
		go c.receive(s)
	}
	s := c.cur
	c.nextID++
	id := c.nextID
	s.pending[id] = ch
	c.mu.Unlock()
	// Send outside mu, so replies keep flowing to receive meanwhile.
	// A frames stream takes concurrent senders, whose frames then share
	// writes; a gRPC stream one at a time.
	if !s.concurrent {
		s.sendMu.Lock()
	}
	var unwatch func() bool
	if ctx.Done() != nil {
		// Send blocks while the node reads nothing (it stopped
		// answering with the connection open, and flow control is
		// spent). If the caller gives up meanwhile, the stream breaks:
		// that ends this send and those queued behind it.
		unwatch = context.AfterFunc(ctx, s.breakIt)
	}
	var sendTimer *time.Timer
	if timeout > 0 && !s.concurrent {
		// The same for the timeout on a gRPC stream; a frames stream's
		// writes end at their own deadline (a node that reads nothing
		// for that long breaks the stream).
		sendTimer = time.AfterFunc(max(time.Until(deadline), 0), s.breakIt)
	}
	err := s.st.Send(build(id))
	if unwatch != nil {
		unwatch()
	}
	if sendTimer != nil {
		sendTimer.Stop()
	}
	if !s.concurrent {
		s.sendMu.Unlock()
	}
	if errors.Is(err, io.EOF) {
		// The stream ended on the node's side (gRPC tells why on the
		// receiving side): receive fails the requests in flight, this one
		// included, with the stream's status.
		err = nil
	}
	if err != nil {
		c.mu.Lock()
		c.breakLocked(s) // fails this request too: its outcome is unknown
		c.mu.Unlock()
		return zero, err
	}
	// next is how long to wait before the timer's next fire: the stall
	// watch's, or the deadline if it comes first.
	next := func(watch time.Duration) time.Duration {
		if timeout <= 0 {
			return watch
		}
		left := max(time.Until(deadline), 0)
		if stall == nil {
			return left
		}
		return min(left, watch)
	}
	var t *time.Timer
	var expired <-chan time.Time
	if timeout > 0 || stall != nil {
		t = getTimer(next(stallAfter))
		defer putTimer(t)
		expired = t.C
	}
	for {
		select {
		case resp, ok := <-ch:
			if !ok {
				c.mu.Lock()
				err := s.err
				c.mu.Unlock()
				if status.Code(err) == codes.Unimplemented {
					return zero, err // the node does not serve this stream
				}
				return zero, errStreamBroken
			}
			// receive took ch out of pending before it sent: nothing else
			// holds it.
			c.chans.put(ch)
			return resp, nil
		case <-ctx.Done():
			c.forget(s, id)
			return zero, ctx.Err()
		case <-expired:
			if stall != nil && (timeout <= 0 || time.Now().Before(deadline)) {
				go stall()
				t.Reset(next(stallRefresh))
				continue
			}
			c.forget(s, id)
			return zero, errCallTimeout
		}
	}
}

// forget takes request id, given up on, out of s's requests in flight.
func (c *idStreamer[S, R]) forget(s *idStream[S, R], id uint64) {
	c.mu.Lock()
	delete(s.pending, id)
	if s.retired && len(s.pending) == 0 {
		s.cancel()
	}
	c.mu.Unlock()
}

// timers keeps stopped timers for callWithin's timeouts: a timer per
// request would be an allocation and a context per read.
var timers sync.Pool

// getTimer returns a timer that fires after d.
func getTimer(d time.Duration) *time.Timer {
	if t, ok := timers.Get().(*time.Timer); ok {
		t.Reset(d)
		return t
	}
	return time.NewTimer(d)
}

// putTimer stops t and keeps it for reuse. Since Go 1.23 a stopped
// timer's channel delivers nothing stale after Stop or Reset.
func putTimer(t *time.Timer) {
	t.Stop()
	timers.Put(t)
}

// receive delivers replies until the stream breaks.
func (c *idStreamer[S, R]) receive(s *idStream[S, R]) {
	for {
		resp, err := s.st.Recv()
		c.mu.Lock()
		if err != nil {
			s.err = err
			c.breakLocked(s)
			c.mu.Unlock()
			return
		}
		id := c.id(resp)
		ch, ok := s.pending[id]
		delete(s.pending, id)
		if s.retired && len(s.pending) == 0 {
			s.cancel() // its last answer: Recv ends, and this loop
		}
		c.mu.Unlock()
		if ok {
			ch <- resp
		}
	}
}

// breakLocked fails every request in flight on s and forgets s. Called
// with mu held.
func (c *idStreamer[S, R]) breakLocked(s *idStream[S, R]) {
	for id, ch := range s.pending {
		close(ch)
		delete(s.pending, id)
	}
	if c.cur == s {
		c.cur = nil
	}
	s.cancel()
}

// retireLocked replaces s, the current stream: the next request opens a
// new one; s closes once the requests in flight on it are answered (or it
// breaks). Called with mu held.
func (c *idStreamer[S, R]) retireLocked(s *idStream[S, R]) {
	c.cur = nil
	s.retired = true
	if len(s.pending) == 0 {
		s.cancel()
	}
}

// close ends the current stream.
func (c *idStreamer[S, R]) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur != nil {
		c.breakLocked(c.cur)
	}
}

// commitStreamer is the stream of a DB's commits to the proxy's node.
type commitStreamer = idStreamer[*wire.CommitStreamRequest, *wire.CommitStreamResponse]

func newCommitStreamer(api wire.DiStashClient, fd *framesDialer, token bearer) *commitStreamer {
	return newDataStreamer(fd, wire.DiStash_CommitStream_FullMethodName, commitTimeout, token,
		func(ctx context.Context) (bidiStream[*wire.CommitStreamRequest, *wire.CommitStreamResponse], error) {
			return api.CommitStream(ctx)
		})
}

// commitOver commits req over s, waiting at most timeout, and calls stall
// (nil: nothing) while the reply is late (callWatched).
func commitOver(ctx context.Context, timeout time.Duration, s *commitStreamer, stall func(), req *wire.CommitRequest) (*wire.CommitResponse, error) {
	resp, err := s.callWatched(ctx, timeout, stall, func(id uint64) *wire.CommitStreamRequest { return &wire.CommitStreamRequest{Id: id, Request: req} })
	if err != nil {
		return nil, err
	}
	return resp.Response, nil
}

// readStreamer is the stream of a DB's reads to one node.
type readStreamer = idStreamer[*wire.ReadStreamRequest, *wire.ReadStreamResponse]

func newReadStreamer(api wire.DiStashClient, fd *framesDialer, token bearer) *readStreamer {
	return newDataStreamer(fd, wire.DiStash_ReadStream_FullMethodName, readTimeout, token,
		func(ctx context.Context) (bidiStream[*wire.ReadStreamRequest, *wire.ReadStreamResponse], error) {
			return api.ReadStream(ctx)
		})
}
