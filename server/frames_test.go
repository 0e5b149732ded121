package server_test

import (
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/distash/distash"
	"github.com/distash/distash/config"
	"github.com/distash/distash/internal/frames"
	"github.com/distash/distash/internal/protover"
	"github.com/distash/distash/internal/testutil/wait"
	"github.com/distash/distash/internal/wire"
	"github.com/distash/distash/server"
)

// TestMalformedFramesDoNotStopTheServer: on the data path's frames
// connections, a frame of an unknown type, an oversized length or bytes
// that do not decode as the request close that connection and are
// logged; a request without its read or commit gets an answer (an error
// in the reply, as over gRPC); and the server keeps serving a stream
// opened before them and a client after.
func TestMalformedFramesDoNotStopTheServer(t *testing.T) {
	cfg, err := config.Parse([]byte(cfg3))
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := server.Start(ctx, server.Options{Dir: t.TempDir(), Config: cfg, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	addr := srv.ClusterString()
	openStream := func(method string) *frames.ClientStream {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		st, err := frames.Open(ctx, c, []byte{frames.RouteByte}, method, protover.This)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	good := openStream(wire.DiStash_ReadStream_FullMethodName)
	var id uint64
	readOnGood := func() {
		t.Helper()
		id++
		if err := good.Send(&wire.ReadStreamRequest{Id: id, Request: &wire.ReadRequest{Keys: [][]byte{[]byte("c/x")}}}); err != nil {
			t.Fatal(err)
		}
		var resp wire.ReadStreamResponse
		if err := good.Recv(&resp); err != nil || resp.Id != id {
			t.Fatalf("read on the stream opened before: %v (id %d, want %d)", err, resp.Id, id)
		}
	}
	readOnGood()

	// Requests that decode but lack their content are answered.
	rs := openStream(wire.DiStash_ReadStream_FullMethodName)
	if err := rs.Send(&wire.ReadStreamRequest{Id: 7}); err != nil {
		t.Fatal(err)
	}
	var rresp wire.ReadStreamResponse
	if err := rs.Recv(&rresp); err != nil || rresp.Id != 7 || rresp.GetResponse().GetError() == nil {
		t.Fatalf("a read request without its read: %v, %v", err, &rresp)
	}
	cs := openStream(wire.DiStash_CommitStream_FullMethodName)
	if err := cs.Send(&wire.CommitStreamRequest{Id: 8}); err != nil {
		t.Fatal(err)
	}
	var cresp wire.CommitStreamResponse
	if err := cs.Recv(&cresp); err != nil || cresp.Id != 8 {
		t.Fatalf("a commit request without its commit: %v, %v", err, &cresp)
	}

	hello := append([]byte{frames.RouteByte}, frames.AppendFrame(nil, frames.TypeOpen, []byte(wire.DiStash_CommitStream_FullMethodName))...)
	for name, b := range map[string][]byte{
		"unknown type":  frames.AppendFrame(append([]byte(nil), hello...), 'Z', nil),
		"oversized":     binary.AppendUvarint(append([]byte(nil), hello...), frames.MaxFrame+1),
		"not a request": frames.AppendFrame(append([]byte(nil), hello...), frames.TypeMsg, []byte{0x12, 0xff, 0xff, 0xff, 0xff, 0x0f}),
		"empty frame":   append(append([]byte(nil), hello...), 0),
	} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.Write(b)
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadAll(c); err != nil {
			t.Fatalf("%s: the server kept the connection: %v", name, err)
		}
		c.Close()
		readOnGood()
	}
	if !wait.Until(5*time.Second, func() bool { return strings.Count(logs.String(), "closed a frames connection") >= 4 }) {
		t.Fatalf("the server logged %d of 4 malformed frames:\n%s", strings.Count(logs.String(), "closed a frames connection"), logs.String())
	}
	db, err := distash.Open(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Transact(ctx, func(tr *distash.Tx) error {
		tr.Set([]byte("c/after"), []byte("v"))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
