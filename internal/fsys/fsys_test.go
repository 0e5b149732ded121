package fsys

import (
	"bytes"
	"errors"
	"io/fs"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/vfs"
)

func TestCheckedFileRoundTripsAndCatchesDamage(t *testing.T) {
	mem := vfs.NewMem()
	if err := mem.MkdirAll("d", 0o755); err != nil {
		t.Fatal(err)
	}
	payload := []byte(`{"tag":7}`)
	if err := WriteChecked(mem, "d/meta", payload); err != nil {
		t.Fatal(err)
	}
	got, legacy, err := ReadChecked(mem, "d/meta")
	if err != nil || legacy || string(got) != string(payload) {
		t.Fatalf("read back %q legacy=%v err=%v", got, legacy, err)
	}
	raw, _ := ReadFile(mem, "d/meta")
	// Each case gets its own copy: a vfs.File's Write may modify the slice
	// it is given, and some cases below are slices of raw.
	clip := func(n int) []byte { return bytes.Clone(raw[:n]) }

	damage := map[string][]byte{
		"truncated":   clip(len(raw) - 2),
		"extended":    append(append([]byte{}, raw...), 'x'),
		"flipped":     flip(raw, len(raw)-3),
		"header flip": flip(raw, 3),
		"empty":       nil,
		"no newline":  clip(10),
	}
	for name, b := range damage {
		write(t, mem, "d/bad", bytes.Clone(b))
		_, _, err := ReadChecked(mem, "d/bad")
		var de *DamageError
		if !errors.As(err, &de) || !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), "d/bad") {
			t.Errorf("%s: err %v, want a DamageError naming d/bad", name, err)
		}
	}
	write(t, mem, "d/old", []byte("n-0123\n"))
	if got, legacy, err := ReadChecked(mem, "d/old"); err != nil || !legacy || string(got) != "n-0123\n" {
		t.Errorf("legacy file: %q %v %v", got, legacy, err)
	}
	if _, _, err := ReadChecked(mem, "d/none"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v, want not-exist", err)
	}
}

func TestLockDirRefusesASecondHolder(t *testing.T) {
	dir := t.TempDir()
	l, err := LockDir(Default, dir)
	if err != nil {
		t.Fatal(err)
	}
	if l2, err := LockDir(Default, dir); err == nil || !strings.Contains(err.Error(), "in use") {
		if l2 != nil {
			l2.Close()
		}
		t.Fatalf("second lock: %v, want in use", err)
	}
	l.Close()
	l3, err := LockDir(Default, dir)
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	l3.Close()
}

func flip(b []byte, i int) []byte {
	c := append([]byte{}, b...)
	c[i] ^= 0x20
	return c
}

func write(t *testing.T, f FS, path string, b []byte) {
	t.Helper()
	file, err := f.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	file.Write(b)
	file.Close()
}
