package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/distash/distash/config"
	"github.com/distash/distash/internal/authz"
	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/raftnet"
	"github.com/distash/distash/internal/shardmap"
	"github.com/distash/distash/internal/wire"
)

// auth is authorization on a cluster with [auth] (docs/security.md): the
// policy in force (the configuration's roles, then the live ones: authlive.go),
// the pools' prefixes, how certificates name clients, and the audit
// log. Nil on a cluster without [auth]: trusted-network mode, where every
// connection may do everything, as before.
type auth struct {
	s      *Server
	field  string // [auth] identity
	pools  *authz.Pools
	policy atomic.Pointer[authz.Policy]
	tokens *authz.TokenKeys // [auth] token_keys; nil: no bearer tokens accepted
	audit  *audit
}

// newAuth returns the authorization of cfg, nil without [auth].
func newAuth(s *Server, cfg *config.Config) *auth {
	if cfg == nil || cfg.Auth == nil {
		return nil
	}
	prefixes := map[string]string{}
	for _, p := range cfg.Pools {
		prefixes[p.Name] = p.Prefix
	}
	a := &auth{s: s, field: cfg.Auth.Identity, pools: authz.NewPools(prefixes)}
	a.policy.Store(authz.NewPolicy(rolesOf(cfg.Auth.Roles)))
	if len(cfg.Auth.TokenKeys) > 0 {
		a.tokens, _ = authz.NewTokenKeys(cfg.Auth.TokenKeys) // checkAuth refused the server's start if they do not load
	}
	a.audit = newAudit(s)
	return a
}

func rolesOf(rs []config.Role) []authz.Role {
	out := make([]authz.Role, len(rs))
	for i, r := range rs {
		out[i] = authz.Role(r)
	}
	return out
}

// authMode is the status's auth field.
func authMode(a *auth) string {
	if a == nil {
		return "trusted-network"
	}
	return "enforced"
}

// errAuthNeedsTLS: identities come from verified certificates (and tokens,
// which must not travel in the clear), and only TLS tells a node's call
// from a client's.
var errAuthNeedsTLS = errors.New("server: [auth] needs TLS (--tls-cert, --tls-key, --tls-ca): identities come from verified client certificates or bearer tokens, and only a node's certificate tells its calls from a client's")

// checkAuth refuses to start a server with [auth] but without TLS, or
// whose token keys do not load.
func checkAuth(cfg *config.Config, tls bool) error {
	if cfg.Auth == nil {
		return nil
	}
	if !tls {
		return errAuthNeedsTLS
	}
	if len(cfg.Auth.TokenKeys) > 0 {
		if _, err := authz.NewTokenKeys(cfg.Auth.TokenKeys); err != nil {
			return fmt.Errorf("server: auth.token_keys: %w", err)
		}
	}
	return nil
}

// identity is the caller of ctx: the subject of its bearer token if it
// presents one (an invalid token is an error), else a node or a client
// named by its certificate, or nobody.
func (a *auth) identity(ctx context.Context) (authz.Identity, error) {
	var certID authz.Identity
	if p, ok := peer.FromContext(ctx); ok {
		switch ai := p.AuthInfo.(type) {
		case credentials.TLSInfo:
			certID = authz.FromTLS(&ai.State, a.field)
		case raftnet.InProcess:
			// A role of this process (the embedded cluster's backup
			// worker): as trusted as a node.
			return authz.Identity{Name: "this-process", Source: "in-process", Node: true}, nil
		}
	}
	md, _ := metadata.FromIncomingContext(ctx)
	auth := md.Get("authorization")
	if len(auth) == 0 {
		return certID, nil
	}
	tok, ok := strings.CutPrefix(auth[0], "Bearer ")
	if !ok {
		return certID, permissionDenied("identity %s: the authorization metadata is not \"Bearer <token>\"", certID)
	}
	if a.tokens == nil {
		return certID, permissionDenied("identity %s presented a bearer token, but the cluster accepts none ([auth] token_keys)", certID)
	}
	sub, err := a.tokens.Verify(strings.TrimSpace(tok))
	if err != nil {
		return certID, permissionDenied("identity %s: %v", certID, err)
	}
	return authz.Identity{Name: sub, Source: "token"}, nil
}

// check decides whether the caller of ctx may make the call req of
// method; a refusal is audited.
func (a *auth) check(ctx context.Context, method string, req any) error {
	id, err := a.identity(ctx)
	if err == nil {
		err = authz.Check(a.policy.Load(), a.pools, id, method, req)
	}
	if err != nil {
		a.audit.refused(id, method, err)
	}
	return err
}

// visibleShards is what the caller of ctx may see of shards (adjacent, in
// key order, as Locations answers them): a pool it may not read is shown
// as one shard over the span asked, served by the team of its first shard,
// so that its split points and the teams of its other parts (which say
// where its data lies and how it is spread) stay hidden, while the client
// still finds a stash for the pool's keys: a read there is refused with
// permission_denied as before, and a grant made later gets the real
// shards on the client's next refresh (the stash answers wrong_shard_server
// for keys it does not own). Nodes, and the system key space, see all.
func (a *auth) visibleShards(ctx context.Context, shards []shardmap.Shard) []shardmap.Shard {
	id, err := a.identity(ctx)
	if err != nil || id.Node {
		return shards // an invalid token was refused before the handler
	}
	p := a.policy.Load()
	out := make([]shardmap.Shard, 0, len(shards))
	hidden := map[int]bool{} // indexes in out of merged shards
	for _, sh := range shards {
		if sh.Pool == "system" || authz.Decide(p, id, wire.DiStash_Locations_FullMethodName, []authz.Need{{Perm: authz.PermRead, Pool: sh.Pool}}) == nil {
			out = append(out, sh)
			continue
		}
		if n := len(out); n > 0 && hidden[n-1] && out[n-1].Pool == sh.Pool {
			out[n-1].End = sh.End
			continue
		}
		hidden[len(out)] = true
		out = append(out, shardmap.Shard{Begin: sh.Begin, End: sh.End, Pool: sh.Pool, Team: sh.Team})
	}
	return out
}

