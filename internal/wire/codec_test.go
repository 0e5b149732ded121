package wire

// Differential tests of the codec: for any bytes, the codec's decoder
// (wireTable.check, then vtprotobuf's UnmarshalVT or proto.Unmarshal) must accept
// exactly what proto.Unmarshal accepts and produce an equal message, and
// the generated marshaller must produce what proto.Marshal does. The fuzz
// targets search for counterexamples (docs/development.md, Fuzzing); a
// plain `go test` replays their seeds: real messages as the client and the
// server build them, and one input per known difference between the two
// decoders.

import (
	"bytes"
	"strings"
	"testing"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// Messages as the client library and the server send them on the hot path.
var (
	seedKey   = []byte("usertable/user6284781860667377211")
	seedValue = bytes.Repeat([]byte("field0=0123456789abcdef "), 40)

	seedReadStreamRequests = []*ReadStreamRequest{
		{Id: 1, Request: &ReadRequest{Stash: 3, Version: 1_723_456_789_012, Keys: [][]byte{seedKey}}},
		{Id: 1 << 40, Request: &ReadRequest{Stash: 0, Version: 5, Keys: [][]byte{seedKey, []byte("a"), {}, []byte("\xff/keyServers/")}, ReadSystemKeys: true}},
		{Id: 7, RangeRequest: &ReadRangeRequest{Stash: 2, Version: 99, Begin: []byte("d/a"), End: []byte("d/b"), Limit: 1, Reverse: true, ByteLimit: 1 << 20}},
		{},
	}
	seedReadStreamResponses = []*ReadStreamResponse{
		{Id: 1, Response: &ReadResponse{Values: []*Value{{Present: true, Value: seedValue}}}},
		{Id: 2, Response: &ReadResponse{Values: []*Value{{Present: true, Value: []byte("v")}, {}, {Present: true}}}},
		{Id: 3, Response: &ReadResponse{Error: &Error{Code: 1007, Detail: "transaction_too_old: read version 12 is below the MVCC window"}}},
		{Id: 4, RangeResponse: &ReadRangeResponse{Kvs: []*KeyValue{{Key: seedKey, Value: seedValue}, {Key: []byte("k"), Value: nil}}, More: true}},
		{},
	}
	seedCommitRequests = []*CommitRequest{
		{ReadVersion: 1_723_456_789_012,
			ReadConflicts:  []*KeyRange{{Begin: seedKey, End: append(append([]byte{}, seedKey...), 0)}},
			WriteConflicts: []*KeyRange{{Begin: seedKey, End: append(append([]byte{}, seedKey...), 0)}},
			Mutations:      []*Mutation{{Type: 0, Key: seedKey, Param: seedValue, Cost: 3}}},
		{ReadVersion: -1, UnthrottledReadVersion: true, Mutations: []*Mutation{{Type: 1, Key: []byte("d/a"), Param: []byte("d/z")}, {Type: 2, Key: []byte("n"), Param: []byte{1, 0, 0, 0}}}},
		{},
	}
	seedCommitStreamRequests = []*CommitStreamRequest{
		{Id: 1, Request: seedCommitRequests[0]},
		{Id: 1 << 62, Request: seedCommitRequests[1]},
		{Id: 3},
	}
	seedCommitResponses = []*CommitResponse{
		{Version: 1_723_456_789_100},
		{Error: &Error{Code: 1020, Detail: "not_committed: conflict on \"usertable/user1\" ✗"}},
	}
	seedCommitStreamResponses = []*CommitStreamResponse{
		{Id: 1, Response: seedCommitResponses[0]},
		{Id: 2, Response: seedCommitResponses[1]},
		{Id: 3},
	}
	seedGRVResponses = []*GetReadVersionResponse{
		{Version: 1_723_456_789_012},
		{Version: -1, Error: &Error{Code: 1037, Detail: "process_behind"}},
		{},
	}
	seedReadRangeResponses = []*ReadRangeResponse{
		{Kvs: []*KeyValue{{Key: seedKey, Value: seedValue}}, More: true},
		{Kvs: []*KeyValue{{Key: []byte("a")}, {Key: []byte("b"), Value: []byte("2")}, {}}},
		{Error: &Error{Code: 2000, Detail: "ranges must not reach into the system space"}},
	}
)

// divergent are inputs on which vtprotobuf's UnmarshalVT and
// proto.Unmarshal disagree, for a message whose field 1 is a uint64 or
// int64 and field 2 a message (all the stream messages and
// GetReadVersionResponse): each must reach proto.Unmarshal's answer.
func divergent() map[string][]byte {
	tag := func(num protowire.Number, typ protowire.Type) []byte { return protowire.AppendTag(nil, num, typ) }
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	return map[string][]byte{
		// Field 1 as length-delimited: proto keeps it as an unknown field,
		// vtprotobuf fails.
		"wrong wire type": cat(tag(1, protowire.BytesType), []byte{2, 'h', 'i'}),
		// A tenth varint byte above 1 overflows 64 bits: proto fails,
		// vtprotobuf drops the bits.
		"varint overflow": cat(tag(1, protowire.VarintType), bytes.Repeat([]byte{0xff}, 9), []byte{0x7f}),
		// Field number 2^32+1 truncates to 1 in vtprotobuf.
		"field number wraps": cat(protowire.AppendVarint(nil, (1<<32+1)<<3), []byte{5}),
		// Field numbers above 2^29-1 are invalid for proto.
		"field number too large": cat(protowire.AppendVarint(nil, uint64(1<<29)<<3), []byte{5}),
		// An unknown group ended by another field number's end.
		"unmatched group end": cat(tag(9, protowire.StartGroupType), tag(10, protowire.EndGroupType)),
		"end group at top":    tag(9, protowire.EndGroupType),
		"field zero":          {0x00, 0x01},
		"truncated":           cat(tag(2, protowire.BytesType), []byte{10, 1}),
		// A nested message with a string that is not UTF-8 (Error.detail
		// for the responses; for requests it is an unknown field of the
		// nested message, which both keep).
		"bad utf-8": cat(tag(2, protowire.BytesType), []byte{6}, tag(2, protowire.BytesType), []byte{3, 0xff, 0xfe, 'x'}),
		"bad utf-8 deeper": cat(tag(2, protowire.BytesType), []byte{8},
			tag(2, protowire.BytesType), []byte{6}, tag(2, protowire.BytesType), []byte{3, 0xc3, 0x28, 'x'}),
		// Unknown field 9 (fixed32) with its tag in two bytes: proto
		// keeps it re-encoded in one, vtprotobuf as it came.
		"overlong unknown tag": {0xcd, 0x00, '0', '0', '0', '0'},
		"unknown field ok":     cat(tag(1, protowire.VarintType), []byte{9}, tag(77, protowire.Fixed32Type), []byte{1, 2, 3, 4}),
		"unknown group ok":     cat(tag(9, protowire.StartGroupType), tag(1, protowire.VarintType), []byte{1}, tag(9, protowire.EndGroupType)),
	}
}

// agree checks the codec against proto.Unmarshal and proto.Marshal on data
// as a T.
func agree[T vtMessage](t *testing.T, data []byte, newT func() T) {
	t.Helper()
	want := newT()
	werr := proto.Unmarshal(data, want)
	got := newT()
	gerr := Unmarshal(data, got)
	if (werr == nil) != (gerr == nil) {
		t.Fatalf("proto.Unmarshal: %v, codec: %v, input %x", werr, gerr, data)
	}
	// When the check lets the generated decoder run, that decoder alone
	// must agree: unmarshal's fallback must not be what saves it.
	if tab := tableOf(want); tab != nil && tab.check(data, 0) {
		raw := newT()
		if err := raw.UnmarshalVT(data); err != nil || werr != nil || !proto.Equal(raw, want) {
			t.Fatalf("check passed %x but UnmarshalVT gives %v (err %v), proto %v (err %v)", data, raw, err, want, werr)
		}
	}
	if werr != nil {
		return
	}
	if !proto.Equal(got, want) {
		t.Fatalf("input %x: codec decoded %v, proto %v", data, got, want)
	}
	// Through the gRPC codec, as one buffer and split in two.
	c := encoding.GetCodecV2(CodecName)
	enc, err := c.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	b := enc.Materialize()
	enc.Free()
	pb, err := proto.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, pb) {
		t.Fatalf("codec marshals %v to %x, proto to %x", want, b, pb)
	}
	if size := want.SizeVT(); size != len(pb) {
		t.Fatalf("SizeVT %d, proto %d", size, len(pb))
	}
	back := newT()
	if err := proto.Unmarshal(b, back); err != nil || !proto.Equal(back, want) {
		t.Fatalf("MarshalVT output %x decodes to %v (%v), want %v", b, back, err, want)
	}
	if len(b) == 0 {
		// gRPC hands an empty message over as an empty slice.
		if err := c.Unmarshal(nil, newT()); err != nil {
			t.Fatalf("codec.Unmarshal of no buffers: %v", err)
		}
	}
	for _, split := range []int{0, len(b) / 2} {
		dec := newT()
		if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b[:split]), mem.SliceBuffer(b[split:])}, dec); err != nil || !proto.Equal(dec, want) {
			t.Fatalf("codec.Unmarshal of %x split at %d: %v (%v)", b, split, dec, err)
		}
	}
}

