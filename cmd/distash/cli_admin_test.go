package main

import (
	"strings"
	"testing"
	"time"

	"github.com/distash/distash/internal/clustertest"
	"github.com/distash/distash/internal/coord"
	"github.com/distash/distash/internal/testutil/wait"
	"github.com/distash/distash/internal/wire"
)

// TestConfigureValidation: `distash cli configure` refuses bad settings
// with an error naming what is wrong, before it connects (the syntax) or
// against the controller's view (the pool, the replication's range).
func TestConfigureValidation(t *testing.T) {
	clearTLSEnv(t)
	// Nothing listens there: these fail before connecting.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"speed=3"}, `unknown key "speed"`},
		{[]string{"failure_wait=soon"}, `failure_wait="soon": not a duration`},
		{[]string{"failure_wait=-5s"}, "negative"},
		{[]string{"failure_wait"}, "not KEY=VALUE"},
		{[]string{"replication=2"}, "pool=NAME"},
		{[]string{"pool=data", "replication=zero"}, "not an integer"},
		{[]string{"pool=data", "replication=0"}, "at least 1"},
	} {
		_, err := run(cliCmd(), append(append([]string{"configure"}, tc.args...), "--cluster", "127.0.0.1:1", "--timeout", "100ms")...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("configure %q: %v, want %q", tc.args, err, tc.want)
		}
	}
	if _, err := run(cliCmd(), "configure", "--cluster", "127.0.0.1:1"); err == nil {
		t.Error("configure without a setting accepted")
	}

	// Against a view: a pool of 3 slots (one joined beyond the
	// configuration's 2) and one of 2.
	view := &wire.ViewResponse{
		FailureWaitMs: 60_000,
		Slots:         []*wire.PoolSlots{{Pool: "cache", Nodes: []string{"a", ""}}, {Pool: "data", Nodes: []string{"b", "c", "d"}}},
		Replication:   []*wire.PoolReplication{{Pool: "cache", Replication: 2}, {Pool: "data", Replication: 2}},
	}
	parse := func(words ...string) coord.Command {
		c, err := coord.ParseConfigure(words)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	for _, tc := range []struct {
		c    coord.Command
		want string // "" for valid: then the value in force
		was  string
	}{
		{parse("pool=nope", "replication=1"), "pool=nope: no such pool (pools: cache, data)", ""},
		{parse("pool=cache", "replication=3"), "the pool has 2 stash slots, so at most 2", ""},
		{parse("pool=data", "replication=4"), "the pool has 3 stash slots, so at most 3", ""},
		{parse("pool=data", "replication=3"), "", "2"},
		{parse("pool=data", "replication=default"), "", "2"},
		{parse("failure_wait=5s"), "", "1m0s"},
	} {
		was, err := checkConfigure(view, tc.c)
		switch {
		case tc.want == "" && (err != nil || was != tc.was):
			t.Errorf("%+v: %q %v, want valid, was %q", tc.c, was, err, tc.was)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v: %v, want %q", tc.c, err, tc.want)
		}
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"exclude", "10.0.0.1"}, `"10.0.0.1" is not an address host:port`},
		{[]string{"include", "a:1", "all"}, `"all" stands alone`},
		{[]string{"kill", "nowhere"}, `"nowhere" is not an address`},
	} {
		if _, err := run(cliCmd(), append(tc.args, "--cluster", "127.0.0.1:1", "--timeout", "100ms")...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.args, err, tc.want)
		}
	}
}

// TestShardsLeft: exclude --wait counts the shards of the stashes on the
// excluded addresses, the largest figure any node reports for a stash, and
// waits for the data distributor's first report.
func TestShardsLeft(t *testing.T) {
	view := &wire.ViewResponse{Stashes: []*wire.StashLocation{
		{Tag: 1, Pool: "data", Node: "a", Address: "h:1"},
		{Tag: 2, Pool: "data", Node: "b", Address: "h:2"},
		{Tag: 3, Pool: "data"}, // free slot
	}}
	st := &wire.StatusResponse{Stashes: []*wire.StashStatus{
		{Id: 1, Shards: 0}, {Id: 1, Shards: 4}, {Id: 2, Shards: 7}, {Id: 3, Shards: 9},
	}}
	total, per, ready := shardsLeft(view, st, []string{"h:1", "h:9"})
	if total != 4 || per["h:1"] != 4 || ready {
		t.Fatalf("total %d per %v ready %v", total, per, ready)
	}
	st.Distribution = []*wire.PoolDistribution{{Pool: "data"}}
	st.Stashes[1].Shards = 0
	if total, _, ready = shardsLeft(view, st, []string{"h:1"}); total != 0 || !ready {
		t.Fatalf("total %d ready %v", total, ready)
	}
}

