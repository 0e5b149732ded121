package server_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/distash/distash"
	"github.com/distash/distash/config"
	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/wire"
)

// TestHostileMessagesDoNotStopTheServer sends every RPC a message with
// every sub-message and field unset, and the malformed messages found in
// review (a CommitStream request without its commit, mutation type 257),
// over a real connection; each gets an answer and the server keeps serving.
func TestHostileMessagesDoNotStopTheServer(t *testing.T) {
	cfg, err := config.Parse([]byte(cfg3))
	if err != nil {
		t.Fatal(err)
	}
	srv, db := start(t, t.TempDir(), cfg)
	defer srv.Stop()
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	conn, err := grpc.NewClient(srv.ClusterString(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	api := wire.NewDiStashClient(conn)

	wantCode := func(what string, e *wire.Error, code kv.Code) {
		t.Helper()
		if e == nil || kv.Code(e.Code) != code {
			t.Errorf("%s: error %v, want %s", what, e, code.Name())
		}
	}
	if _, err := api.GetReadVersion(ctx, &wire.GetReadVersionRequest{}); err != nil {
		t.Error(err)
	}
	if _, err := api.ClusterInfo(ctx, &wire.ClusterInfoRequest{}); err != nil {
		t.Error(err)
	}
	if _, err := api.Status(ctx, &wire.StatusRequest{}); err != nil {
		t.Error(err)
	}
	if r, err := api.Commit(ctx, &wire.CommitRequest{Mutations: []*wire.Mutation{{}}}); err != nil {
		t.Error(err)
	} else {
		wantCode("commit of an empty mutation", r.Error, kv.CodeInvalidMutation)
	}
	// 257 was cut to 8 bits and committed as a set.
	r, err := api.Commit(ctx, &wire.CommitRequest{Mutations: []*wire.Mutation{{Type: 257, Key: []byte("d/k257"), Param: []byte("v")}}})
	if err != nil {
		t.Fatal(err)
	}
	wantCode("mutation type 257", r.Error, kv.CodeInvalidMutation)
	if r, err := api.Read(ctx, &wire.ReadRequest{}); err != nil {
		t.Error(err)
	} else if r.Error == nil {
		t.Error("empty read answered without error")
	}
	if r, err := api.ReadRange(ctx, &wire.ReadRangeRequest{Stash: 3, Begin: []byte("d/z"), End: []byte("d/a")}); err != nil {
		t.Error(err)
	} else {
		wantCode("backwards range", r.Error, kv.CodeInvalidMutation)
	}
	// System keys need the read_system_keys option, also on the wire.
	sysRead := &wire.ReadRequest{Stash: 0, Version: 1 << 40, Keys: [][]byte{[]byte("\xff/conf/cluster")}}
	if r, err := api.Read(ctx, sysRead); err != nil {
		t.Error(err)
	} else {
		wantCode("system key read without the option", r.Error, kv.CodeKeyOutsidePools)
	}
	if r, err := api.ReadRange(ctx, &wire.ReadRangeRequest{Stash: 0, Begin: []byte("\xff"), End: []byte("\xff\xff")}); err != nil {
		t.Error(err)
	} else {
		wantCode("system range read without the option", r.Error, kv.CodeKeyOutsidePools)
	}
	if _, err := api.Locations(ctx, &wire.LocationsRequest{}); err != nil {
		t.Error(err)
	}
	if _, err := api.Coldest(ctx, &wire.ColdestRequest{}); err != nil {
		t.Error(err)
	}

	// The stream request that killed the process: no commit inside.
	stream, err := api.CommitStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&wire.CommitStreamRequest{Id: 7}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if resp.Id != 7 {
		t.Fatalf("reply to id %d, want 7", resp.Id)
	}
	wantCode("stream request without a commit", resp.GetResponse().GetError(), kv.CodeInvalidMutation)
	stream.CloseSend()

	// Still serving, and nothing of the bad commits applied.
	err = db.Transact(ctx, func(tr *distash.Tx) error {
		v, err := tr.Get([]byte("d/k257"))
		if err != nil {
			return err
		}
		if v != nil {
			t.Errorf("d/k257 = %q: a mutation of type 257 was applied", v)
		}
		tr.Set([]byte("d/after"), []byte("ok"))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
