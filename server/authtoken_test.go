package server_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/distash/distash"
)

// TestAuthTokens: a client whose certificate names nobody with a grant
// presents a bearer token: it is served as the token's subject; expired,
// wrongly signed and unknown-key tokens are refused with
// permission_denied; a key added to token_keys' directory is trusted
// without a restart.
func TestAuthTokens(t *testing.T) {
	keyDir := t.TempDir()
	newKey := func(kid string) ed25519.PrivateKey {
		pub, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		der, _ := x509.MarshalPKIXPublicKey(pub)
		if err := os.WriteFile(filepath.Join(keyDir, kid+".pem"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return priv
	}
	k1 := newKey("k1")
	c := startAuthCluster(t, fmt.Sprintf("token_keys = [%q]\n", keyDir), "")
	ctx := ctxFor(t)
	sign := func(priv ed25519.PrivateKey, kid, sub string, ttl time.Duration) string {
		tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, jwt.RegisteredClaims{Subject: sub, ExpiresAt: jwt.NewNumericDate(time.Now().Add(ttl))})
		tok.Header["kid"] = kid
		s, err := tok.SignedString(priv)
		if err != nil {
			t.Fatal(err)
		}
		return s
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
	waitFor(t, 3*time.Second, func() error {
		db, err := distash.Open(ctx, c.srv.ClusterString(), distash.WithTLS(clientTLS(t, cert, key, c.pki.CA)), distash.WithToken(sign(k2, "k2", "app1", time.Hour)))
		if err != nil {
			return err
		}
		defer db.Close()
		return read(db)
	})
}
