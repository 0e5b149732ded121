package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/distash/distash/internal/tlsconf/tlstest"
)

// TestCLIAuth: on a server with [auth], each CLI verb is refused with
// permission_denied to an identity without its permission and served to
// one with it; auth grant takes effect for the next command.
func TestCLIAuth(t *testing.T) {
	clearTLSEnv(t)
	pki := tlstest.New(t)
	cfg := filepath.Join(t.TempDir(), "cluster.toml")
	err := os.WriteFile(cfg, []byte(`
[[pool]]
name = "cache"
prefix = "c/"
medium = "dram"
mode = "ephemeral"
engine = "memory"

[[pool]]
name = "data"
prefix = "d/"
medium = "dram"
mode = "ephemeral"
engine = "memory"

[auth]
[[auth.role]]
name = "app"
members = ["app1"]
read = ["cache", "data"]
write = ["cache"]

[[auth.role]]
name = "operator"
members = ["alice"]
admin = true
status = true
`), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	addr := startServerInProcess(t, "--config", cfg, "--http", "off", "--tls-cert", pki.ServerCert, "--tls-key", pki.ServerKey, "--tls-ca", pki.CA)
	as := func(id string, args ...string) (string, error) {
		cert, key := pki.Client(t, id)
		return run(cliCmd(), append(args, "--cluster", addr, "--timeout", "5s", "--tls-cert", cert, "--tls-key", key, "--tls-ca", pki.CA)...)
	}
	for _, tc := range []struct {
		args          []string
		allowed, deny string // identities
	}{
		{[]string{"set", "c/k", "v"}, "app1", "alice"},
		{[]string{"set", "d/k", "v"}, "", "app1"},
		{[]string{"get", "d/k"}, "app1", "alice"},
		{[]string{"getrange", "c/", "c0"}, "app1", "alice"},
		{[]string{"clear", "c/k"}, "app1", "alice"},
		{[]string{"status"}, "alice", "app1"},
		{[]string{"status", "json"}, "alice", "app1"},
		{[]string{"auth", "list"}, "alice", "app1"},
		{[]string{"backup", "status"}, "alice", "app1"},
	} {
		if tc.allowed != "" {
			if out, err := as(tc.allowed, tc.args...); err != nil {
				t.Errorf("%v as %s: %v %s", tc.args, tc.allowed, err, out)
			}
		}
		out, err := as(tc.deny, tc.args...)
		if err == nil || !strings.Contains(err.Error(), "permission_denied") || !strings.Contains(err.Error(), tc.deny) {
			t.Errorf("%v as %s: %v %s; want permission_denied naming %s", tc.args, tc.deny, err, out, tc.deny)
		}
	}
	if out, err := as("alice", "auth", "grant", "operator", "app1"); err != nil || !strings.Contains(out, "members=[alice,app1]") {
		t.Fatalf("auth grant: %q, %v", out, err)
	}
	if out, err := as("app1", "status"); err != nil {
		t.Errorf("status after the grant: %v %s", err, out)
	}
}
