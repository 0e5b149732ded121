package server_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/distash/distash"
	"github.com/distash/distash/config"
	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/testutil/wait"
	"github.com/distash/distash/internal/tlsconf/tlstest"
	"github.com/distash/distash/internal/wire"
	"github.com/distash/distash/server"
)

// authConfig: three pools and the roles of docs/security.md's example: an
// app that may read and write the cache and only read the data, an
// operator, a monitoring identity, and an owner of everything (to look at
// the state the others could not change).
const authConfig = `
[[pool]]
name = "cache"
prefix = "c/"
medium = "dram"
mode = "ephemeral"
engine = "memory"
capacity = "4MiB"

[[pool]]
name = "data"
prefix = "d/"
medium = "dram"
mode = "ephemeral"
engine = "memory"
capacity = "4MiB"

[[pool]]
name = "logs"
prefix = "l/"
medium = "dram"
mode = "ephemeral"
engine = "memory"
capacity = "4MiB"

[auth]
identity = "cn"

[[auth.role]]
name = "shop"
members = ["app1"]
read = ["cache", "data"]
write = ["cache"]

[[auth.role]]
name = "operator"
members = ["alice"]
admin = true

[[auth.role]]
name = "monitoring"
members = ["prom"]
status = true

[[auth.role]]
name = "owner"
members = ["root"]
read = ["cache", "data", "logs"]
write = ["cache", "data", "logs"]
`

// authCluster is an embedded cluster over mutual TLS with authConfig.
type authCluster struct {
	srv  *server.Server
	pki  *tlstest.PKI
	logs *syncBuffer
}

// startAuthCluster starts it; authKeys go in [auth], extra after the roles.
func startAuthCluster(t *testing.T, authKeys, extra string) *authCluster {
	t.Helper()
	return startAuthClusterWith(t, authKeys, extra, nil)
}

// startAuthClusterWith is startAuthCluster with mod applied to the
// server's options (nil: none).
func startAuthClusterWith(t *testing.T, authKeys, extra string, mod func(*server.Options)) *authCluster {
	t.Helper()
	pki := tlstest.New(t)
	srvTLS, err := server.TLSConfigFromFiles(pki.ServerCert, pki.ServerKey, pki.CA)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse([]byte(strings.Replace(authConfig, "identity = \"cn\"\n", "identity = \"cn\"\n"+authKeys, 1) + extra))
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opts := server.Options{Dir: t.TempDir(), Config: cfg, TLS: srvTLS, HTTPAddr: "127.0.0.1:0",
		Logger: slog.New(slog.NewJSONHandler(logs, nil))}
	if mod != nil {
		mod(&opts)
	}
	srv, err := server.Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	return &authCluster{srv: srv, pki: pki, logs: logs}
}

