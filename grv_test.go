package distash

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/distash/distash/internal/frames"
	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/protover"
	"github.com/distash/distash/internal/testutil/wait"
	"github.com/distash/distash/internal/wire"
)

// grvNode answers GetReadVersion with the number of requests started so
// far, after delay; hang makes it answer nothing until the call ends.
type grvNode struct {
	wire.DiStashClient
	started atomic.Int64
	delay   time.Duration
	hang    atomic.Bool
}

func (n *grvNode) GetReadVersion(ctx context.Context, _ *wire.GetReadVersionRequest, _ ...grpc.CallOption) (*wire.GetReadVersionResponse, error) {
	v := n.started.Add(1)
	for n.hang.Load() {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
	<-time.After(n.delay) // the node's service time
	return &wire.GetReadVersionResponse{Version: v}, nil
}

// TestGRVBatcherAnswersFromLaterRequests: whether a caller asks itself (no
// request in flight) or waits for a batch, its read version comes from a
// request that started after it arrived (strict serializability), and
// concurrent callers share requests.
func TestGRVBatcherAnswersFromLaterRequests(t *testing.T) {
	n := &grvNode{delay: time.Millisecond}
	b := &grvBatcher{api: n}
	var wg sync.WaitGroup
	var calls atomic.Int64
	for range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 25 {
				before := n.started.Load()
				v, err := b.get(context.Background())
				calls.Add(1)
				if err != nil {
					t.Error(err)
					return
				}
				if int64(v) <= before {
					t.Errorf("read version from request %d; %d requests had started before the caller asked", v, before)
					return
				}
			}
		}()
	}
	wg.Wait()
	if got, asked := n.started.Load(), calls.Load(); got >= asked {
		t.Errorf("%d requests for %d callers: none shared", got, asked)
	}
}

// TestGRVBatcherCallerContextEndsItsRequest: a caller is not held past its
// context by a node that does not answer, and a caller that queued behind
// its request gets a request of its own.
func TestGRVBatcherCallerContextEndsItsRequest(t *testing.T) {
	n := &grvNode{}
	n.hang.Store(true)
	b := &grvBatcher{api: n}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	began := time.Now()
	first := make(chan error, 1)
	go func() {
		_, err := b.get(ctx)
		first <- err
	}()
	wait.Within(t, 5*time.Second, "the first request", func() bool { return n.started.Load() > 0 })
	second := make(chan grv, 1)
	go func() {
		v, err := b.get(context.Background())
		second <- grv{v, err}
	}()
	if err := <-first; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("first caller: %v, want its deadline", err)
	}
	n.hang.Store(false)
	if d := time.Since(began); d > 2*time.Second {
		t.Fatalf("first caller held %v past a 50ms deadline", d)
	}
	r := <-second
	if r.err != nil || r.version != kv.Version(2) {
		t.Fatalf("second caller: version %d, %v; want 2 (its own request)", r.version, r.err)
	}
}

// grvStreamNode serves ReadVersionStream over frames: each reply's version
// is the number of requests started so far, after delay; while hang is
// set it answers nothing.
type grvStreamNode struct {
	wire.UnimplementedDiStashServer
	started atomic.Int64
	delay   time.Duration
	hang    atomic.Bool
	// hangFirst: the first request waits for hang to clear, the others
	// do not.
	hangFirst bool
}

func (n *grvStreamNode) ReadVersionStream(st wire.DiStash_ReadVersionStreamServer) error {
	var mu sync.Mutex
	for {
		req, err := st.Recv()
		if err != nil {
			return nil
		}
		v := n.started.Add(1)
		go func() {
			for n.hang.Load() && (!n.hangFirst || v == 1) {
				time.Sleep(time.Millisecond)
			}
			time.Sleep(n.delay)
			mu.Lock()
			defer mu.Unlock()
			st.Send(&wire.ReadVersionStreamResponse{Id: req.Id, Response: &wire.GetReadVersionResponse{Version: v}})
		}()
	}
}

