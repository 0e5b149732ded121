package distash

import (
	"context"
	"errors"
	"sync"

	"github.com/distash/distash/internal/wire"
)

// commitStreamer sends a DB's commits over one long-lived gRPC stream,
// matching replies by id, which saves the per-request HTTP/2 stream setup
// of unary calls. When the stream breaks, every commit in flight on it
// fails (its outcome is unknown) and the next commit opens a new stream.
type commitStreamer struct {
	api wire.DiStashClient

	mu     sync.Mutex
	cur    *commitStream // nil until opened, and after it broke. Protected by mu.
	nextID uint64        // Protected by mu.
}

type commitStream struct {
	st      wire.DiStash_CommitStreamClient
	sendMu  sync.Mutex // gRPC allows one sender at a time on a stream
	cancel  context.CancelFunc
	pending map[uint64]chan *wire.CommitResponse // Protected by commitStreamer.mu.
}

var errStreamBroken = errors.New("commit stream broke")

func (c *commitStreamer) commit(ctx context.Context, req *wire.CommitRequest) (*wire.CommitResponse, error) {
	ch := make(chan *wire.CommitResponse, 1)
	c.mu.Lock()
	if c.cur == nil {
		sctx, cancel := context.WithCancel(context.Background())
		st, err := c.api.CommitStream(sctx)
		if err != nil {
			cancel()
			c.mu.Unlock()
			return nil, err
		}
		c.cur = &commitStream{st: st, cancel: cancel, pending: map[uint64]chan *wire.CommitResponse{}}
		go c.receive(c.cur)
	}
	s := c.cur
	c.nextID++
	id := c.nextID
	s.pending[id] = ch
	c.mu.Unlock()
	// Send outside mu, so replies keep flowing to receive meanwhile.
	s.sendMu.Lock()
	err := s.st.Send(&wire.CommitStreamRequest{Id: id, Request: req})
	s.sendMu.Unlock()
	if err != nil {
		c.mu.Lock()
		c.breakLocked(s) // fails this commit too: its outcome is unknown
		c.mu.Unlock()
		return nil, err
	}
	select {
	case resp, ok := <-ch:
		if !ok {
			return nil, errStreamBroken
		}
		return resp, nil
	case <-ctx.Done():
		c.mu.Lock()
		delete(s.pending, id)
		c.mu.Unlock()
		return nil, ctx.Err()
	}
}

// receive delivers replies until the stream breaks.
func (c *commitStreamer) receive(s *commitStream) {
	for {
		resp, err := s.st.Recv()
		c.mu.Lock()
		if err != nil {
			c.breakLocked(s)
			c.mu.Unlock()
			return
		}
		ch, ok := s.pending[resp.Id]
		delete(s.pending, resp.Id)
		c.mu.Unlock()
		if ok {
			ch <- resp.Response
		}
	}
}

// breakLocked fails every commit in flight on s and forgets s. Called with mu held.
func (c *commitStreamer) breakLocked(s *commitStream) {
	for id, ch := range s.pending {
		close(ch)
		delete(s.pending, id)
	}
	if c.cur == s {
		c.cur = nil
		s.cancel()
	}
}

// close ends the current stream.
func (c *commitStreamer) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur != nil {
		c.breakLocked(c.cur)
	}
}
