package authz

import (
	"crypto/tls"
	"crypto/x509"

	"github.com/distash/distash/internal/tlsconf"
)

// Identity fields a client certificate may be named by ([auth] identity).
const (
	FieldCN     = "cn"
	FieldSANURI = "san-uri"
	FieldSANDNS = "san-dns"
)

// CertName is the name field gives the certificate: its subject's common
// name, or its first URI or DNS subject alternative name ("" if it has
// none).
func CertName(c *x509.Certificate, field string) string {
	switch field {
	case FieldSANURI:
		if len(c.URIs) > 0 {
			return c.URIs[0].String()
		}
		return ""
	case FieldSANDNS:
		if len(c.DNSNames) > 0 {
			return c.DNSNames[0]
		}
		return ""
	}
	return c.Subject.CommonName
}

// FromTLS is the identity of a verified TLS peer: a node (its certificate
// allows server authentication) or a client named by field. A connection
// without a peer certificate has the empty identity.
func FromTLS(st *tls.ConnectionState, field string) Identity {
	if st == nil || len(st.PeerCertificates) == 0 {
		return Identity{}
	}
	c := st.PeerCertificates[0]
	return Identity{Name: CertName(c, field), Source: "certificate", Node: tlsconf.IsNodeCert(c)}
}
