// Package logrpc carries the log's Peek and Pop over gRPC, so that a stash
// in another process pulls the mutations of its tag from a log replica and
// reports what it made durable, exactly as a stash in the log's process
// does through txlog.Log.
//
//	svc := logrpc.NewService(log, report)    // on the node holding a log replica:
//	wire.RegisterLogServer(grpcServer, svc)  // and on its frames server (PeekStream)
//	st := stash.New(stash.Options{Log: logrpc.NewClient(conn, logger), ...})
//
// A Peek waits on the server for new versions at most MaxPeekWait, then
// answers with no messages and the caller asks again: no call outlives a
// dead connection by more than that. A stash's pull rides one PeekStream
// per tag on the frames transport instead, when its Leader can dial it
// (FramesLeader, stream.go): the server pushes each answer as the log
// grows, and an empty one every MaxPeekWait of nothing new.
package logrpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/logentry"
	"github.com/distash/distash/internal/wire"
)

// MaxPeekWait bounds how long one Peek waits for new versions on the server.
const MaxPeekWait = 2 * time.Second

// MaxPeekBytes bounds one Peek's answer (and is its default).
const MaxPeekBytes = 16 << 20

// PopTimeout bounds a Pop call; a lost Pop is harmless (the next one
// carries a later version).
const PopTimeout = time.Second

// PeekTimeout bounds one Peek call on the client: the server's wait
// (MaxPeekWait) plus room for the answer. A node that stopped answering
// with its connection open (paused, hung) is noticed after this: the
// client asks its Leader again, which may name another node by then.
const PeekTimeout = MaxPeekWait + time.Second

// Log is the part of the log this package serves (a *txlog.Log).
type Log interface {
	Peek(ctx context.Context, tag kv.Tag, after kv.Version, maxBytes int) ([]logentry.Message, kv.Version, error)
	Pop(tag kv.Tag, upTo kv.Version)
	LastVersion() kv.Version
}

// StashReport is what a stash in another process pushes to the log
// leader's node: its live bytes (durable pools' capacity checks) and its
// progress and MVCC window (the ratekeeper's lag signals).
type StashReport struct {
	Tag                           kv.Tag
	UsedBytes                     int64
	Applied                       kv.Version
	WindowBytes, WindowLimitBytes int64
}

// MemoryBudgeted is implemented by a Log that bounds the memory of the
// entries it holds until every tag popped them (txlog.Log): Peek and
// Report answers say when it is over that budget, so that durable stashes
// in other processes flush (and pop) everything they applied, as stashes
// in the log's process do.
type MemoryBudgeted interface {
	OverMemoryBudget() bool
}

// Gate is implemented by a Log that serves only at times (the log of a
// node that may not lead it): while Serving returns an error, every call is
// answered with it.
type Gate interface {
	Serving() error
}

func (v *service) overMemoryBudget() bool {
	b, ok := v.log.(MemoryBudgeted)
	return ok && b.OverMemoryBudget()
}

func (v *service) closed() error {
	if g, ok := v.log.(Gate); ok {
		return g.Serving()
	}
	return nil
}

// NewService returns the log's service over l (Peek, PeekStream, Pop,
// Report), for gRPC and frames servers; stashes' reports go to report
// (nil: acknowledged and dropped).
func NewService(l Log, report func(StashReport)) wire.LogServer {
	return newService(l, report, MaxPeekWait)
}

func newService(l Log, report func(StashReport), peekWait time.Duration) *service {
	return &service{log: l, report: report, peekWait: peekWait}
}

type service struct {
	wire.UnimplementedLogServer
	log      Log
	report   func(StashReport)
	peekWait time.Duration // MaxPeekWait; tests shorten it
	// emptyPeeks counts the peeks answered with nothing new after
	// peekWait (tests wait for one).
	emptyPeeks atomic.Int64
}

// Report records a stash's report and answers the log's last version.
func (v *service) Report(ctx context.Context, req *wire.ReportRequest) (*wire.ReportResponse, error) {
	if err := v.closed(); err != nil {
		return &wire.ReportResponse{Error: wire.ErrorOf(err)}, nil
	}
	if req.UsedBytes < 0 || req.Applied < 0 || req.WindowBytes < 0 || req.WindowLimitBytes < 0 {
		return &wire.ReportResponse{Error: wire.ErrorOf(kv.Errorf(kv.CodeInvalidMutation, "report of tag %d: negative figures", req.Tag))}, nil
	}
	if v.report != nil {
		v.report(StashReport{Tag: kv.Tag(req.Tag), UsedBytes: req.UsedBytes, Applied: kv.Version(req.Applied),
			WindowBytes: req.WindowBytes, WindowLimitBytes: req.WindowLimitBytes})
	}
	return &wire.ReportResponse{LastVersion: int64(v.log.LastVersion()), OverMemoryBudget: v.overMemoryBudget()}, nil
}

