package authz

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// TokenKeys are the public keys whose bearer tokens (JWT) a cluster
// accepts ([auth] token_keys). Each entry is a PEM file of one public key
// (PKIX "PUBLIC KEY": Ed25519, ECDSA or RSA) whose name without its
// extension is the key's id, the tokens' "kid"; or a directory, whose
// *.pem files are such keys. The files are looked at again at most once a
// keyReload interval and reread when one changed (name, size, time), so
// keys rotate without a restart: add the new key's file, sign with it,
// remove the old one. Keys that fail to load keep the previous set in
// force (the error is reported by Err).
type TokenKeys struct {
	entries []string
	now     func() time.Time

	mu      sync.Mutex
	checked time.Time // Protected by mu: when the files were last looked at.
	stamp   string    // Protected by mu: what they looked like then.
	keys    map[string]crypto.PublicKey
	gen     uint64 // Protected by mu: counts the reloads of keys.
	err     error
	cache   map[string]cachedToken // Protected by mu: verified tokens, while keys stay.
}

type cachedToken struct {
	subject string
	expires time.Time
}

// keyReload is how often the key files are looked at.
const keyReload = time.Second

// maxCachedTokens bounds the verified tokens remembered.
const maxCachedTokens = 4096

// NewTokenKeys loads the keys of entries; an error names the file.
func NewTokenKeys(entries []string) (*TokenKeys, error) {
	k := &TokenKeys{entries: entries, now: time.Now}
	stamp, keys, err := k.load()
	if err != nil {
		return nil, err
	}
	k.stamp, k.keys, k.checked = stamp, keys, k.now()
	return k, nil
}

// files lists the key files of the entries, sorted.
func (k *TokenKeys) files() ([]string, error) {
	var out []string
	for _, e := range k.entries {
		fi, err := os.Stat(e)
		if err != nil {
			return nil, fmt.Errorf("token key %s: %w", e, err)
		}
		if !fi.IsDir() {
			out = append(out, e)
			continue
		}
		m, err := filepath.Glob(filepath.Join(e, "*.pem"))
		if err != nil {
			return nil, err
		}
		out = append(out, m...)
	}
	sort.Strings(out)
	return out, nil
}

// stampOf describes files by name, size and modification time.
func stampOf(files []string) (string, error) {
	var b strings.Builder
	for _, f := range files {
		fi, err := os.Stat(f)
		if err != nil {
			return "", fmt.Errorf("token key %s: %w", f, err)
		}
		fmt.Fprintf(&b, "%s %d %d\n", f, fi.Size(), fi.ModTime().UnixNano())
	}
	return b.String(), nil
}

func (k *TokenKeys) load() (string, map[string]crypto.PublicKey, error) {
	files, err := k.files()
	if err != nil {
		return "", nil, err
	}
	stamp, err := stampOf(files)
	if err != nil {
		return "", nil, err
	}
	keys := map[string]crypto.PublicKey{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", nil, fmt.Errorf("token key %s: %w", f, err)
		}
		blk, _ := pem.Decode(b)
		if blk == nil || blk.Type != "PUBLIC KEY" {
			return "", nil, fmt.Errorf("token key %s: no PEM PUBLIC KEY block (openssl pkey -pubout writes one)", f)
		}
		pub, err := x509.ParsePKIXPublicKey(blk.Bytes)
		if err != nil {
			return "", nil, fmt.Errorf("token key %s: %w", f, err)
		}
		switch pub.(type) {
		case ed25519.PublicKey, *ecdsa.PublicKey, *rsa.PublicKey:
		default:
			return "", nil, fmt.Errorf("token key %s: a %T key; want Ed25519, ECDSA or RSA", f, pub)
		}
		kid := strings.TrimSuffix(filepath.Base(f), filepath.Ext(f))
		if _, dup := keys[kid]; dup {
			return "", nil, fmt.Errorf("token key %s: a second key with id %q", f, kid)
		}
		keys[kid] = pub
	}
	return stamp, keys, nil
}

// refresh rereads the keys if the files changed (at most once per
// keyReload). Called with mu held.
func (k *TokenKeys) refresh() {
	now := k.now()
	if now.Sub(k.checked) < keyReload {
		return
	}
	k.checked = now
	files, err := k.files()
	var stamp string
	if err == nil {
		stamp, err = stampOf(files)
	}
	if err == nil && stamp == k.stamp {
		return
	}
	var keys map[string]crypto.PublicKey
	if err == nil {
		stamp, keys, err = k.load()
	}
	if err != nil {
		k.err = err // the keys loaded last stay in force
		return
	}
	k.stamp, k.keys, k.err = stamp, keys, nil
	k.gen++
	k.cache = nil
}

