package server

import (
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"

	"github.com/distash/distash/internal/tlsconf"
)

// TLSConfigFromFiles returns a server TLS configuration for Options.TLS:
// the cluster presents the certificate in certFile (with its private key in
// keyFile) and accepts only clients that present a certificate a CA in
// caFile signed (tls.RequireAndVerifyClientCert, TLS 1.2 or newer). Errors
// name the file at fault.
//
// The files are re-read at the first handshake after one of them changes,
// so certificates can be rotated without a restart; if the new files do not
// load, the previous certificates stay in use and the failure is logged to
// slog.Default().
func TLSConfigFromFiles(certFile, keyFile, caFile string) (*tls.Config, error) {
	return tlsconf.Server(tlsconf.Files{Cert: certFile, Key: keyFile, CA: caFile}, func(err error) {
		slog.Default().Error("reloading TLS certificates failed", "err", err)
	})
}

// logRejected logs a refused TLS handshake: the client only sees its
// connection closed (often as "broken pipe"), so without this an operator
// could not tell a client with a certificate of the wrong CA from a
// network fault.
func (s *Server) logRejected(remote net.Addr, err error) {
	// io.EOF: closed before a word, as TCP health checks do; not worth a warning.
	if !errors.Is(err, io.EOF) {
		s.logger.Warn("refused a connection: TLS handshake failed", "remote", remote.String(), "err", err)
	}
}

// warnIfExposed warns when the cluster listens beyond the loopback
// interface without mutual TLS: every connected client may read, write and
// clear every key of every pool (there is no per-user authorization), so
// the port itself is the only protection.
func (s *Server) warnIfExposed(lis net.Listener) {
	addr, _ := lis.Addr().(*net.TCPAddr)
	if addr != nil && addr.IP.IsLoopback() {
		return
	}
	s.warnTLS(s.opts.TLS, lis.Addr().String())
}

// warnTLS is warnIfExposed's warning for a node listening on addr with
// server configuration t.
func (s *Server) warnTLS(t *tls.Config, addr string) {
	switch {
	case t == nil:
		s.logger.Warn("WARNING: serving without TLS on a non-loopback address: anyone who can reach this port can read, write and clear every key of every pool. "+
			"Enable mutual TLS (distash server --tls-cert F --tls-key F --tls-ca F, or server.Options.TLS; see docs/security.md) or listen on 127.0.0.1",
			"addr", addr)
	case t.GetConfigForClient == nil && t.ClientAuth != tls.RequireAndVerifyClientCert:
		s.logger.Warn("WARNING: TLS does not require verified client certificates (tls.RequireAndVerifyClientCert): anyone who can reach this port can read, write and clear every key of every pool. See docs/security.md",
			"addr", addr)
	}
}
