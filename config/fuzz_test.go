package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// FuzzParse feeds arbitrary bytes to Parse, the reader of configuration files
// written by people (and of the TOML that Marshal writes). Whatever the input,
// Parse must return an error (a *TOMLError or *FieldError, so the operator is
// told what is wrong and where) or a configuration that validates; and a
// configuration it accepts must survive Marshal and Parse unchanged, since
// tools rewrite configurations with Marshal.
//
// Seeds: the f.Add calls below and testdata/fuzz/FuzzParse (valid files, each
// kind of error, and files cut short mid-token).
func FuzzParse(f *testing.F) {
	f.Add([]byte(designExample))
	f.Add([]byte(Default().String()))
	f.Add([]byte(""))
	f.Add([]byte("[[pool]]\nname = \"data\"\nprefix = \"d/\"\nmedium = \"ssd\"\nmode = \"durable\"\nengine = \"flash\"\n[pool.flash]\nsegment = \"2MiB\"\n"))
	f.Add([]byte("[pool]\nname = \"x\"\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err != nil {
			var te *TOMLError
			var fe *FieldError
			if !errors.As(err, &te) && !errors.As(err, &fe) {
				t.Fatalf("Parse error %T %q is neither a *TOMLError nor a *FieldError", err, err)
			}
			if c != nil {
				t.Fatalf("Parse returned a configuration with error %v", err)
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("Parse accepted a configuration that does not validate: %v", err)
		}
		out, err := c.Marshal()
		if err != nil {
			t.Fatalf("Marshal of a parsed configuration: %v", err)
		}
		back, err := Parse(out)
		if err != nil {
			t.Fatalf("Parse(Marshal()) = %v\ninput:\n%s\nmarshalled:\n%s", err, data, out)
		}
		if !reflect.DeepEqual(back, c) {
			t.Fatalf("round trip differs:\n got %#v\nwant %#v\ninput:\n%s\nmarshalled:\n%s", back, c, data, out)
		}
		out2, err := back.Marshal()
		if err != nil || string(out2) != string(out) {
			t.Fatalf("second Marshal differs (%v):\n%s\n---\n%s", err, out, out2)
		}
	})
}

// FuzzParseSize: ParseSize (sizes in the file, also behind a Size's
// UnmarshalText) returns an error or a size >= 0 that its writer, String,
// writes back as text ParseSize reads to the same size.
func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"4096", "512KiB", "256 mib", "1GB", "7EiB", "9223372036854775807", "1.5GiB", "-1", "10XB", "", "99999999999EiB"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseSize(s)
		if err != nil {
			return
		}
		if n < 0 {
			t.Fatalf("ParseSize(%q) = %d, negative", s, n)
		}
		back, err := ParseSize(n.String())
		if err != nil || back != n {
			t.Fatalf("ParseSize(%q) = %d, written %q, read back %d, %v", s, n, n.String(), back, err)
		}
	})
}

// FuzzParseDuration: a Duration's UnmarshalText returns an error or a
// duration that MarshalText writes back as text UnmarshalText reads to the
// same duration.
func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"60s", "1m30s", "1.5s", "1h0m0s", "-2562047h47m16.854775808s", "2562047h47m16.854775807s", "500ms", "5", " ", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var d Duration
		if err := d.UnmarshalText([]byte(s)); err != nil {
			return
		}
		text, err := d.MarshalText()
		if err != nil {
			t.Fatalf("MarshalText of %v: %v", d.Duration, err)
		}
		var back Duration
		if err := back.UnmarshalText(text); err != nil || back != d {
			t.Fatalf("%q read as %v, written %q, read back %v, %v", s, d.Duration, text, back.Duration, err)
		}
	})
}

// TestFuzzSeeds keeps the hand-written seeds in testdata/fuzz meaningful:
// those named valid-* must be accepted, err-* and trunc-* rejected (other
// names, and the fuzzer's regressions, are only replayed by their target).
func TestFuzzSeeds(t *testing.T) {
	decoders := map[string]func([]byte) error{
		"FuzzParse": func(b []byte) error {
			_, err := Parse(b)
			return err
		},
		"FuzzParseSize": func(b []byte) error {
			_, err := ParseSize(string(b))
			return err
		},
		"FuzzParseDuration": func(b []byte) error {
			return new(Duration).UnmarshalText(b)
		},
	}
	for target, decode := range decoders {
		files, err := filepath.Glob(filepath.Join("testdata", "fuzz", target, "*"))
		if err != nil || len(files) == 0 {
			t.Fatalf("%s: no seeds (%v)", target, err)
		}
		for _, file := range files {
			name := filepath.Base(file)
			data, err := readCorpusFile(file)
			if err != nil {
				t.Fatal(err)
			}
			err = decode(data)
			switch {
			case strings.HasPrefix(name, "valid-") && err != nil:
				t.Errorf("%s/%s: %v, want it accepted", target, name, err)
			case (strings.HasPrefix(name, "err-") || strings.HasPrefix(name, "trunc-")) && err == nil:
				t.Errorf("%s/%s is accepted, want an error", target, name)
			}
		}
	}
}

// readCorpusFile reads the value of a corpus file of Go's fuzzer that holds
// one []byte or string.
func readCorpusFile(file string) ([]byte, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	header, rest, _ := strings.Cut(string(b), "\n")
	lit := strings.TrimSpace(rest)
	if header != "go test fuzz v1" || !strings.HasSuffix(lit, ")") {
		return nil, errors.New(file + ": not a corpus file of one value")
	}
	for _, typ := range []string{"[]byte(", "string("} {
		if q, ok := strings.CutPrefix(lit, typ); ok {
			s, err := strconv.Unquote(q[:len(q)-1])
			if err != nil {
				return nil, errors.New(file + ": " + err.Error())
			}
			return []byte(s), nil
		}
	}
	return nil, errors.New(file + ": not a []byte or string")
}
