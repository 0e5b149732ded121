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
// a request is in flight, new callers queue and are all answered by the
// next one a batch goroutine sends. A caller is only ever answered by a request sent after it
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

	mu sync.Mutex
	// batching: a batch goroutine (send) asks for the callers that
	// queue; own: a caller's own request (startOwn) is on the wire. At
	// most one of each: a caller that sent its own may be busy with its
	// read before it reads the reply, so callers that come meanwhile are
	// served by a batch, not held behind it. Protected by mu.
	batching, own bool
	waiting       []chan grv // callers for the next request. Protected by mu.

	chans replyChans[grv]
	// batches counts the batch goroutines started (tests).
	batches atomic.Int64
}

// grvTimeout bounds one read-version request.
const grvTimeout = 5 * time.Second

type grv struct {
	version kv.Version
	err     error
}

func (b *grvBatcher) get(ctx context.Context) (kv.Version, error) {
	return b.waitTicket(ctx, b.startOwn())
}

// start asks for a read version without waiting for it: wait(ctx, ch)
// returns it. first is true when no request was in flight, so this one
// goes on the wire at once, alone: the client is not busy.
func (b *grvBatcher) start() (ch chan grv, first bool) {
	ch = b.chans.get()
	b.mu.Lock()
	b.waiting = append(b.waiting, ch)
	first = !b.batching && !b.own
	b.startBatchLocked()
	b.mu.Unlock()
	return ch, first
}

// grvTicket is a caller's place in a read version's request: its own
// request, sent by startOwn, or a channel a batch answers.
type grvTicket struct {
	own   bool
	alone bool // no request was in flight: this one went on the wire alone
	call  sentCall[*wire.ReadVersionStreamRequest, *wire.ReadVersionStreamResponse]
	err   error    // sending the own request failed
	ch    chan grv // not own: a batch answers it
}

// startOwn is start for a caller that can wait for its own request:
// when none is in flight, it sends one itself, before it returns, rather
// than through a batch's goroutine, and waitTicket reads its reply (from
// the connection itself, on a frames stream). An idle client's read
// version then costs no goroutine and no hand-off; a busy client's
// callers queue for the next batch as start's do.
func (b *grvBatcher) startOwn() grvTicket {
	if b.stream == nil || b.noStream.Load() {
		ch, first := b.start()
		return grvTicket{ch: ch, alone: first}
	}
	b.mu.Lock()
	if b.batching || b.own {
		ch := b.chans.get()
		b.waiting = append(b.waiting, ch)
		b.startBatchLocked()
		b.mu.Unlock()
		return grvTicket{ch: ch}
	}
	b.own = true
	b.mu.Unlock()
	sc, err := b.stream.send(b.parent(), grvTimeout, newGRVRequest)
	return grvTicket{own: true, alone: true, call: sc, err: err}
}

// waitTicket returns the read version of t (startOwn), while ctx lasts.
func (b *grvBatcher) waitTicket(ctx context.Context, t grvTicket) (kv.Version, error) {
	if !t.own {
		return b.wait(ctx, t.ch)
	}
	defer b.passOn()
	var resp *wire.ReadVersionStreamResponse
	err := t.err
	if err == nil {
		// The request ends with the proxy (b.ctx), the wait with ctx too.
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		if b.ctx != nil {
			defer context.AfterFunc(b.ctx, cancel)()
		}
		var watch *stallWatch
		if b.stalled != nil {
			watch = watchStall(b.stalled)
		}
		resp, err = b.stream.await(wctx, t.call, nil)
		if watch != nil {
			watch.stop()
		}
		if err != nil && ctx.Err() != nil {
			return 0, ctx.Err()
		}
	}
	if status.Code(err) == codes.Unimplemented {
		// A node of an older release: ask unary, from now on.
		b.noStream.Store(true)
		r, uerr := b.ask(b.parent())
		got := b.answer(r, uerr)
		return got.version, got.err
	}
	r := b.answer(resp.GetResponse(), err)
	return r.version, r.err
}

// passOn ends a caller's own request (the callers that queued meanwhile
// are a batch's).
func (b *grvBatcher) passOn() {
	b.mu.Lock()
	b.own = false
	b.mu.Unlock()
}

// startBatchLocked starts a batch goroutine for the callers queued, unless
// one runs. Called with mu held.
func (b *grvBatcher) startBatchLocked() {
	if !b.batching {
		b.batching = true
		b.batches.Add(1)
		go b.send()
	}
}

func newGRVRequest(id uint64) *wire.ReadVersionStreamRequest {
	return &wire.ReadVersionStreamRequest{Id: id, Request: &wire.GetReadVersionRequest{}}
}

// parent is the context of the batcher's requests: they end when the
// proxy is replaced.
func (b *grvBatcher) parent() context.Context {
	if b.ctx == nil {
		return context.Background()
	}
	return b.ctx
}

// answer turns a request's reply, or its error, into a caller's grv.
func (b *grvBatcher) answer(resp *wire.GetReadVersionResponse, err error) grv {
	var r grv
	if err != nil && b.ctx != nil && b.ctx.Err() != nil {
		r.err = errorf(kv.CodeWrongNode, "the cluster's roles moved while the read version was asked: %v", err)
	} else if err != nil {
		r.err = transportErr(err)
	} else if resp == nil {
		r.err = errorf(kv.CodeInternal, "the node answered a read version request without a version")
	} else if r.err = fromWire(resp.Error); r.err == nil {
		r.version = kv.Version(resp.Version)
	}
	return r
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

// send issues requests until no caller is waiting.
func (b *grvBatcher) send() {
	for {
		b.mu.Lock()
		batch := b.waiting
		b.waiting = nil
		if len(batch) == 0 {
			b.batching = false
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		// Bounded, so that a node that stopped answering without breaking
		// the connection (cut off, or hung) fails these callers with a
		// retryable error, and the client looks for the roles again,
		// instead of holding every later transaction behind this request.
		var watch *stallWatch
		if b.stalled != nil {
			watch = watchStall(b.stalled)
		}
		resp, err := b.ask(b.parent())
		if watch != nil {
			watch.stop()
		}
		r := b.answer(resp, err)
		for _, ch := range batch {
			ch <- r
		}
	}
}

// ask asks the node for a read version, within grvTimeout: over its
// stream, or unary if the node does not serve the stream.
func (b *grvBatcher) ask(ctx context.Context) (*wire.GetReadVersionResponse, error) {
	if b.stream != nil && !b.noStream.Load() {
		resp, err := b.stream.callWithin(ctx, grvTimeout, newGRVRequest)
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
