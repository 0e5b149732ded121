package logrpc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/distash/distash/internal/engine"
	"github.com/distash/distash/internal/engine/memory"
	"github.com/distash/distash/internal/frames"
	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/logentry"
	"github.com/distash/distash/internal/protover"
	"github.com/distash/distash/internal/stash"
	"github.com/distash/distash/internal/testutil/silent"
	"github.com/distash/distash/internal/testutil/wait"
	"github.com/distash/distash/internal/txlog"
	"github.com/distash/distash/internal/wire"
)

// framesLeader is a FramesLeader of one node: unary calls on conn, streams
// dialled to addrs[0] until Failed, then to the next address. It counts
// its dials and Failed calls.
type framesLeader struct {
	conn    grpc.ClientConnInterface
	addrs   []string
	failed  atomic.Int64
	dials   atomic.Int64
	movedCh chan struct{} // nil: no Mover
}

func (f *framesLeader) Conn(context.Context) (grpc.ClientConnInterface, error) { return f.conn, nil }
func (f *framesLeader) Failed(grpc.ClientConnInterface)                        { f.failed.Add(1) }

func (f *framesLeader) DialFrames(ctx context.Context) (net.Conn, protover.Speaker, error) {
	f.dials.Add(1)
	addr := f.addrs[min(int(f.failed.Load()), len(f.addrs)-1)]
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	return c, protover.This, err
}

type movingFramesLeader struct{ *framesLeader }

func (m movingFramesLeader) Moved() <-chan struct{} { return movedOnce(m.movedCh) }

// serveFrames serves svc's PeekStream on frames on loopback (nil svc: a
// frames server without the log's service, as a release before it).
func serveFrames(t *testing.T, svc *service) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fs := frames.NewServer(frames.ServerOptions{Logger: quiet})
	if svc != nil {
		fs.Register(&wire.Log_ServiceDesc, svc)
	}
	go fs.Serve(lis)
	t.Cleanup(fs.Stop)
	return lis.Addr().String()
}

// TestStreamedPullMatchesTheLog: a pull on the stream, each Peek after
// the last one's end while versions are appended, returns what the log's
// own Peek does, for each tag and answer bound, on one stream per tag.
func TestStreamedPullMatchesTheLog(t *testing.T) {
	l, conn, svc := serveWith(t, 50*time.Millisecond)
	fl := &framesLeader{conn: conn, addrs: []string{serveFrames(t, svc)}}
	c := NewLeaderClient(fl, quiet)
	ctx := context.Background()
	var keys []string
	for i := 0; i < 40; i++ {
		keys = append(keys, fmt.Sprintf("k%02d", i))
	}
	appendSets(t, l, keys[:20]...)
	appended := make(chan error, 1)
	go func() { // arrive while the pulls run
		_, err := appendSetsErr(l, keys[20:]...)
		appended <- err
	}()
	for _, tag := range []kv.Tag{1, 2} {
		var after kv.Version
		for after < l.LastVersion() || after < 400 {
			rm, re, err := c.Peek(ctx, tag, after, MinStreamBytes)
			if err != nil {
				t.Fatal(err)
			}
			lm, le, err := l.Peek(ctx, tag, after, MinStreamBytes)
			if err != nil {
				t.Fatal(err)
			}
			// The stream's answer may have been read before later
			// versions arrived: it is a prefix of the log's.
			if re > le || len(rm) > len(lm) || !reflect.DeepEqual(rm, lm[:len(rm)]) || (len(rm) < len(lm) && lm[len(rm)].Version <= re) {
				t.Fatalf("tag %d after %d: stream %d messages to %d, log %d to %d", tag, after, len(rm), re, len(lm), le)
			}
			after = re
		}
	}
	if err := <-appended; err != nil {
		t.Fatal(err)
	}
	if n := fl.dials.Load(); n != 2 {
		t.Errorf("%d streams dialled for two tags' pulls, want 2", n)
	}
	// A one-off question (a small bound) stays unary and leaves the
	// stream alone.
	if _, _, err := c.Peek(ctx, 1, 0, 1); err != nil {
		t.Fatal(err)
	}
	if n := fl.dials.Load(); n != 2 {
		t.Errorf("a small peek dialled a stream (%d dials)", n)
	}
}

