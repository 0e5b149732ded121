package distash_test

import (
	"flag"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/distash/distash"
)

// TestStreamsUseFrames: read versions, reads and commits travel on frames streams by
// default, through the server's stream interceptors (which the fault tests
// use), and on gRPC streams with WithGRPCDataPath; both read what the
// other wrote.
func TestStreamsUseFrames(t *testing.T) {
	var intercepted = make(chan string, 16)
	c := startClusterWith(t, twoPools, nil, func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		select {
		case intercepted <- fmt.Sprintf("%T", ss):
		default:
		}
		return h(srv, ss)
	})
	ctx := ctxT(t, 30*time.Second)
	framesBefore, grpcBefore := distash.DataPathStreams()
	if err := c.DB.Transact(ctx, func(tr *distash.Tx) error {
		tr.Set([]byte("c/k"), []byte("over frames"))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var got []byte
	if err := c.DB.ReadTransact(ctx, func(tr *distash.Tx) (err error) {
		got, err = tr.Get([]byte("c/k"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	framesAfter, grpcAfter := distash.DataPathStreams()
	if string(got) != "over frames" || framesAfter-framesBefore != 3 || grpcAfter != grpcBefore {
		t.Fatalf("read %q; %d frames and %d gRPC streams opened, want a commit, a read-version and a read stream over frames",
			got, framesAfter-framesBefore, grpcAfter-grpcBefore)
	}
	for i := 0; i < 3; i++ {
		if s := <-intercepted; s != "*frames.serverStream" {
			t.Fatalf("the interceptor saw a %s, want the frames server's stream", s)
		}
	}

	db, err := distash.Open(ctx, c.Server.ClusterString(), distash.WithGRPCDataPath())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Transact(ctx, func(tr *distash.Tx) error {
		v, err := tr.Get([]byte("c/k"))
		tr.Set([]byte("c/k2"), append(v, " and gRPC"...))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.DB.ReadTransact(ctx, func(tr *distash.Tx) (err error) {
		got, err = tr.Get([]byte("c/k2"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	framesLast, grpcLast := distash.DataPathStreams()
	if string(got) != "over frames and gRPC" || framesLast != framesAfter || grpcLast-grpcAfter != 3 {
		t.Fatalf("read %q; %d frames and %d gRPC streams opened with WithGRPCDataPath, want 0 and 3",
			got, framesLast-framesAfter, grpcLast-grpcAfter)
	}
	if s := <-intercepted; s == "*frames.serverStream" {
		t.Fatal("WithGRPCDataPath's stream reached the server over frames")
	}
}

// grpcDataPath makes the read benchmarks' client use gRPC streams, to
// compare with frames alternately:
// go test -run XXX -bench 'ReadTransactions/m/get' -grpc-data-path .
var grpcDataPath = flag.Bool("grpc-data-path", false, "benchmarks: reads and commits on gRPC streams (WithGRPCDataPath) instead of frames")

// benchDB is c's client, or one with WithGRPCDataPath under -grpc-data-path.
func benchDB(b *testing.B, c *cluster) *distash.DB {
	if !*grpcDataPath {
		return c.DB
	}
	db, err := distash.Open(ctxT(b, 30*time.Second), c.Server.ClusterString(), distash.WithGRPCDataPath())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	return db
}
