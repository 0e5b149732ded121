package tlsconf_test

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/distash/distash/internal/tlsconf"
	"github.com/distash/distash/internal/tlsconf/tlstest"
)

func TestEnabledNeedsAllThreeFiles(t *testing.T) {
	if ok, err := (tlsconf.Files{}).Enabled(); ok || err != nil {
		t.Fatalf("no files: %v, %v; want false, nil", ok, err)
	}
	if ok, err := (tlsconf.Files{Cert: "c", Key: "k", CA: "a"}).Enabled(); !ok || err != nil {
		t.Fatalf("three files: %v, %v; want true, nil", ok, err)
	}
	_, err := tlsconf.Files{Cert: "c"}.Enabled()
	if err == nil || !strings.Contains(err.Error(), "missing: key, CA") {
		t.Fatalf("only a certificate: %v", err)
	}
	if _, err := tlsconf.Client(tlsconf.Files{Key: "k", CA: "a"}); err == nil || !strings.Contains(err.Error(), "missing: certificate") {
		t.Fatalf("Client without a certificate: %v", err)
	}
}

// TestBadFilesAreNamed: each way a file can be wrong gives an error that
// names that file.
func TestBadFilesAreNamed(t *testing.T) {
	pki := tlstest.New(t)
	garbage := filepath.Join(pki.Dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	badCA := filepath.Join(pki.Dir, "bad-ca.pem")
	if err := os.WriteFile(badCA, []byte("-----BEGIN CERTIFICATE-----\naGVsbG8=\n-----END CERTIFICATE-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(pki.Dir, "missing.pem")
	for _, c := range []struct {
		name  string
		files tlsconf.Files
		want  string // in the error, with the file's name
	}{
		{"missing certificate", tlsconf.Files{Cert: missing, Key: pki.ClientKey, CA: pki.CA}, missing},
		{"missing key", tlsconf.Files{Cert: pki.ClientCert, Key: missing, CA: pki.CA}, missing},
		{"missing CA", tlsconf.Files{Cert: pki.ClientCert, Key: pki.ClientKey, CA: missing}, missing},
		{"certificate not PEM", tlsconf.Files{Cert: garbage, Key: pki.ClientKey, CA: pki.CA}, "certificate file " + garbage},
		{"key not PEM", tlsconf.Files{Cert: pki.ClientCert, Key: garbage, CA: pki.CA}, "key file " + garbage},
		{"key is a certificate", tlsconf.Files{Cert: pki.ClientCert, Key: pki.ClientCert, CA: pki.CA}, "key file " + pki.ClientCert},
		{"CA not PEM", tlsconf.Files{Cert: pki.ClientCert, Key: pki.ClientKey, CA: garbage}, "CA file " + garbage},
		{"CA not a certificate", tlsconf.Files{Cert: pki.ClientCert, Key: pki.ClientKey, CA: badCA}, "CA file " + badCA},
		{"key of another certificate", tlsconf.Files{Cert: pki.ClientCert, Key: pki.ServerKey, CA: pki.CA}, pki.ClientCert + " with key " + pki.ServerKey},
	} {
		_, err := tlsconf.Client(c.files)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error naming %q", c.name, err, c.want)
		}
		_, err = tlsconf.Server(c.files, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s (server): got %v, want an error naming %q", c.name, err, c.want)
		}
	}
}

func TestConfigs(t *testing.T) {
	pki := tlstest.New(t)
	c, err := tlsconf.Client(tlsconf.Files{Cert: pki.ClientCert, Key: pki.ClientKey, CA: pki.CA})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Certificates) != 1 || c.RootCAs == nil || c.MinVersion != tls.VersionTLS12 || c.InsecureSkipVerify {
		t.Fatalf("client config: %+v", c)
	}
	// Presented whatever CAs the server lists, so a refusal names the CA.
	if got, err := c.GetClientCertificate(&tls.CertificateRequestInfo{}); err != nil || got.Leaf.Subject.CommonName != "client" {
		t.Fatalf("client certificate presented: %v, %v", got, err)
	}
	s, err := tlsconf.Server(tlsconf.Files{Cert: pki.ServerCert, Key: pki.ServerKey, CA: pki.CA}, nil)
	if err != nil {
		t.Fatal(err)
	}
	h, err := s.GetConfigForClient(&tls.ClientHelloInfo{})
	if err != nil {
		t.Fatal(err)
	}
	if h.ClientAuth != tls.RequireAndVerifyClientCert || h.ClientCAs == nil || len(h.Certificates) != 1 || h.MinVersion != tls.VersionTLS12 {
		t.Fatalf("server config: %+v", h)
	}
}

// TestServerReloadsChangedFiles: a handshake after the files change gets
// the new certificate; files that do not load leave the old one in use and
// are reported once.
func TestServerReloadsChangedFiles(t *testing.T) {
	pki := tlstest.New(t)
	certFile, keyFile := filepath.Join(pki.Dir, "live.pem"), filepath.Join(pki.Dir, "live-key.pem")
	put := func(dst, src string) {
		t.Helper()
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	put(certFile, pki.ServerCert)
	put(keyFile, pki.ServerKey)
	var reported []error
	s, err := tlsconf.Server(tlsconf.Files{Cert: certFile, Key: keyFile, CA: pki.CA}, func(err error) { reported = append(reported, err) })
	if err != nil {
		t.Fatal(err)
	}
	serving := func() string {
		t.Helper()
		h, err := s.GetConfigForClient(&tls.ClientHelloInfo{})
		if err != nil {
			t.Fatal(err)
		}
		return h.Certificates[0].Leaf.Subject.CommonName
	}
	if got := serving(); got != "server" {
		t.Fatalf("serving %q", got)
	}
	// Half a rotation: the certificate changed, its key not yet.
	put(certFile, pki.OtherServerCert)
	for range 3 {
		if got := serving(); got != "server" {
			t.Fatalf("after a mismatched pair: serving %q", got)
		}
	}
	if len(reported) != 1 || !strings.Contains(reported[0].Error(), certFile) {
		t.Fatalf("reported %v, want one error naming %s", reported, certFile)
	}
	put(keyFile, pki.OtherServerKey)
	if got := serving(); got != "other-server" {
		t.Fatalf("after the rotation: serving %q", got)
	}
}
