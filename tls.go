package distash

import (
	"crypto/tls"

	"github.com/distash/distash/internal/tlsconf"
)

// Option configures Open.
type Option func(*openOptions)

type openOptions struct {
	tls *tls.Config
}

// WithTLS makes Open connect over TLS with config, which should hold the
// client's certificate (Certificates) and the CA that signed the cluster's
// (RootCAs): a cluster started with TLS accepts only clients whose
// certificate its CA signed. TLSConfigFromFiles builds such a config from
// PEM files. A nil config means plaintext, as without the option.
func WithTLS(config *tls.Config) Option {
	return func(o *openOptions) { o.tls = config }
}

// TLSConfigFromFiles returns a client TLS configuration for WithTLS: the
// client presents the certificate in certFile (with its private key in
// keyFile) and trusts only servers whose certificate a CA in caFile signed.
// Errors name the file at fault. The files are read once, now.
func TLSConfigFromFiles(certFile, keyFile, caFile string) (*tls.Config, error) {
	return tlsconf.Client(tlsconf.Files{Cert: certFile, Key: keyFile, CA: caFile})
}