func (v *service) Peek(ctx context.Context, req *wire.PeekRequest) (*wire.PeekResponse, error) {
	if err := v.closed(); err != nil {
		return &wire.PeekResponse{Error: wire.ErrorOf(err)}, nil
	}
	if err := checkPeek(req); err != nil {
		return &wire.PeekResponse{Error: wire.ErrorOf(err)}, nil
	}
	resp, _ := v.peekOnce(ctx, kv.Tag(req.Tag), kv.Version(req.After), peekBytes(req))
	return resp, nil
}

// PeekStream serves a stash's pull of its tag as one stream: the first
// request names the tag and where to start, and every answer follows the
// last one's end (see the proto's comment). An answer with an error ends
// it, as does the client's hang-up.
func (v *service) PeekStream(stream wire.Log_PeekStreamServer) error {
	req, err := stream.Recv()
	if err != nil {
		return err
	}
	if err := checkPeek(req); err != nil {
		return stream.Send(&wire.PeekResponse{Error: wire.ErrorOf(err)})
	}
	ctx := stream.Context()
	go func() {
		// The client sends nothing more; reading is how its hang-up (a
		// closed frames connection) ends ctx. Later requests are ignored.
		for {
			if _, err := stream.Recv(); err != nil {
				return
			}
		}
	}()
	tag, after, maxBytes := kv.Tag(req.Tag), kv.Version(req.After), peekBytes(req)
	for {
		var resp *wire.PeekResponse
		if err := v.closed(); err != nil {
			resp = &wire.PeekResponse{Error: wire.ErrorOf(err)}
		} else {
			resp, after = v.peekOnce(ctx, tag, after, maxBytes)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err := stream.Send(resp); err != nil || resp.Error != nil {
			return err
		}
	}
}

// checkPeek refuses a request with negative figures.
func checkPeek(req *wire.PeekRequest) error {
	if req.After < 0 || req.MaxBytes < 0 {
		return kv.Errorf(kv.CodeInvalidMutation, "peek after %d, max bytes %d: negative", req.After, req.MaxBytes)
	}
	return nil
}

// peekBytes is the bound of req's answers: its own, at most MaxPeekBytes
// (0: that).
func peekBytes(req *wire.PeekRequest) int {
	maxBytes := int(min(req.MaxBytes, MaxPeekBytes))
	if maxBytes == 0 {
		maxBytes = MaxPeekBytes
	}
	return maxBytes
}

// peekOnce answers tag's messages after after, waiting for new versions at
// most peekWait (then the answer has none and ends at after), and the end
// the next answer follows. An error is in the answer.
func (v *service) peekOnce(ctx context.Context, tag kv.Tag, after kv.Version, maxBytes int) (*wire.PeekResponse, kv.Version) {
	wctx, cancel := context.WithTimeout(ctx, v.peekWait)
	defer cancel()
	msgs, end, err := v.log.Peek(wctx, tag, after, maxBytes)
	if err != nil {
		if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			// Nothing new within MaxPeekWait: the caller asks again.
			v.emptyPeeks.Add(1)
			return &wire.PeekResponse{End: int64(after), OverMemoryBudget: v.overMemoryBudget()}, after
		}
		if errors.Is(err, logentry.ErrTrimmed) {
			// Carried as transaction_too_old; the client turns it back
			// into logentry.ErrTrimmed.
			err = kv.Errorf(kv.CodeTransactionTooOld, "%v", err)
		}
		return &wire.PeekResponse{Error: wire.ErrorOf(err)}, after
	}
	resp := &wire.PeekResponse{End: int64(end), Messages: make([]*wire.LogMessage, len(msgs)), OverMemoryBudget: v.overMemoryBudget()}
	for i, m := range msgs {
		wm := &wire.LogMessage{Version: int64(m.Version), Mutations: make([]*wire.Mutation, len(m.Mutations))}
		for j, mut := range m.Mutations {
			wm.Mutations[j] = &wire.Mutation{Type: uint32(mut.Type), Key: mut.Key, Param: mut.Param, Cost: mut.Cost}
		}
		resp.Messages[i] = wm
	}
	return resp, end
}

