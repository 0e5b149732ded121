package main

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"strings"

	"github.com/spf13/pflag"

	"github.com/distash/distash"
	"github.com/distash/distash/internal/tlsconf"
)

// tlsFlags are --tls-cert, --tls-key and --tls-ca, shared by the commands
// that serve or connect to a cluster.
type tlsFlags struct {
	cert, key, ca string
}

// add registers the flags. With env, $DISTASH_TLS_CERT, $DISTASH_TLS_KEY and
// $DISTASH_TLS_CA give their defaults (for clients: the server takes its
// files only from flags, so a client's environment never turns into a
// server's identity).
func (f *tlsFlags) add(fs *pflag.FlagSet, role string, env bool) {
	def := func(name string) (string, string) {
		if !env {
			return "", ""
		}
		return envOr(name, ""), " (env " + name + ")"
	}
	d, e := def("DISTASH_TLS_CERT")
	fs.StringVar(&f.cert, "tls-cert", d, "PEM certificate this "+role+" presents (mutual TLS; with --tls-key and --tls-ca)"+e)
	d, e = def("DISTASH_TLS_KEY")
	fs.StringVar(&f.key, "tls-key", d, "PEM private key of --tls-cert"+e)
	d, e = def("DISTASH_TLS_CA")
	fs.StringVar(&f.ca, "tls-ca", d, "PEM CA certificate(s) that must have signed the other end's certificate"+e)
}

// enabled reports whether the flags ask for TLS; an error names the flags
// missing when only some are given.
func (f *tlsFlags) enabled() (bool, error) {
	ok, err := tlsconf.Files{Cert: f.cert, Key: f.key, CA: f.ca}.Enabled()
	if err != nil {
		var missing []string
		for _, m := range []struct{ flag, val string }{{"--tls-cert", f.cert}, {"--tls-key", f.key}, {"--tls-ca", f.ca}} {
			if m.val == "" {
				missing = append(missing, m.flag)
			}
		}
		return false, fmt.Errorf("--tls-cert, --tls-key and --tls-ca must be given together; missing %s", strings.Join(missing, ", "))
	}
	return ok, nil
}

// client returns the client configuration, nil without TLS.
func (f *tlsFlags) client() (*tls.Config, error) {
	if ok, err := f.enabled(); !ok {
		return nil, err
	}
	return distash.TLSConfigFromFiles(f.cert, f.key, f.ca)
}

// server returns the server configuration, nil without TLS. It re-reads
// the files when they change (see server.TLSConfigFromFiles) and logs a
// failed reload to the logger logger returns then (the server's, once it
// runs).
func (f *tlsFlags) server(logger func() *slog.Logger) (*tls.Config, error) {
	if ok, err := f.enabled(); !ok {
		return nil, err
	}
	return tlsconf.Server(tlsconf.Files{Cert: f.cert, Key: f.key, CA: f.ca}, func(err error) {
		logger().Error("reloading TLS certificates failed", "err", err)
	})
}

// tlsHint adds a hint to err when a plaintext connection failed the way it
// does against a cluster that serves TLS: the server hangs up before gRPC's
// preface, which by itself does not suggest TLS.
func tlsHint(err error, tlsConfig *tls.Config) error {
	if tlsConfig == nil && strings.Contains(err.Error(), "server preface") {
		return fmt.Errorf("%w (if the cluster serves TLS, give --tls-cert, --tls-key and --tls-ca)", err)
	}
	return err
}
