package logrpc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/distash/distash/internal/frames"
	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/logentry"
	"github.com/distash/distash/internal/protover"
	"github.com/distash/distash/internal/wire"
)

// A stash's pull of its tag on one PeekStream. With unary peeks every
// version the log commits costs each stash a request and a call's setup on
// both nodes, even a stash whose tag the version did not touch (it must
// still learn the version to serve reads at it); on the stream the log's
// node writes one frame per answer and the stash's pull loop reads it from
// the connection itself, with no hand-off to another goroutine.

// MinStreamBytes: a Peek asking at least this much is a pull and rides the
// tag's stream; smaller ones (a question about where the log is, asked
// with 1) stay unary.
const MinStreamBytes = 64 << 10

// unaryFor is how long a client keeps to unary peeks after a log node
// answered that it has no PeekStream: it may be upgraded meanwhile, or the
// answer may have come from a node restarting mid-open.
const unaryFor = 30 * time.Second

// FramesLeader is a Leader that also reaches the log's node on the frames
// transport (internal/frames).
type FramesLeader interface {
	Leader
	// DialFrames connects to the frames server of the node Conn names and
	// returns the protocol versions to state when opening a stream there.
	DialFrames(ctx context.Context) (net.Conn, protover.Speaker, error)
}

// peekStream is one tag's open stream: the next answer follows after.
type peekStream struct {
	conn     net.Conn
	after    kv.Version
	maxBytes int
	done     chan struct{} // closed by close: ends the wait for a move
	once     sync.Once
	mu       sync.Mutex
	cs       *frames.ClientStream // nil while it opens. Protected by mu.
	// unwatch ends the watch of the context of the Peek that used it
	// last, which closes it if that context ends, even while it is kept.
	unwatch func() bool
}

func (st *peekStream) close() {
	st.once.Do(func() {
		close(st.done)
		st.mu.Lock()
		cs := st.cs
		st.mu.Unlock()
		if cs != nil {
			cs.Close()
		} else {
			st.conn.Close() // closed while it opens
		}
	})
}

// recv reads the next answer, waiting at most PeekTimeout (the server
// answers at least every MaxPeekWait) and until the watched context ends.
func (st *peekStream) recv() (*wire.PeekResponse, error) {
	st.conn.SetReadDeadline(time.Now().Add(PeekTimeout))
	resp := new(wire.PeekResponse)
	err := st.stream().Recv(resp)
	return resp, err
}

// stream is st's frames stream, once open.
func (st *peekStream) stream() *frames.ClientStream {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.cs
}

// watch closes st when ctx ends, until the next watch.
func (st *peekStream) watch(ctx context.Context) {
	st.unwatch = context.AfterFunc(ctx, st.close)
}

// take removes tag's stream from the client's, for one Peek's use: nil if
// there is none, or the context of the Peek that kept it closed it.
func (c *Client) take(tag kv.Tag) *peekStream {
	c.mu.Lock()
	st := c.streams[tag]
	delete(c.streams, tag)
	c.mu.Unlock()
	if st != nil && !st.unwatch() {
		st.close()
		return nil
	}
	return st
}

// keep puts st back as tag's stream, closing one another Peek left there.
func (c *Client) keep(tag kv.Tag, st *peekStream) {
	c.mu.Lock()
	old := c.streams[tag]
	if c.streams == nil {
		c.streams = map[kv.Tag]*peekStream{}
	}
	c.streams[tag] = st
	c.mu.Unlock()
	if old != nil {
		old.close()
	}
}

