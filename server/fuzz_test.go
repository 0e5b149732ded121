package server

// Fuzz targets for every RPC handler: arbitrary bytes are decoded as the
// handler's request message and handed to it, as a hostile client on the
// network could. The handlers run without the panic-recovering
// interceptor, so a panic fails the target. `go test` replays the seeds
// (f.Add and testdata/fuzz); docs/development.md tells how to fuzz longer.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/distash/distash/config"
	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/wire"
)

const fuzzConfig = `
[cluster]
mvcc_window = "1s"

[[pool]]
name = "cache"
prefix = "c/"
medium = "dram"
mode = "ephemeral"
engine = "memory"
stashes = 2
replication = 2
capacity = "4MiB"

[[pool]]
name = "data"
prefix = "d/"
medium = "ssd"
mode = "durable"
engine = "pebble"
stashes = 2
capacity = "64MiB"
`

// startQuiet starts an embedded cluster of the given configuration for
// a test of this package, logging nothing, stopped when the test ends.
func startQuiet(tb testing.TB, toml string) *Server {
	tb.Helper()
	return startQuietTuned(tb, toml, Tuning{})
}

// startQuietTuned is startQuiet with the server's test settings.
func startQuietTuned(tb testing.TB, toml string, tuning Tuning) *Server {
	tb.Helper()
	cfg, err := config.Parse([]byte(toml))
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := Start(ctx, Options{Dir: tb.TempDir(), Config: cfg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), FlushInterval: 20 * time.Millisecond, Tuning: tuning})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(srv.Stop)
	return srv
}

// fuzzService starts a small embedded cluster for one fuzz target.
func fuzzService(f *testing.F) *service { return &service{s: startQuiet(f, fuzzConfig)} }

