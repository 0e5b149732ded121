package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/distash/distash/internal/tlsconf/tlstest"
)

// run executes cmd in this process with args and returns what it printed.
func run(cmd *cobra.Command, args ...string) (string, error) {
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

// lineWriter hands the first line written to it to a channel.
type lineWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	lines chan string
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if line, _, ok := strings.Cut(w.buf.String(), "\n"); ok && w.lines != nil {
		w.lines <- line
		w.lines = nil
	}
	return len(p), nil
}

// startServerInProcess runs `distash server args...` in this process and
// returns its address; the server stops when the test ends.
func startServerInProcess(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &lineWriter{lines: make(chan string, 1)}
	lines := w.lines
	cmd := serverCmd()
	cmd.SetOut(w)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	cmd.SetArgs(append([]string{"--dir", t.TempDir(), "--listen", "127.0.0.1:0"}, args...))
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server: %v", err)
		}
	})
	select {
	case line := <-lines:
		addr, ok := strings.CutPrefix(line, "listening on ")
		if !ok {
			t.Fatalf("server printed %q", line)
		}
		return addr
	case err := <-done:
		done <- err
		t.Fatalf("server stopped: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("server did not start")
	}
	return ""
}

// startTLSServer writes toml as the configuration of an embedded cluster
// served over mutual TLS with the test PKI's server certificate, starts it
// in this process, and returns the PKI and a CLI runner: as(id, args...)
// runs `distash cli args...` with a client certificate naming id, within
// timeout.
func startTLSServer(t *testing.T, toml string, timeout time.Duration) (*tlstest.PKI, func(id string, args ...string) (string, error)) {
	t.Helper()
	clearTLSEnv(t)
	pki := tlstest.New(t)
	cfg := filepath.Join(t.TempDir(), "cluster.toml")
	if err := os.WriteFile(cfg, []byte(toml), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := startServerInProcess(t, "--config", cfg, "--http", "off", "--tls-cert", pki.ServerCert, "--tls-key", pki.ServerKey, "--tls-ca", pki.CA)
	return pki, func(id string, args ...string) (string, error) {
		cert, key := pki.Client(t, id)
		return run(cliCmd(), append(args, "--cluster", addr, "--timeout", timeout.String(), "--tls-cert", cert, "--tls-key", key, "--tls-ca", pki.CA)...)
	}
}

// clearTLSEnv keeps a developer's own settings out of the test.
func clearTLSEnv(t *testing.T) {
	for _, name := range []string{"DISTASH_CLUSTER", "DISTASH_TLS_CERT", "DISTASH_TLS_KEY", "DISTASH_TLS_CA"} {
		t.Setenv(name, "")
	}
}

// TestCLIOverMutualTLS: `distash server --tls-*` serves only clients with a
// certificate of its CA; `distash cli` gets there with the flags or the
// environment variables, and without them is refused.
func TestCLIOverMutualTLS(t *testing.T) {
	clearTLSEnv(t)
	pki := tlstest.New(t)
	addr := startServerInProcess(t, "--tls-cert", pki.ServerCert, "--tls-key", pki.ServerKey, "--tls-ca", pki.CA)

	out, err := run(cliCmd(), "set", "d/user:1", "Ada", "--cluster", addr,
		"--tls-cert", pki.ClientCert, "--tls-key", pki.ClientKey, "--tls-ca", pki.CA)
	if err != nil || !strings.HasPrefix(out, "committed at version") {
		t.Fatalf("cli set with --tls-* flags: %q, %v", out, err)
	}

	out, err = run(cliCmd(), "get", "d/user:1", "--cluster", addr, "--timeout", "1s")
	if err == nil {
		t.Fatalf("cli get without TLS succeeded: %q", out)
	}
	if !strings.Contains(err.Error(), "--tls-cert") {
		t.Errorf("plaintext cli get: %v; want a hint about --tls-cert", err)
	}

	out, err = run(cliCmd(), "get", "d/user:1", "--cluster", addr, "--timeout", "1s",
		"--tls-cert", pki.OtherClientCert, "--tls-key", pki.OtherClientKey, "--tls-ca", pki.CA)
	if err == nil {
		t.Fatalf("cli get with another CA's certificate succeeded: %q", out)
	}

	t.Setenv("DISTASH_CLUSTER", addr)
	t.Setenv("DISTASH_TLS_CERT", pki.ClientCert)
	t.Setenv("DISTASH_TLS_KEY", pki.ClientKey)
	t.Setenv("DISTASH_TLS_CA", pki.CA)
	out, err = run(cliCmd(), "get", "d/user:1")
	if err != nil || out != "Ada\n" {
		t.Fatalf("cli get with DISTASH_TLS_*: %q, %v", out, err)
	}
	out, err = run(cliCmd(), "status")
	if err != nil || !strings.Contains(out, "POOL") {
		t.Fatalf("cli status with DISTASH_TLS_*: %q, %v", out, err)
	}
}

// TestTLSFlagErrors: half a TLS configuration, or a bad file, stops the
// server and the cli before they do anything, with an error that says
// which flag or file.
func TestTLSFlagErrors(t *testing.T) {
	clearTLSEnv(t)
	pki := tlstest.New(t)
	garbage := filepath.Join(pki.Dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, c := range []struct {
		name string
		cmd  func() *cobra.Command
		args []string
		want string
	}{
		{"server cert only", serverCmd, []string{"--dir", dir, "--tls-cert", pki.ServerCert}, "--tls-cert, --tls-key and --tls-ca must be given together; missing --tls-key, --tls-ca"},
		{"server without CA", serverCmd, []string{"--dir", dir, "--tls-cert", pki.ServerCert, "--tls-key", pki.ServerKey}, "missing --tls-ca"},
		{"server bad certificate", serverCmd, []string{"--dir", dir, "--tls-cert", garbage, "--tls-key", pki.ServerKey, "--tls-ca", pki.CA}, "certificate file " + garbage},
		{"server missing CA file", serverCmd, []string{"--dir", dir, "--tls-cert", pki.ServerCert, "--tls-key", pki.ServerKey, "--tls-ca", garbage + ".missing"}, garbage + ".missing"},
		{"cli key only", cliCmd, []string{"get", "k", "--tls-key", pki.ClientKey}, "missing --tls-cert, --tls-ca"},
		{"cli bad CA", cliCmd, []string{"status", "--tls-cert", pki.ClientCert, "--tls-key", pki.ClientKey, "--tls-ca", garbage}, "CA file " + garbage},
	} {
		_, err := run(c.cmd(), c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", c.name, err, c.want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "log")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a server with bad TLS flags created its files (%v)", err)
	}
}
