package server_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/distash/distash"
	"github.com/distash/distash/config"
	"github.com/distash/distash/internal/tlsconf/tlstest"
	"github.com/distash/distash/internal/wire"
	"github.com/distash/distash/server"
)

const authNodeConfig = `
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
[[auth.role]]
name = "shop"
members = ["app1"]
read = ["cache"]
write = ["cache"]

[[auth.role]]
name = "guest"
members = ["app2"]

[[auth.role]]
name = "operator"
members = ["alice"]
admin = true
`

// TestAuthLiveGrantAcrossNodes: in a multi-process cluster (a
// transaction node, which is the coordinator, and a stash node, over
// mutual TLS on loopback), a grant sent to the transaction node reaches
// the coordinators' state, and the stash node serves the newly granted
// identity's reads on its open connection within a second; a revoke takes
// effect as fast.
func TestAuthLiveGrantAcrossNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two nodes")
	}
	n := startAuthNodes(t, authNodeConfig, "")
	ctx, pki, coords, open := n.ctx, n.pki, n.coords, func(id string) *distash.DB { return n.open(id) }
	app1 := open("app1")
	waitFor(t, 30*time.Second, func() error {
		return app1.Transact(ctx, func(tr *distash.Tx) error { tr.Set([]byte("c/k"), []byte("v")); return nil })
	})
	app2 := open("app2")
	read := func() error {
		return app2.ReadTransact(ctx, func(tr *distash.Tx) error { _, err := tr.Get([]byte("c/k")); return err })
	}
	mustDeny(t, read(), `"app2"`, `read on pool "cache"`)

	cert, key := pki.Client(t, "alice")
	admin := wire.NewAdminClient(dialTLS(t, coords[0], clientTLS(t, cert, key, pki.CA)))
	change := func(op string) time.Time {
		resp, err := admin.Auth(ctx, &wire.AuthRequest{Op: op, Role: "shop", Identity: "app2"})
		if err == nil {
			err = resp.Error.Err()
		}
		if err != nil {
			t.Fatalf("auth %s: %v", op, err)
		}
		return time.Now()
	}
	granted := change("grant")
	waitFor(t, time.Second, read)
	t.Logf("grant in force on the stash node after %v", time.Since(granted).Round(time.Millisecond))
	revoked := change("revoke")
	waitFor(t, time.Second, func() error {
		if err := read(); !errors.Is(err, distash.ErrPermissionDenied) {
			return errors.New("still served")
		}
		return nil
	})
	t.Logf("revoke in force after %v", time.Since(revoked).Round(time.Millisecond))
	// Node-to-node calls stay for node certificates: app1 may not pop.
	resp, err := wire.NewLogClient(dialTLS(t, coords[0], clientTLS(t, pki.ClientCert, pki.ClientKey, pki.CA))).Pop(ctx, &wire.PopRequest{})
	if err == nil {
		err = resp.Error.Err()
	}
	if !refused(err) {
		t.Errorf("Log.Pop by a client certificate: %v", err)
	}
}

// dialTLS is a gRPC connection to addr over TLS with c.
func dialTLS(t *testing.T, addr string, c *tls.Config) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(c)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// authNodes is a multi-process cluster in the test process: a transaction
// node (the coordinator) and a stash node of pool cache, over mutual TLS
// on loopback, with [auth].
type authNodes struct {
	t         *testing.T
	ctx       context.Context
	pki       *tlstest.PKI
	coords    []string
	tx, stash *server.Server
	nodeTLS   *tls.Config // a node's client TLS
}

// startAuthNodes starts them with the configuration toml; the
// transaction node serves HTTP (with pprof) on httpAddr unless it is "".
func startAuthNodes(t *testing.T, toml, httpAddr string) *authNodes {
	t.Helper()
	pki := tlstest.New(t)
	srvTLS, err := server.TLSConfigFromFiles(pki.NodeCert, pki.NodeKey, pki.CA)
	if err != nil {
		t.Fatal(err)
	}
	nodeClient := clientTLS(t, pki.NodeCert, pki.NodeKey, pki.CA)
	cfg, err := config.Parse([]byte(toml))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	lnT, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lnS, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	coords := []string{lnT.Addr().String()}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	start := func(ln net.Listener, class, pool, httpAddr string) *server.Server {
		srv, err := server.StartNode(ctx, server.NodeOptions{Dir: t.TempDir(), Config: cfg, Listen: ln.Addr().String(), Listener: ln,
			Coordinators: coords, Class: class, Pool: pool, ServerTLS: srvTLS, ClientTLS: nodeClient, Logger: logger,
			HTTPAddr: httpAddr, Pprof: httpAddr != ""})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(srv.Stop)
		return srv
	}
	n := &authNodes{t: t, ctx: ctx, pki: pki, coords: coords, nodeTLS: nodeClient}
	n.tx = start(lnT, server.ClassTransaction, "", httpAddr)
	n.stash = start(lnS, server.ClassStash, "cache", "")
	return n
}

// open is a client of the cluster with a certificate naming identity.
func (n *authNodes) open(identity string, opts ...distash.Option) *distash.DB {
	t := n.t
	t.Helper()
	cert, key := n.pki.Client(t, identity)
	db, err := distash.Open(n.ctx, n.coords[0], append([]distash.Option{distash.WithTLS(clientTLS(t, cert, key, n.pki.CA))}, opts...)...)
	if err != nil {
		t.Fatalf("open as %s: %v", identity, err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}
