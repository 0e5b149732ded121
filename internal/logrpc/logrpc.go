// Package logrpc carries the log's Peek and Pop over gRPC, so that a stash
// in another process pulls the mutations of its tag from a log replica and
// reports what it made durable, exactly as a stash in the log's process
// does through txlog.Log.
//
//	logrpc.Register(grpcServer, log)        // on the node holding a log replica
//	st := stash.New(stash.Options{Log: logrpc.NewClient(conn), ...})
//
// A Peek waits on the server for new versions at most MaxPeekWait, then
// answers with no messages and the caller asks again: no call outlives a
// dead connection by more than that.
package logrpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/grpc"

	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/txlog"
	"github.com/distash/distash/internal/wire"
)

// MaxPeekWait bounds how long one Peek waits for new versions on the server.
const MaxPeekWait = 2 * time.Second

// MaxPeekBytes bounds one Peek's answer (and is its default).
const MaxPeekBytes = 16 << 20

// PopTimeout bounds a Pop call; a lost Pop is harmless (the next one
// carries a later version).
const PopTimeout = time.Second

// Log is the part of the log this package serves (a *txlog.Log).
type Log interface {
	Peek(ctx context.Context, tag kv.Tag, after kv.Version, maxBytes int) ([]txlog.Message, kv.Version, error)
	Pop(tag kv.Tag, upTo kv.Version)
	LastVersion() kv.Version
}

// Register serves l's Peek and Pop on s.
func Register(s *grpc.Server, l Log) { wire.RegisterLogServer(s, &service{log: l}) }

type service struct {
	wire.UnimplementedLogServer
	log Log
}

func (v *service) Peek(ctx context.Context, req *wire.PeekRequest) (*wire.PeekResponse, error) {
	if req.After < 0 || req.MaxBytes < 0 {
		return &wire.PeekResponse{Error: wire.ErrorOf(kv.Errorf(kv.CodeInvalidMutation, "peek after %d, max bytes %d: negative", req.After, req.MaxBytes))}, nil
	}
	maxBytes := int(min(req.MaxBytes, MaxPeekBytes))
	if maxBytes == 0 {
		maxBytes = MaxPeekBytes
	}
	wctx, cancel := context.WithTimeout(ctx, MaxPeekWait)
	defer cancel()
	after := kv.Version(req.After)
	msgs, end, err := v.log.Peek(wctx, kv.Tag(req.Tag), after, maxBytes)
	if err != nil {
		if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			// Nothing new within MaxPeekWait: the caller asks again.
			return &wire.PeekResponse{End: req.After}, nil
		}
		return &wire.PeekResponse{Error: wire.ErrorOf(err)}, nil
	}
	resp := &wire.PeekResponse{End: int64(end), Messages: make([]*wire.LogMessage, len(msgs))}
	for i, m := range msgs {
		wm := &wire.LogMessage{Version: int64(m.Version), Mutations: make([]*wire.Mutation, len(m.Mutations))}
		for j, mut := range m.Mutations {
			wm.Mutations[j] = &wire.Mutation{Type: uint32(mut.Type), Key: mut.Key, Param: mut.Param, Cost: mut.Cost}
		}
		resp.Messages[i] = wm
	}
	return resp, nil
}

func (v *service) Pop(ctx context.Context, req *wire.PopRequest) (*wire.PopResponse, error) {
	// A pop beyond the log's end would let it drop entries no stash has
	// seen yet.
	if last := v.log.LastVersion(); req.UpTo < 0 || kv.Version(req.UpTo) > last {
		return &wire.PopResponse{Error: wire.ErrorOf(kv.Errorf(kv.CodeInvalidMutation, "pop up to %d: outside the log's versions [0, %d]", req.UpTo, last))}, nil
	}
	v.log.Pop(kv.Tag(req.Tag), kv.Version(req.UpTo))
	return &wire.PopResponse{}, nil
}

// Client is a stash's view of a remote log (stash.Log).
type Client struct {
	api    wire.LogClient
	logger *slog.Logger
}

// NewClient returns a log client over conn.
func NewClient(conn grpc.ClientConnInterface, logger *slog.Logger) *Client {
	if logger == nil {
		logger = slog.Default()
	}
	return &Client{api: wire.NewLogClient(conn), logger: logger}
}

// Peek returns tag's messages with versions in (after, end] and end, as
// txlog.Log.Peek, waiting for new versions until ctx ends. Messages are
// checked as a server's requests are: a bad one is an error, not applied.
func (c *Client) Peek(ctx context.Context, tag kv.Tag, after kv.Version, maxBytes int) ([]txlog.Message, kv.Version, error) {
	for {
		resp, err := c.api.Peek(ctx, &wire.PeekRequest{Tag: uint32(tag), After: int64(after), MaxBytes: int64(maxBytes)})
		if err != nil {
			return nil, after, err
		}
		if err := resp.Error.Err(); err != nil {
			return nil, after, err
		}
		end := kv.Version(resp.End)
		if end <= after && len(resp.Messages) == 0 {
			continue // the server's wait ended with nothing new
		}
		msgs := make([]txlog.Message, len(resp.Messages))
		prev := after
		for i, wm := range resp.Messages {
			v := kv.Version(wm.GetVersion())
			if v <= prev || v > end {
				return nil, after, fmt.Errorf("logrpc: peek of tag %d after %d: message at version %d out of order (previous %d, end %d)", tag, after, v, prev, end)
			}
			prev = v
			m := txlog.Message{Version: v, Mutations: make([]kv.Mutation, len(wm.Mutations))}
			for j, mut := range wm.Mutations {
				if mut.GetType() < uint32(kv.MutSet) || mut.GetType() > uint32(kv.MutMin) {
					return nil, after, fmt.Errorf("logrpc: peek of tag %d: message at version %d has a mutation of type %d", tag, v, mut.GetType())
				}
				m.Mutations[j] = kv.Mutation{Type: kv.MutationType(mut.Type), Key: mut.Key, Param: mut.Param, Cost: mut.Cost}
			}
			msgs[i] = m
		}
		return msgs, end, nil
	}
}

// Pop tells the log that tag's stash made every version up to upTo
// durable. Errors are logged, not returned: the next pop repeats it.
func (c *Client) Pop(tag kv.Tag, upTo kv.Version) {
	ctx, cancel := context.WithTimeout(context.Background(), PopTimeout)
	defer cancel()
	resp, err := c.api.Pop(ctx, &wire.PopRequest{Tag: uint32(tag), UpTo: int64(upTo)})
	if err == nil {
		err = resp.Error.Err()
	}
	if err != nil {
		c.logger.Warn("logrpc: pop failed", "tag", tag, "up_to", upTo, "err", err)
	}
}
