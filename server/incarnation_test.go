package server

import (
	"io"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/distash/distash/internal/fsys"
)

// TestIncarnationsOfANodeIncrease: each start of a node names a later
// incarnation than the last, even when the clock reads earlier than the
// last start (a clock stepped back), so the controller can tell a killed
// process's late registration from its successor's.
func TestIncarnationsOfANodeIncrease(t *testing.T) {
	dir := t.TempDir()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	seq := func(inc string) uint64 {
		t.Helper()
		s, _, ok := strings.Cut(inc, ".")
		n, err := strconv.ParseUint(s, 10, 64)
		if !ok || err != nil {
			t.Fatalf("incarnation %q: not <seq>.<random>", inc)
		}
		return n
	}
	first := newIncarnation(nil, dir, logger)
	second := newIncarnation(nil, dir, logger)
	if seq(second) <= seq(first) || first == second {
		t.Fatalf("second start %s not after the first %s", second, first)
	}
	// The last start was far in the future of this clock.
	future := uint64(1) << 62
	if err := fsys.WriteChecked(nil, filepath.Join(dir, incarnationFile), []byte(strconv.FormatUint(future, 10)+"\n")); err != nil {
		t.Fatal(err)
	}
	if got := seq(newIncarnation(nil, dir, logger)); got != future+1 {
		t.Fatalf("after a start at %d: %d, want %d", future, got, future+1)
	}
}
