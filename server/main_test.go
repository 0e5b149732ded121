package server_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/distash/distash/internal/engine/pebble/guard"
)

// TestMain keeps a Pebble store's fatal error in one of its background
// goroutines (a failed directory sync under the fault file system, say)
// from ending the test binary. A real node exits on it (guard.Exit) and is
// restarted; the clusters of these tests run every node in one process,
// so the store is only failed for good, and its stash's supervisor
// reopens it from its files, as the restarted node would.
func TestMain(m *testing.M) {
	guard.Exit = func(msg string) {
		fmt.Fprintln(os.Stderr, "server tests: a node would exit here; the store is failed instead:", msg)
	}
	os.Exit(m.Run())
}
