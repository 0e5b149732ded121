// Package tlsconf loads the PEM files of DiStash's mutual TLS — a
// certificate, its private key and a CA bundle — into tls.Configs for both
// ends of a connection. It is the one loader behind distash.TLSConfigFromFiles,
// server.TLSConfigFromFiles and the command line's --tls-* flags (and, later,
// the links between nodes), so every side reports bad files the same way.
package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

// Files names the three PEM files of one end of a mutual-TLS connection.
type Files struct {
	Cert string // this end's certificate (chain), leaf first
	Key  string // its private key
	CA   string // the CA certificate(s) that sign the other end's certificates
}

// Enabled reports whether TLS is configured: false when no file is named,
// true when all three are, an error naming the missing ones otherwise
// (half a configuration must not silently fall back to plaintext).
func (f Files) Enabled() (bool, error) {
	var missing []string
	for _, m := range []struct{ name, file string }{{"certificate", f.Cert}, {"key", f.Key}, {"CA", f.CA}} {
		if m.file == "" {
			missing = append(missing, m.name)
		}
	}
	switch len(missing) {
	case 0:
		return true, nil
	case 3:
		return false, nil
	}
	return false, fmt.Errorf("tls: a certificate, its key and a CA file go together; missing: %s", strings.Join(missing, ", "))
}

// material is what the files hold, parsed.
type material struct {
	cert tls.Certificate
	cas  *x509.CertPool
}

// load reads and checks the three files; errors name the file at fault.
func load(f Files) (*material, error) {
	if ok, err := f.Enabled(); err != nil {
		return nil, err
	} else if !ok {
		return nil, errors.New("tls: no certificate, key or CA file given")
	}
	certPEM, err := readPEM(f.Cert, "certificate", "CERTIFICATE")
	if err != nil {
		return nil, err
	}
	keyPEM, err := readPEM(f.Key, "key", "PRIVATE KEY")
	if err != nil {
		return nil, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("tls: certificate %s with key %s: %w", f.Cert, f.Key, err)
	}
	// An expired certificate would fail every handshake with an error that
	// names neither end's files; say it at load time instead.
	if now := time.Now(); cert.Leaf != nil && now.After(cert.Leaf.NotAfter) {
		return nil, fmt.Errorf("tls: certificate %s expired on %s", f.Cert, cert.Leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	caPEM, err := readPEM(f.CA, "CA", "CERTIFICATE")
	if err != nil {
		return nil, err
	}
	cas := x509.NewCertPool()
	for i, rest := 0, caPEM; ; i++ {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("tls: CA file %s: certificate %d: %w", f.CA, i+1, err)
		}
		cas.AddCert(c)
	}
	return &material{cert: cert, cas: cas}, nil
}

// readPEM reads file and checks that it holds a PEM block whose type ends
// in wantType ("PRIVATE KEY" matches RSA, EC and PKCS#8 keys).
func readPEM(file, role, wantType string) ([]byte, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("tls: read %s file: %w", role, err)
	}
	for rest := data; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		if strings.HasSuffix(b.Type, wantType) {
			return data, nil
		}
	}
	return nil, fmt.Errorf("tls: %s file %s holds no PEM %q block", role, file, wantType)
}

// Client returns the configuration of a connecting end: it presents the
// certificate and accepts only servers whose certificate the CA signed (and
// whose name or IP address matches the one dialled). The files are read
// once; reconnecting with a new Config picks up rotated files.
func Client(f Files) (*tls.Config, error) {
	m, err := load(f)
	if err != nil {
		return nil, err
	}
	cert := m.cert
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		// Present the certificate even when the server's list of acceptable
		// CAs does not name its issuer (Go would send none): the server then
		// refuses it for what it is, "unknown certificate authority", on both
		// ends, instead of "client didn't provide a certificate".
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil },
		RootCAs:              m.cas,
		MinVersion:           tls.VersionTLS12, // TLS 1.3 is negotiated when both ends have it
	}, nil
}

// Server returns the configuration of a listening end: it presents the
// certificate and accepts only clients that present one the CA signed.
//
// The files are re-read at the first handshake after any of them changes
// (size or modification time), so certificates rotate without a restart;
// connections already open keep the certificates they were made with. If
// the changed files do not load (say the certificate was replaced and its
// key not yet), handshakes go on with the previous certificates and
// onReloadError, if not nil, is called once per change.
func Server(f Files, onReloadError func(error)) (*tls.Config, error) {
	r := &reloader{files: f, onError: onReloadError}
	// Stamp before reading: a change in between is then seen as a change.
	r.stamps = stampsOf(f)
	r.tried = r.stamps
	m, err := load(f)
	if err != nil {
		return nil, err
	}
	r.current = serverConfig(m)
	return &tls.Config{
		// These fields state the policy for code that inspects the
		// Config; handshakes use the Config GetConfigForClient returns.
		ClientAuth: tls.RequireAndVerifyClientCert,
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return r.config(), nil
		},
	}, nil
}

func serverConfig(m *material) *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{m.cert},
		ClientCAs:    m.cas,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS12,
		// A resumed session skips the client's certificate chain; without
		// tickets every connection is checked against the current CA
		// bundle, so removing a CA takes effect for new connections.
		// Clients hold few, long-lived connections, so this costs little.
		SessionTicketsDisabled: true,
	}
}

// reloader holds the server's current certificates and re-reads the files
// when they change.
type reloader struct {
	files   Files
	onError func(error)

	mu      sync.Mutex
	stamps  [3]stamp // of the files current was loaded from
	tried   [3]stamp // of the files last tried, to report a failure once
	current *tls.Config
}

// stamp identifies a version of a file cheaply.
type stamp struct {
	size    int64
	modTime time.Time
	err     bool
}

func stampsOf(f Files) [3]stamp {
	var s [3]stamp
	for i, name := range []string{f.Cert, f.Key, f.CA} {
		fi, err := os.Stat(name)
		if err != nil {
			s[i] = stamp{err: true}
			continue
		}
		s[i] = stamp{size: fi.Size(), modTime: fi.ModTime()}
	}
	return s
}

func (r *reloader) config() *tls.Config {
	// Three stats per handshake: clients keep their connections, so
	// handshakes are rare.
	now := stampsOf(r.files)
	r.mu.Lock()
	defer r.mu.Unlock()
	if now == r.stamps || now == r.tried {
		return r.current
	}
	r.tried = now // stamped before reading, as in Server
	m, err := load(r.files)
	if err != nil {
		if r.onError != nil {
			r.onError(fmt.Errorf("%w (still using the certificates loaded before)", err))
		}
		return r.current
	}
	r.stamps = now
	r.current = serverConfig(m)
	return r.current
}

// IsNodeCert reports whether cert is a cluster node's certificate: one
// that allows server authentication (a node serves its peers, so every
// node's certificate must). A client's certificate allows only client
// authentication (docs/security.md), so this tells the two apart on
// connections whose handshake already checked the CA.
func IsNodeCert(cert *x509.Certificate) bool {
	return cert != nil && slices.Contains(cert.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
}

// RequireNodePeer returns nil when the peer of a verified TLS connection
// presented a node's certificate (IsNodeCert), else an error saying what
// it presented.
func RequireNodePeer(st tls.ConnectionState) error {
	if len(st.PeerCertificates) == 0 {
		return errors.New("no certificate: only cluster nodes may connect here")
	}
	c := st.PeerCertificates[0]
	if !IsNodeCert(c) {
		return fmt.Errorf("certificate %q is not a node's (its extendedKeyUsage lacks serverAuth): only cluster nodes may connect here", c.Subject.CommonName)
	}
	return nil
}
