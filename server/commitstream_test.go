package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/distash/distash/config"
	"github.com/distash/distash/internal/frames"
	"github.com/distash/distash/internal/protover"
	"github.com/distash/distash/internal/wire"
)

// inflightCounter counts, over the commit streams it wraps, the requests
// received and not yet answered, and keeps the maximum.
type inflightCounter struct {
	mu            sync.Mutex
	inflight, max int
}

func (c *inflightCounter) add(d int) {
	c.mu.Lock()
	c.inflight += d
	c.max = max(c.max, c.inflight)
	c.mu.Unlock()
}

type countingStream struct {
	grpc.ServerStream
	c *inflightCounter
}

func (s countingStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if err == nil {
		s.c.add(1)
	}
	return err
}

func (s countingStream) SendMsg(m any) error {
	s.c.add(-1)
	return s.ServerStream.SendMsg(m)
}

// TestCommitStreamBoundsInflight pipelines 40 commits on one stream and
// counts the requests the server holds at once: at most the bound, plus the
// one received and waiting for room. Without the bound it received all 40
// at once.
func TestCommitStreamBoundsInflight(t *testing.T) {
	req := func(i int) *wire.CommitStreamRequest {
		return &wire.CommitStreamRequest{Id: uint64(i), Request: &wire.CommitRequest{
			Mutations: []*wire.Mutation{{Type: 1, Key: fmt.Appendf(nil, "c/%03d", i), Param: make([]byte, 100)}}}}
	}
	one := requestMemory(req(0).Request)
	for _, c := range []struct {
		name     string
		requests int
		bytes    int64
	}{
		{"requests", 2, 1 << 30},
		{"bytes", 1 << 20, 2 * one},
	} {
		for _, transport := range []string{"frames", "grpc"} {
			t.Run(c.name+"/"+transport, func(t *testing.T) {
				oldReqs, oldBytes := streamMaxRequests, streamMaxBytes
				streamMaxRequests, streamMaxBytes = c.requests, c.bytes
				t.Cleanup(func() { streamMaxRequests, streamMaxBytes = oldReqs, oldBytes })
				counter := &inflightCounter{}
				cfg, err := config.Parse([]byte(`
[[pool]]
name = "cache"
prefix = "c/"
medium = "dram"
mode = "ephemeral"
engine = "memory"
capacity = "1MiB"
`))
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				srv, err := Start(ctx, Options{Dir: t.TempDir(), Config: cfg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
					StreamInterceptor: func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
						return handler(srv, countingStream{ServerStream: ss, c: counter})
					}})
				if err != nil {
					t.Fatal(err)
				}
				defer srv.Stop()
				st := openCommitStream(t, ctx, srv.ClusterString(), transport)
				const n = 40
				for i := 0; i < n; i++ {
					if err := st.Send(req(i)); err != nil {
						t.Fatal(err)
					}
				}
				for i := 0; i < n; i++ {
					resp, err := st.Recv()
					if err != nil {
						t.Fatal(err)
					}
					if e := resp.GetResponse().GetError(); e != nil {
						t.Fatalf("commit %d: %v", resp.Id, e)
					}
				}
				t.Logf("at most %d requests in flight", counter.max)
				if counter.max > 3 {
					t.Fatalf("%d requests in flight on the stream; want at most 2, plus 1 waiting for room", counter.max)
				}
			})
		}
	}
}

// commitStream is a commit stream over either transport.
type commitStream interface {
	Send(*wire.CommitStreamRequest) error
	Recv() (*wire.CommitStreamResponse, error)
}

type framesCommitStream struct{ *frames.ClientStream }

func (f framesCommitStream) Send(m *wire.CommitStreamRequest) error { return f.ClientStream.Send(m) }
func (f framesCommitStream) Recv() (*wire.CommitStreamResponse, error) {
	var m wire.CommitStreamResponse
	return &m, f.ClientStream.Recv(&m)
}

// openCommitStream opens a commit stream to addr over "frames" or "grpc".
func openCommitStream(t *testing.T, ctx context.Context, addr, transport string) commitStream {
	t.Helper()
	if transport == "frames" {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		st, err := frames.Open(ctx, c, []byte{frames.RouteByte}, wire.DiStash_CommitStream_FullMethodName, protover.This)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return framesCommitStream{st}
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	st, err := wire.NewDiStashClient(conn).CommitStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.CloseSend() })
	return st
}
