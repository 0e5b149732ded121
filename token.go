package distash

import (
	"context"

	"google.golang.org/grpc/credentials"
)

// WithToken makes the DB present tok, a bearer token (a JWT signed with a
// key the cluster trusts: [auth] token_keys, docs/security.md), with every
// request: the cluster then names the client by the token's subject
// rather than by its certificate. Tokens travel only over TLS (WithTLS).
// Reads and commits carry it on their frames streams (in each stream's
// open frame) as on gRPC. A token expires: WithTokenSource gives a fresh
// one.
func WithToken(tok string) Option {
	return WithTokenSource(func(context.Context) (string, error) { return tok, nil })
}

// WithTokenSource is WithToken with the token asked of src before each
// request, so that a long-lived DB can renew its token before it expires.
// A read or commit stream opened with an older token is replaced by one
// with the new token (the requests in flight on it finish there).
func WithTokenSource(src func(ctx context.Context) (string, error)) Option {
	return func(o *openOptions) { o.token = src }
}

// bearer are the per-RPC credentials of WithTokenSource: the gRPC
// metadata "authorization: Bearer <token>".
type bearer func(ctx context.Context) (string, error)

func (b bearer) GetRequestMetadata(ctx context.Context, _ ...string) (map[string]string, error) {
	tok, err := b(ctx)
	if err != nil {
		return nil, err
	}
	return map[string]string{"authorization": "Bearer " + tok}, nil
}

// RequireTransportSecurity: a token must not travel in the clear.
func (b bearer) RequireTransportSecurity() bool { return true }

// TokenCredentials are the gRPC per-RPC credentials that present tok as
// WithToken does, for programs (the CLI) that call the cluster's gRPC
// services directly.
func TokenCredentials(tok string) credentials.PerRPCCredentials {
	return bearer(func(context.Context) (string, error) { return tok, nil })
}
