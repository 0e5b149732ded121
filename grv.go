package distash

import (
	"context"
	"sync"
	"time"

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
	ch := b.chans.get()
	b.mu.Lock()
	b.waiting = append(b.waiting, ch)
	if !b.inflight {
		b.inflight = true
		go b.send()
	}
	b.mu.Unlock()
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
			b.inflight = false
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		var r grv
		// Bounded, so that a node that stopped answering without breaking
		// the connection (cut off, or hung) fails these callers with a
		// retryable error, and the client looks for the roles again,
		// instead of holding every later transaction behind this request.
		parent := b.ctx
		if parent == nil {
			parent = context.Background()
		}
		ctx, cancel := context.WithTimeout(parent, grvTimeout)
		var watch *stallWatch
		if b.stalled != nil {
			watch = watchStall(b.stalled)
		}
		resp, err := b.api.GetReadVersion(ctx, &wire.GetReadVersionRequest{})
		if watch != nil {
			watch.stop()
		}
		cancel()
		if err != nil && b.ctx != nil && b.ctx.Err() != nil {
			r.err = errorf(kv.CodeWrongNode, "the cluster's roles moved while the read version was asked: %v", err)
		} else if err != nil {
			r.err = transportErr(err)
		} else if r.err = fromWire(resp.Error); r.err == nil {
			r.version = kv.Version(resp.Version)
		}
		for _, ch := range batch {
			ch <- r
		}
	}
}
