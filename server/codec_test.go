package server

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/wire"
)

// rawCodec sends and receives frames as they are, under the name of the
// protobuf codec, so the server decodes them with wire's codec: a test can
// put bytes in a frame that no marshaller would write.
type rawCodec struct{}

func (rawCodec) Name() string { return wire.CodecName }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(v.([]byte))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}

// TestMalformedFramesOnStreams sends frames that are not valid messages
// (among them the ones on which vtprotobuf's decoder alone would accept
// what proto.Unmarshal refuses) on the read and commit streams of a running
// cluster: each stream ends without a reply, as with gRPC's own codec, and
// the server keeps serving reads and commits on the same connection.
func TestMalformedFramesOnStreams(t *testing.T) {
	srv := startQuiet(t, fuzzConfig)
	conn, err := grpc.NewClient(srv.ClusterString(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rawCodec{})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	tag := func(num protowire.Number, typ protowire.Type) []byte { return protowire.AppendTag(nil, num, typ) }
	cat := func(parts ...[]byte) (b []byte) {
		for _, p := range parts {
			b = append(b, p...)
		}
		return b
	}
	malformed := map[string][]byte{
		"truncated":          cat(tag(2, protowire.BytesType), []byte{40, 1, 2}),
		"field zero":         {0, 1},
		"bad wire type":      {0x0f},
		"varint overflow":    cat(tag(1, protowire.VarintType), []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}),
		"field number wraps": cat(protowire.AppendVarint(nil, (1<<32+1)<<3), []byte{5}),
		"unmatched group":    cat(tag(9, protowire.StartGroupType), tag(10, protowire.EndGroupType)),
		"nested garbage":     cat(tag(2, protowire.BytesType), []byte{3}, tag(3, protowire.BytesType), []byte{0xff}),
	}
	streams := []struct {
		method string
		desc   *grpc.StreamDesc
		fresh  func() proto.Message
	}{
		{wire.DiStash_ReadStream_FullMethodName, &wire.DiStash_ServiceDesc.Streams[1], func() proto.Message { return new(wire.ReadStreamRequest) }},
		{wire.DiStash_CommitStream_FullMethodName, &wire.DiStash_ServiceDesc.Streams[0], func() proto.Message { return new(wire.CommitStreamRequest) }},
	}
	for _, s := range streams {
		if s.desc.StreamName != s.method[len("/distash.v1.DiStash/"):] {
			t.Fatalf("stream %s is not %s", s.desc.StreamName, s.method)
		}
		for name, frame := range malformed {
			if proto.Unmarshal(frame, s.fresh()) == nil {
				t.Fatalf("%s: proto.Unmarshal accepts the frame", name)
			}
			st, err := conn.NewStream(ctx, s.desc, s.method)
			if err != nil {
				t.Fatal(err)
			}
			if err := st.SendMsg(frame); err != nil && !errors.Is(err, io.EOF) {
				t.Fatalf("%s %s: send: %v", s.method, name, err)
			}
			var reply []byte
			if err := st.RecvMsg(&reply); err == nil {
				t.Fatalf("%s %s: the server answered %x", s.method, name, reply)
			}
		}
	}

	// The same connection still commits and reads, on the streams.
	send := func(method string, desc *grpc.StreamDesc, req, resp proto.Message) {
		t.Helper()
		st, err := conn.NewStream(ctx, desc, method)
		if err != nil {
			t.Fatal(err)
		}
		b, err := proto.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.SendMsg(b); err != nil {
			t.Fatal(err)
		}
		var reply []byte
		if err := st.RecvMsg(&reply); err != nil {
			t.Fatalf("%s after malformed frames: %v", method, err)
		}
		if err := proto.Unmarshal(reply, resp); err != nil {
			t.Fatal(err)
		}
		st.CloseSend()
	}
	// GRV and locations through a client with the ordinary codec.
	plain, err := grpc.NewClient(srv.ClusterString(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	client := wire.NewDiStashClient(plain)
	grv, err := client.GetReadVersion(ctx, &wire.GetReadVersionRequest{})
	if err != nil || grv.Error != nil {
		t.Fatalf("GetReadVersion: %v %v", grv, err)
	}
	key := []byte("c/after-garbage")
	loc, err := client.Locations(ctx, &wire.LocationsRequest{Begin: key, End: append(append([]byte{}, key...), 0)})
	if err != nil || loc.Error != nil || len(loc.Shards) != 1 || len(loc.Shards[0].Stashes) == 0 {
		t.Fatalf("Locations: %v %v", loc, err)
	}
	commit := &wire.CommitStreamResponse{}
	send(wire.DiStash_CommitStream_FullMethodName, streams[1].desc, &wire.CommitStreamRequest{Id: 11, Request: &wire.CommitRequest{
		ReadVersion:    grv.Version,
		WriteConflicts: []*wire.KeyRange{{Begin: key, End: append(append([]byte{}, key...), 0)}},
		Mutations:      []*wire.Mutation{{Type: uint32(kv.MutSet), Key: key, Param: []byte("still serving")}},
	}}, commit)
	if commit.Id != 11 || commit.Response == nil || commit.Response.Error != nil {
		t.Fatalf("commit after malformed frames: %v", commit)
	}
	read := &wire.ReadStreamResponse{}
	send(wire.DiStash_ReadStream_FullMethodName, streams[0].desc, &wire.ReadStreamRequest{Id: 12, Request: &wire.ReadRequest{
		Stash: loc.Shards[0].Stashes[0], Version: commit.Response.Version, Keys: [][]byte{key},
	}}, read)
	if read.Id != 12 || read.Response == nil || read.Response.Error != nil || len(read.Response.Values) != 1 ||
		string(read.Response.Values[0].Value) != "still serving" {
		t.Fatalf("read after malformed frames: %v", read)
	}
}
