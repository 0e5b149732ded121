package fsys

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/vfs"

	"github.com/distash/distash/internal/version"
)

func TestOpenFormat(t *testing.T) {
	f := vfs.NewMem()
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))

	// A new directory: version 1 (nothing to convert), marked silently.
	f.MkdirAll("new", 0o755)
	got, mark, err := OpenFormat(f, "new", "engine-test", 1, logger)
	if err != nil || got != Unversioned {
		t.Fatalf("new directory: got %d, %v", got, err)
	}
	if err := mark(); err != nil {
		t.Fatal(err)
	}
	if b, _ := ReadFile(f, "new/FORMAT"); string(b) != "distash engine-test format 1\n" {
		t.Fatalf("marker %q", b)
	}
	if logs.Len() != 0 {
		t.Fatalf("a new directory logged: %s", logs.String())
	}

	// A directory of a release before markers opens as version 1, and is
	// marked with a log line.
	f.MkdirAll("old", 0o755)
	WriteAtomic(f, "old/data", []byte("x"))
	if got, mark, err = OpenFormat(f, "old", "engine-test", 1, logger); err != nil || got != 1 {
		t.Fatalf("unmarked directory: got %d, %v", got, err)
	}
	if err := mark(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "dir=old") {
		t.Fatalf("no log line for the marked directory: %q", logs.String())
	}

	// A newer version is refused naming both; so is another kind.
	WriteAtomic(f, "new/FORMAT", []byte("distash engine-test format 3\n"))
	_, _, err = OpenFormat(f, "new", "engine-test", 1, logger)
	var fe *version.FormatError
	if !errors.As(err, &fe) || fe.Got != 3 || fe.Want != 1 || !strings.Contains(err.Error(), "new") {
		t.Fatalf("newer format: got %v", err)
	}
	if _, _, err = OpenFormat(f, "old", "raft-store", 1, logger); err == nil || !strings.Contains(err.Error(), "engine-test") {
		t.Fatalf("another kind's directory: got %v", err)
	}
	WriteAtomic(f, "new/FORMAT", []byte("garbage"))
	if _, _, err = OpenFormat(f, "new", "engine-test", 1, logger); !errors.Is(err, ErrDamaged) {
		t.Fatalf("a damaged marker: got %v", err)
	}
}
