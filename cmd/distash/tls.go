package main

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"strings"

	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/distash/distash"
	"github.com/distash/distash/internal/clusterstatus"
	"github.com/distash/distash/internal/coordrpc"
	"github.com/distash/distash/internal/protover"
	"github.com/distash/distash/internal/tlsconf"
)

// tlsFlags are --tls-cert, --tls-key and --tls-ca, shared by the commands
// that serve or connect to a cluster.
type tlsFlags struct {
	cert, key, ca string
	// token: `distash cli`'s --token ($DISTASH_TOKEN), a bearer token
	// naming the client on a cluster with [auth] token_keys.
	token string
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

// cliClient is what every `distash cli` verb reaches the cluster with:
// the TLS configuration of --tls-* (nil: plaintext) and the bearer token
// of --token (empty: none). Its methods are the one place these become
// connection options, so no verb can leave the token out.
type cliClient struct {
	tls   *tls.Config
	token string
}

// connect returns the cliClient of the flags.
func (f *tlsFlags) connect() (cliClient, error) {
	c, err := f.client()
	return cliClient{tls: c, token: f.token}, err
}

// perRPC presents the token with every call; nil without one.
func (c cliClient) perRPC() credentials.PerRPCCredentials {
	if c.token == "" {
		return nil
	}
	return distash.TokenCredentials(c.token)
}

// dialOptions are a gRPC connection's: TLS, protocol versions, token.
func (c cliClient) dialOptions() []grpc.DialOption {
	opts := append([]grpc.DialOption{grpc.WithTransportCredentials(clusterstatus.Creds(c.tls))}, protover.This.DialOptions()...)
	if p := c.perRPC(); p != nil {
		opts = append(opts, grpc.WithPerRPCCredentials(p))
	}
	return opts
}

// status are the options of clusterstatus (status, finding the cluster).
func (c cliClient) status() clusterstatus.Options {
	return clusterstatus.Options{TLS: c.tls, PerRPC: c.perRPC()}
}

// coordinators are the options of a client of the coordinators.
func (c cliClient) coordinators() coordrpc.ClientOptions {
	return coordrpc.ClientOptions{TLS: c.tls, PerRPC: c.perRPC()}
}

// db are the options of distash.Open.
func (c cliClient) db() []distash.Option {
	opts := []distash.Option{distash.WithTLS(c.tls)}
	if c.token != "" {
		opts = append(opts, distash.WithToken(c.token))
	}
	return opts
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
