package distash

import (
	"context"
	"crypto/tls"
	"net"

	"github.com/distash/distash/internal/tlsconf"
)

// Option configures Open.
type Option func(*openOptions)

type openOptions struct {
	tls    *tls.Config
	dialer func(ctx context.Context, addr string) (net.Conn, error)
	dc     string // WithDC (cluster_dc.go)
	// grpcDataPath: WithGRPCDataPath.
	grpcDataPath bool
	// token: WithToken, WithTokenSource (token.go).
	token func(ctx context.Context) (string, error)
}

// WithGRPCDataPath makes the DB send its reads and commits on gRPC streams
// instead of the frames protocol (internal/frames), the leaner transport
// it uses by default: to compare the two, or to get through a proxy that
// only passes HTTP/2. The client falls back to gRPC by itself for a node
// that does not speak frames (a server of an older version).
func WithGRPCDataPath() Option {
	return func(o *openOptions) { o.grpcDataPath = true }
}

// WithDialer makes the DB open every connection it makes (to the
// coordinators, the stateless node, the stash nodes) with dial instead of
// TCP: a custom transport, such as an in-process network in tests or a
// proxy. dial gets the address to reach as the cluster names it (an entry
// of the cluster string, a node's listen address), unresolved; TLS, if
// WithTLS is given too, runs over the connection it returns. A nil dial
// means TCP, as without the option.
func WithDialer(dial func(ctx context.Context, addr string) (net.Conn, error)) Option {
	return func(o *openOptions) { o.dialer = dial }
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