// fuzzAgree registers seeds (the given messages, and every divergent input)
// and the differential target for T.
func fuzzAgree[T vtMessage](f *testing.F, seeds []T, newT func() T) {
	for _, s := range seeds {
		b, err := proto.Marshal(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, b := range divergent() {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) { agree(t, data, newT) })
}

func FuzzReadStreamRequest(f *testing.F) {
	fuzzAgree(f, seedReadStreamRequests, func() *ReadStreamRequest { return new(ReadStreamRequest) })
}

func FuzzReadStreamResponse(f *testing.F) {
	fuzzAgree(f, seedReadStreamResponses, func() *ReadStreamResponse { return new(ReadStreamResponse) })
}

func FuzzCommitStreamRequest(f *testing.F) {
	fuzzAgree(f, seedCommitStreamRequests, func() *CommitStreamRequest { return new(CommitStreamRequest) })
}

func FuzzCommitStreamResponse(f *testing.F) {
	fuzzAgree(f, seedCommitStreamResponses, func() *CommitStreamResponse { return new(CommitStreamResponse) })
}

func FuzzCommitRequest(f *testing.F) {
	fuzzAgree(f, seedCommitRequests, func() *CommitRequest { return new(CommitRequest) })
}

func FuzzGetReadVersionResponse(f *testing.F) {
	fuzzAgree(f, seedGRVResponses, func() *GetReadVersionResponse { return new(GetReadVersionResponse) })
}

func FuzzReadRangeResponse(f *testing.F) {
	fuzzAgree(f, seedReadRangeResponses, func() *ReadRangeResponse { return new(ReadRangeResponse) })
}

// TestDivergentInputs shows that the inputs of divergent() do separate
// UnmarshalVT from proto.Unmarshal (else the check around it would be
// untested), and that the codec follows proto.Unmarshal on each.
func TestDivergentInputs(t *testing.T) {
	differ := 0
	for name, data := range divergent() {
		t.Run(strings.ReplaceAll(name, " ", "_"), func(t *testing.T) {
			for _, newT := range []func() vtMessage{
				func() vtMessage { return new(ReadStreamResponse) },
				func() vtMessage { return new(CommitStreamRequest) },
				func() vtMessage { return new(GetReadVersionResponse) },
			} {
				agree(t, data, newT)
				want, raw := newT(), newT()
				werr, rerr := proto.Unmarshal(data, want), raw.UnmarshalVT(data)
				if (werr == nil) != (rerr == nil) || (werr == nil && !proto.Equal(want, raw)) {
					differ++
				}
			}
		})
	}
	// wrong wire type, overflow, wrapping and too large field numbers,
	// unmatched group end, overlong unknown tag and bad UTF-8 (for the
	// responses) at least.
	if differ < 9 {
		t.Errorf("only %d of the divergent inputs separate the decoders", differ)
	}
}

// TestCodecRegistered checks that gRPC's "proto" codec is this one, with
// gRPC's as the fallback for messages without generated methods.
func TestCodecRegistered(t *testing.T) {
	c, ok := encoding.GetCodecV2(CodecName).(codec)
	if !ok {
		t.Fatalf("codec %q is %T", CodecName, encoding.GetCodecV2(CodecName))
	}
	if _, self := c.fallback.(codec); self || c.fallback == nil {
		t.Fatalf("fallback is %T", c.fallback)
	}
}

// TestTablesCoverWireMessages checks that every message of the service
// file has a table (so none silently takes the slow path) and that the
// slow path still serves a message the check does not cover.
func TestTablesCoverWireMessages(t *testing.T) {
	msgs := File_distash_proto.Messages()
	for i := 0; i < msgs.Len(); i++ {
		md := msgs.Get(i)
		mt, err := protoregistry.GlobalTypes.FindMessageByName(md.FullName())
		if err != nil {
			t.Fatal(err)
		}
		if tableOf(mt.New().Interface()) == nil {
			t.Errorf("%s has no table: it would always be decoded by proto.Unmarshal", md.FullName())
		}
	}
}

// TestLargeMessagePooled marshals a message above gRPC's pooling threshold
// (the buffer comes from the pool) and checks the bytes.
func TestLargeMessagePooled(t *testing.T) {
	m := &ReadRangeResponse{}
	for i := 0; i < 200; i++ {
		m.Kvs = append(m.Kvs, &KeyValue{Key: []byte(strings.Repeat("k", i)), Value: seedValue})
	}
	agree(t, mustMarshal(t, m), func() *ReadRangeResponse { return new(ReadRangeResponse) })
	enc, err := encoding.GetCodecV2(CodecName).Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Free()
	if len(enc) != 1 || mem.IsBelowBufferPoolingThreshold(enc.Len()) {
		t.Fatalf("%d buffers of %d bytes", len(enc), enc.Len())
	}
}

func mustMarshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
