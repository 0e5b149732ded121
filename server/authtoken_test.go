package server_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"google.golang.org/grpc"

	"github.com/distash/distash"
	"github.com/distash/distash/internal/frames"
	"github.com/distash/distash/internal/protover"
	"github.com/distash/distash/internal/testutil/wait"
	"github.com/distash/distash/internal/wire"
	"github.com/distash/distash/server"
)

// TestAuthTokens: a client whose certificate names nobody with a grant
// presents a bearer token: it is served as the token's subject; expired,
// wrongly signed and unknown-key tokens are refused with
// permission_denied; a key added to token_keys' directory is trusted
// without a restart.
func TestAuthTokens(t *testing.T) {
	keyDir := t.TempDir()
	newKey := func(kid string) ed25519.PrivateKey { return newTokenKey(t, keyDir, kid) }
	k1 := newKey("k1")
	c := startAuthCluster(t, fmt.Sprintf("token_keys = [%q]\n", keyDir), "")
	ctx := ctxFor(t)
	sign := func(priv ed25519.PrivateKey, kid, sub string, ttl time.Duration) string {
		return signToken(t, priv, kid, sub, ttl)
	}
	if err := c.open(t, "root").Transact(ctx, func(tr *distash.Tx) error { tr.Set([]byte("d/k"), []byte("v")); return nil }); err != nil {
		t.Fatal(err)
	}
	read := func(db *distash.DB) error {
		return db.ReadTransact(ctx, func(tr *distash.Tx) error { _, err := tr.Get([]byte("d/k")); return err })
	}
	write := func(db *distash.DB) error {
		return db.Transact(ctx, func(tr *distash.Tx) error { tr.Set([]byte("d/k"), []byte("w")); return nil })
	}
	// "gateway" has no grant of its own: the token names the client.
	app := c.open(t, "gateway", distash.WithToken(sign(k1, "k1", "app1", time.Hour)))
	if err := read(app); err != nil {
		t.Fatalf("read as app1 by token: %v", err)
	}
	mustDeny(t, write(app), `"app1" (token)`, `write on pool "data"`)

	// Refused tokens: the connection's certificate (root, who may do
	// anything) does not stand in for them.
	_, other, _ := ed25519.GenerateKey(rand.Reader)
	for name, tok := range map[string]string{
		"expired":        sign(k1, "k1", "app1", -time.Minute),
		"wrongly signed": sign(other, "k1", "app1", time.Hour),
		"unknown key id": sign(other, "k7", "app1", time.Hour),
	} {
		cert, key := c.pki.Client(t, "root")
		_, err := distash.Open(ctx, c.srv.ClusterString(), distash.WithTLS(clientTLS(t, cert, key, c.pki.CA)), distash.WithToken(tok))
		mustDeny(t, err, "token")
		t.Logf("%s: %v", name, err)
	}

	// Rotation: k2's tokens are trusted once its file is there.
	k2 := newKey("k2")
	cert, key := c.pki.Client(t, "gateway")
	waitFor(t, 20*time.Second, func() error {
		db, err := distash.Open(ctx, c.srv.ClusterString(), distash.WithTLS(clientTLS(t, cert, key, c.pki.CA)), distash.WithToken(sign(k2, "k2", "app1", time.Hour)))
		if err != nil {
			return err
		}
		defer db.Close()
		return read(db)
	})
}

