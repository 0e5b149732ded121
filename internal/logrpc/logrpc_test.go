package logrpc

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"reflect"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/distash/distash/internal/engine"
	"github.com/distash/distash/internal/engine/memory"
	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/logentry"
	"github.com/distash/distash/internal/stash"
	"github.com/distash/distash/internal/testutil/silent"
	"github.com/distash/distash/internal/testutil/wait"
	"github.com/distash/distash/internal/txlog"
	"github.com/distash/distash/internal/wire"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// serve opens a log with tags 1 and 2 and serves it on loopback.
func serve(t *testing.T) (*txlog.Log, *grpc.ClientConn) {
	t.Helper()
	l, conn, _ := serveWith(t, MaxPeekWait)
	return l, conn
}

// serveWith is serve with the server's peek wait, and its service.
func serveWith(t *testing.T, peekWait time.Duration) (*txlog.Log, *grpc.ClientConn, *service) {
	t.Helper()
	l, err := txlog.Open(txlog.Options{Dir: t.TempDir(), Tags: []kv.Tag{1, 2}, Logger: quiet, PopInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	svc := newService(l, nil, peekWait)
	wire.RegisterLogServer(s, svc)
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return l, conn, svc
}

// appendSets appends one entry per key, each set tagged 1, and every
// third also tagged 2; it returns the last version.
func appendSets(t *testing.T, l *txlog.Log, keys ...string) kv.Version {
	t.Helper()
	v, err := appendSetsErr(l, keys...)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// appendSetsErr is appendSets for a goroutine other than the test's.
func appendSetsErr(l *txlog.Log, keys ...string) (kv.Version, error) {
	v := l.LastVersion()
	for i, k := range keys {
		tags := []kv.Tag{1}
		if i%3 == 0 {
			tags = append(tags, 2)
		}
		e := &logentry.Entry{Version: v + 10, PrevVersion: v, Mutations: []logentry.TaggedMutation{{
			Mutation: kv.Mutation{Type: kv.MutSet, Key: []byte(k), Param: []byte("v-" + k)}, Tags: tags}}}
		if err := l.Append(e).Wait(context.Background()); err != nil {
			return v, err
		}
		v += 10
	}
	return v, nil
}

// TestRemotePeekMatchesLocal: a remote Peek returns what a local one does,
// for each tag, from any version, and pages with maxBytes.
func TestRemotePeekMatchesLocal(t *testing.T) {
	l, conn := serve(t)
	c := NewClient(conn, quiet)
	ctx := context.Background()
	var keys []string
	for i := 0; i < 30; i++ {
		keys = append(keys, fmt.Sprintf("k%02d", i))
	}
	appendSets(t, l, keys...)
	for _, tag := range []kv.Tag{1, 2} {
		for _, after := range []kv.Version{0, 50, 150} {
			for _, maxBytes := range []int{0, 40} {
				lm, le, lerr := l.Peek(ctx, tag, after, maxBytes)
				rm, re, rerr := c.Peek(ctx, tag, after, maxBytes)
				if lerr != nil || rerr != nil {
					t.Fatal(lerr, rerr)
				}
				if le != re || !reflect.DeepEqual(lm, rm) {
					t.Fatalf("tag %d after %d max %d: local %d messages to %d, remote %d to %d", tag, after, maxBytes, len(lm), le, len(rm), re)
				}
			}
		}
	}
}

// TestStashPullsOverTheNetwork: a stash whose log is remote catches up,
// waits for new versions across the server's peek timeout, serves reads,
// and its pops reach the log.
func TestStashPullsOverTheNetwork(t *testing.T) {
	l, conn, svc := serveWith(t, 50*time.Millisecond)
	last := appendSets(t, l, "a", "b", "c")
	eng, _ := memory.Open(engine.Options{})
	st := stash.New(stash.Options{Tag: 1, Engine: eng, Log: NewClient(conn, quiet), WindowVersions: 5, FlushInterval: 5 * time.Millisecond, Logger: quiet})
	st.SetOwned([]kv.KeyRange{{Begin: []byte(""), End: []byte("\xff")}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go st.Run(ctx)
	vals, present, err := st.Get(ctx, last, [][]byte{[]byte("a"), []byte("c"), []byte("z")})
	if err != nil || !present[0] || !present[1] || present[2] || string(vals[0]) != "v-a" || string(vals[1]) != "v-c" {
		t.Fatalf("read through the remote log: %q %v %v", vals, present, err)
	}
	// A write after the server answered a peek with nothing new arrives.
	wait.For(t, "a peek answered empty", func() bool { return svc.emptyPeeks.Load() > 0 })
	last = appendSets(t, l, "d")
	vals, present, err = st.Get(ctx, last, [][]byte{[]byte("d")})
	if err != nil || !present[0] || string(vals[0]) != "v-d" {
		t.Fatalf("read of a later write: %q %v %v", vals, present, err)
	}
	// The stash flushed and popped through the network.
	wait.For(t, "the log popped tag 1 to about the last write", func() bool { return l.Popped(1) >= last-5 })
}

// TestPopBeyondTheLogIsRefused: a pop past the log's end would let it drop
// entries no stash has seen.
func TestPopBeyondTheLogIsRefused(t *testing.T) {
	l, conn := serve(t)
	last := appendSets(t, l, "a")
	resp, err := wire.NewLogClient(conn).Pop(context.Background(), &wire.PopRequest{Tag: 1, UpTo: int64(last) + 1_000_000})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Error == nil || kv.Code(resp.Error.Code) != kv.CodeInvalidMutation {
		t.Fatalf("pop beyond the end: %v", resp.Error)
	}
	presp, err := wire.NewLogClient(conn).Peek(context.Background(), &wire.PeekRequest{Tag: 1, After: -1})
	if err != nil || presp.Error == nil {
		t.Fatalf("peek after -1: %v %v", presp, err)
	}
}

// silentLeader is a Leader whose first node never answers (it accepts
// connections and reads nothing, like a paused process); after Failed, or
// once moved is closed, it names the real node.
type silentLeader struct {
	silent, real grpc.ClientConnInterface
	failed       chan struct{} // closed by Failed
	moved        chan struct{} // nil: no Mover
}

func (s *silentLeader) Conn(context.Context) (grpc.ClientConnInterface, error) {
	select {
	case <-s.failed:
		return s.real, nil
	default:
	}
	if s.moved != nil {
		select {
		case <-s.moved:
			return s.real, nil
		default:
		}
	}
	return s.silent, nil
}

func (s *silentLeader) Failed(grpc.ClientConnInterface) {
	select {
	case <-s.failed:
	default:
		close(s.failed)
	}
}

type movingLeader struct{ *silentLeader }

func (m movingLeader) Moved() <-chan struct{} { return movedOnce(m.moved) }

// movedOnce is a Mover's Moved of one move, when moved closes: moved
// until then, a new channel after, as a node's after each newer
// generation.
func movedOnce(moved chan struct{}) <-chan struct{} {
	select {
	case <-moved:
		return make(chan struct{})
	default:
		return moved
	}
}

// silentConn is a connection to a listener that accepts and then ignores
// every connection (silent.Listen).
func silentConn(t *testing.T) *grpc.ClientConn {
	t.Helper()
	addr, _ := silent.Listen(t)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestPeekLeavesASilentNode: a Peek sent to a node that stopped answering
// with its connection open gives up after PeekTimeout and asks its Leader
// again, instead of waiting as long as its caller does; with a Leader
// that says the log moved (Mover), it gives up as soon as it says so.
func TestPeekLeavesASilentNode(t *testing.T) {
	l, conn := serve(t)
	last := appendSets(t, l, "a")
	silent := silentConn(t)
	checkLeavesSilentNode(t, last, 0, func(moved chan struct{}) Leader {
		sl := &silentLeader{silent: silent, real: conn, failed: make(chan struct{}), moved: moved}
		if moved == nil {
			return sl
		}
		return movingLeader{sl}
	})
}

// checkLeavesSilentNode peeks tag 1 from 0 with maxBytes through the
// Leader that leader returns, whose first node is silent: without a move
// (moved nil) the Peek must leave it after about PeekTimeout, with one
// 200 ms in at once; either way it returns the one message up to last.
func checkLeavesSilentNode(t *testing.T, last kv.Version, maxBytes int, leader func(moved chan struct{}) Leader) {
	t.Helper()
	for _, moving := range []bool{false, true} {
		var moved chan struct{}
		bound := PeekTimeout + time.Second
		if moving {
			moved = make(chan struct{})
			time.AfterFunc(200*time.Millisecond, func() { close(moved) })
			bound = time.Second
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*PeekTimeout)
		began := time.Now()
		msgs, end, err := NewLeaderClient(leader(moved), quiet).Peek(ctx, 1, 0, maxBytes)
		took := time.Since(began)
		cancel()
		if err != nil || end != last || len(msgs) != 1 {
			t.Fatalf("moving %v: peek: %d messages to %d, %v (took %v)", moving, len(msgs), end, err, took)
		}
		if took > bound {
			t.Errorf("moving %v: the peek took %v to leave the silent node: want < %v", moving, took.Round(time.Millisecond), bound)
		}
		t.Logf("moving %v: left the silent node after %v", moving, took.Round(time.Millisecond))
	}
}
