// Package statusjson writes a cluster's status (wire.StatusResponse) as
// the JSON document of `distash cli status json` and of the web console's
// /status.json, schema 1, documented field by field in docs/status.md.
//
// The document is the protobuf message's JSON mapping (protojson field
// names: lowerCamelCase, every field present even when zero) with three
// changes that make it easy to read from scripts and browsers:
//
//   - int64 and uint64 fields are JSON numbers, not strings (protojson
//     writes them as strings so that JavaScript loses no precision; the
//     figures of a status stay far below 2^53);
//   - bytes fields (pool prefixes, shard bounds) are printable strings:
//     printable ASCII as is, every other byte and the backslash as a
//     Go-style \xNN escape (the form `distash cli get` and `getrange`
//     accept), not base64;
//   - a top-level "schema": 1 versions the document: a field may be
//     added within a schema; renaming, removing or changing the type or
//     meaning of one bumps it.
//
// It walks the message with protoreflect rather than mirroring it in Go
// structs so that a field added to the proto shows up in the document
// (and, through the test on docs/status.md, in its documentation).
package statusjson

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/distash/distash/internal/wire"
)

// Schema is the version of the document Marshal writes.
const Schema = 1

// Marshal returns st as the status document, indented by two spaces.
func Marshal(st *wire.StatusResponse) ([]byte, error) {
	if st == nil {
		st = &wire.StatusResponse{}
	}
	var b bytes.Buffer
	b.WriteString(`{"schema":`)
	b.WriteString(strconv.Itoa(Schema))
	writeFields(&b, st.ProtoReflect(), true)
	b.WriteByte('}')
	var out bytes.Buffer
	if err := json.Indent(&out, b.Bytes(), "", "  "); err != nil {
		return nil, fmt.Errorf("status json: %w", err) // a bug in this package
	}
	return out.Bytes(), nil
}

// Escape returns b as printable ASCII: bytes 0x20..0x7e as they are but
// the backslash, which like every other byte becomes \xNN.
func Escape(b []byte) string {
	var sb strings.Builder
	for _, c := range b {
		if c >= 0x20 && c < 0x7f && c != '\\' {
			sb.WriteByte(c)
		} else {
			fmt.Fprintf(&sb, "\\x%02x", c)
		}
	}
	return sb.String()
}

// writeMessage writes m as a JSON object, every field in field number
// order; an unset message is null, as protojson writes it.
func writeMessage(b *bytes.Buffer, m protoreflect.Message) {
	if !m.IsValid() {
		b.WriteString("null")
		return
	}
	b.WriteByte('{')
	writeFields(b, m, false)
	b.WriteByte('}')
}

// writeFields writes m's fields; comma says whether a field was written
// before them.
func writeFields(b *bytes.Buffer, m protoreflect.Message, comma bool) {
	fields := m.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if comma {
			b.WriteByte(',')
		}
		comma = true
		writeString(b, fd.JSONName())
		b.WriteByte(':')
		switch {
		case fd.IsList():
			l := m.Get(fd).List()
			b.WriteByte('[')
			for j := 0; j < l.Len(); j++ {
				if j > 0 {
					b.WriteByte(',')
				}
				writeValue(b, fd, l.Get(j))
			}
			b.WriteByte(']')
		case fd.IsMap():
			mp := m.Get(fd).Map()
			b.WriteByte('{')
			first := true
			mp.Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
				if !first {
					b.WriteByte(',')
				}
				first = false
				writeString(b, k.String())
				b.WriteByte(':')
				writeValue(b, fd.MapValue(), v)
				return true
			})
			b.WriteByte('}')
		case fd.Message() != nil && !m.Has(fd):
			b.WriteString("null")
		default:
			writeValue(b, fd, m.Get(fd))
		}
	}
}

// writeValue writes one value of field fd (a list's element, a map's
// value or a singular field).
func writeValue(b *bytes.Buffer, fd protoreflect.FieldDescriptor, v protoreflect.Value) {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		b.WriteString(strconv.FormatBool(v.Bool()))
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind,
		protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		b.WriteString(strconv.FormatInt(v.Int(), 10))
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind, protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		b.WriteString(strconv.FormatUint(v.Uint(), 10))
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		f := v.Float()
		if math.IsNaN(f) || math.IsInf(f, 0) {
			b.WriteString("null") // JSON has no NaN nor infinity
			return
		}
		bits := 64
		if fd.Kind() == protoreflect.FloatKind {
			bits = 32
		}
		b.WriteString(strconv.FormatFloat(f, 'g', -1, bits))
	case protoreflect.StringKind:
		writeString(b, v.String())
	case protoreflect.BytesKind:
		writeString(b, Escape(v.Bytes()))
	case protoreflect.EnumKind:
		if ev := fd.Enum().Values().ByNumber(v.Enum()); ev != nil {
			writeString(b, string(ev.Name()))
		} else {
			b.WriteString(strconv.FormatInt(int64(v.Enum()), 10))
		}
	case protoreflect.MessageKind, protoreflect.GroupKind:
		writeMessage(b, v.Message())
	default:
		b.WriteString("null")
	}
}

func writeString(b *bytes.Buffer, s string) {
	enc, _ := json.Marshal(s) // a string always marshals
	b.Write(enc)
}
