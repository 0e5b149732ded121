package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/distash/distash/internal/authz"
	"github.com/distash/distash/internal/clustertest"
	"github.com/distash/distash/internal/coordrpc"
	"github.com/distash/distash/internal/testutil/wait"
	"github.com/distash/distash/internal/tlsconf"
	"github.com/distash/distash/internal/tlsconf/tlstest"
	"github.com/spf13/cobra"
)

// TestCLIAuth: on a server with [auth], each CLI verb is refused with
// permission_denied to an identity without its permission and served to
// one with it; auth grant takes effect for the next command.
func TestCLIAuth(t *testing.T) {
	_, as := startTLSServer(t, `
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
`, 5*time.Second)
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

// cliRow is one verb's two sides: refuse run by an identity without the
// permission must fail with permission_denied naming it and leave the
// cluster as it was; serve run by one with it must not be refused.
type cliRow struct {
	verb          string // the command's path under `distash cli`
	without, with string
	refuse, serve []string
	after         func() // after serve, if set
}

// localVerbs talk to no cluster.
var localVerbs = map[string]bool{"auth token": true, "backup verify": true}

// TestCLIAuthEveryVerb runs every `distash cli` verb that talks to the
// cluster (enumerated from the command tree: a new verb without a row
// fails) against a multi-process cluster in this process (a transaction
// node and a stash node over mutual TLS, with [auth]): refused to an
// identity without its permission, with the cluster unchanged, and served
// to one with it. It runs every row twice: named by the client's
// certificate, then by a bearer token (--token, and $DISTASH_TOKEN for
// one) on a certificate that names nobody.
func TestCLIAuthEveryVerb(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two nodes")
	}
	clearTLSEnv(t)
	t.Setenv("DISTASH_TOKEN", "")
	pki := tlstest.New(t)
	dir := t.TempDir()
	priv := filepath.Join(dir, "k1.key")
	keys := filepath.Join(dir, "keys")
	writeTokenKey(t, priv, filepath.Join(keys, "k1.pem"))
	cfg := filepath.Join(dir, "cluster.toml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`
[log]
replicas = 1

[[pool]]
name = "cache"
prefix = "c/"
medium = "dram"
mode = "ephemeral"
engine = "memory"
stashes = 1
replication = 1

[auth]
token_keys = [%q]

`+clustertest.AuthMatrixRoles, keys)), 0o600); err != nil {
		t.Fatal(err)
	}
	addrs := freePorts(t, 2)
	tlsArgs := []string{"--tls-cert", pki.NodeCert, "--tls-key", pki.NodeKey, "--tls-ca", pki.CA}
	startServerInProcess(t, append([]string{"--config", cfg, "--http", "off", "--listen", addrs[0], "--coordinators", addrs[0], "--class", "transaction"}, tlsArgs...)...)
	startServerInProcess(t, append([]string{"--config", cfg, "--http", "off", "--listen", addrs[1], "--coordinators", addrs[0], "--class", "stash", "--pool", "cache"}, tlsArgs...)...)

	// byToken: name the caller by a token on the certificate of "gateway",
	// which no role names.
	byToken := false
	as := func(id string, args ...string) (string, error) {
		certID := id
		extra := []string{}
		if byToken {
			certID = "gateway"
			tok, err := authz.SignToken(priv, "k1", id, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			extra = []string{"--token", tok}
		}
		cert, key := pki.Client(t, certID)
		return run(cliCmd(), append(append(args, "--cluster", addrs[0], "--timeout", "10s", "--tls-cert", cert, "--tls-key", key, "--tls-ca", pki.CA), extra...)...)
	}
	wait.Within(t, 30*time.Second, "the cluster takes a write", func() bool {
		_, err := as("root", "set", "c/k", "v")
		return err == nil
	})

	// The state a refused verb must leave as it was.
	state := func() string {
		var b strings.Builder
		for _, args := range [][]string{{"auth", "list"}, {"getrange", "c/", "c0"}, {"backup", "status"}} {
			out, err := as("root", args...)
			fmt.Fprintf(&b, "%v: %v\n", args, err)
			for _, l := range strings.Split(out, "\n") {
				if args[0] != "backup" || strings.HasPrefix(l, "backup ") { // a backup's progress moves by itself
					fmt.Fprintln(&b, l)
				}
			}
		}
		cc, err := coordrpc.NewClient(addrs[0], coordrpc.ClientOptions{TLS: nodeTLS(t, pki)})
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		v, err := cc.View(ctx)
		if err != nil {
			t.Fatalf("view: %v", err)
		}
		fmt.Fprintf(&b, "generation %d failure_wait %d set %v excluded %v nodes %d\n", v.Generation, v.FailureWaitMs, v.FailureWaitSet, v.Excluded, len(v.Nodes))
		return b.String()
	}

	backupDir := "file://" + filepath.Join(dir, "backup")
	rows := []cliRow{
		{"get", "alice", "app1", []string{"get", "c/k"}, []string{"get", "c/k"}, nil},
		{"set", "app3", "app1", []string{"set", "c/k", "bad"}, []string{"set", "c/served", "x"}, nil},
		{"clear", "app3", "app1", []string{"clear", "c/", "c0"}, []string{"clear", "c/served"}, nil},
		{"getrange", "alice", "app1", []string{"getrange", "c/", "c0"}, []string{"getrange", "c/", "c0"}, nil},
		{"status", "app1", "prom", []string{"status"}, []string{"status"}, nil},
		{"status", "alice", "prom", []string{"status", "json"}, []string{"status", "json"}, nil},
		{"configure", "app1", "alice", []string{"configure", "failure_wait=1ms"}, []string{"configure", "failure_wait=60s"}, nil},
		{"exclude", "app1", "alice", []string{"exclude", addrs[1]}, []string{"exclude", "127.0.0.1:1"}, nil},
		{"include", "app1", "alice", []string{"include", "all"}, []string{"include", "127.0.0.1:1"}, nil},
		{"auth list", "app1", "alice", []string{"auth", "list"}, []string{"auth", "list"}, nil},
		{"auth grant", "app1", "alice", []string{"auth", "grant", "operator", "app1"}, []string{"auth", "grant", "reader", "mallory"}, nil},
		{"auth revoke", "app1", "alice", []string{"auth", "revoke", "operator", "alice"}, []string{"auth", "revoke", "reader", "mallory"}, nil},
		{"auth role", "prom", "alice", []string{"auth", "role", "x", "--read", "cache"}, []string{"auth", "role", "x", "--read", "cache"}, nil},
		{"auth delete-role", "app1", "alice", []string{"auth", "delete-role", "shop"}, []string{"auth", "delete-role", "x"}, nil},
		{"backup start", "app1", "alice", []string{"backup", "start", "--to", backupDir, "--include-ephemeral"}, []string{"backup", "start", "--to", backupDir, "--include-ephemeral"},
			func() { // restore, below, needs a restorable backup
				wait.Within(t, 30*time.Second, "the backup is restorable", func() bool {
					out, err := as("root", "backup", "status")
					return err == nil && strings.Contains(out, "restorable: ") && !strings.Contains(out, "not yet")
				})
			}},
		{"backup status", "app1", "alice", []string{"backup", "status"}, []string{"backup", "status"}, nil},
		{"backup stop", "app1", "alice", []string{"backup", "stop"}, []string{"backup", "stop"}, nil},
		// restore reads the target ranges first (they must be empty):
		// alice may not read them; root may, and finds them not empty.
		{"restore", "alice", "root", []string{"restore", "--from", backupDir}, []string{"restore", "--from", backupDir}, nil},
		// kill: served last, once (it stops the stash node).
		{"kill", "app1", "alice", []string{"kill", addrs[1]}, nil, nil},
	}
	have := map[string]bool{}
	for _, r := range rows {
		have[r.verb] = true
	}
	var walk func(c *cobra.Command, path string)
	walk = func(c *cobra.Command, path string) {
		if !c.HasSubCommands() {
			if !localVerbs[path] && !have[path] {
				t.Errorf("`distash cli %s` has no row in TestCLIAuthEveryVerb", path)
			}
			return
		}
		for _, sub := range c.Commands() {
			if sub.Name() == "help" || sub.Name() == "completion" {
				continue
			}
			walk(sub, strings.TrimSpace(path+" "+sub.Name()))
		}
	}
	walk(cliCmd(), "")

	for _, mode := range []string{"certificate", "token"} {
		byToken = mode == "token"
		before := state()
		for _, r := range rows {
			out, err := as(r.without, r.refuse...)
			if err == nil || !strings.Contains(err.Error(), "permission_denied") || !strings.Contains(err.Error(), `"`+r.without+`"`) {
				t.Errorf("%s: %v as %s: %v %s; want permission_denied naming %s", mode, r.refuse, r.without, err, out, r.without)
			}
			if after := state(); after != before {
				t.Fatalf("%s: %v refused to %s changed the cluster:\nbefore:\n%s\nafter:\n%s", mode, r.refuse, r.without, before, after)
			}
			if r.serve == nil {
				continue
			}
			out, err = as(r.with, r.serve...)
			if err != nil && strings.Contains(err.Error(), "permission_denied") {
				t.Errorf("%s: %v as %s: refused: %v", mode, r.serve, r.with, err)
			}
			t.Logf("%s: %q refused to %s, served to %s (%v)", mode, r.serve, r.without, r.with, err)
			if r.after != nil {
				r.after()
			}
			before = state()
		}
	}
	// $DISTASH_TOKEN stands for --token.
	tok, err := authz.SignToken(priv, "k1", "prom", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("DISTASH_TOKEN", tok)
	cert, key := pki.Client(t, "gateway")
	if out, err := run(cliCmd(), "status", "--cluster", addrs[0], "--timeout", "10s", "--tls-cert", cert, "--tls-key", key, "--tls-ca", pki.CA); err != nil {
		t.Errorf("status with $DISTASH_TOKEN naming prom: %v %s", err, out)
	}
	t.Setenv("DISTASH_TOKEN", "")

	// Last, alice's kill is served: the stash node stops.
	if out, err := as("alice", "kill", addrs[1]); err != nil {
		t.Fatalf("kill as alice: %v %s", err, out)
	}
}

// writeTokenKey writes a new Ed25519 key: the private one (PKCS#8 PEM,
// what `distash cli auth token --key` reads) and the public one (PEM, a
// token_keys file).
func writeTokenKey(t *testing.T, privFile, pubFile string) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	pder, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(pubFile), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(privFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pubFile, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pder}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// nodeTLS is a node's client TLS configuration.
func nodeTLS(t *testing.T, pki *tlstest.PKI) *tls.Config {
	t.Helper()
	c, err := tlsconf.Client(tlsconf.Files{Cert: pki.NodeCert, Key: pki.NodeKey, CA: pki.CA})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
