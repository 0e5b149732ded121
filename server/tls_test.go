package server_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/distash/distash"
	"github.com/distash/distash/config"
	"github.com/distash/distash/internal/testutil/wait"
	"github.com/distash/distash/internal/tlsconf/tlstest"
	"github.com/distash/distash/internal/wire"
	"github.com/distash/distash/server"
)

// tinyConfig is one small DRAM pool: the TLS tests are about the
// connection, and this cluster starts fastest.
const tinyConfig = `
[[pool]]
name = "cache"
prefix = "c/"
medium = "dram"
mode = "ephemeral"
engine = "memory"
capacity = "4MiB"
`

func startTiny(t *testing.T, listen string, tlsConfig *tls.Config, logger *slog.Logger) *server.Server {
	t.Helper()
	cfg, err := config.Parse([]byte(tinyConfig))
	if err != nil {
		t.Fatal(err)
	}
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := server.Start(ctx, server.Options{Dir: t.TempDir(), Config: cfg, ListenAddr: listen, TLS: tlsConfig, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	return srv
}

// clusterInfo makes one RPC over a fresh connection with creds and returns
// its error. It does not wait for the connection to become ready, so a
// refused handshake fails the call at once.
func clusterInfo(t *testing.T, addr string, creds credentials.TransportCredentials) error {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = wire.NewDiStashClient(conn).ClusterInfo(ctx, &wire.ClusterInfoRequest{})
	return err
}

func clientTLS(t *testing.T, cert, key, ca string) *tls.Config {
	t.Helper()
	c, err := distash.TLSConfigFromFiles(cert, key, ca)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func mustRefuse(t *testing.T, addr string, creds credentials.TransportCredentials) {
	t.Helper()
	err := clusterInfo(t, addr, creds)
	if err == nil {
		t.Fatal("the server answered")
	}
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("got %v, want a refused connection (Unavailable)", err)
	}
	t.Logf("refused: %v", err)
}

// TestMutualTLS: a cluster started with TLSConfigFromFiles serves only
// clients that present a certificate its CA signed, and clients accept only
// a server certificate their CA signed.
func TestMutualTLS(t *testing.T) {
	pki := tlstest.New(t)
	srvTLS, err := server.TLSConfigFromFiles(pki.ServerCert, pki.ServerKey, pki.CA)
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	srv := startTiny(t, "127.0.0.1:0", srvTLS, slog.New(slog.NewTextHandler(&logs, nil)))
	addr := srv.ClusterString()

	t.Run("plaintext client refused", func(t *testing.T) {
		mustRefuse(t, addr, insecure.NewCredentials())
	})
	t.Run("client certificate of another CA refused", func(t *testing.T) {
		mustRefuse(t, addr, credentials.NewTLS(clientTLS(t, pki.OtherClientCert, pki.OtherClientKey, pki.CA)))
		// TLSConfigFromFiles presents the certificate although the server
		// does not list its CA, so the server refuses it for its CA, and
		// logs why (the client may only see its connection closed).
		want := "certificate signed by unknown authority"
		if !wait.Until(5*time.Second, func() bool { return strings.Contains(logs.String(), want) }) {
			t.Fatalf("the server logged no refused handshake with %q:\n%s", want, logs.String())
		}
	})
	t.Run("client without certificate refused", func(t *testing.T) {
		c := clientTLS(t, pki.ClientCert, pki.ClientKey, pki.CA)
		c.Certificates, c.GetClientCertificate = nil, nil
		mustRefuse(t, addr, credentials.NewTLS(c))
	})
	t.Run("server certificate of another CA refused by the client", func(t *testing.T) {
		mustRefuse(t, addr, credentials.NewTLS(clientTLS(t, pki.ClientCert, pki.ClientKey, pki.OtherCA)))
	})
	t.Run("client certificate of the CA served", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		db, err := distash.Open(ctx, addr, distash.WithTLS(clientTLS(t, pki.ClientCert, pki.ClientKey, pki.CA)))
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if err := db.Transact(ctx, func(tr *distash.Tx) error {
			tr.Set([]byte("c/greeting"), []byte("hello over TLS"))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		var got []byte
		if err := db.ReadTransact(ctx, func(tr *distash.Tx) error {
			got, err = tr.Get([]byte("c/greeting"))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if string(got) != "hello over TLS" {
			t.Fatalf("got %q", got)
		}
	})
	t.Run("Open reports a refused handshake", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		db, err := distash.Open(ctx, addr)
		if err == nil {
			db.Close()
			t.Fatal("a plaintext Open of a TLS cluster succeeded")
		}
		t.Logf("plaintext Open: %v", err)
	})
}

// TestTLSCertificatesReloadWithoutRestart: the server re-reads its files
// when they change. A client of a new CA is refused until the server's CA
// file holds both CAs, then served; the old CA's clients keep working,
// as during a rotation (docs/security.md).
func TestTLSCertificatesReloadWithoutRestart(t *testing.T) {
	pki := tlstest.New(t)
	bundle := filepath.Join(pki.Dir, "bundle.pem")
	copyFile(t, bundle, pki.CA)
	srvTLS, err := server.TLSConfigFromFiles(pki.ServerCert, pki.ServerKey, bundle)
	if err != nil {
		t.Fatal(err)
	}
	srv := startTiny(t, "127.0.0.1:0", srvTLS, nil)
	addr := srv.ClusterString()

	newCA := tlstest.NewAuthority(t, pki.Dir, "new-ca")
	newCert, newKey := newCA.Issue(t, "new-client", false)
	newClient := credentials.NewTLS(clientTLS(t, newCert, newKey, pki.CA))
	mustRefuse(t, addr, newClient)

	// Rotation step 1: the server trusts both CAs.
	both := append(readFile(t, pki.CA), readFile(t, newCA.CertFile)...)
	if err := os.WriteFile(bundle, both, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := clusterInfo(t, addr, newClient); err != nil {
		t.Fatalf("a client of the new CA after the bundle holds it: %v", err)
	}
	if err := clusterInfo(t, addr, credentials.NewTLS(clientTLS(t, pki.ClientCert, pki.ClientKey, pki.CA))); err != nil {
		t.Fatalf("a client of the old CA during the rotation: %v", err)
	}

	// A broken file does not take the server down: it keeps the last
	// certificates that loaded.
	if err := os.WriteFile(bundle, []byte("not PEM"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := clusterInfo(t, addr, newClient); err != nil {
		t.Fatalf("after a broken CA file: %v", err)
	}

	// Rotation step 3: the old CA is removed.
	copyFile(t, bundle, newCA.CertFile)
	mustRefuse(t, addr, credentials.NewTLS(clientTLS(t, pki.ClientCert, pki.ClientKey, pki.CA)))
	if err := clusterInfo(t, addr, newClient); err != nil {
		t.Fatalf("a client of the new CA after the rotation: %v", err)
	}
}

// TestWarnsWhenExposedWithoutTLS: listening beyond loopback without TLS
// logs a loud warning; on loopback, or with TLS, it does not.
func TestWarnsWhenExposedWithoutTLS(t *testing.T) {
	pki := tlstest.New(t)
	srvTLS, err := server.TLSConfigFromFiles(pki.ServerCert, pki.ServerKey, pki.CA)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		listen string
		tls    *tls.Config
		warn   bool
	}{
		{"0.0.0.0:0", nil, true},
		{"127.0.0.1:0", nil, false},
		{"0.0.0.0:0", srvTLS, false},
	} {
		var logs syncBuffer
		srv := startTiny(t, c.listen, c.tls, slog.New(slog.NewTextHandler(&logs, nil)))
		srv.Stop()
		got := logs.String()
		warned := strings.Contains(got, "WARNING") && strings.Contains(got, "anyone who can reach this port can read, write and clear every key")
		if warned != c.warn {
			t.Errorf("listen %s, TLS %v: warned %v, want %v; log:\n%s", c.listen, c.tls != nil, warned, c.warn, got)
		}
	}
}

func readFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func copyFile(t *testing.T, dst, src string) {
	t.Helper()
	if err := os.WriteFile(dst, readFile(t, src), 0o600); err != nil {
		t.Fatal(err)
	}
}

// syncBuffer is a bytes.Buffer for a logger that goroutines share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