// TestStashPullsOverAStream: a stash pulling on the stream catches up,
// hears a write that follows the server's empty answers, and pops.
func TestStashPullsOverAStream(t *testing.T) {
	l, conn, svc := serveWith(t, 50*time.Millisecond)
	last := appendSets(t, l, "a", "b", "c")
	fl := &framesLeader{conn: conn, addrs: []string{serveFrames(t, svc)}}
	eng, _ := memory.Open(engine.Options{})
	st := stash.New(stash.Options{Tag: 1, Engine: eng, Log: NewLeaderClient(fl, quiet), WindowVersions: 5, FlushInterval: 5 * time.Millisecond, Logger: quiet})
	st.SetOwned([]kv.KeyRange{{Begin: []byte(""), End: []byte("\xff")}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go st.Run(ctx)
	vals, present, err := st.Get(ctx, last, [][]byte{[]byte("a"), []byte("c")})
	if err != nil || !present[0] || !present[1] || string(vals[0]) != "v-a" || string(vals[1]) != "v-c" {
		t.Fatalf("read through the stream: %q %v %v", vals, present, err)
	}
	empty := svc.emptyPeeks.Load()
	wait.For(t, "the stream's empty answers", func() bool { return svc.emptyPeeks.Load() > empty+2 })
	last = appendSets(t, l, "d")
	vals, present, err = st.Get(ctx, last, [][]byte{[]byte("d")})
	if err != nil || !present[0] || string(vals[0]) != "v-d" {
		t.Fatalf("read of a later write: %q %v %v", vals, present, err)
	}
	wait.For(t, "the log popped tag 1 to about the last write", func() bool { return l.Popped(1) >= last-5 })
	if n := fl.dials.Load(); n != 1 {
		t.Errorf("%d streams dialled, want 1", n)
	}
}

// TestStreamFallsBackToUnary: a log node without PeekStream (an older
// release) answers that it has none; the pull goes on with unary peeks.
func TestStreamFallsBackToUnary(t *testing.T) {
	l, conn, _ := serveWith(t, 50*time.Millisecond)
	last := appendSets(t, l, "a", "b")
	fl := &framesLeader{conn: conn, addrs: []string{serveFrames(t, nil)}}
	c := NewLeaderClient(fl, quiet)
	msgs, end, err := c.Peek(context.Background(), 1, 0, MinStreamBytes)
	if err != nil || end != last || len(msgs) != 2 {
		t.Fatalf("peek: %d messages to %d, %v; want 2 to %d", len(msgs), end, err, last)
	}
	if _, _, err := c.Peek(context.Background(), 1, end-1, MinStreamBytes); err != nil {
		t.Fatal(err)
	}
	if n := fl.dials.Load(); n != 1 {
		t.Errorf("%d dials: the client must keep to unary peeks for a while after a refusal", n)
	}
}

// TestStreamLeavesASilentNode: a stream to a node that stopped answering
// (its connection open) is left after PeekTimeout, or at once when the
// Leader says the log moved, for the node it names next; and a Peek whose
// context ends returns then, wherever it waits.
func TestStreamLeavesASilentNode(t *testing.T) {
	l, conn, svc := serveWith(t, 50*time.Millisecond)
	last := appendSets(t, l, "a")
	real := serveFrames(t, svc)
	paused, _ := silent.Listen(t)
	checkLeavesSilentNode(t, last, MinStreamBytes, func(moved chan struct{}) Leader {
		fl := &framesLeader{conn: conn, addrs: []string{paused, real}, movedCh: moved}
		if moved == nil {
			return fl
		}
		return movingFramesLeader{fl}
	})

	// A Peek waiting on a live stream, and one waiting on a silent node's
	// open, return when their context ends.
	for _, addr := range []string{real, paused} {
		fl := &framesLeader{conn: conn, addrs: []string{addr}}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		began := time.Now()
		_, _, err := NewLeaderClient(fl, quiet).Peek(ctx, 1, last, MinStreamBytes)
		took := time.Since(began)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) || took > time.Second {
			t.Errorf("a peek whose context ended after 200ms: %v after %v", err, took.Round(time.Millisecond))
		}
	}
}

// TestStreamedPeekOfTrimmedVersions: a pull from versions the log dropped
// is logentry.ErrTrimmed, as over unary peeks (the stash fails loudly
// rather than skip them).
func TestStreamedPeekOfTrimmedVersions(t *testing.T) {
	l, err := txlog.Open(txlog.Options{Dir: t.TempDir(), Tags: []kv.Tag{1, 2}, Logger: quiet, PopInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	svc := newService(l, nil, 50*time.Millisecond)
	fl := &framesLeader{addrs: []string{serveFrames(t, svc)}}
	last := appendSets(t, l, "a", "b", "c", "d")
	l.Pop(1, last)
	l.Pop(2, last)
	wait.For(t, "the log to drop the popped entries", func() bool {
		_, _, err := l.Peek(context.Background(), 1, 0, 1)
		return errors.Is(err, logentry.ErrTrimmed)
	})
	_, _, err = NewLeaderClient(fl, quiet).Peek(context.Background(), 1, 0, MinStreamBytes)
	if !errors.Is(err, logentry.ErrTrimmed) {
		t.Fatalf("a streamed peek of dropped versions: %v, want ErrTrimmed", err)
	}
}
