package wire

import (
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// CodecName is the name the codec registers under: gRPC's default, so
// every client and server of a binary that imports this package uses it
// without a dial or server option, and peers see the same content-subtype
// ("application/grpc" or "application/grpc+proto") as before.
const CodecName = "proto"

// vtMessage is a message with vtprotobuf's generated methods
// (distash_vtproto.pb.go).
type vtMessage interface {
	proto.Message
	SizeVT() int
	MarshalToSizedBufferVT([]byte) (int, error)
	UnmarshalVT([]byte) error
}

// codec marshals the wire messages with their generated vtprotobuf methods
// and hands every other message (gRPC's own health or reflection messages,
// say) to the codec it replaced. The wire format is the same either way.
type codec struct {
	fallback encoding.CodecV2
}

func init() {
	// gRPC registers its protobuf codec in an init of a package that this
	// one imports (through the generated service code), so it is there to
	// be kept as the fallback before this one replaces it.
	fallback := encoding.GetCodecV2(CodecName)
	if fallback == nil {
		panic("wire: gRPC's proto codec is not registered")
	}
	if _, already := fallback.(codec); already {
		return
	}
	encoding.RegisterCodecV2(codec{fallback: fallback})
}

func (c codec) Name() string { return CodecName }

// Marshal sizes the message once and writes it into one buffer, from gRPC's
// buffer pool when it is big enough to be worth pooling, as gRPC's own codec
// does: the transport frames and writes it without another copy and
// returns the buffer to the pool once written.
func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(vtMessage)
	if !ok {
		return c.fallback.Marshal(v)
	}
	size := m.SizeVT()
	if mem.IsBelowBufferPoolingThreshold(size) {
		buf := make([]byte, size)
		if _, err := m.MarshalToSizedBufferVT(buf); err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(buf)}, nil
	}
	pool := mem.DefaultBufferPool()
	buf := pool.Get(size)
	if _, err := m.MarshalToSizedBufferVT((*buf)[:size]); err != nil {
		pool.Put(buf)
		return nil, err
	}
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

// Unmarshal decodes a message that arrived in one buffer (the usual case:
// gRPC reads a frame into one pooled buffer) in place, and one split over
// several after gathering it into a pooled buffer. The generated decoder
// copies every byte and string field, so nothing of the message aliases
// the buffers, which gRPC frees after this returns.
func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(vtMessage)
	if !ok {
		return c.fallback.Unmarshal(data, v)
	}
	if len(data) == 1 {
		return Unmarshal(data[0].ReadOnlyData(), m)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	return Unmarshal(buf.ReadOnlyData(), m)
}

// Unmarshal decodes b into m, which it resets first, accepting and
// rejecting exactly what proto.Unmarshal does: vtprotobuf's decoder alone
// is laxer in places (no UTF-8 check of strings, field numbers past 2^29-1,
// varints of more than 64 bits, unmatched group ends) and stricter in one
// (a known field with an unexpected wire type is an error, not an unknown
// field). So the generated decoder runs only on input that a cheap check
// against the message's schema (wireTable.check) shows to be in the common ground
// of the two; anything else, in practice malformed or foreign input, goes
// to proto.Unmarshal, whose answer is the codec's.
//
// Unmarshal is the codec's decoder, exported for the other transport of the
// wire messages (internal/frames), so both accept and refuse the same
// input. The decoded message does not alias b.
func Unmarshal(b []byte, m proto.Message) error {
	vm, ok := m.(vtMessage)
	if !ok {
		return proto.Unmarshal(b, m)
	}
	t := tableOf(m)
	if t == nil || !t.check(b, 0) {
		return proto.Unmarshal(b, m)
	}
	proto.Reset(m)
	if err := vm.UnmarshalVT(b); err != nil {
		// Not expected after the check; proto.Unmarshal has the last word.
		return proto.Unmarshal(b, m)
	}
	return nil
}
