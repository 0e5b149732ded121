package distash

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/distash/distash/internal/kv"
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
