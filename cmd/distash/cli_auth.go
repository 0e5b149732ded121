package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/distash/distash/internal/authz"
	"github.com/distash/distash/internal/wire"
)

// authCmds is `distash cli auth ...`: the cluster's roles (docs/security.md),
// admin only. The request goes to the first address of the cluster string
// that answers (Admin.Auth): a node passes it to the coordinators, an
// embedded cluster applies it itself.
func authCmds(cluster *string, timeout *time.Duration, tlsf *tlsFlags) *cobra.Command {
	send := func(cmd *cobra.Command, req *wire.AuthRequest) error {
		cl, err := tlsf.connect()
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), *timeout)
		defer cancel()
		resp, err := authCall(ctx, *cluster, req, cl.dialOptions()...)
		if err != nil {
			return tlsHint(err, cl.tls)
		}
		printRoles(cmd.OutOrStdout(), resp)
		return nil
	}
	auth := &cobra.Command{
		Use:   "auth grant|revoke|list|role|delete-role",
		Short: "The cluster's roles: who may read, write, see status, administer (docs/security.md; admin only)",
	}
	grant := &cobra.Command{
		Use: "grant ROLE IDENTITY", Short: "Make IDENTITY (a certificate identity or token subject) a member of ROLE", Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return send(cmd, &wire.AuthRequest{Op: "grant", Role: args[0], Identity: args[1]})
		},
	}
	revoke := &cobra.Command{
		Use: "revoke ROLE IDENTITY", Short: "Remove IDENTITY from ROLE", Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return send(cmd, &wire.AuthRequest{Op: "revoke", Role: args[0], Identity: args[1]})
		},
	}
	list := &cobra.Command{
		Use: "list", Short: "Print the roles", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return send(cmd, &wire.AuthRequest{Op: "list"}) },
	}
	var read, write []string
	var st, admin bool
	role := &cobra.Command{
		Use: "role NAME [--read a,b] [--write a] [--status] [--admin]", Args: cobra.ExactArgs(1),
		Short: "Define a role, or replace its permissions (its members stay)",
		RunE: func(cmd *cobra.Command, args []string) error {
			return send(cmd, &wire.AuthRequest{Op: "role", Define: &wire.AuthRole{Name: args[0], Read: read, Write: write, Status: st, Admin: admin}})
		},
	}
	role.Flags().StringSliceVar(&read, "read", nil, "pools the role may read")
	role.Flags().StringSliceVar(&write, "write", nil, "pools the role may write")
	role.Flags().BoolVar(&st, "status", false, "status, status json, /metrics and the console; reads of the system key space")
	role.Flags().BoolVar(&admin, "admin", false, "exclude, include, kill, configure, auth, backup and restore")
	del := &cobra.Command{
		Use: "delete-role NAME", Short: "Delete a role", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return send(cmd, &wire.AuthRequest{Op: "delete-role", Role: args[0]})
		},
	}
	var keyFile, kid, subject string
	var ttl time.Duration
	tok := &cobra.Command{
		Use: "token --key FILE --subject NAME [--kid ID] [--ttl 1h]", Args: cobra.NoArgs,
		Short: "Print a bearer token (JWT) for NAME signed with a private key (made here; the cluster is not asked)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if keyFile == "" || subject == "" {
				return errors.New("auth token: --key and --subject are required")
			}
			if kid == "" {
				kid = strings.TrimSuffix(filepath.Base(keyFile), filepath.Ext(keyFile))
			}
			t, err := authz.SignToken(keyFile, kid, subject, ttl)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), t)
			return nil
		},
	}
	tok.Flags().StringVar(&keyFile, "key", "", "private key file (PEM, PKCS#8: openssl genpkey)")
	tok.Flags().StringVar(&kid, "kid", "", "key id: the name of the public key's file in [auth] token_keys without .pem (default: the key file's name without its extension)")
	tok.Flags().StringVar(&subject, "subject", "", "the identity the token names (its sub)")
	tok.Flags().DurationVar(&ttl, "ttl", time.Hour, "how long the token is valid")
	auth.AddCommand(grant, revoke, list, role, del, tok)
	return auth
}

// authCall sends req to the addresses of cluster in turn until one
// answers.
func authCall(ctx context.Context, cluster string, req *wire.AuthRequest, opts ...grpc.DialOption) (*wire.AuthResponse, error) {
	var last error
	for _, addr := range strings.Split(cluster, ",") {
		if addr = strings.TrimSpace(addr); addr == "" {
			continue
		}
		conn, err := grpc.NewClient(addr, opts...)
		if err != nil {
			return nil, err
		}
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		resp, err := wire.NewAdminClient(conn).Auth(actx, req, grpc.WaitForReady(true))
		cancel()
		conn.Close()
		switch status.Code(err) {
		case codes.OK:
			return resp, rpcErr(nil, resp.GetError())
		case codes.Unimplemented:
			return nil, fmt.Errorf("%s does not serve `distash cli auth` (a node of an older version?)", addr)
		case codes.PermissionDenied:
			return nil, errors.New(status.Convert(err).Message())
		}
		last = fmt.Errorf("auth via %s: %w", addr, err)
	}
	if last == nil {
		last = errors.New("no cluster address")
	}
	return nil, last
}

func printRoles(out io.Writer, resp *wire.AuthResponse) {
	if !resp.Enabled {
		fmt.Fprintln(out, "trusted-network mode: the cluster has no [auth], every connection may do everything")
		return
	}
	for _, r := range authz.RolesFromWire(resp.Roles) {
		fmt.Fprintln(out, r.String())
	}
}
