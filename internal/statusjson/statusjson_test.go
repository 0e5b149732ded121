package statusjson_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/distash/distash"
	"github.com/distash/distash/config"
	"github.com/distash/distash/internal/clusterstatus"
	"github.com/distash/distash/internal/embedded"
	"github.com/distash/distash/internal/statusjson"
	"github.com/distash/distash/internal/wire"
)

func TestEscape(t *testing.T) {
	for in, want := range map[string]string{
		"":              "",
		"c/":            "c/",
		"a b~":          "a b~",
		"k\x00\xff":     `k\x00\xff`,
		`back\slash`:    `back\x5cslash`,
		"tab\tnl\n\x7f": `tab\x09nl\x0a\x7f`,
	} {
		if got := statusjson.Escape([]byte(in)); got != want {
			t.Errorf("Escape(%q) = %q, want %q", in, got, want)
		}
	}
}

// populated returns a status with every field of every message set (one
// element in each list), so that its document has every field and object.
func populated() *wire.StatusResponse {
	st := &wire.StatusResponse{}
	fill(st.ProtoReflect(), 0)
	return st
}

func fill(m protoreflect.Message, depth int) {
	if depth > 8 {
		panic("status messages nest too deep (a cycle?)")
	}
	fields := m.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		switch {
		case fd.IsMap():
			panic("no map field expected in the status: teach fill and docs/status.md")
		case fd.IsList():
			l := m.Mutable(fd).List()
			if fd.Message() != nil {
				e := l.NewElement()
				fill(e.Message(), depth+1)
				l.Append(e)
			} else {
				l.Append(scalar(fd))
			}
		case fd.Message() != nil:
			fill(m.Mutable(fd).Message(), depth+1)
		default:
			m.Set(fd, scalar(fd))
		}
	}
}

func scalar(fd protoreflect.FieldDescriptor) protoreflect.Value {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(true)
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(7)
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(1 << 50)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(7)
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(1 << 50)
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(1.5)
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(2.5)
	case protoreflect.StringKind:
		return protoreflect.ValueOfString("s")
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte("k\x00\\"))
	case protoreflect.EnumKind:
		return protoreflect.ValueOfEnum(fd.Enum().Values().Get(fd.Enum().Values().Len() - 1).Number())
	}
	panic(fmt.Sprintf("field %s: kind %s: teach the test", fd.FullName(), fd.Kind()))
}

// decode parses a status document, numbers as json.Number.
func decode(t *testing.T, b []byte) map[string]any {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var doc map[string]any
	if err := d.Decode(&doc); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, b)
	}
	return doc
}

// objects flattens a document into its objects: path (".", "pools[]",
// "stashes[].engineCounters[]", "log"...) → field → value. Objects of
// one path (the elements of a list) merge.
func objects(doc map[string]any) map[string]map[string]any {
	out := map[string]map[string]any{}
	var walk func(path string, obj map[string]any)
	walk = func(path string, obj map[string]any) {
		if out[path] == nil {
			out[path] = map[string]any{}
		}
		prefix := path + "."
		if path == "." {
			prefix = ""
		}
		for k, v := range obj {
			out[path][k] = v
			switch v := v.(type) {
			case map[string]any:
				walk(prefix+k, v)
			case []any:
				for _, e := range v {
					if o, ok := e.(map[string]any); ok {
						walk(prefix+k+"[]", o)
					}
				}
			}
		}
	}
	walk(".", doc)
	return out
}

// jsonType names the JSON type of v as docs/status.md does.
func jsonType(v any) string {
	switch v := v.(type) {
	case json.Number, float64:
		return "number"
	case string:
		return "string"
	case bool:
		return "boolean"
	case nil:
		return "null"
	case map[string]any:
		return "object"
	case []any:
		if len(v) == 0 {
			return "array"
		}
		return "array of " + jsonType(v[0]) + "s"
	}
	return fmt.Sprintf("%T", v)
}

