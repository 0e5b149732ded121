package server

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/distash/distash/internal/authz"
	"github.com/distash/distash/internal/coord"
	"github.com/distash/distash/internal/fsys"
	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/wire"
)

// Live grants (distash cli auth). A multi-process cluster keeps its roles
// in the coordinators' replicated state (coord.OpAuth): a node passes a
// change on to them and follows their roles (followAuth, every
// authPollInterval), so a change is in force on every node within about a
// second, on connections already open too (every request is checked). An
// embedded cluster, which has no coordinators, keeps them in a file of its
// directory (authFile), written before the change takes effect.

// authFile holds an embedded cluster's roles once changed live: JSON,
// checksummed (fsys.WriteChecked). Without it the configuration's roles
// are in force.
const authFile = "auth-roles.json"

// authPollInterval is how often a node reads the coordinators' roles.
const authPollInterval = 300 * time.Millisecond

// authMu serialises an embedded cluster's changes (read, change, write).
var authMu sync.Mutex

// setRoles puts roles in force.
func (a *auth) setRoles(roles []authz.Role) {
	a.policy.Store(authz.NewPolicy(roles))
}

// loadRoles puts an embedded cluster's roles of authFile in force, if it
// has one.
func (e *embedded) loadRoles() error {
	s := e.s
	if s.auth == nil {
		return nil
	}
	path := filepath.Join(s.opts.Dir, authFile)
	ok, err := fsys.Exists(s.opts.FS, path)
	if err != nil || !ok {
		return err
	}
	b, _, err := fsys.ReadChecked(s.opts.FS, path)
	if err != nil {
		return fmt.Errorf("server: the cluster's roles: %w", err)
	}
	roles, err := authz.Decode(b)
	if err != nil {
		return fmt.Errorf("server: the cluster's roles in %s: %w", path, err)
	}
	s.auth.setRoles(roles)
	return nil
}

// authChange applies or lists (Admin.Auth) an embedded cluster's roles.
func (e *embedded) authChange(_ context.Context, req *wire.AuthRequest) (*wire.AuthResponse, error) {
	s := e.s
	if s.auth == nil {
		return noAuth(req), nil
	}
	authMu.Lock()
	defer authMu.Unlock()
	roles := s.auth.policy.Load().Roles()
	if req.GetOp() != "list" && req.GetOp() != "" {
		next, err := authz.Change(roles, req.Op, req.Role, req.Identity, authz.FromWire(req.Define), func(p string) bool {
			_, ok := s.cfg.PoolByName(p)
			return ok
		})
		if err != nil {
			return &wire.AuthResponse{Enabled: true, Error: wire.ErrorOf(kv.Errorf(kv.CodeInvalidMutation, "%v", err))}, nil
		}
		b, err := authz.Encode(next)
		if err == nil {
			err = fsys.WriteChecked(s.opts.FS, filepath.Join(s.opts.Dir, authFile), b)
		}
		if err != nil {
			return nil, status.Errorf(codes.Internal, "write the cluster's roles: %v", err)
		}
		s.auth.setRoles(next)
		roles = next
	}
	return &wire.AuthResponse{Enabled: true, Roles: authz.ToWire(roles)}, nil
}

// noAuth answers Admin.Auth on a cluster without [auth].
func noAuth(req *wire.AuthRequest) *wire.AuthResponse {
	if req.GetOp() == "list" || req.GetOp() == "" {
		return &wire.AuthResponse{}
	}
	return &wire.AuthResponse{Error: wire.ErrorOf(kv.Errorf(kv.CodeInvalidMutation, "%v", coord.ErrNoAuth))}
}

// authChange passes a change or list (Admin.Auth) to the coordinators and
// puts their answer in force on this node at once.
func (n *node) authChange(ctx context.Context, req *wire.AuthRequest) (*wire.AuthResponse, error) {
	resp, err := n.cc.Auth(ctx, &wire.AuthRequest{Op: req.Op, Role: req.Role, Identity: req.Identity, Define: req.Define})
	if err != nil {
		var ke *kv.Error
		if errors.As(err, &ke) {
			return &wire.AuthResponse{Error: wire.ErrorOf(ke)}, nil
		}
		return nil, status.Errorf(codes.Unavailable, "the coordinators: %v", err)
	}
	if a := n.s.auth; a != nil && resp.Enabled {
		a.setRoles(authz.RolesFromWire(resp.Roles))
	}
	return resp, nil
}

// followAuth keeps this node's roles those of the coordinators, until ctx
// ends.
func (n *node) followAuth(ctx context.Context) {
	a := n.s.auth
	t := time.NewTicker(authPollInterval)
	defer t.Stop()
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := n.cc.Auth(cctx, &wire.AuthRequest{Op: "list"})
		cancel()
		if err == nil && resp.Enabled {
			roles := authz.RolesFromWire(resp.Roles)
			if !slices.EqualFunc(roles, a.policy.Load().Roles(), rolesEqual) {
				a.setRoles(roles)
				n.s.logger.Info("auth: the cluster's roles changed", "roles", len(roles))
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func rolesEqual(a, b authz.Role) bool {
	return a.Name == b.Name && a.Status == b.Status && a.Admin == b.Admin &&
		slices.Equal(a.Members, b.Members) && slices.Equal(a.Read, b.Read) && slices.Equal(a.Write, b.Write)
}