// openStream opens tag's stream after after on the node fl names. A move
// of the log (Mover) closes it, even while it opens; so does the end of
// ctx while it opens.
func (c *Client) openStream(ctx context.Context, fl FramesLeader, tag kv.Tag, after kv.Version, maxBytes int) (*peekStream, error) {
	moved := c.moved() // taken before the dial: a move after it closes this channel
	dctx, cancel := context.WithTimeout(ctx, PeekTimeout)
	defer cancel()
	conn, sp, err := fl.DialFrames(dctx)
	if err != nil {
		return nil, err
	}
	st := &peekStream{conn: conn, after: after, maxBytes: maxBytes, done: make(chan struct{})}
	if moved != nil {
		go func() {
			select {
			case <-moved:
				st.close()
			case <-st.done:
			}
		}()
	}
	stop := context.AfterFunc(dctx, st.close)
	defer stop()
	// The stream outlives this call: its end is close (Open's context is
	// the stream's), and the open waits at most PeekTimeout.
	conn.SetDeadline(time.Now().Add(PeekTimeout))
	cs, err := frames.Open(context.Background(), conn, nil, wire.Log_PeekStream_FullMethodName, sp)
	if err == nil {
		st.mu.Lock()
		st.cs = cs
		st.mu.Unlock()
		conn.SetDeadline(time.Time{})
		cs.SetWriteTimeout(PeekTimeout)
		err = cs.Send(&wire.PeekRequest{Tag: uint32(tag), After: int64(after), MaxBytes: int64(maxBytes)})
	}
	if err != nil || !stop() {
		st.close()
		if err == nil {
			err = status.FromContextError(dctx.Err()).Err()
		}
		return nil, err
	}
	return st, nil
}

// peekStreamed is Peek on tag's stream. done is false when the log's node
// has no PeekStream (the caller peeks unary).
func (c *Client) peekStreamed(ctx context.Context, fl FramesLeader, tag kv.Tag, after kv.Version, maxBytes int) (msgs []logentry.Message, end kv.Version, err error, done bool) {
	st := c.take(tag)
	if st != nil && (st.after != after || st.maxBytes != maxBytes) {
		st.close() // the caller starts elsewhere: a new stream from there
		st = nil
	}
	if st != nil {
		st.watch(ctx)
	}
	for {
		if st == nil {
			st, err = c.openStream(ctx, fl, tag, after, maxBytes)
			if errors.Is(err, frames.ErrNotFrames) || status.Code(err) == codes.Unimplemented {
				c.unaryUntil.Store(time.Now().Add(unaryFor).UnixNano())
				return nil, after, nil, false
			}
			if err == nil {
				st.watch(ctx)
			}
		}
		var resp *wire.PeekResponse
		if err == nil {
			resp, err = st.recv()
			if err == nil {
				err = resp.Error.Err()
			}
			if err != nil {
				st.unwatch()
				st.close()
				st = nil
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, after, ctx.Err(), true
			}
			var ke *kv.Error
			if errors.As(err, &ke) && ke.Code == kv.CodeTransactionTooOld {
				return nil, after, fmt.Errorf("%w (%s)", logentry.ErrTrimmed, ke.Detail), true
			}
			if !retryStream(err) {
				return nil, after, err, true // the log's own answer, or a refusal
			}
			// The connection broke, timed out or was closed by a move,
			// or the node no longer serves the log: ask where it is now.
			c.leader.Failed(nil)
			select {
			case <-ctx.Done():
				return nil, after, ctx.Err(), true
			case <-time.After(retryDelay):
			}
			continue
		}
		c.overBudget.Store(resp.OverMemoryBudget)
		if kv.Version(resp.End) <= after && len(resp.Messages) == 0 {
			continue // nothing new within the server's wait
		}
		msgs, end, err = decodePeek(tag, after, resp)
		if err != nil {
			st.unwatch()
			st.close()
			return nil, after, err, true
		}
		st.after = end
		c.keep(tag, st)
		return msgs, end, nil, true
	}
}

// retryStream reports whether a stream's err means the log is to be asked
// again, perhaps elsewhere: a dial that failed (not a status), a broken or
// silent connection, a move; not the log's answers or a refusal.
func retryStream(err error) bool {
	if movedErr(err) {
		return true
	}
	var ke *kv.Error
	if errors.As(err, &ke) {
		return false
	}
	st, ok := status.FromError(err)
	if !ok {
		return true
	}
	switch st.Code() {
	case codes.DeadlineExceeded, codes.Canceled, codes.Unavailable:
		return true
	}
	return false
}