func TestMarshalTypes(t *testing.T) {
	b, err := statusjson.Marshal(populated())
	if err != nil {
		t.Fatal(err)
	}
	doc := decode(t, b)
	if doc["schema"] != json.Number("1") {
		t.Fatalf("schema %v, want 1", doc["schema"])
	}
	if doc["commits"] != json.Number(fmt.Sprint(int64(1<<50))) || doc["generation"] != json.Number(fmt.Sprint(uint64(1<<50))) {
		t.Errorf("64-bit integers: commits %#v generation %#v, want JSON numbers", doc["commits"], doc["generation"])
	}
	pool := doc["pools"].([]any)[0].(map[string]any)
	if pool["prefix"] != `k\x00\x5c` {
		t.Errorf("prefix %#v, want the printable k\\x00\\x5c", pool["prefix"])
	}
	if doc["rateLimit"] != json.Number("2.5") {
		t.Errorf("rateLimit %#v", doc["rateLimit"])
	}

	// The names are protojson's: the same objects with the same fields.
	pj, err := protojson.MarshalOptions{EmitUnpopulated: true}.Marshal(populated())
	if err != nil {
		t.Fatal(err)
	}
	want := objects(decode(t, pj))
	want["."]["schema"] = nil
	got := objects(doc)
	if len(got) != len(want) {
		t.Errorf("objects %v, protojson's %v", keys(got), keys(want))
	}
	for path, fields := range want {
		if !slices.Equal(keys(got[path]), keys(fields)) {
			t.Errorf("%s: fields %v, protojson's %v", path, keys(got[path]), keys(fields))
		}
	}

	// Unset messages are null, unset lists [] and zeros 0, as protojson's
	// EmitUnpopulated writes them.
	empty := decode(t, must(statusjson.Marshal(&wire.StatusResponse{})))
	if empty["log"] != nil || jsonType(empty["pools"]) != "array" || empty["commits"] != json.Number("0") || empty["controller"] != "" {
		t.Errorf("empty status: log %#v pools %#v commits %#v controller %#v", empty["log"], empty["pools"], empty["commits"], empty["controller"])
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// docField is one row of a table of docs/status.md.
type docField struct{ typ, unit, meaning string }

// readDocs parses docs/status.md: under each "### `path`" heading (several
// paths may share one), a table whose rows start with a backquoted field
// name.
func readDocs(t *testing.T) map[string]map[string]docField {
	t.Helper()
	b, err := os.ReadFile("../../docs/status.md")
	if err != nil {
		t.Fatal(err)
	}
	heading := regexp.MustCompile("^### (.*)$")
	path := regexp.MustCompile("`([^`]+)`")
	row := regexp.MustCompile("^\\| `([A-Za-z0-9]+)` \\| ([^|]+) \\| ([^|]+) \\| (.+) \\|$")
	out := map[string]map[string]docField{}
	var current []string
	for i, line := range strings.Split(string(b), "\n") {
		if m := heading.FindStringSubmatch(line); m != nil {
			current = nil
			for _, p := range path.FindAllStringSubmatch(m[1], -1) {
				current = append(current, p[1])
				if out[p[1]] != nil {
					t.Errorf("docs/status.md:%d: %s described twice", i+1, p[1])
				}
				out[p[1]] = map[string]docField{}
			}
			continue
		}
		if m := row.FindStringSubmatch(line); m != nil {
			if len(current) == 0 {
				t.Fatalf("docs/status.md:%d: a field outside an object's section", i+1)
			}
			for _, p := range current {
				if _, dup := out[p][m[1]]; dup {
					t.Errorf("docs/status.md:%d: %s.%s described twice", i+1, p, m[1])
				}
				out[p][m[1]] = docField{strings.TrimSpace(m[2]), strings.TrimSpace(m[3]), strings.TrimSpace(m[4])}
			}
		} else if strings.HasPrefix(line, "| `") {
			t.Errorf("docs/status.md:%d: a table row that is not | `field` | type | unit | meaning |: %s", i+1, line)
		}
	}
	if len(out) == 0 {
		t.Fatal("docs/status.md describes no object")
	}
	return out
}

// checkDocumented compares the objects of a document with docs/status.md:
// every field of every object is described, and every described field of
// an object the document has is in it. typed also checks the types.
func checkDocumented(t *testing.T, what string, docs map[string]map[string]docField, objs map[string]map[string]any, typed bool) {
	t.Helper()
	for path, fields := range objs {
		described, ok := docs[path]
		if !ok {
			t.Errorf("%s: object %s is not described in docs/status.md (add a \"### `%s`\" section)", what, path, path)
			continue
		}
		for name, v := range fields {
			d, ok := described[name]
			if !ok {
				t.Errorf("%s: %s is not described in docs/status.md", what, qualified(path, name))
				continue
			}
			if d.meaning == "" || d.unit == "" {
				t.Errorf("docs/status.md: %s has no unit or meaning", qualified(path, name))
			}
			if got := jsonType(v); typed && d.typ != got && !(d.typ == "object or null" && (got == "object" || got == "null")) {
				t.Errorf("%s: %s is %s, docs/status.md says %s", what, qualified(path, name), got, d.typ)
			}
		}
		for name := range described {
			if _, ok := fields[name]; !ok {
				t.Errorf("%s: docs/status.md describes %s, which is not in the document", what, qualified(path, name))
			}
		}
	}
}

// qualified names a field of the object at path.
func qualified(path, field string) string {
	if path == "." {
		return field
	}
	return path + "." + field
}

// TestDocumented: docs/status.md describes exactly the fields of the
// document: every field of a status with every field set, with its type,
// and every field of the status of a running embedded cluster.
func TestDocumented(t *testing.T) {
	docs := readDocs(t)
	objs := objects(decode(t, must(statusjson.Marshal(populated()))))
	checkDocumented(t, "every field set", docs, objs, true)
	for path := range docs {
		if objs[path] == nil {
			t.Errorf("docs/status.md describes object %s, which the document does not have", path)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := embedded.Start(ctx, config.Default(), embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	err = cl.DB.Transact(ctx, func(tr *distash.Tx) error {
		tr.Set([]byte("c/key"), []byte("cached"))
		tr.Set([]byte("d/key\x00\xff"), []byte("data"))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.DB.Transact(ctx, func(tr *distash.Tx) error { _, err := tr.Get([]byte("c/key")); return err }); err != nil {
		t.Fatal(err)
	}
	st, err := clusterstatus.Gather(ctx, cl.Server.ClusterString(), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := statusjson.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	live := decode(t, b)
	robjs := objects(live)
	checkDocumented(t, "an embedded cluster's status", docs, robjs, false)
	for _, path := range []string{".", "pools[]", "stashes[]", "log"} {
		if robjs[path] == nil {
			t.Errorf("an embedded cluster's status has no %s", path)
		}
	}
	checkValues(t, live, st.ProtoReflect().Descriptor())
	if pools := live["pools"].([]any); len(pools) != 2 || pools[0].(map[string]any)["prefix"] != "c/" || pools[1].(map[string]any)["prefix"] != "d/" {
		t.Errorf("pools %v: want prefixes c/ and d/ as they are", pools)
	}
	var keys json.Number
	for _, s := range live["stashes"].([]any) {
		if s := s.(map[string]any); s["pool"] == "cache" {
			keys = s["keys"].(json.Number)
		}
	}
	if keys != "1" {
		t.Errorf("a cache stash holds %v keys, want the number 1", keys)
	}
}

// checkValues walks a document with the message's descriptor: integers
// and floats are JSON numbers, bytes printable strings.
func checkValues(t *testing.T, obj map[string]any, md protoreflect.MessageDescriptor) {
	t.Helper()
	fields := md.Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		v, ok := obj[fd.JSONName()]
		if !ok {
			t.Errorf("%s: no field %s", md.FullName(), fd.JSONName())
			continue
		}
		vals := []any{v}
		if fd.IsList() {
			l, ok := v.([]any)
			if !ok {
				t.Errorf("%s: %#v is not a list", fd.FullName(), v)
				continue
			}
			vals = l
		}
		for _, v := range vals {
			switch fd.Kind() {
			case protoreflect.MessageKind:
				if o, ok := v.(map[string]any); ok {
					checkValues(t, o, fd.Message())
				} else if v != nil {
					t.Errorf("%s: %#v is not an object", fd.FullName(), v)
				}
			case protoreflect.BytesKind:
				s, ok := v.(string)
				if !ok || strings.IndexFunc(s, func(r rune) bool { return r < 0x20 || r >= 0x7f }) >= 0 {
					t.Errorf("%s: %#v is not a printable string", fd.FullName(), v)
				}
			case protoreflect.StringKind:
				if _, ok := v.(string); !ok {
					t.Errorf("%s: %#v is not a string", fd.FullName(), v)
				}
			case protoreflect.BoolKind:
				if _, ok := v.(bool); !ok {
					t.Errorf("%s: %#v is not a boolean", fd.FullName(), v)
				}
			default: // numbers
				if _, ok := v.(json.Number); !ok {
					t.Errorf("%s: %#v is not a JSON number", fd.FullName(), v)
				}
			}
		}
	}
}
