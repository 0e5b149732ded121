package main

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/distash/distash/internal/testutil/wait"
)

// TestServerFlagErrors: a bad --log-format or --http fails before the
// server starts (no files), with an error naming the flag; an --http
// address that is taken fails the start.
func TestServerFlagErrors(t *testing.T) {
	clearTLSEnv(t)
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--log-format", "bogus"}, `--log-format "bogus": want text or json`},
		{[]string{"--http", "bogus"}, `--http "bogus": want host:port`},
		{[]string{"--http", "127.0.0.1:99999"}, `--http "127.0.0.1:99999"`},
		{[]string{"--http", "127.0.0.1:http"}, `bad port "http"`},
	} {
		_, err := run(serverCmd(), append([]string{"--dir", dir, "--listen", "127.0.0.1:0"}, c.args...)...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("server %v: %v; want an error containing %q", c.args, err, c.want)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) > 0 {
		t.Errorf("a server with bad flags created files in its directory: %v", entries)
	}
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	_, err = run(serverCmd(), "--dir", filepath.Join(dir, "taken"), "--listen", "127.0.0.1:0", "--http", taken.Addr().String())
	if err == nil || !strings.Contains(err.Error(), "HTTP listen on "+taken.Addr().String()) {
		t.Errorf("server --http on a taken address: %v; want an HTTP listen error", err)
	}
}

// TestServerHTTP: `distash server --http 127.0.0.1:0` prints where it
// serves HTTP after "listening on", and serves metrics there.
func TestServerHTTP(t *testing.T) {
	clearTLSEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	w := &lineWriter{}
	cmd := serverCmd()
	cmd.SetOut(w)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	cmd.SetArgs([]string{"--dir", t.TempDir(), "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0", "--log-format", "json"})
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server: %v", err)
		}
	}()
	var out string
	wait.Until(30*time.Second, func() bool {
		w.mu.Lock()
		out = w.buf.String()
		w.mu.Unlock()
		return strings.Contains(out, "http on ")
	})
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 2 || !strings.HasPrefix(lines[0], "listening on ") || !strings.HasPrefix(lines[1], "http on ") {
		t.Fatalf("server printed %q; want listening on, then http on", out)
	}
	resp, err := http.Get("http://" + strings.TrimPrefix(lines[1], "http on ") + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /metrics: %s", resp.Status)
	}
}

func TestStopWithinBoundsAHungStop(t *testing.T) {
	if err := stopWithin(func() {}, time.Second); err != nil {
		t.Fatalf("a stop that finishes: %v", err)
	}
	hang := make(chan struct{})
	defer close(hang)
	if err := stopWithin(func() { <-hang }, 20*time.Millisecond); err == nil {
		t.Fatal("a stop that hangs returned nil")
	}
}
