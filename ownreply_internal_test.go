package distash

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/distash/distash/internal/frames"
	"github.com/distash/distash/internal/protover"
	"github.com/distash/distash/internal/testutil/wait"
	"github.com/distash/distash/internal/wire"
)

// delayedEcho serves ReadStream: each reply carries its request's id and,
// as the value, its first key, after the delay the key's second key
// names ("10ms"; none: at once), or once release is closed ("hold").
type delayedEcho struct {
	wire.UnimplementedDiStashServer
	release chan struct{}
}

func (e *delayedEcho) ReadStream(st wire.DiStash_ReadStreamServer) error {
	var mu sync.Mutex
	for {
		req, err := st.Recv()
		if err != nil {
			return nil
		}
		go func() {
			keys := req.GetRequest().GetKeys()
			if len(keys) > 1 {
				if string(keys[1]) == "hold" {
					<-e.release
				} else if d, err := time.ParseDuration(string(keys[1])); err == nil {
					<-time.After(d) // the node's service time
				}
			}
			mu.Lock()
			defer mu.Unlock()
			st.Send(&wire.ReadStreamResponse{Id: req.Id, Response: &wire.ReadResponse{Values: []*wire.Value{{Value: keys[0], Present: true}}}})
		}()
	}
}

// echoStreamer returns a read streamer over frames to a delayedEcho.
func echoStreamer(t *testing.T, wrap func(net.Conn) net.Conn) (*readStreamer, *delayedEcho) {
	t.Helper()
	e := &delayedEcho{release: make(chan struct{})}
	srv := frames.NewServer(frames.ServerOptions{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	srv.Register(&wire.DiStash_ServiceDesc, e)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	c := &readStreamer{
		open: func(ctx context.Context) (bidiStream[*wire.ReadStreamRequest, *wire.ReadStreamResponse], error) {
			conn, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				return nil, err
			}
			if wrap != nil {
				conn = wrap(conn)
			}
			cs, err := frames.Open(ctx, conn, nil, wire.DiStash_ReadStream_FullMethodName, protover.This)
			if err != nil {
				return nil, err
			}
			return &framesStream[*wire.ReadStreamRequest, *wire.ReadStreamResponse]{cs: cs, newR: func() *wire.ReadStreamResponse { return new(wire.ReadStreamResponse) }}, nil
		},
		id: (*wire.ReadStreamResponse).GetId,
	}
	t.Cleanup(c.close)
	return c, e
}

func echoCall(ctx context.Context, c *readStreamer, timeout time.Duration, keys ...string) (string, error) {
	resp, err := c.callWithin(ctx, timeout, func(id uint64) *wire.ReadStreamRequest {
		req := &wire.ReadRequest{}
		for _, k := range keys {
			req.Keys = append(req.Keys, []byte(k))
		}
		return &wire.ReadStreamRequest{Id: id, Request: req}
	})
	if err != nil {
		return "", err
	}
	return string(resp.GetResponse().GetValues()[0].GetValue()), nil
}

// TestCallersReadTheirOwnReplies: on a frames stream a caller alone reads
// its own reply, without a receive goroutine; one that gives up while it
// reads (its timeout, its context) leaves the stream to the others, whose
// replies still reach them, and to the next caller.
func TestCallersReadTheirOwnReplies(t *testing.T) {
	ctx := context.Background()
	c, e := echoStreamer(t, nil)

	for i := range 50 {
		k := fmt.Sprint("k", i)
		if v, err := echoCall(ctx, c, time.Second, k); err != nil || v != k {
			t.Fatalf("call %d: %q, %v", i, v, err)
		}
	}
	if n := c.receivers.Load(); n != 0 {
		t.Fatalf("%d receive goroutines for 50 calls one after another; want none: each caller reads its own reply", n)
	}

	// A reads (it came first) and times out while B waits for a reply
	// that comes later: B gets it.
	aDone := make(chan error, 1)
	go func() {
		_, err := echoCall(ctx, c, 50*time.Millisecond, "a", "hold")
		aDone <- err
	}()
	// A registered first, so it is the stream's receiver.
	wait.Within(t, 5*time.Second, "A's request", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.cur != nil && len(c.cur.pending) == 1
	})
	bDone := make(chan string, 1)
	go func() {
		v, err := echoCall(ctx, c, 5*time.Second, "b", "200ms")
		if err != nil {
			v = err.Error()
		}
		bDone <- v
	}()
	if err := <-aDone; !errors.Is(err, errCallTimeout) {
		t.Fatalf("A: %v, want its timeout", err)
	}
	if v := <-bDone; v != "b" {
		t.Fatalf("B, still waiting when the reading caller gave up: %q", v)
	}
	close(e.release) // A's reply comes late: no one waits for it

	// A caller whose context ends while it reads returns at once.
	cctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := echoCall(cctx, c, 10*time.Second, "c", "3s"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("C: %v, want its context's end", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("C returned %v after its context ended", d)
	}
	if v, err := echoCall(ctx, c, time.Second, "d"); err != nil || v != "d" {
		t.Fatalf("the call after: %q, %v", v, err)
	}
}

// TestOwnRepliesUnderConcurrency: many callers, replies out of order,
// some callers giving up: every reply reaches its own caller, and no
// caller that waits is left without a receiver.
func TestOwnRepliesUnderConcurrency(t *testing.T) {
	ctx := context.Background()
	c, _ := echoStreamer(t, nil)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 150 {
				k := fmt.Sprint(g, "/", i)
				delay := fmt.Sprint(rand.IntN(3000), "us")
				timeout := 10 * time.Second // replies come within 3 ms
				if i%10 == 0 {
					timeout = time.Millisecond // often gives up, reading or not
				}
				v, err := echoCall(ctx, c, timeout, k, delay)
				if err != nil && (!errors.Is(err, errCallTimeout) || timeout > time.Millisecond) {
					errs <- fmt.Errorf("%s: %v", k, err)
					return
				}
				if err == nil && v != k {
					errs <- fmt.Errorf("%s got the reply of %s", k, v)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if v, err := echoCall(ctx, c, time.Second, "last"); err != nil || v != "last" {
		t.Fatalf("after: %q, %v", v, err)
	}
}

// noDeadlines is a connection that takes no read deadline.
type noDeadlines struct{ net.Conn }

func (noDeadlines) SetReadDeadline(time.Time) error { return errors.New("no deadlines here") }

// TestConnWithoutDeadlinesKeepsAReceiver: over a connection that takes no
// read deadline a caller could not end its own read on time, so a receive
// goroutine reads for it, and a timeout still ends the call.
func TestConnWithoutDeadlinesKeepsAReceiver(t *testing.T) {
	ctx := context.Background()
	c, _ := echoStreamer(t, func(c net.Conn) net.Conn { return noDeadlines{c} })
	for i := range 5 {
		if v, err := echoCall(ctx, c, time.Second, "k"); err != nil || v != "k" {
			t.Fatalf("call %d: %q, %v", i, v, err)
		}
	}
	if n := c.receivers.Load(); n != 1 {
		t.Fatalf("%d receive goroutines, want the stream's one", n)
	}
	if _, err := echoCall(ctx, c, 30*time.Millisecond, "late", "2s"); !errors.Is(err, errCallTimeout) {
		t.Fatalf("a call past its timeout: %v", err)
	}
}