// newTokenKey makes an Ed25519 key, writes its public half to dir as
// kid.pem (a token_keys file) and returns the private one.
func newTokenKey(t *testing.T, dir, kid string) ed25519.PrivateKey {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKIXPublicKey(pub)
	if err := os.WriteFile(filepath.Join(dir, kid+".pem"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return priv
}

// signToken is a token for sub signed with priv under kid, expiring after
// ttl (JWT times are whole seconds).
func signToken(t *testing.T, priv ed25519.PrivateKey, kid, sub string, ttl time.Duration) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, jwt.RegisteredClaims{Subject: sub, ExpiresAt: jwt.NewNumericDate(time.Now().Add(ttl))})
	tok.Header["kid"] = kid
	s, err := tok.SignedString(priv)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// streamCounter counts the data path's streams a server opens, by
// transport (frames streams are those whose sends may run concurrently).
type streamCounter struct {
	mu            sync.Mutex
	frames, grpcs map[string]int // by method
}

func (c *streamCounter) intercept(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	c.mu.Lock()
	if frames.SendsConcurrently(ss.Context()) {
		c.frames[info.FullMethod]++
	} else {
		c.grpcs[info.FullMethod]++
	}
	c.mu.Unlock()
	return handler(srv, ss)
}

// counts returns the frames and gRPC streams opened so far, all methods.
func (c *streamCounter) counts() (framesStreams, grpcStreams int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.frames {
		framesStreams += n
	}
	for _, n := range c.grpcs {
		grpcStreams += n
	}
	return framesStreams, grpcStreams
}

// TestAuthTokensOnFrames: a DB with a bearer token reads and commits over
// frames streams, the token in each stream's open frame and checked by the
// same authorization as on gRPC: an expired or wrongly signed token is
// refused there; a token that expires while its stream is open is refused
// from then on, on that stream; a revoke applies to an open stream; a
// token source's new token opens a new stream (and the data path then
// acts as its subject). WithGRPCDataPath still carries tokens on gRPC.
func TestAuthTokensOnFrames(t *testing.T) {
	keyDir := t.TempDir()
	k1 := newTokenKey(t, keyDir, "k1")
	sc := &streamCounter{frames: map[string]int{}, grpcs: map[string]int{}}
	c := startAuthClusterWith(t, fmt.Sprintf("token_keys = [%q]\n", keyDir), `
[[auth.role]]
name = "tokens"
members = ["tok2"]
read = ["cache", "data"]
write = ["cache"]
`, func(o *server.Options) { o.StreamInterceptor = sc.intercept })
	ctx := ctxFor(t)
	if err := c.open(t, "root").Transact(ctx, func(tr *distash.Tx) error { tr.Set([]byte("d/k"), []byte("v")); return nil }); err != nil {
		t.Fatal(err)
	}
	read := func(db *distash.DB) error {
		return db.ReadTransact(ctx, func(tr *distash.Tx) error { _, err := tr.Get([]byte("d/k")); return err })
	}
	write := func(db *distash.DB, k string) error {
		return db.Transact(ctx, func(tr *distash.Tx) error { tr.Set([]byte(k), []byte("w")); return nil })
	}

	// Served over frames, as the token's subject.
	f0, g0 := sc.counts()
	app := c.open(t, "gateway", distash.WithToken(signToken(t, k1, "k1", "app1", time.Hour)))
	if err := read(app); err != nil {
		t.Fatalf("read as app1 by token: %v", err)
	}
	if err := write(app, "c/by-token"); err != nil {
		t.Fatalf("commit as app1 by token: %v", err)
	}
	mustDeny(t, write(app, "d/k"), `"app1" (token)`, `write on pool "data"`)
	f1, g1 := sc.counts()
	if f1-f0 < 2 || g1 != g0 {
		t.Fatalf("a token client opened %d frames and %d gRPC streams; want its read and commit streams on frames", f1-f0, g1-g0)
	}

	// Refused on frames: a raw frames stream whose open frame carries an
	// expired or wrongly signed token, or none from a certificate no role
	// names.
	_, other, _ := ed25519.GenerateKey(rand.Reader)
	for name, authorization := range map[string]string{
		"expired":        "Bearer " + signToken(t, k1, "k1", "app1", -time.Minute),
		"wrongly signed": "Bearer " + signToken(t, other, "k1", "app1", time.Hour),
		"unknown key id": "Bearer " + signToken(t, other, "k9", "app1", time.Hour),
		"not bearer":     "Basic YXBwMTp4",
		"no token":       "",
	} {
		err := framesRead(t, c, "gateway", authorization)
		if !refused(err) {
			t.Errorf("frames, %s: %v, want permission_denied", name, err)
		}
		t.Logf("frames, %s: %v", name, err)
	}
	if err := framesRead(t, c, "gateway", "Bearer "+signToken(t, k1, "k1", "app1", time.Hour)); refused(err) {
		t.Errorf("frames with a good token: %v", err)
	}

	// Expiry on an open stream: the token is checked again with every
	// request, so the stream that served it refuses it once it expired.
	short := c.open(t, "gateway", distash.WithToken(signToken(t, k1, "k1", "app1", 2*time.Second)))
	if err := read(short); err != nil {
		t.Fatalf("read with a token valid 2s: %v", err)
	}
	fBefore, _ := sc.counts()
	wait.Within(t, 10*time.Second, "the token expires on the open stream", func() bool {
		return errors.Is(read(short), distash.ErrPermissionDenied)
	})
	mustDeny(t, read(short), "expired")
	if f, _ := sc.counts(); f != fBefore {
		t.Errorf("%d streams opened while the token expired; want it refused on the stream open", f-fBefore)
	}

	// A revoke applies to an open frames stream.
	tok2 := c.open(t, "gateway", distash.WithToken(signToken(t, k1, "k1", "tok2", time.Hour)))
	if err := read(tok2); err != nil {
		t.Fatalf("read as tok2: %v", err)
	}
	fBefore, _ = sc.counts()
	admin := wire.NewAdminClient(c.conn(t, "alice"))
	if resp, err := admin.Auth(ctx, &wire.AuthRequest{Op: "revoke", Role: "tokens", Identity: "tok2"}); err != nil || resp.Error != nil {
		t.Fatalf("revoke: %v %v", err, resp.GetError())
	}
	wait.Within(t, time.Second, "the revoke reaches the open stream", func() bool {
		return errors.Is(read(tok2), distash.ErrPermissionDenied)
	})
	if f, _ := sc.counts(); f != fBefore {
		t.Errorf("%d streams opened meanwhile; want the revoke applied to the open one", f-fBefore)
	}

	// A token source's new token replaces the stream: root's writes of
	// the data pool, then app1's refused.
	var cur atomic.Value
	cur.Store(signToken(t, k1, "k1", "root", time.Hour))
	src := c.open(t, "gateway", distash.WithTokenSource(func(context.Context) (string, error) { return cur.Load().(string), nil }))
	if err := write(src, "d/by-root"); err != nil {
		t.Fatalf("write as root by token: %v", err)
	}
	fBefore, _ = sc.counts()
	cur.Store(signToken(t, k1, "k1", "app1", time.Hour))
	mustDeny(t, write(src, "d/by-app1"), `"app1" (token)`)
	if f, _ := sc.counts(); f == fBefore {
		t.Error("a new token from the source opened no new stream")
	}

	// WithGRPCDataPath: the token on gRPC streams.
	_, g0 = sc.counts()
	viaGRPC := c.open(t, "gateway", distash.WithToken(signToken(t, k1, "k1", "app1", time.Hour)), distash.WithGRPCDataPath())
	if err := read(viaGRPC); err != nil {
		t.Fatalf("read by token over gRPC: %v", err)
	}
	mustDeny(t, write(viaGRPC, "d/k"), `"app1" (token)`)
	if _, g := sc.counts(); g == g0 {
		t.Error("WithGRPCDataPath opened no gRPC stream")
	}
}

// framesRead opens a ReadStream over frames as the certificate identity
// with authorization in the open frame, reads d/k and returns the error.
func framesRead(t *testing.T, c *authCluster, identity, authorization string) error {
	t.Helper()
	ctx := ctxFor(t)
	cert, key := c.pki.Client(t, identity)
	cfg := clientTLS(t, cert, key, c.pki.CA)
	cfg.NextProtos = nil
	conn, err := tls.Dial("tcp", c.srv.ClusterString(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	st, err := frames.OpenAuthorized(ctx, conn, []byte{frames.RouteByte}, wire.DiStash_ReadStream_FullMethodName, protover.This, authorization)
	if err != nil {
		return err
	}
	defer st.Close()
	rv, err := wire.NewDiStashClient(c.conn(t, "root")).GetReadVersion(ctx, &wire.GetReadVersionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&wire.ReadStreamRequest{Id: 1, Request: &wire.ReadRequest{Version: rv.Version, Keys: [][]byte{[]byte("d/k")}}}); err != nil {
		return err
	}
	resp := new(wire.ReadStreamResponse)
	if err := st.Recv(resp); err != nil {
		return err
	}
	return resp.GetResponse().GetError().Err()
}
