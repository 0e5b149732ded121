package clustertest

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/distash/distash/config"
)

func TestSpecsAndDurablePool(t *testing.T) {
	s := Specs("tx1 transaction", "data1 stash data")
	if len(s) != 2 || s[0] != (Spec{Name: "tx1", Class: Transaction}) || s[1] != (Spec{Name: "data1", Class: Stash, Pool: "data"}) {
		t.Fatalf("Specs: %+v", s)
	}
	cfg, err := config.Parse([]byte(DurablePool(3, 2, `mvcc_window = "2s"`, `shard_bytes = "4KiB"`)))
	if err != nil {
		t.Fatal(err)
	}
	p := cfg.Pools[0]
	if len(cfg.Pools) != 1 || p.Name != "data" || p.Prefix != "d/" || p.Stashes != 3 || p.Replication != 2 ||
		cfg.Cluster.MVCCWindow.Duration != 2*time.Second {
		t.Fatalf("DurablePool parses to %+v, cluster %+v", cfg.Pools, cfg.Cluster)
	}
}

func TestFreeAddrsAreDistinct(t *testing.T) {
	addrs, err := FreeAddrs(20)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, a := range addrs {
		if seen[a] || !strings.HasPrefix(a, "127.0.0.1:") {
			t.Fatalf("address %q given twice or not on loopback: %v", a, addrs)
		}
		seen[a] = true
	}
}

func TestUntil(t *testing.T) {
	n := 0
	d, err := Until(context.Background(), time.Second, time.Millisecond, "n reaches 3", func() (bool, string) {
		n++
		return n >= 3, ""
	})
	if err != nil || n != 3 || d >= time.Second {
		t.Fatalf("Until: %v after %v, %d calls", err, d, n)
	}
	_, err = Until(context.Background(), 20*time.Millisecond, time.Millisecond, "never", func() (bool, string) { return false, "still no" })
	if !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "never") || !strings.Contains(err.Error(), "still no") {
		t.Fatalf("Until of a condition that never holds: %v", err)
	}
}

// TestProcLifecycle drives a shell that prints the readiness line as a
// server would: ready, paused (SIGSTOP: its state is T), resumed, stopped
// by SIGTERM (its trap exits 0), started again and killed.
func TestProcLifecycle(t *testing.T) {
	sh := "/bin/sh"
	if _, err := os.Stat(sh); err != nil {
		t.Skip("no /bin/sh")
	}
	p := &Proc{Spec: Spec{Name: "fake"}, Args: []string{"-c",
		`trap 'echo bye; exit 0' TERM; echo starting >&2; echo "listening on here"; while :; do sleep 0.05; done`}}
	ctx := context.Background()
	if err := p.Start(sh); err != nil {
		t.Fatal(err)
	}
	if err := p.WaitReady(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if !p.Running() || p.Pid() == 0 {
		t.Fatalf("running %v, pid %d", p.Running(), p.Pid())
	}
	if err := p.Pause(); err != nil {
		t.Fatal(err)
	}
	state := func() string {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(p.Pid()) + "/stat")
		if i := strings.LastIndexByte(string(b), ')'); i >= 0 && i+2 < len(b) {
			return string(b[i+2])
		}
		return ""
	}
	if _, err := os.Stat("/proc/self/stat"); err == nil {
		if _, err := Until(ctx, 5*time.Second, 5*time.Millisecond, "stopped", func() (bool, string) { return state() == "T", state() }); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(syscall.SIGTERM, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if p.Running() || !strings.Contains(p.LastLines(), "starting") || !strings.Contains(p.LastLines(), "bye") {
		t.Fatalf("after Stop: running %v, last lines %q", p.Running(), p.LastLines())
	}
	if err := p.Start(sh); err != nil {
		t.Fatal(err)
	}
	if err := p.WaitReady(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Kill()
	if p.Running() || p.ExitState().Success() {
		t.Fatalf("after Kill: running %v, exit %v", p.Running(), p.ExitState())
	}
	// A process that exits before its readiness line.
	q := &Proc{Spec: Spec{Name: "quitter"}, Args: []string{"-c", "echo oops >&2; exit 3"}}
	if err := q.Start(sh); err != nil {
		t.Fatal(err)
	}
	if err := q.WaitReady(ctx, 10*time.Second); err == nil || !strings.Contains(err.Error(), "oops") {
		t.Fatalf("WaitReady of a process that exits at once: %v", err)
	}
}