// authorize checks a request of a stream checked per message (a commit or
// read of CommitStream or ReadStream); nil in trusted-network mode.
func (s *Server) authorize(ctx context.Context, method string, req any) error {
	if s.auth == nil {
		return nil
	}
	return s.auth.check(ctx, method, req)
}

// authUnary refuses a unary call the caller may not make: with the
// method's response carrying the permission_denied error when it has an
// error field (so clients see distash.ErrPermissionDenied, as for any
// other refusal), else as gRPC's PermissionDenied.
func (s *Server) authUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := s.auth.check(ctx, info.FullMethod, req); err != nil {
		return refusal(info.FullMethod, err)
	}
	resp, err := handler(ctx, req)
	if err == nil && adminMethods[info.FullMethod] {
		id, _ := s.auth.identity(ctx)
		s.auth.audit.admin(id, info.FullMethod, req, resp)
	}
	if v, ok := resp.(*wire.ViewResponse); ok && err == nil && v.Config != "" {
		resp = s.auth.visibleView(ctx, v)
	}
	return resp, err
}

// visibleView is what the caller of ctx may see of the coordinators'
// view: all of it with status or admin (or as a node); else without the
// cluster's configuration, whose [auth] names every role's members and
// which is also in the system key space. Clients find the roles and the
// stashes in the rest.
func (a *auth) visibleView(ctx context.Context, v *wire.ViewResponse) *wire.ViewResponse {
	id, err := a.identity(ctx)
	if err == nil && authz.Decide(a.policy.Load(), id, wire.Coordinator_View_FullMethodName, []authz.Need{{Perm: authz.PermSystemRead}}) == nil {
		return v
	}
	v = proto.Clone(v).(*wire.ViewResponse)
	v.Config = ""
	return v
}

// authStream refuses a stream the caller may not open; streams checked
// per message open freely, their handlers call authorize on each request.
func (s *Server) authStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if r, ok := authz.RuleOf(info.FullMethod); !ok || !r.PerMessage {
		if err := s.auth.check(ss.Context(), info.FullMethod, nil); err != nil {
			return status.Error(codes.PermissionDenied, err.Error())
		}
	}
	return handler(srv, ss)
}

// refusal is the answer to a refused call of method: its response
// message with err in its error field, or a gRPC PermissionDenied status
// when it has none.
func refusal(method string, err error) (any, error) {
	if resp := errorResponse(method, err); resp != nil {
		return resp, nil
	}
	return nil, status.Error(codes.PermissionDenied, err.Error())
}

// errorResponse builds method's response message with its "error" field
// (a distash.v1.Error) set to err; nil if it has no such field.
func errorResponse(method string, err error) proto.Message {
	svc, name, ok := splitMethod(method)
	if !ok {
		return nil
	}
	d, ferr := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(svc))
	if ferr != nil {
		return nil
	}
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if !ok {
		return nil
	}
	md := sd.Methods().ByName(protoreflect.Name(name))
	if md == nil {
		return nil
	}
	fd := md.Output().Fields().ByName("error")
	if fd == nil || fd.Message() == nil || fd.Message().FullName() != (&wire.Error{}).ProtoReflect().Descriptor().FullName() {
		return nil
	}
	mt, ferr := protoregistry.GlobalTypes.FindMessageByName(md.Output().FullName())
	if ferr != nil {
		return nil
	}
	m := mt.New()
	m.Set(fd, protoreflect.ValueOfMessage(wire.ErrorOf(err).ProtoReflect()))
	return m.Interface()
}

// splitMethod splits "/pkg.Service/Method".
func splitMethod(full string) (svc, name string, ok bool) {
	if len(full) < 3 || full[0] != '/' {
		return "", "", false
	}
	for i := len(full) - 1; i > 0; i-- {
		if full[i] == '/' {
			return full[1:i], full[i+1:], i > 1 && i < len(full)-1
		}
	}
	return "", "", false
}

// adminMethods are the operator calls the audit log records when served.
var adminMethods = map[string]bool{
	wire.Admin_Kill_FullMethodName:            true,
	wire.Admin_Auth_FullMethodName:            true,
	wire.Coordinator_Exclude_FullMethodName:   true,
	wire.Coordinator_Include_FullMethodName:   true,
	wire.Coordinator_Configure_FullMethodName: true,
	wire.Coordinator_Auth_FullMethodName:      true,
	wire.Backup_Start_FullMethodName:          true,
	wire.Backup_Stop_FullMethodName:           true,
}

// permissionDenied is a refusal outside a gRPC method (HTTP).
func permissionDenied(format string, args ...any) error {
	return kv.Errorf(kv.CodePermissionDenied, "%s", fmt.Sprintf(format, args...))
}
