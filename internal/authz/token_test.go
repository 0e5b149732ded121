package authz

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// writeKey makes an Ed25519 key pair: the public key in dir/kid.pem, the
// private key returned.
func writeKey(t *testing.T, dir, kid string) ed25519.PrivateKey {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, kid+".pem"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return priv
}

func sign(t *testing.T, priv ed25519.PrivateKey, kid, sub string, exp time.Time) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, jwt.RegisteredClaims{Subject: sub, ExpiresAt: jwt.NewNumericDate(exp)})
	tok.Header["kid"] = kid
	s, err := tok.SignedString(priv)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestTokens: a token signed by a trusted key names its subject; an
// expired one, one signed by another key under a trusted kid, one of an
// unknown kid and one without expiry are refused; a key added to the
// directory is trusted and a removed one no longer, without a restart.
func TestTokens(t *testing.T) {
	dir := t.TempDir()
	k1 := writeKey(t, dir, "k1")
	now := time.Now()
	keys, err := NewTokenKeys([]string{dir})
	if err != nil {
		t.Fatal(err)
	}
	keys.now = func() time.Time { return now }
	if sub, err := keys.Verify(sign(t, k1, "k1", "app1", now.Add(time.Hour))); err != nil || sub != "app1" {
		t.Fatalf("valid token: %q, %v", sub, err)
	}
	if _, err := keys.Verify(sign(t, k1, "k1", "app1", now.Add(-time.Second))); !errors.Is(err, ErrTokenExpired) {
		t.Errorf("expired token: %v", err)
	}
	_, other, _ := ed25519.GenerateKey(rand.Reader)
	if _, err := keys.Verify(sign(t, other, "k1", "app1", now.Add(time.Hour))); err == nil || !strings.Contains(err.Error(), "signature") {
		t.Errorf("wrongly signed token: %v", err)
	}
	if _, err := keys.Verify(sign(t, k1, "k9", "app1", now.Add(time.Hour))); !errors.Is(err, ErrTokenUnknownKey) {
		t.Errorf("unknown kid: %v", err)
	}
	noExp := jwt.NewWithClaims(jwt.SigningMethodEdDSA, jwt.RegisteredClaims{Subject: "app1"})
	noExp.Header["kid"] = "k1"
	s, _ := noExp.SignedString(k1)
	if _, err := keys.Verify(s); err == nil {
		t.Error("a token without exp was accepted")
	}
	// A cached token still expires.
	valid := sign(t, k1, "k1", "app1", now.Add(time.Minute))
	if _, err := keys.Verify(valid); err != nil {
		t.Fatal(err)
	}
	now = now.Add(2 * time.Minute)
	if _, err := keys.Verify(valid); !errors.Is(err, ErrTokenExpired) {
		t.Errorf("a cached token after its expiry: %v", err)
	}

	// Rotation: k2 added, then k1 removed.
	k2 := writeKey(t, dir, "k2")
	t2 := sign(t, k2, "k2", "app2", now.Add(time.Hour))
	if _, err := keys.Verify(t2); !errors.Is(err, ErrTokenUnknownKey) {
		t.Fatalf("k2 before the reload: %v", err)
	}
	now = now.Add(keyReload)
	if sub, err := keys.Verify(t2); err != nil || sub != "app2" {
		t.Fatalf("k2 after the reload: %q, %v", sub, err)
	}
	t1 := sign(t, k1, "k1", "app1", now.Add(time.Hour))
	if _, err := keys.Verify(t1); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(dir, "k1.pem"))
	now = now.Add(keyReload)
	if _, err := keys.Verify(t1); !errors.Is(err, ErrTokenUnknownKey) {
		t.Errorf("k1 after its removal: %v", err)
	}
	// A broken file keeps the keys in force and says why.
	os.WriteFile(filepath.Join(dir, "k3.pem"), []byte("garbage"), 0o600)
	now = now.Add(keyReload)
	if _, err := keys.Verify(t2); err != nil {
		t.Errorf("k2 with a broken file beside it: %v", err)
	}
	if keys.Err() == nil || !strings.Contains(keys.Err().Error(), "k3.pem") {
		t.Errorf("Err: %v", keys.Err())
	}
}
