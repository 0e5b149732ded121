package distash

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/wire"
)

// grvBatcher shares read-version requests of concurrent transactions: while
// one request is in flight, new callers queue and are all answered by the
// next one. A caller is only ever answered by a request sent after it
// arrived, so it sees every commit acknowledged before it asked (strict
// serializability), as FoundationDB's client batches GRVs.
type grvBatcher struct {
	api wire.DiStashClient
	// stream carries the requests (ReadVersionStream), unless the node
	// does not serve it (noStream): then the unary GetReadVersion does.
	stream   *grvStreamer
	noStream atomic.Bool
	// ctx ends when the proxy is replaced: a request still waiting on its
	// node ends then (retryable), and the next goes to the new proxy.
	ctx context.Context
	// stalled is called while a request waits longer than stallAfter
	// (DB.suspect: the view is refreshed).
	stalled func()

	mu       sync.Mutex
	inflight bool       // a request is on the wire. Protected by mu.
	waiting  []chan grv // callers for the next request. Protected by mu.

	chans replyChans[grv]
}

// grvTimeout bounds one read-version request.
const grvTimeout = 5 * time.Second

type grv struct {
	version kv.Version
	err     error
}

func (b *grvBatcher) get(ctx context.Context) (kv.Version, error) {
	ch, _ := b.start()
	return b.wait(ctx, ch)
}

// start asks for a read version without waiting for it: wait(ctx, ch)
// returns it. first is true when no request was in flight, so this one
// goes on the wire at once, alone: the client is not busy.
func (b *grvBatcher) start() (ch chan grv, first bool) {
	ch = b.chans.get()
	b.mu.Lock()
	b.waiting = append(b.waiting, ch)
	if !b.inflight {
		b.inflight, first = true, true
		go b.send()
	}
	b.mu.Unlock()
	return ch, first
}

// wait returns the answer to start's request.
func (b *grvBatcher) wait(ctx context.Context, ch chan grv) (kv.Version, error) {
	select {
	case r := <-ch:
		// send answers each waiting channel once: it is done with ch.
		b.chans.put(ch)
		return r.version, r.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// send issues requests until no caller is waiting. It marks the batcher
// idle before it answers the last batch, so a caller it answers that
// starts another transaction at once finds no request in flight (start's
// first), as a client that waits for nothing else is.
func (b *grvBatcher) send() {
	b.mu.Lock()
	batch := b.waiting
	b.waiting = nil
	b.mu.Unlock()
	for {
		r := b.request()
		b.mu.Lock()
		next := b.waiting
		b.waiting = nil
		if len(next) == 0 {
			b.inflight = false
		}
		b.mu.Unlock()
		for _, ch := range batch {
			ch <- r
		}
		if len(next) == 0 {
			return
		}
		batch = next
	}
}

// request asks for one read version for a batch of callers.
func (b *grvBatcher) request() grv {
	var r grv
	// Bounded, so that a node that stopped answering without breaking
	// the connection (cut off, or hung) fails these callers with a
	// retryable error, and the client looks for the roles again,
	// instead of holding every later transaction behind this request.
	parent := b.ctx
	if parent == nil {
		parent = context.Background()
	}
	var watch *stallWatch
	if b.stalled != nil {
		watch = watchStall(b.stalled)
	}
	resp, err := b.ask(parent)
	if watch != nil {
		watch.stop()
	}
	if err != nil && b.ctx != nil && b.ctx.Err() != nil {
		r.err = errorf(kv.CodeWrongNode, "the cluster's roles moved while the read version was asked: %v", err)
	} else if err != nil {
		r.err = transportErr(err)
	} else if r.err = fromWire(resp.Error); r.err == nil {
		r.version = kv.Version(resp.Version)
	}
	return r
}

// ask asks the node for a read version, within grvTimeout: over its
// stream, or unary if the node does not serve the stream.
func (b *grvBatcher) ask(ctx context.Context) (*wire.GetReadVersionResponse, error) {
	if b.stream != nil && !b.noStream.Load() {
		resp, err := b.stream.callWithin(ctx, grvTimeout, func(id uint64) *wire.ReadVersionStreamRequest {
			return &wire.ReadVersionStreamRequest{Id: id, Request: &wire.GetReadVersionRequest{}}
		})
		if err == nil && resp.Response != nil {
			return resp.Response, nil
		}
		if err == nil {
			err = errorf(kv.CodeInternal, "the node answered a read version request without a version")
		}
		if status.Code(err) != codes.Unimplemented {
			return nil, err
		}
		b.noStream.Store(true) // a node of an older release
	}
	ctx, cancel := context.WithTimeout(ctx, grvTimeout)
	defer cancel()
	return b.api.GetReadVersion(ctx, &wire.GetReadVersionRequest{})
}

// grvStreamer is the stream of a DB's read-version requests to the
// proxy's node.
type grvStreamer = idStreamer[*wire.ReadVersionStreamRequest, *wire.ReadVersionStreamResponse]

func newGRVStreamer(api wire.DiStashClient, fd *framesDialer, token bearer) *grvStreamer {
	return newDataStreamer(fd, wire.DiStash_ReadVersionStream_FullMethodName, grvTimeout, token,
		func(ctx context.Context) (bidiStream[*wire.ReadVersionStreamRequest, *wire.ReadVersionStreamResponse], error) {
			return api.ReadVersionStream(ctx)
		})
}
