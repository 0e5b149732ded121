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
	"github.com/distash/distash/internal/stash"
	"github.com/distash/distash/internal/txlog"
	"github.com/distash/distash/internal/wire"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// serve opens a log with tags 1 and 2 and serves it on loopback.
func serve(t *testing.T) (*txlog.Log, *grpc.ClientConn) {
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
	Register(s, l, nil)
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return l, conn
}

// appendSets appends one entry per key, each set tagged 1, and every
// third also tagged 2; it returns the last version.
func appendSets(t *testing.T, l *txlog.Log, keys ...string) kv.Version {
	t.Helper()
	v := l.LastVersion()
	for i, k := range keys {
		tags := []kv.Tag{1}
		if i%3 == 0 {
			tags = append(tags, 2)
		}
		e := &txlog.Entry{Version: v + 10, PrevVersion: v, Mutations: []txlog.TaggedMutation{{
			Mutation: kv.Mutation{Type: kv.MutSet, Key: []byte(k), Param: []byte("v-" + k)}, Tags: tags}}}
		if err := l.Append(e).Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		v += 10
	}
	return v
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
	l, conn := serve(t)
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
	// A write after a pause longer than the server's peek wait arrives.
	time.Sleep(MaxPeekWait + 200*time.Millisecond)
	last = appendSets(t, l, "d")
	vals, present, err = st.Get(ctx, last, [][]byte{[]byte("d")})
	if err != nil || !present[0] || string(vals[0]) != "v-d" {
		t.Fatalf("read of a later write: %q %v %v", vals, present, err)
	}
	// The stash flushed and popped through the network.
	deadline := time.Now().Add(5 * time.Second)
	for l.Popped(1) < last-5 {
		if time.Now().After(deadline) {
			t.Fatalf("log popped tag 1 to %d, want about %d", l.Popped(1), last)
		}
		time.Sleep(10 * time.Millisecond)
	}
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