// TestAdminVerbsNeedACluster: on an embedded cluster the admin verbs say
// they need a multi-process one.
func TestAdminVerbsNeedACluster(t *testing.T) {
	clearTLSEnv(t)
	addr := startServerInProcess(t)
	for _, args := range [][]string{
		{"configure", "failure_wait=5s"},
		{"exclude", "127.0.0.1:9"},
		{"include", "all"},
	} {
		_, err := run(cliCmd(), append(args, "--cluster", addr)...)
		if err == nil || !strings.Contains(err.Error(), "needs a multi-process cluster") {
			t.Errorf("%q on an embedded cluster: %v", args, err)
		}
	}
	if _, err := run(cliCmd(), "kill", addr, "--cluster", addr); err == nil || !strings.Contains(err.Error(), "embedded cluster") {
		t.Errorf("kill of an embedded cluster: %v", err)
	}
}

// TestAdminVerbsOnACluster: a one-transaction-node cluster with a stash
// node, as real processes: configure, exclude, include change the
// controller's state; kill stops a node, whose process exits with 0.
func TestAdminVerbsOnACluster(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs a cluster")
	}
	clearTLSEnv(t)
	toml := "[log]\nreplicas = 1\n" +
		"[[pool]]\nname = \"data\"\nprefix = \"d/\"\nmedium = \"ssd\"\nmode = \"durable\"\nengine = \"pebble\"\nstashes = 2\nreplication = 1\n"
	c := newProcs(t, clustertest.ProcsOptions{TOML: toml, Nodes: clustertest.Specs("tx transaction", "s stash data", "s2 stash data")})
	c.start("tx")
	c.start("s")
	c.start("s2")
	stash := c.node("s")
	addrs := []string{c.node("tx").Addr, stash.Addr}

	cli := func(args ...string) string {
		t.Helper()
		out, err := run(cliCmd(), append(args, "--cluster", addrs[0])...)
		if err != nil {
			t.Fatalf("cli %q: %v\n%s", args, err, out)
		}
		return out
	}
	if out := cli("configure", "failure_wait=5s"); !strings.Contains(out, "failure_wait is now 5s (was 1m0s)") {
		t.Fatalf("configure: %q", out)
	}
	if out := cli("configure", "pool=data", "replication=2"); !strings.Contains(out, "pool data: replication is now 2 (was 1)") {
		t.Fatalf("configure replication: %q", out)
	}
	if _, err := run(cliCmd(), "configure", "pool=data", "replication=3", "--cluster", addrs[0]); err == nil || !strings.Contains(err.Error(), "2 stash slots") {
		t.Fatalf("replication beyond the slots: %v", err)
	}
	if out := cli("exclude", addrs[1]); !strings.Contains(out, "excluded "+addrs[1]+": its shards move to other stashes; run `distash cli include "+addrs[1]+"` to undo") {
		t.Fatalf("exclude: %q", out)
	}
	if out := cli("include", "all"); !strings.Contains(out, "included "+addrs[1]) {
		t.Fatalf("include: %q", out)
	}
	// exclude --failed of a live stash node: it keeps its stash and data;
	// of an address with no node: nothing to give up. Both are done at
	// once, and shown in status json.
	out := cli("exclude", "--failed", addrs[1], "127.0.0.1:9")
	for _, want := range []string{
		"declared " + addrs[1] + " failed, but the controller heard from its stash node lately: it keeps its stash and data",
		"declared 127.0.0.1:9 failed: its stashes are retired",
		"no stash node is registered at 127.0.0.1:9 now",
		"done after",
	} {
		if !strings.Contains(out, want) {
			t.Fatalf("exclude --failed: %q lacks %q", out, want)
		}
	}
	if out := cli("status", "json"); !strings.Contains(out, `"excluded": true`) || strings.Contains(out, `"givenUp": true`) {
		t.Fatalf("status json after exclude --failed of a live node: want it excluded, not given up:\n%s", out)
	}
	if out := cli("include", "all"); !strings.Contains(out, "included "+addrs[1]) {
		t.Fatalf("include: %q", out)
	}
	if out := cli("kill", addrs[1]); !strings.Contains(out, "asked "+addrs[1]+" to stop") {
		t.Fatalf("kill: %q", out)
	}
	done := make(chan error, 1)
	go func() { done <- stash.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the killed node exited with %v, want status 0", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the killed node did not exit within 30s")
	}
	// The stopped node's stash is gone for good: exclude --failed gives
	// it up, and waits until no shard names it (its shards' other
	// replicas on s2 keep them, or they start empty there).
	// Until the controller counts the node dead (2 s of silence), the
	// command keeps its stash and says why; run again, it gives it up.
	wait.Within(t, 30*time.Second, "exclude --failed of the stopped node gives up its stash", func() bool {
		out = cli("exclude", "--failed", addrs[1], "--timeout", "2m")
		return !strings.Contains(out, "heard from its stash node lately")
	})
	for _, want := range []string{"declared " + addrs[1] + " failed: its stashes are retired", "done after"} {
		if !strings.Contains(out, want) {
			t.Fatalf("exclude --failed of a stopped node: %q lacks %q", out, want)
		}
	}
	if out := cli("status", "json"); !strings.Contains(out, `"givenUp": true`) {
		t.Fatalf("status json does not show the stash given up:\n%s", out)
	}
	if out := cli("status"); !strings.Contains(out, "failed (data given up)") {
		t.Fatalf("status does not show the stash given up:\n%s", out)
	}
}