// open is a client of the cluster with a certificate naming identity.
func (c *authCluster) open(t *testing.T, identity string, opts ...distash.Option) *distash.DB {
	t.Helper()
	cert, key := c.pki.Client(t, identity)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	db, err := distash.Open(ctx, c.srv.ClusterString(), append([]distash.Option{distash.WithTLS(clientTLS(t, cert, key, c.pki.CA))}, opts...)...)
	if err != nil {
		t.Fatalf("open as %s: %v", identity, err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// conn is a raw gRPC connection with a certificate naming identity.
func (c *authCluster) conn(t *testing.T, identity string) *grpc.ClientConn {
	t.Helper()
	cert, key := c.pki.Client(t, identity)
	conn, err := grpc.NewClient(c.srv.ClusterString(), grpc.WithTransportCredentials(credentials.NewTLS(clientTLS(t, cert, key, c.pki.CA))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustDeny(t *testing.T, err error, want ...string) {
	t.Helper()
	if !errors.Is(err, distash.ErrPermissionDenied) {
		t.Fatalf("got %v, want ErrPermissionDenied", err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%q does not name %q", err, w)
		}
	}
}

// TestAuthCommitRefusedWhole: a transaction writing a pool its identity
// may only read is refused at commit, whole: its write to the pool it may
// write is not applied either. Reads of a pool without read are refused;
// the system key space needs status or admin.
func TestAuthCommitRefusedWhole(t *testing.T) {
	c := startAuthCluster(t, "", "")
	ctx := ctxFor(t)
	app, root := c.open(t, "app1"), c.open(t, "root")
	if err := root.Transact(ctx, func(tr *distash.Tx) error {
		tr.Set([]byte("d/k"), []byte("before"))
		tr.Set([]byte("l/k"), []byte("secret"))
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// Allowed: write the cache, read the data.
	if err := app.Transact(ctx, func(tr *distash.Tx) error {
		v, err := tr.Get([]byte("d/k"))
		if err != nil {
			return err
		}
		tr.Set([]byte("c/copy"), v)
		return nil
	}); err != nil {
		t.Fatalf("app1 reading data, writing the cache: %v", err)
	}

	// Refused whole: the cache's write goes with the data's.
	err := app.Transact(ctx, func(tr *distash.Tx) error {
		tr.Set([]byte("c/new"), []byte("x"))
		tr.Set([]byte("d/k"), []byte("after"))
		return nil
	})
	mustDeny(t, err, `"app1"`, "write", `pool "data"`)
	// A clear range of the data pool, alone.
	mustDeny(t, app.Transact(ctx, func(tr *distash.Tx) error { tr.ClearRange([]byte("d/"), []byte("d0")); return nil }), `pool "data"`)
	err = root.ReadTransact(ctx, func(tr *distash.Tx) error {
		for k, want := range map[string]string{"c/new": "", "d/k": "before", "c/copy": "before"} {
			v, err := tr.Get([]byte(k))
			if err != nil {
				return err
			}
			if string(v) != want {
				t.Errorf("%s = %q after the refused commits, want %q", k, v, want)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// Reads of a pool without read, and of the system key space.
	mustDeny(t, app.ReadTransact(ctx, func(tr *distash.Tx) error { _, err := tr.Get([]byte("l/k")); return err }), `read on pool "logs"`)
	mustDeny(t, app.ReadTransact(ctx, func(tr *distash.Tx) error {
		_, err := tr.GetRange([]byte("l/"), []byte("l0"), distash.RangeOptions{})
		return err
	}), `pool "logs"`)
	sys := func(tr *distash.Tx) error {
		tr.Options().SetReadSystemKeys()
		_, err := tr.Get([]byte("\xff/conf/cluster"))
		return err
	}
	mustDeny(t, app.ReadTransact(ctx, sys), "system key space")
	if err := c.open(t, "prom").ReadTransact(ctx, sys); err != nil {
		t.Errorf("prom (status) reading the system key space: %v", err)
	}

	// The refusals are in the audit log.
	if !strings.Contains(c.logs.String(), `"msg":"audit"`) || !strings.Contains(c.logs.String(), `lacks write on pool \"data\"`) {
		t.Errorf("no audit line of the refused commit:\n%.3000s", c.logs.String())
	}
}

// TestAuthEveryMethod calls every method of the services an embedded
// cluster serves (DiStash, Admin, Backup, enumerated from the protocol's
// descriptor) with an empty request, as an identity no role names: each is
// refused with permission_denied (in the response's error, or as gRPC's
// PermissionDenied) and nothing happens. The identity with the method's
// permission is then served (not refused) for a sample.
func TestAuthEveryMethod(t *testing.T) {
	c := startAuthCluster(t, "", "")
	ctx := ctxFor(t)
	stranger := c.conn(t, "mallory")
	services := wire.File_distash_proto.Services()
	n := 0
	for _, svc := range []string{"DiStash", "Admin", "Backup"} {
		sd := services.ByName(protoreflect.Name(svc))
		for i := 0; i < sd.Methods().Len(); i++ {
			md := sd.Methods().Get(i)
			full := "/" + string(sd.FullName()) + "/" + string(md.Name())
			n++
			err := call(ctx, t, stranger, md, full)
			if !refused(err) {
				t.Errorf("%s by an identity without grants: %v, want permission_denied", full, err)
			}
		}
	}
	if n < 15 {
		t.Fatalf("only %d methods enumerated", n)
	}
	// Served with the permission: status for prom, not for app1.
	if err := call(ctx, t, c.conn(t, "prom"), services.ByName("DiStash").Methods().ByName("Status"), wire.DiStash_Status_FullMethodName); err != nil {
		t.Errorf("Status by prom: %v", err)
	}
	if err := call(ctx, t, c.conn(t, "app1"), services.ByName("DiStash").Methods().ByName("Status"), wire.DiStash_Status_FullMethodName); !refused(err) {
		t.Errorf("Status by app1: %v, want permission_denied", err)
	}
	if err := call(ctx, t, c.conn(t, "app1"), services.ByName("Admin").Methods().ByName("Kill"), wire.Admin_Kill_FullMethodName); !refused(err) {
		t.Errorf("Kill by app1: %v, want permission_denied", err)
	}
	// Still serving: nobody's Kill went through.
	if err := c.open(t, "root").Transact(ctx, func(tr *distash.Tx) error { tr.Set([]byte("c/alive"), nil); return nil }); err != nil {
		t.Fatal(err)
	}
}

// call invokes md with an empty request over conn and returns the error:
// gRPC's, or the one in the response's error field.
func call(ctx context.Context, t *testing.T, conn *grpc.ClientConn, md protoreflect.MethodDescriptor, full string) error {
	t.Helper()
	newMsg := func(d protoreflect.MessageDescriptor) proto.Message {
		mt, err := protoregistry.GlobalTypes.FindMessageByName(d.FullName())
		if err != nil {
			t.Fatal(err)
		}
		return mt.New().Interface()
	}
	in, out := newMsg(md.Input()), newMsg(md.Output())
	if md.IsStreamingClient() || md.IsStreamingServer() {
		st, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, full)
		if err != nil {
			return err
		}
		switch r := in.(type) { // a request the stream's handler takes
		case *wire.CommitStreamRequest:
			r.Request = &wire.CommitRequest{Mutations: []*wire.Mutation{{Type: uint32(kv.MutSet), Key: []byte("c/x")}}}
		case *wire.ReadStreamRequest:
			r.Request = &wire.ReadRequest{Keys: [][]byte{[]byte("c/x")}}
		}
		if err := st.SendMsg(in); err != nil {
			return err
		}
		if err := st.RecvMsg(out); err != nil {
			return err
		}
		st.CloseSend()
		if e := findError(out.ProtoReflect()); e != nil {
			return e
		}
		return nil
	}
	if err := conn.Invoke(ctx, full, in, out); err != nil {
		return err
	}
	if e := findError(out.ProtoReflect()); e != nil {
		return e
	}
	return nil
}

// findError finds a set distash.v1.Error in m or its message fields.
func findError(m protoreflect.Message) error {
	var found error
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Kind() != protoreflect.MessageKind || fd.IsList() || fd.IsMap() {
			return true
		}
		if e, ok := v.Message().Interface().(*wire.Error); ok {
			if e.Code != 0 {
				found = e.Err()
			}
		} else {
			found = findError(v.Message())
		}
		return found == nil
	})
	return found
}

func refused(err error) bool {
	return errors.Is(err, &kv.Error{Code: kv.CodePermissionDenied}) || status.Code(err) == codes.PermissionDenied
}

func insecureCreds() credentials.TransportCredentials { return insecure.NewCredentials() }

// TestAuthModeInStatus: status says whether [auth] is enforced or the
// cluster trusts its network.
func TestAuthModeInStatus(t *testing.T) {
	ctx := ctxFor(t)
	c := startAuthCluster(t, "", "")
	st, err := wire.NewDiStashClient(c.conn(t, "prom")).Status(ctx, &wire.StatusRequest{})
	if err != nil || st.Auth != "enforced" {
		t.Errorf("status of a cluster with [auth]: auth %q, %v; want enforced", st.GetAuth(), err)
	}
	plain := startTiny(t, "127.0.0.1:0", nil, nil)
	conn, err := grpc.NewClient(plain.ClusterString(), grpc.WithTransportCredentials(insecureCreds()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	st, err = wire.NewDiStashClient(conn).Status(ctx, &wire.StatusRequest{})
	if err != nil || st.Auth != "trusted-network" {
		t.Errorf("status without [auth]: auth %q, %v; want trusted-network", st.GetAuth(), err)
	}
	// [auth] without TLS does not start.
	cfg, err := config.Parse([]byte(authConfig))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := server.Start(ctx, server.Options{Dir: t.TempDir(), Config: cfg}); err == nil || !strings.Contains(err.Error(), "[auth] needs TLS") {
		t.Errorf("[auth] without TLS: %v", err)
	}
}

// TestAuthLiveGrant: auth grant and revoke (Admin.Auth, admin only) take
// effect on a connection already open, without reconnecting.
func TestAuthLiveGrant(t *testing.T) {
	c := startAuthCluster(t, "", `
[[auth.role]]
name = "logreader"
members = ["app2"]
read = ["logs"]
`)
	ctx := ctxFor(t)
	app2 := c.open(t, "app2")
	read := func() error {
		return app2.ReadTransact(ctx, func(tr *distash.Tx) error { _, err := tr.Get([]byte("d/k")); return err })
	}
	mustDeny(t, read(), `"app2"`, `read on pool "data"`)
	admin := wire.NewAdminClient(c.conn(t, "alice"))
	authOK := func(req *wire.AuthRequest) *wire.AuthResponse {
		t.Helper()
		resp, err := admin.Auth(ctx, req)
		if err == nil {
			err = resp.Error.Err()
		}
		if err != nil {
			t.Fatalf("auth %s: %v", req.Op, err)
		}
		return resp
	}
	// Not for app1, which has no admin.
	resp, err := wire.NewAdminClient(c.conn(t, "app1")).Auth(ctx, &wire.AuthRequest{Op: "grant", Role: "operator", Identity: "app1"})
	if err == nil {
		err = resp.Error.Err()
	}
	if !refused(err) {
		t.Fatalf("app1 granting itself admin: %v", err)
	}

	resp = authOK(&wire.AuthRequest{Op: "grant", Role: "shop", Identity: "app2"})
	if !resp.Enabled || len(resp.Roles) != 5 {
		t.Fatalf("roles after the grant: %v", resp)
	}
	waitFor(t, time.Second, func() error { return read() })
	authOK(&wire.AuthRequest{Op: "revoke", Role: "shop", Identity: "app2"})
	waitFor(t, time.Second, func() error {
		if err := read(); !errors.Is(err, distash.ErrPermissionDenied) {
			return errors.New("still served")
		}
		return nil
	})
	// A role defined live; an unknown pool is refused.
	if _, err := admin.Auth(ctx, &wire.AuthRequest{Op: "role", Define: &wire.AuthRole{Name: "x", Read: []string{"nope"}}}); err != nil {
		t.Fatal(err)
	} else if r, _ := admin.Auth(ctx, &wire.AuthRequest{Op: "role", Define: &wire.AuthRole{Name: "x", Read: []string{"nope"}}}); r.GetError() == nil {
		t.Error("a role reading a pool that does not exist was accepted")
	}
	authOK(&wire.AuthRequest{Op: "role", Define: &wire.AuthRole{Name: "datareader", Read: []string{"data"}}})
	authOK(&wire.AuthRequest{Op: "grant", Role: "datareader", Identity: "app2"})
	if err := read(); err != nil {
		t.Fatal(err)
	}
	authOK(&wire.AuthRequest{Op: "delete-role", Role: "logreader"})
	mustDeny(t, app2.ReadTransact(ctx, func(tr *distash.Tx) error { _, err := tr.Get([]byte("l/k")); return err }), `read on pool "logs"`)
	for _, want := range []string{`"action":"Auth grant"`, `"action":"Auth revoke"`, `"target":"role=shop identity=app2"`, `"identity":"\"alice\" (certificate)"`} {
		if !strings.Contains(c.logs.String(), want) {
			t.Errorf("audit log lacks %s", want)
		}
	}
}

// waitFor retries f until it succeeds or within passes.
func waitFor(t *testing.T, within time.Duration, f func() error) {
	t.Helper()
	var err error
	if !wait.Until(within, func() bool { err = f(); return err == nil }) {
		t.Fatalf("not within %v: %v", within, err)
	}
}

// TestAuthHTTP: with [auth] the HTTP port serves TLS, and /metrics and
// the console only to identities with status; the refusals are counted in
// /metrics.
func TestAuthHTTP(t *testing.T) {
	c := startAuthCluster(t, "", "")
	get := func(identity, path string) (int, string) {
		t.Helper()
		ca := clientTLS(t, c.pki.ClientCert, c.pki.ClientKey, c.pki.CA)
		ca.Certificates, ca.GetClientCertificate = nil, nil
		if identity != "" {
			cert, key := c.pki.Client(t, identity)
			ca = clientTLS(t, cert, key, c.pki.CA)
		}
		cl := &http.Client{Transport: &http.Transport{TLSClientConfig: ca}, Timeout: 10 * time.Second}
		defer cl.CloseIdleConnections()
		resp, err := cl.Get("https://" + c.srv.HTTPAddr() + path)
		if err != nil {
			t.Fatalf("GET %s as %q: %v", path, identity, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, path := range []string{"/metrics", "/", "/status.json"} {
		if code, body := get("app1", path); code != http.StatusForbidden || !strings.Contains(body, "permission_denied") {
			t.Errorf("GET %s as app1: %d %.200s", path, code, body)
		}
		if code, _ := get("", path); code != http.StatusUnauthorized {
			t.Errorf("GET %s without a certificate: %d", path, code)
		}
		if code, body := get("prom", path); code != http.StatusOK {
			t.Errorf("GET %s as prom: %d %.200s", path, code, body)
		}
	}
	_, body := get("prom", "/metrics")
	if !strings.Contains(body, `distash_auth_refused_total{permission="status"} 3`) || !strings.Contains(body, `distash_auth_refused_total{permission="any"} 3`) {
		t.Errorf("metrics do not count the refusals:\n%s", grepLines(body, "distash_auth"))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestAuthLocationsHideUnreadablePools: Locations shows a pool's shards
// (split points, teams) only to identities that may read it; others see
// the pool as one shard, and their reads of it are still refused with
// permission_denied; a reader of the pool sees every shard and reads.
func TestAuthLocationsHideUnreadablePools(t *testing.T) {
	c := startAuthCluster(t, "", `
[[auth.role]]
name = "big"
members = ["bigreader"]
read = ["big"]
write = ["big"]

[[pool]]
name = "big"
prefix = "b/"
medium = "dram"
mode = "ephemeral"
engine = "memory"
capacity = "4MiB"
stashes = 3
replication = 1
`)
	ctx := ctxFor(t)
	shardsOf := func(identity string) (big []*wire.Shard, all int) {
		resp, err := wire.NewDiStashClient(c.conn(t, identity)).Locations(ctx, &wire.LocationsRequest{End: []byte{0xff, 0xff}})
		if err != nil || resp.Error != nil {
			t.Fatalf("locations as %s: %v %v", identity, err, resp.GetError())
		}
		for _, s := range resp.Shards {
			if s.Pool == "big" {
				big = append(big, s)
			}
		}
		return big, len(resp.Shards)
	}
	full, nFull := shardsOf("bigreader")
	if len(full) != 3 {
		t.Fatalf("the reader of pool big sees %d of its shards, want 3", len(full))
	}
	hidden, nHidden := shardsOf("app1")
	if len(hidden) != 1 || string(hidden[0].Begin) != "b/" || string(hidden[0].End) != "b0" || nHidden != nFull-2 {
		t.Fatalf("app1 (no read on big) sees %v (%d shards in all, the reader %d); want big as one shard [b/, b0)", hidden, nHidden, nFull)
	}
	reader := c.open(t, "bigreader")
	if err := reader.Transact(ctx, func(tr *distash.Tx) error {
		for _, k := range []string{"b/\x10", "b/\x60", "b/\xc0"} { // one key in each shard
			tr.Set([]byte(k), []byte("v"))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := reader.ReadTransact(ctx, func(tr *distash.Tx) error {
		kvs, err := tr.GetRange([]byte("b/"), []byte("b0"), distash.RangeOptions{})
		if err == nil && len(kvs) != 3 {
			err = fmt.Errorf("%d pairs, want 3", len(kvs))
		}
		return err
	}); err != nil {
		t.Fatalf("the reader of big reading it: %v", err)
	}
	app := c.open(t, "app1")
	for _, k := range []string{"b/\x10", "b/\x60", "b/\xc0"} {
		mustDeny(t, app.ReadTransact(ctx, func(tr *distash.Tx) error { _, err := tr.Get([]byte(k)); return err }), `read on pool "big"`)
	}
	mustDeny(t, app.ReadTransact(ctx, func(tr *distash.Tx) error {
		_, err := tr.GetRange([]byte("b/"), []byte("b0"), distash.RangeOptions{})
		return err
	}), `pool "big"`)
	// app1's own pools are served as before.
	if err := app.Transact(ctx, func(tr *distash.Tx) error { tr.Set([]byte("c/x"), []byte("v")); return nil }); err != nil {
		t.Fatal(err)
	}
	// Granted read of big, the same DB (whose cached locations show big as
	// one shard) reads every part of it: a stash that does not own a key
	// says so, and the client asks for the locations again.
	if resp, err := wire.NewAdminClient(c.conn(t, "alice")).Auth(ctx, &wire.AuthRequest{Op: "grant", Role: "big", Identity: "app1"}); err != nil || resp.Error != nil {
		t.Fatalf("grant: %v %v", err, resp.GetError())
	}
	waitFor(t, 20*time.Second, func() error {
		return app.ReadTransact(ctx, func(tr *distash.Tx) error {
			for _, k := range []string{"b/\x10", "b/\x60", "b/\xc0"} {
				if v, err := tr.Get([]byte(k)); err != nil || string(v) != "v" {
					return fmt.Errorf("%q = %q, %v", k, v, err)
				}
			}
			return nil
		})
	})
}
