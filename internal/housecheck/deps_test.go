package housecheck

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/distash/distash"

// Packages that must not be linked, by why.
const (
	raft   = "github.com/hashicorp/raft"     // the log's replication: only txlog, raftstore, coord and the node runtime
	pebble = "github.com/cockroachdb/pebble" // Pebble's database (its vfs, behind internal/fsys, is fine)
	toml   = "github.com/BurntSushi/toml"    // the configuration's syntax: config, server and cmd only
)

// TestDependencies: the roles on either side of the log (stash, commit
// proxy) and the client library link neither raft nor Pebble, and the
// client library not the TOML parser (issue 22, "Clean dependencies"); the
// commit proxy's tests run against a fake log, not raft.
func TestDependencies(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("the go command is not on PATH, so go list cannot run: the dependency checks are skipped")
	}
	for _, c := range []struct {
		pkg    string
		test   bool // with the package's tests
		banned []string
	}{
		{pkg: module + "/internal/stash", banned: []string{raft, pebble}},
		{pkg: module + "/internal/proxy", banned: []string{raft, pebble}},
		{pkg: module + "/internal/proxy", test: true, banned: []string{raft, pebble}},
		{pkg: module, banned: []string{raft, pebble, toml}},
	} {
		args := []string{"list", "-deps"}
		if c.test {
			args = append(args, "-test")
		}
		args = append(args, c.pkg)
		out, err := exec.Command("go", args...).Output()
		if err != nil {
			msg := err.Error()
			if ee, ok := err.(*exec.ExitError); ok {
				msg += ": " + string(ee.Stderr)
			}
			t.Fatalf("go %s: %s", strings.Join(args, " "), msg)
		}
		deps := strings.Fields(string(out))
		if !slices.Contains(deps, c.pkg) {
			t.Fatalf("go %s does not list the package itself: %q", strings.Join(args, " "), out)
		}
		for _, b := range c.banned {
			if slices.Contains(deps, b) {
				t.Errorf("go %s lists %s", strings.Join(args, " "), b)
			}
		}
	}
}