// Err is the error of the last reload of the key files; nil when they
// loaded.
func (k *TokenKeys) Err() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.err
}

// Errors of Verify.
var (
	ErrTokenUnknownKey = errors.New("signed with a key the cluster does not trust (unknown kid)")
	ErrTokenExpired    = errors.New("expired")
)

// Verify checks tok — signature by a trusted key named by its kid,
// expiry (exp required), not-before — and returns its subject.
func (k *TokenKeys) Verify(tok string) (string, error) {
	k.mu.Lock()
	k.refresh()
	now := k.now()
	if c, ok := k.cache[tok]; ok {
		k.mu.Unlock()
		if !now.Before(c.expires) {
			return "", fmt.Errorf("token %w at %s", ErrTokenExpired, c.expires.UTC().Format(time.RFC3339))
		}
		return c.subject, nil
	}
	keys, gen := k.keys, k.gen
	k.mu.Unlock()

	var claims jwt.RegisteredClaims
	_, err := jwt.ParseWithClaims(tok, &claims, func(t *jwt.Token) (any, error) {
		kid, _ := t.Header["kid"].(string)
		key, ok := keys[kid]
		if !ok {
			return nil, fmt.Errorf("kid %q: %w", kid, ErrTokenUnknownKey)
		}
		if !methodFits(t.Method, key) {
			return nil, fmt.Errorf("algorithm %s does not match key %q", t.Method.Alg(), kid)
		}
		return key, nil
	}, jwt.WithExpirationRequired(), jwt.WithTimeFunc(k.now),
		jwt.WithValidMethods([]string{"EdDSA", "ES256", "ES384", "ES512", "RS256", "RS384", "RS512", "PS256", "PS384", "PS512"}))
	switch {
	case errors.Is(err, ErrTokenUnknownKey):
		return "", fmt.Errorf("token refused: %w", ErrTokenUnknownKey)
	case errors.Is(err, jwt.ErrTokenExpired):
		return "", fmt.Errorf("token %w", ErrTokenExpired)
	case err != nil:
		return "", fmt.Errorf("token refused: %v", err)
	case claims.Subject == "":
		return "", errors.New("token refused: no subject (sub)")
	}
	k.mu.Lock()
	if k.cache == nil || len(k.cache) >= maxCachedTokens {
		k.cache = map[string]cachedToken{}
	}
	if gen == k.gen { // not verified with keys replaced meanwhile
		k.cache[tok] = cachedToken{subject: claims.Subject, expires: claims.ExpiresAt.Time}
	}
	k.mu.Unlock()
	return claims.Subject, nil
}

// methodFits reports whether a token's algorithm is one of its key's kind.
func methodFits(m jwt.SigningMethod, key crypto.PublicKey) bool {
	switch key.(type) {
	case ed25519.PublicKey:
		return m == jwt.SigningMethodEdDSA
	case *ecdsa.PublicKey:
		return strings.HasPrefix(m.Alg(), "ES")
	case *rsa.PublicKey:
		return strings.HasPrefix(m.Alg(), "RS") || strings.HasPrefix(m.Alg(), "PS")
	}
	return false
}

// SignToken makes a token for subject valid for ttl, signed with the
// private key in keyFile (PEM, PKCS#8 as openssl genpkey writes) under key
// id kid: what `distash cli auth token` prints.
func SignToken(keyFile, kid, subject string, ttl time.Duration) (string, error) {
	b, err := os.ReadFile(keyFile)
	if err != nil {
		return "", err
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return "", fmt.Errorf("%s: no PEM block", keyFile)
	}
	priv, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return "", fmt.Errorf("%s: %w (want PKCS#8: openssl genpkey)", keyFile, err)
	}
	var m jwt.SigningMethod
	switch p := priv.(type) {
	case ed25519.PrivateKey:
		m = jwt.SigningMethodEdDSA
	case *ecdsa.PrivateKey:
		switch p.Curve.Params().BitSize {
		case 256:
			m = jwt.SigningMethodES256
		case 384:
			m = jwt.SigningMethodES384
		default:
			m = jwt.SigningMethodES512
		}
	case *rsa.PrivateKey:
		m = jwt.SigningMethodRS256
	default:
		return "", fmt.Errorf("%s: a %T key; want Ed25519, ECDSA or RSA", keyFile, priv)
	}
	now := time.Now()
	t := jwt.NewWithClaims(m, jwt.RegisteredClaims{Subject: subject, IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(ttl))})
	t.Header["kid"] = kid
	return t.SignedString(priv)
}