// streamBatcher returns a grvBatcher whose requests go over frames to n.
func streamBatcher(t *testing.T, n *grvStreamNode, ctx context.Context) *grvBatcher {
	t.Helper()
	srv := frames.NewServer(frames.ServerOptions{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	srv.Register(&wire.DiStash_ServiceDesc, n)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	st := &grvStreamer{
		open: func(ctx context.Context) (bidiStream[*wire.ReadVersionStreamRequest, *wire.ReadVersionStreamResponse], error) {
			conn, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				return nil, err
			}
			cs, err := frames.Open(ctx, conn, nil, wire.DiStash_ReadVersionStream_FullMethodName, protover.This)
			if err != nil {
				return nil, err
			}
			return &framesStream[*wire.ReadVersionStreamRequest, *wire.ReadVersionStreamResponse]{cs: cs, newR: func() *wire.ReadVersionStreamResponse { return new(wire.ReadVersionStreamResponse) }}, nil
		},
		id: (*wire.ReadVersionStreamResponse).GetId,
	}
	t.Cleanup(st.close)
	return &grvBatcher{stream: st, ctx: ctx}
}

// TestOwnReadVersionRequests: over a stream, a caller that finds no
// request in flight sends its own and reads its reply, with no batch
// goroutine; concurrent callers still get versions from requests that
// started after they asked, and share them.
func TestOwnReadVersionRequests(t *testing.T) {
	n := &grvStreamNode{delay: time.Millisecond}
	b := streamBatcher(t, n, context.Background())
	for i := range 20 {
		before := n.started.Load()
		if v, err := b.get(context.Background()); err != nil || int64(v) <= before {
			t.Fatalf("call %d: version %d, %v; %d requests had started before", i, v, err, before)
		}
	}
	if g, r := b.batches.Load(), b.stream.receivers.Load(); g != 0 || r != 0 {
		t.Fatalf("one caller at a time started %d batch goroutines and %d receive goroutines; want none", g, r)
	}
	var wg sync.WaitGroup
	var calls atomic.Int64
	for range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 25 {
				before := n.started.Load()
				v, err := b.get(context.Background())
				calls.Add(1)
				if err != nil {
					t.Error(err)
					return
				}
				if int64(v) <= before {
					t.Errorf("read version from request %d; %d requests had started before the caller asked", v, before)
					return
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("callers still wait after 30s (%d of 1000 answered): a queued caller got no request", calls.Load())
	}
	if got, asked := n.started.Load()-20, calls.Load(); got >= asked {
		t.Errorf("%d requests for %d callers: none shared", got, asked)
	}
}

// TestOwnReadVersionRequestEnds: a caller waiting for its own request
// returns when its context ends, and the callers queued behind it get a
// request of their own; when the proxy is replaced (the batcher's
// context), the caller gets a retryable wrong-node error at once.
func TestOwnReadVersionRequestEnds(t *testing.T) {
	n := &grvStreamNode{}
	n.hang.Store(true)
	proxyCtx, replace := context.WithCancel(context.Background())
	b := streamBatcher(t, n, proxyCtx)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	first := make(chan error, 1)
	go func() {
		_, err := b.get(ctx)
		first <- err
	}()
	wait.Within(t, 5*time.Second, "the first request", func() bool { return n.started.Load() > 0 })
	second := make(chan grv, 1)
	go func() {
		v, err := b.get(context.Background())
		second <- grv{v, err}
	}()
	if err := <-first; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("first caller: %v, want its deadline", err)
	}
	n.hang.Store(false)
	select {
	case r := <-second:
		if r.err != nil || r.version != kv.Version(2) {
			t.Fatalf("second caller: version %d, %v; want 2 (its own request)", r.version, r.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the caller queued behind a request given up on got no request")
	}

	n.hang.Store(true)
	third := make(chan error, 1)
	go func() {
		_, err := b.get(context.Background())
		third <- err
	}()
	wait.Within(t, 5*time.Second, "the third request", func() bool { return n.started.Load() > 2 })
	replace()
	select {
	case err := <-third:
		if !errors.Is(err, ErrWrongNode) {
			t.Fatalf("third caller, its proxy replaced: %v", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("a caller whose proxy was replaced still waits")
	}
	n.hang.Store(false)
}

// TestBusyOwnRequestHoldsNoOne: callers that come while a caller's own
// request is on the wire (its caller busy with its read, or its node slow
// to answer it) are answered by a batch meanwhile, not held behind it.
func TestBusyOwnRequestHoldsNoOne(t *testing.T) {
	n := &grvStreamNode{hangFirst: true}
	n.hang.Store(true)
	b := streamBatcher(t, n, context.Background())
	first := make(chan error, 1)
	go func() {
		_, err := b.get(context.Background())
		first <- err
	}()
	wait.Within(t, 5*time.Second, "the first request", func() bool { return n.started.Load() > 0 })
	for i := range 5 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		v, err := b.get(ctx)
		cancel()
		if err != nil || v < 2 {
			t.Fatalf("caller %d, behind a request that does not come back: version %d, %v", i, v, err)
		}
	}
	n.hang.Store(false)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
}