// fuzzRPC registers seeds and a target that decodes the input as a Req and
// calls the handler, which must neither panic nor fail at the gRPC level
// (errors travel in the response).
func fuzzRPC[Req proto.Message](f *testing.F, seeds []Req, newReq func() Req, call func(ctx context.Context, v *service, req Req) error) {
	for _, s := range seeds {
		b, err := proto.Marshal(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	v := fuzzService(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		req := newReq()
		if err := proto.Unmarshal(data, req); err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		if err := call(ctx, v, req); err != nil {
			t.Fatalf("%v: %v", req, err)
		}
	})
}

var validCommit = &wire.CommitRequest{
	ReadConflicts:  []*wire.KeyRange{{Begin: []byte("d/a"), End: []byte("d/b")}},
	WriteConflicts: []*wire.KeyRange{{Begin: []byte("c/a"), End: []byte("c/a\x00")}},
	Mutations: []*wire.Mutation{
		{Type: uint32(kv.MutSet), Key: []byte("c/a"), Param: []byte("v")},
		{Type: uint32(kv.MutAdd), Key: []byte("d/n"), Param: []byte{1}},
		{Type: uint32(kv.MutClearRange), Key: []byte("d/x"), Param: []byte("d/y")},
	},
}

func FuzzCommit(f *testing.F) {
	seeds := []*wire.CommitRequest{
		validCommit,
		{},
		{Mutations: []*wire.Mutation{{Type: 257, Key: []byte("d/k"), Param: []byte("v")}}},
		{ReadVersion: -1},
		{WriteConflicts: []*wire.KeyRange{{Begin: []byte("d/b"), End: []byte("d/a")}}},
		{Mutations: []*wire.Mutation{{Type: uint32(kv.MutClearRange), Key: []byte("d/z"), Param: []byte("d/a")}}},
		{Mutations: []*wire.Mutation{{Type: uint32(kv.MutSet), Key: []byte("\xff/keyServers/"), Param: []byte("x")}}},
	}
	fuzzRPC(f, seeds, func() *wire.CommitRequest { return &wire.CommitRequest{} },
		func(ctx context.Context, v *service, req *wire.CommitRequest) error {
			resp, err := v.Commit(ctx, req)
			if err != nil {
				return err
			}
			if resp.Error == nil {
				// Committed: every mutation must have been a valid one, so
				// no type was narrowed into another (257 is not a set).
				for _, m := range req.Mutations {
					if m.Type < uint32(kv.MutSet) || m.Type > uint32(kv.MutMin) {
						return fmt.Errorf("committed a mutation of type %d", m.Type)
					}
				}
			}
			return nil
		})
}

func FuzzCommitStream(f *testing.F) {
	seeds := []*wire.CommitStreamRequest{
		{Id: 1, Request: validCommit},
		{Id: 2},
		{Id: 3, Request: &wire.CommitRequest{Mutations: []*wire.Mutation{{}}}},
	}
	fuzzRPC(f, seeds, func() *wire.CommitStreamRequest { return &wire.CommitStreamRequest{} },
		func(ctx context.Context, v *service, req *wire.CommitStreamRequest) error {
			st := &oneRequestStream{ctx: ctx, req: req}
			if err := v.CommitStream(st); err != nil {
				return err
			}
			if len(st.sent) != 1 || st.sent[0].Id != req.Id || st.sent[0].Response == nil {
				return fmt.Errorf("stream answered %v", st.sent)
			}
			return nil
		})
}

func FuzzRead(f *testing.F) {
	seeds := []*wire.ReadRequest{
		{Stash: 1, Keys: [][]byte{[]byte("c/a")}},
		{},
		{Stash: 3, Version: -5, Keys: [][]byte{[]byte("d/a"), nil}},
		{Stash: 0, Keys: [][]byte{[]byte("\xff/keyServers/")}},
		{Stash: 1 << 31, Keys: [][]byte{[]byte("c/a")}},
	}
	fuzzRPC(f, seeds, func() *wire.ReadRequest { return &wire.ReadRequest{} },
		func(ctx context.Context, v *service, req *wire.ReadRequest) error {
			_, err := v.Read(ctx, req)
			return err
		})
}

func FuzzReadRange(f *testing.F) {
	seeds := []*wire.ReadRangeRequest{
		{Stash: 3, Begin: []byte("d/"), End: []byte("d0"), Limit: 10},
		{},
		{Stash: 3, Begin: []byte("d/z"), End: []byte("d/a")},
		{Stash: 1, Begin: []byte("c/"), End: []byte("c0"), Limit: -1, ByteLimit: -1, Reverse: true},
	}
	fuzzRPC(f, seeds, func() *wire.ReadRangeRequest { return &wire.ReadRangeRequest{} },
		func(ctx context.Context, v *service, req *wire.ReadRangeRequest) error {
			_, err := v.ReadRange(ctx, req)
			return err
		})
}

func FuzzLocations(f *testing.F) {
	seeds := []*wire.LocationsRequest{{}, {Begin: []byte("d/"), End: []byte("d0")}, {Begin: []byte("z"), End: []byte("a")}}
	fuzzRPC(f, seeds, func() *wire.LocationsRequest { return &wire.LocationsRequest{} },
		func(ctx context.Context, v *service, req *wire.LocationsRequest) error {
			_, err := v.Locations(ctx, req)
			return err
		})
}

func FuzzColdest(f *testing.F) {
	seeds := []*wire.ColdestRequest{{}, {Pool: "cache", Limit: 10}, {Pool: "data"}, {Pool: "cache", Limit: 1<<31 - 1}, {Pool: "nope", Limit: -3}}
	fuzzRPC(f, seeds, func() *wire.ColdestRequest { return &wire.ColdestRequest{} },
		func(ctx context.Context, v *service, req *wire.ColdestRequest) error {
			_, err := v.Coldest(ctx, req)
			return err
		})
}

// FuzzStatus covers the requests without fields (GetReadVersion,
// ClusterInfo, Status): unknown fields must be ignored.
func FuzzStatus(f *testing.F) {
	fuzzRPC(f, []*wire.StatusRequest{{}}, func() *wire.StatusRequest { return &wire.StatusRequest{} },
		func(ctx context.Context, v *service, req *wire.StatusRequest) error {
			if _, err := v.Status(ctx, req); err != nil {
				return err
			}
			if _, err := v.ClusterInfo(ctx, &wire.ClusterInfoRequest{}); err != nil {
				return err
			}
			_, err := v.GetReadVersion(ctx, &wire.GetReadVersionRequest{})
			return err
		})
}

// oneRequestStream is a CommitStream server stream that delivers one
// request, then end of stream, and records what the handler sends.
type oneRequestStream struct {
	grpc.ServerStream
	ctx  context.Context
	req  *wire.CommitStreamRequest
	done bool
	sent []*wire.CommitStreamResponse
}

func (s *oneRequestStream) Context() context.Context { return s.ctx }

func (s *oneRequestStream) Recv() (*wire.CommitStreamRequest, error) {
	if s.done {
		return nil, io.EOF
	}
	s.done = true
	return s.req, nil
}

// Send is called from the handler's goroutines under its send lock.
func (s *oneRequestStream) Send(r *wire.CommitStreamResponse) error {
	s.sent = append(s.sent, r)
	return nil
}