func (v *service) Pop(ctx context.Context, req *wire.PopRequest) (*wire.PopResponse, error) {
	if err := v.closed(); err != nil {
		return &wire.PopResponse{Error: wire.ErrorOf(err)}, nil
	}
	// A pop beyond the log's end would let it drop entries no stash has
	// seen yet.
	if last := v.log.LastVersion(); req.UpTo < 0 || kv.Version(req.UpTo) > last {
		return &wire.PopResponse{Error: wire.ErrorOf(kv.Errorf(kv.CodeInvalidMutation, "pop up to %d: outside the log's versions [0, %d]", req.UpTo, last))}, nil
	}
	v.log.Pop(kv.Tag(req.Tag), kv.Version(req.UpTo))
	return &wire.PopResponse{}, nil
}

// Leader finds the node serving the log for a stash: the log leader's
// node in a multi-process cluster.
type Leader interface {
	// Conn returns a connection to it, asking the cluster if it must.
	Conn(ctx context.Context) (grpc.ClientConnInterface, error)
	// Failed reports that a call on conn failed in a way that suggests
	// the log moved (transport failure, wrong_node): the next Conn asks
	// again.
	Failed(conn grpc.ClientConnInterface)
}

// Mover is implemented by a Leader that learns when the log's leader may
// have moved (a new generation in the cluster's view): Moved returns a
// channel closed then. A call in flight to the old node when it closes is
// abandoned and sent again to the node Conn names now, rather than left
// waiting on a node that may have stopped answering.
type Mover interface {
	Moved() <-chan struct{}
}

type fixed struct{ conn grpc.ClientConnInterface }

func (f fixed) Conn(context.Context) (grpc.ClientConnInterface, error) { return f.conn, nil }
func (fixed) Failed(grpc.ClientConnInterface)                          {}

// Client is a stash's view of a remote log (stash.Log).
type Client struct {
	leader Leader
	logger *slog.Logger
	// overBudget is what the log's last Peek or Report answer said of its
	// memory budget (OverMemoryBudget).
	overBudget atomic.Bool

	// unaryUntil (unix ns): pulls use unary peeks until then, after a log
	// node answered that it has no PeekStream (an older release).
	unaryUntil atomic.Int64
	mu         sync.Mutex
	streams    map[kv.Tag]*peekStream // each tag's open stream while no Peek uses it. Protected by mu.
}

// OverMemoryBudget reports whether the log said, in its last answer to a
// Peek or Report, that it holds more than its memory budget (the stash's
// flush then moves everything it applied to its engine, and pops it).
func (c *Client) OverMemoryBudget() bool { return c.overBudget.Load() }

// NewClient returns a log client over conn.
func NewClient(conn grpc.ClientConnInterface, logger *slog.Logger) *Client {
	return NewLeaderClient(fixed{conn}, logger)
}

// NewLeaderClient returns a log client that follows the log's leader: a
// Peek or Pop that fails because the node is gone or no longer serves the
// log asks leader again and retries (Peek until its ctx ends).
func NewLeaderClient(leader Leader, logger *slog.Logger) *Client {
	if logger == nil {
		logger = slog.Default()
	}
	return &Client{leader: leader, logger: logger}
}

// retryDelay spaces the attempts of a Peek whose node failed.
const retryDelay = 100 * time.Millisecond

// moved returns the leader's Moved channel, nil if it has none.
func (c *Client) moved() <-chan struct{} {
	if m, ok := c.leader.(Mover); ok {
		return m.Moved()
	}
	return nil
}

// movedErr reports whether err (of a call or in a reply) means the log is
// to be found elsewhere now.
func movedErr(err error) bool {
	if status.Code(err) == codes.Unavailable {
		return true
	}
	var ke *kv.Error
	return errors.As(err, &ke) && (ke.Code == kv.CodeWrongNode || ke.Code == kv.CodeConnectionFailed)
}

// Peek returns tag's messages with versions in (after, end] and end, as
// txlog.Log.Peek, waiting for new versions until ctx ends. Messages are
// checked as a server's requests are: a bad one is an error, not applied.
//
// A pull (maxBytes of at least MinStreamBytes) rides the tag's PeekStream
// on frames when the leader can dial it (FramesLeader): the log pushes
// each version as it commits, and the next Peek after the last one's end
// reads it from the stream. Other peeks, and a log node without
// PeekStream, use the unary Peek.
func (c *Client) Peek(ctx context.Context, tag kv.Tag, after kv.Version, maxBytes int) ([]logentry.Message, kv.Version, error) {
	if fl, ok := c.leader.(FramesLeader); ok && maxBytes >= MinStreamBytes && time.Now().UnixNano() >= c.unaryUntil.Load() {
		if msgs, end, err, done := c.peekStreamed(ctx, fl, tag, after, maxBytes); done {
			return msgs, end, err
		}
	}
	return c.peekUnary(ctx, tag, after, maxBytes)
}

