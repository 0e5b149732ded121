package wire

import (
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// maxCheckDepth bounds the walk; proto.Unmarshal allows 10000 levels, the
// wire messages have a handful, and deeper input takes the slow path.
const maxCheckDepth = 64

type fieldKind uint8

const (
	kindUnknown fieldKind = iota // not a field of the message
	kindVarint                   // int32/64, uint32/64, sint32/64, bool, enum
	kindFixed32
	kindFixed64
	kindBytes
	kindString
	kindMessage
)

type wireField struct {
	kind fieldKind
	list bool       // repeated: a scalar may come packed
	msg  *wireTable // of a message field
}

// wireTable describes one message: its fields indexed by number.
type wireTable struct {
	fields []wireField
	ok     bool // every field has a kind the check covers, recursively
}

// maxTableNumber bounds the dense field index; a message with a larger
// field number is left to proto.Unmarshal.
const maxTableNumber = 1 << 12

// tables holds the table of every message of distash.proto, built at init
// and only read after, keyed by descriptor (an interface holding a pointer:
// no allocation to look up).
var tables map[protoreflect.MessageDescriptor]*wireTable

func init() {
	file_distash_proto_init() // idempotent; whichever init runs first
	tables = buildTables(File_distash_proto.Messages())
}

// tableOf returns m's table, or nil when m is not a message of
// distash.proto or its schema has something the check does not cover
// (groups, maps, oneofs, extensions, huge field numbers).
func tableOf(m proto.Message) *wireTable {
	return tables[m.ProtoReflect().Descriptor()]
}

func buildTables(mds protoreflect.MessageDescriptors) map[protoreflect.MessageDescriptor]*wireTable {
	built := map[protoreflect.MessageDescriptor]*wireTable{}
	for i := 0; i < mds.Len(); i++ {
		buildTable(mds.Get(i), built)
	}
	// A message whose field's message is unsupported is unsupported too;
	// with cycles, that needs a fixed point.
	for changed := true; changed; {
		changed = false
		for _, t := range built {
			if !t.ok {
				continue
			}
			for _, f := range t.fields {
				if f.msg != nil && !f.msg.ok {
					t.ok, changed = false, true
					break
				}
			}
		}
	}
	for md, t := range built {
		if !t.ok {
			delete(built, md)
		}
	}
	return built
}

func buildTable(md protoreflect.MessageDescriptor, built map[protoreflect.MessageDescriptor]*wireTable) *wireTable {
	if t, ok := built[md]; ok {
		return t
	}
	t := &wireTable{ok: true}
	built[md] = t
	if md.Oneofs().Len() > 0 || md.ExtensionRanges().Len() > 0 {
		t.ok = false
		return t
	}
	fds := md.Fields()
	maxNum := 0
	for i := 0; i < fds.Len(); i++ {
		maxNum = max(maxNum, int(fds.Get(i).Number()))
	}
	if maxNum > maxTableNumber {
		t.ok = false
		return t
	}
	t.fields = make([]wireField, maxNum+1)
	for i := 0; i < fds.Len(); i++ {
		fd := fds.Get(i)
		f := wireField{list: fd.IsList()}
		switch fd.Kind() {
		case protoreflect.BoolKind, protoreflect.EnumKind,
			protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Uint32Kind,
			protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Uint64Kind:
			f.kind = kindVarint
		case protoreflect.Fixed32Kind, protoreflect.Sfixed32Kind, protoreflect.FloatKind:
			f.kind = kindFixed32
		case protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind, protoreflect.DoubleKind:
			f.kind = kindFixed64
		case protoreflect.BytesKind:
			f.kind = kindBytes
		case protoreflect.StringKind:
			f.kind = kindString
		case protoreflect.MessageKind:
			if fd.IsMap() {
				t.ok = false
				return t
			}
			f.kind = kindMessage
			f.msg = buildTable(fd.Message(), built)
		default: // groups
			t.ok = false
			return t
		}
		t.fields[fd.Number()] = f
	}
	return t
}

// check answers one question before the generated decoder runs: is b, as
// a message of t's type, an input that vtprotobuf's decoder and
// proto.Unmarshal both accept, with the same result? It walks the bytes once against t, built from the
// message's descriptor (no allocation, no reflection per field), with
// protowire's functions, which are the ones proto.Unmarshal uses, and says
// yes only when every tag, varint, length and nested message is one both
// decoders read the same way:
//
//   - field numbers 1 to 2^29-1 (vtprotobuf takes larger ones as unknown
//     fields, or truncates them onto a known one);
//   - varints that fit in 64 bits (vtprotobuf drops the excess bits of a
//     tenth byte);
//   - a known field with the wire type of its kind, or packed for a
//     repeated scalar (proto keeps a mismatch as an unknown field,
//     vtprotobuf fails);
//   - strings that are valid UTF-8 (proto3 requires it; vtprotobuf does
//     not check);
//   - unknown fields, groups included, that protowire can skip (vtprotobuf
//     does not match a group's end with its start), with a tag in its
//     shortest encoding (proto re-encodes it, vtprotobuf keeps it);
//   - nesting no deeper than maxCheckDepth.
//
// A "no" costs a proto.Unmarshal, whose answer is then the codec's.
func (t *wireTable) check(b []byte, depth int) bool {
	if depth > maxCheckDepth {
		return false
	}
	for len(b) > 0 {
		// One-byte tags, varints and lengths (nearly all of them) inline;
		// protowire for the rest.
		var num protowire.Number
		var typ protowire.Type
		var n int
		if b[0] < 0x80 {
			num, typ, n = protowire.Number(b[0]>>3), protowire.Type(b[0]&7), 1
			if num == 0 {
				return false
			}
		} else {
			num, typ, n = protowire.ConsumeTag(b)
		}
		if n < 0 || num > protowire.MaxValidNumber || typ == protowire.EndGroupType {
			return false
		}
		tagLen := n
		b = b[n:]
		var f wireField
		if int(num) < len(t.fields) {
			f = t.fields[num]
		}
		switch f.kind {
		case kindUnknown:
			// proto keeps an unknown field with its tag re-encoded in the
			// shortest form, vtprotobuf as it came.
			if tagLen != protowire.SizeTag(num) {
				return false
			}
			n = protowire.ConsumeFieldValue(num, typ, b)
		case kindVarint:
			switch {
			case typ == protowire.VarintType:
				if len(b) > 0 && b[0] < 0x80 {
					n = 1
				} else {
					_, n = protowire.ConsumeVarint(b)
				}
			case typ == protowire.BytesType && f.list:
				var p []byte
				if p, n = protowire.ConsumeBytes(b); n >= 0 && !packedVarints(p) {
					return false
				}
			default:
				return false
			}
		case kindFixed32, kindFixed64:
			size, fixed := 4, protowire.Fixed32Type
			if f.kind == kindFixed64 {
				size, fixed = 8, protowire.Fixed64Type
			}
			switch {
			case typ == fixed:
				if len(b) < size {
					return false
				}
				n = size
			case typ == protowire.BytesType && f.list:
				var p []byte
				if p, n = protowire.ConsumeBytes(b); n >= 0 && len(p)%size != 0 {
					return false
				}
			default:
				return false
			}
		case kindBytes, kindString, kindMessage:
			if typ != protowire.BytesType {
				return false
			}
			var v []byte
			if len(b) > 0 && b[0] < 0x80 && int(b[0]) < len(b) {
				v, n = b[1:1+b[0]], 1+int(b[0])
			} else if v, n = protowire.ConsumeBytes(b); n < 0 {
				return false
			}
			if f.kind == kindString && !utf8.Valid(v) {
				return false
			}
			if f.kind == kindMessage && !f.msg.check(v, depth+1) {
				return false
			}
		}
		if n < 0 {
			return false
		}
		b = b[n:]
	}
	return true
}

func packedVarints(p []byte) bool {
	for len(p) > 0 {
		_, n := protowire.ConsumeVarint(p)
		if n < 0 {
			return false
		}
		p = p[n:]
	}
	return true
}
