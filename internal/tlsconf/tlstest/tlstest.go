// Package tlstest makes throwaway certificate authorities and certificates
// for tests of mutual TLS, written as PEM files so the tests go through the
// same file loading as the command line.
//
//	pki := tlstest.New(t)
//	srvTLS, err := server.TLSConfigFromFiles(pki.ServerCert, pki.ServerKey, pki.CA)
//	cliTLS, err := distash.TLSConfigFromFiles(pki.ClientCert, pki.ClientKey, pki.CA)
package tlstest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// PKI is a set of PEM files in a temporary directory: a CA, a server and a
// client certificate it signed, and an unrelated CA with a client
// certificate of its own, which the first CA's servers must refuse.
type PKI struct {
	Dir string

	CA                    string // the CA's certificate
	ServerCert, ServerKey string // signed by CA, for 127.0.0.1, ::1 and localhost
	ClientCert, ClientKey string // signed by CA
	// NodeCert, NodeKey: a cluster node's certificate, signed by CA, for
	// 127.0.0.1, ::1 and localhost: both server and client authentication,
	// since a node serves its peers and dials them.
	NodeCert, NodeKey string

	OtherCA                         string // an unrelated CA's certificate
	OtherClientCert, OtherClientKey string // signed by OtherCA
	OtherServerCert, OtherServerKey string // signed by OtherCA, for 127.0.0.1, ::1 and localhost

	ca, otherCA *Authority
}

// New writes a fresh PKI into a temporary directory of t.
func New(t testing.TB) *PKI {
	t.Helper()
	p := &PKI{Dir: t.TempDir()}
	p.ca = NewAuthority(t, p.Dir, "ca")
	p.otherCA = NewAuthority(t, p.Dir, "other-ca")
	p.CA, p.OtherCA = p.ca.CertFile, p.otherCA.CertFile
	p.ServerCert, p.ServerKey = p.ca.Issue(t, "server", true)
	p.ClientCert, p.ClientKey = p.ca.Issue(t, "client", false)
	p.NodeCert, p.NodeKey = p.ca.issue(t, "node", []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth})
	p.OtherClientCert, p.OtherClientKey = p.otherCA.Issue(t, "other-client", false)
	p.OtherServerCert, p.OtherServerKey = p.otherCA.Issue(t, "other-server", true)
	return p
}

// Authority is a CA whose certificate is in CertFile.
type Authority struct {
	Name     string
	CertFile string

	dir  string
	cert *x509.Certificate
	key  crypto.Signer
}

// NewAuthority makes a self-signed CA and writes its certificate to
// dir/name.pem.
func NewAuthority(t testing.TB, dir, name string) *Authority {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: "distash test " + name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	a := &Authority{Name: name, CertFile: filepath.Join(dir, name+".pem"), dir: dir, cert: cert, key: key}
	writePEM(t, a.CertFile, "CERTIFICATE", der)
	return a
}

// Issue signs a new certificate named name — a server's (serverAuth, for
// 127.0.0.1, ::1 and localhost) or a client's (clientAuth) — and writes it
// and its key to dir/name.pem and dir/name-key.pem.
func (a *Authority) Issue(t testing.TB, name string, server bool) (certFile, keyFile string) {
	t.Helper()
	if server {
		return a.issue(t, name, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth})
	}
	return a.issue(t, name, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth})
}

// issue signs a certificate with the given extended key usages; one for
// server authentication names the loopback addresses.
func (a *Authority) issue(t testing.TB, name string, usages []x509.ExtKeyUsage) (certFile, keyFile string) {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  usages,
	}
	for _, u := range usages {
		if u == x509.ExtKeyUsageServerAuth {
			tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
			tmpl.DNSNames = []string{"localhost"}
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, key.Public(), a.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(a.dir, name+".pem"), filepath.Join(a.dir, name+"-key.pem")
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "PRIVATE KEY", keyDER)
	return certFile, keyFile
}

// newKey makes a P-256 key: fast to generate, so tests stay quick.
func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func writePEM(t testing.TB, file, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// Client signs a client certificate (clientAuth) whose subject's common
// name is name, with the PKI's CA, and returns its files.
func (p *PKI) Client(t testing.TB, name string) (certFile, keyFile string) {
	t.Helper()
	return p.ca.Issue(t, name, false)
}