// peekUnary is Peek over unary calls.
func (c *Client) peekUnary(ctx context.Context, tag kv.Tag, after kv.Version, maxBytes int) ([]logentry.Message, kv.Version, error) {
	for {
		// Taken before Conn: a move after it closes this channel.
		moved := c.moved()
		conn, err := c.leader.Conn(ctx)
		if err != nil {
			return nil, after, err
		}
		pctx, cancel := context.WithTimeout(ctx, PeekTimeout)
		if moved != nil {
			go func() {
				select {
				case <-moved:
					cancel()
				case <-pctx.Done():
				}
			}()
		}
		resp, err := wire.NewLogClient(conn).Peek(pctx, &wire.PeekRequest{Tag: uint32(tag), After: int64(after), MaxBytes: int64(maxBytes)})
		cancel()
		if err == nil {
			err = resp.Error.Err()
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, after, ctx.Err()
			}
			var ke *kv.Error
			if errors.As(err, &ke) && ke.Code == kv.CodeTransactionTooOld {
				return nil, after, fmt.Errorf("%w (%s)", logentry.ErrTrimmed, ke.Detail)
			}
			if !movedErr(err) && status.Code(err) != codes.DeadlineExceeded && status.Code(err) != codes.Canceled {
				return nil, after, err
			}
			c.leader.Failed(conn)
			select {
			case <-ctx.Done():
				return nil, after, ctx.Err()
			case <-time.After(retryDelay):
			}
			continue
		}
		c.overBudget.Store(resp.OverMemoryBudget)
		if kv.Version(resp.End) <= after && len(resp.Messages) == 0 {
			continue // the server's wait ended with nothing new
		}
		return decodePeek(tag, after, resp)
	}
}

// decodePeek checks and converts a Peek answer following after, as a
// server checks requests: a bad one is an error, not applied.
func decodePeek(tag kv.Tag, after kv.Version, resp *wire.PeekResponse) ([]logentry.Message, kv.Version, error) {
	end := kv.Version(resp.End)
	if end < after {
		return nil, after, fmt.Errorf("logrpc: peek of tag %d after %d: the answer ends before, at %d", tag, after, end)
	}
	msgs := make([]logentry.Message, len(resp.Messages))
	prev := after
	for i, wm := range resp.Messages {
		v := kv.Version(wm.GetVersion())
		if v <= prev || v > end {
			return nil, after, fmt.Errorf("logrpc: peek of tag %d after %d: message at version %d out of order (previous %d, end %d)", tag, after, v, prev, end)
		}
		prev = v
		m := logentry.Message{Version: v, Mutations: make([]kv.Mutation, len(wm.Mutations))}
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

// Pop tells the log that tag's stash made every version up to upTo
// durable. Errors are logged, not returned: the next pop repeats it.
func (c *Client) Pop(tag kv.Tag, upTo kv.Version) {
	ctx, cancel := context.WithTimeout(context.Background(), PopTimeout)
	defer cancel()
	conn, err := c.leader.Conn(ctx)
	if err == nil {
		var resp *wire.PopResponse
		resp, err = wire.NewLogClient(conn).Pop(ctx, &wire.PopRequest{Tag: uint32(tag), UpTo: int64(upTo)})
		if err == nil {
			err = resp.Error.Err()
		}
		if movedErr(err) || status.Code(err) == codes.DeadlineExceeded {
			c.leader.Failed(conn)
		}
	}
	if err != nil {
		c.logger.Warn("logrpc: pop failed", "tag", tag, "up_to", upTo, "err", err)
	}
}

// Report sends a stash's report to the log's node and returns the log's
// last version.
func (c *Client) Report(ctx context.Context, r StashReport) (kv.Version, error) {
	conn, err := c.leader.Conn(ctx)
	if err != nil {
		return 0, err
	}
	resp, err := wire.NewLogClient(conn).Report(ctx, &wire.ReportRequest{Tag: uint32(r.Tag), UsedBytes: r.UsedBytes,
		Applied: int64(r.Applied), WindowBytes: r.WindowBytes, WindowLimitBytes: r.WindowLimitBytes})
	if err == nil {
		err = resp.Error.Err()
	}
	if err != nil {
		if movedErr(err) || status.Code(err) == codes.DeadlineExceeded {
			c.leader.Failed(conn)
		}
		return 0, err
	}
	c.overBudget.Store(resp.OverMemoryBudget)
	return kv.Version(resp.LastVersion), nil
}
