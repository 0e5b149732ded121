// Package fuzzseed checks the generated seeds of a package's fuzz targets,
// for its tests: the seeds in testdata/fuzz/<target>/ with descriptive
// names are written by the package's encoders, so a test can tell when an
// encoding changed by accident (old files must still be readable) and that
// the seeds still reach the decoders' success and failure paths. The
// fuzzer adds its regressions beside them under hash names.
//
// After an intended change of an encoding, rewrite the seeds with the
// test's -update-fuzz-seeds flag, e.g.
//
//	go test -run '^TestFuzzSeeds$' ./internal/txlog -update-fuzz-seeds
package fuzzseed

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update-fuzz-seeds", false, "rewrite the generated seeds in testdata/fuzz")

// Check checks seeds, by target and file name, against the files in
// testdata/fuzz/<target>/, or writes them there with -update-fuzz-seeds.
// Names starting with "valid-" must decode; the others (truncated "trunc-"
// and damaged "bad-" inputs) must fail with an error wrapping corrupt.
// decode runs the decoder that target fuzzes on one input.
func Check(t *testing.T, seeds map[string]map[string][]byte, corrupt error, decode func(target string, b []byte) error) {
	t.Helper()
	for target, seeds := range seeds {
		dir := filepath.Join("testdata", "fuzz", target)
		if *update {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		for name, b := range seeds {
			err := decode(target, b)
			if valid := strings.HasPrefix(name, "valid-"); valid && err != nil {
				t.Errorf("%s/%s: %v, want it to decode", target, name, err)
			} else if !valid && !errors.Is(err, corrupt) {
				t.Errorf("%s/%s: err %v, want %v", target, name, err, corrupt)
			}
			file := filepath.Join(dir, name)
			want := fmt.Appendf(nil, "go test fuzz v1\n[]byte(%q)\n", b)
			if *update {
				if err := os.WriteFile(file, want, 0o644); err != nil {
					t.Fatal(err)
				}
				continue
			}
			if got, err := os.ReadFile(file); err != nil || !bytes.Equal(got, want) {
				t.Errorf("%s differs from what the encoders write now (%v); if the change is intended, run with -update-fuzz-seeds", file, err)
			}
		}
	}
}

// Cuts adds to seeds the prefixes of b cut at each offset, named
// name-<offset>: truncated inputs a decoder must reject.
func Cuts(seeds map[string][]byte, name string, b []byte, offsets ...int) {
	for _, n := range offsets {
		seeds[fmt.Sprintf("%s-%d", name, n)] = b[:n]
	}
}
