package server_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/distash/distash"
	"github.com/distash/distash/internal/clustertest"
	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/wire"
	"github.com/distash/distash/server"
)

// authMatrixConfig: one pool, and an identity for each side of every
// permission: app1 reads and writes the cache, app3 only reads it, alice
// is an operator, prom monitors, root has every client permission (but is
// no node), and mallory is named by no role.
const authMatrixConfig = `
[log]
replicas = 1

[[pool]]
name = "cache"
prefix = "c/"
medium = "dram"
mode = "ephemeral"
engine = "memory"
stashes = 1
replication = 1

[auth]
` + clustertest.AuthMatrixRoles

// matrixRow is one RPC's two sides: the identity without its permission
// sends refuse (a request that would change the cluster if it were
// served) and must get permission_denied with the cluster unchanged; the
// identity with it sends serve and must not be refused (a domain error
// for a request that is deliberately harmless is allowed).
type matrixRow struct {
	on            string // "tx" or "stash": the node called
	without, with string // identities; "node": a node's certificate
	refuse, serve proto.Message
}

// TestAuthMatrix walks every method of every service in the protocol's
// descriptor on a multi-process cluster (a transaction node serving the
// coordinator, log, admin, backup and data services, and a stash node),
// and every HTTP path: each has a row, or the test fails (a new RPC needs
// one). For each, an identity without the permission is refused with
// permission_denied and the cluster's state (data, roles, view, backup,
// nodes alive) is unchanged; an identity with it is served. Node-only
// calls are refused to a client holding every client permission and
// served to a node's certificate.
func TestAuthMatrix(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two nodes")
	}
	n := startAuthNodes(t, authMatrixConfig, "127.0.0.1:0")
	ctx := n.ctx
	root := n.open("root")
	waitFor(t, 30*time.Second, func() error {
		return root.Transact(ctx, func(tr *distash.Tx) error { tr.Set([]byte("c/k"), []byte("v")); return nil })
	})

	conns := map[string]*grpc.ClientConn{}
	connOf := func(identity, on string) *grpc.ClientConn {
		key := identity + "@" + on
		if c, ok := conns[key]; ok {
			return c
		}
		addr := n.tx.Addr()
		if on == "stash" {
			addr = n.stash.Addr()
		}
		cfg := n.nodeTLS
		if identity != "node" {
			cert, key := n.pki.Client(t, identity)
			cfg = clientTLS(t, cert, key, n.pki.CA)
		}
		conns[key] = dialTLS(t, addr, cfg)
		return conns[key]
	}

	view, err := wire.NewCoordinatorClient(connOf("node", "tx")).View(ctx, &wire.ViewRequest{})
	if err != nil || view.Error != nil {
		t.Fatalf("view: %v %v", err, view.GetError())
	}
	var tag uint32
	var stashNode string
	for _, s := range view.Stashes {
		if s.Pool == "cache" {
			tag, stashNode = s.Tag, s.Node
		}
	}
	if stashNode == "" {
		t.Fatalf("no cache stash in the view: %v", view.Stashes)
	}
	rv, err := wire.NewDiStashClient(connOf("root", "tx")).GetReadVersion(ctx, &wire.GetReadVersionRequest{})
	if err != nil || rv.Error != nil {
		t.Fatalf("read version: %v %v", err, rv.GetError())
	}
	set := func(k, v string) *wire.CommitRequest {
		return &wire.CommitRequest{ReadVersion: rv.Version,
			Mutations:      []*wire.Mutation{{Type: uint32(kv.MutSet), Key: []byte(k), Param: []byte(v)}},
			WriteConflicts: []*wire.KeyRange{{Begin: []byte(k), End: append([]byte(k), 0)}}}
	}
	read := func(k string) *wire.ReadRequest {
		return &wire.ReadRequest{Stash: tag, Version: rv.Version, Keys: [][]byte{[]byte(k)}}
	}
	rangeOf := &wire.ReadRangeRequest{Stash: tag, Version: rv.Version, Begin: []byte("c/"), End: []byte("c0")}
	backupDir := t.TempDir()
	grantRoot := &wire.AuthRequest{Op: "grant", Role: "operator", Identity: "mallory"}
	list := &wire.AuthRequest{Op: "list"}

	rows := map[string]matrixRow{
		// Data: read versions and the layout need any grant; commits
		// write on their pools; reads read.
		wire.DiStash_GetReadVersion_FullMethodName: {"tx", "mallory", "app1", &wire.GetReadVersionRequest{}, &wire.GetReadVersionRequest{}},
		wire.DiStash_Commit_FullMethodName:         {"tx", "app3", "app1", set("c/k", "app3 was here"), set("c/served1", "x")},
		wire.DiStash_CommitStream_FullMethodName: {"tx", "app3", "app1",
			&wire.CommitStreamRequest{Id: 1, Request: set("c/k", "app3 was here")}, &wire.CommitStreamRequest{Id: 1, Request: set("c/served2", "x")}},
		wire.DiStash_ReadVersionStream_FullMethodName: {"tx", "mallory", "app1",
			&wire.ReadVersionStreamRequest{Id: 1, Request: &wire.GetReadVersionRequest{}}, &wire.ReadVersionStreamRequest{Id: 1, Request: &wire.GetReadVersionRequest{}}},
		wire.DiStash_ReadStream_FullMethodName: {"stash", "alice", "app1",
			&wire.ReadStreamRequest{Id: 1, Request: read("c/k")}, &wire.ReadStreamRequest{Id: 1, Request: read("c/k")}},
		wire.DiStash_Read_FullMethodName:        {"stash", "alice", "app1", read("c/k"), read("c/k")},
		wire.DiStash_ReadRange_FullMethodName:   {"stash", "alice", "app1", rangeOf, rangeOf},
		wire.DiStash_Locations_FullMethodName:   {"tx", "mallory", "app1", &wire.LocationsRequest{End: []byte{0xff}}, &wire.LocationsRequest{End: []byte{0xff}}},
		wire.DiStash_ClusterInfo_FullMethodName: {"tx", "mallory", "app1", &wire.ClusterInfoRequest{}, &wire.ClusterInfoRequest{}},
		wire.DiStash_Status_FullMethodName:      {"tx", "app1", "prom", &wire.StatusRequest{}, &wire.StatusRequest{}},
		wire.DiStash_Coldest_FullMethodName:     {"stash", "alice", "app3", &wire.ColdestRequest{Pool: "cache", Limit: 1}, &wire.ColdestRequest{Pool: "cache", Limit: 1}},
		wire.DiStash_ShardMetrics_FullMethodName: {"stash", "root", "node",
			&wire.ShardMetricsRequest{Stash: tag, Ranges: []*wire.KeyRangeMsg{{Begin: []byte("c/"), End: []byte("c0")}}},
			&wire.ShardMetricsRequest{Stash: tag, Ranges: []*wire.KeyRangeMsg{{Begin: []byte("c/"), End: []byte("c0")}}}},

		// The log: nodes only. Served requests are invalid (negative
		// figures), so a node's call does nothing either.
		wire.Log_Peek_FullMethodName:       {"tx", "root", "node", &wire.PeekRequest{Tag: tag}, &wire.PeekRequest{Tag: tag, After: -1}},
		wire.Log_PeekStream_FullMethodName: {"tx", "root", "node", &wire.PeekRequest{Tag: tag}, &wire.PeekRequest{Tag: tag, After: -1}},
		wire.Log_Pop_FullMethodName:        {"tx", "root", "node", &wire.PopRequest{Tag: tag, UpTo: rv.Version}, &wire.PopRequest{Tag: tag, UpTo: -1}},
		wire.Log_Report_FullMethodName:     {"tx", "root", "node", &wire.ReportRequest{Tag: tag, UsedBytes: 1 << 40}, &wire.ReportRequest{Tag: tag, UsedBytes: -1}},

		// The coordinators: node-to-node calls, the view for any grant,
		// operator calls for admin.
		wire.Coordinator_Register_FullMethodName: {"tx", "root", "node",
			&wire.RegisterRequest{Id: "intruder", Address: "127.0.0.1:1", Class: "stash", Pool: "cache"}, &wire.RegisterRequest{}},
		wire.Coordinator_Heartbeat_FullMethodName:    {"tx", "root", "node", &wire.HeartbeatRequest{Id: stashNode}, &wire.HeartbeatRequest{}},
		wire.Coordinator_View_FullMethodName:         {"tx", "mallory", "app1", &wire.ViewRequest{}, &wire.ViewRequest{}},
		wire.Coordinator_Claim_FullMethodName:        {"tx", "root", "node", &wire.ClaimRequest{Id: n.tx.NodeID()}, &wire.ClaimRequest{}},
		wire.Coordinator_RecoveryDone_FullMethodName: {"tx", "root", "node", &wire.RecoveryDoneRequest{Id: n.tx.NodeID(), Generation: view.Generation, Micros: 1}, &wire.RecoveryDoneRequest{}},
		wire.Coordinator_Exclude_FullMethodName:      {"tx", "app1", "alice", &wire.ExcludeRequest{Addresses: []string{n.stash.Addr()}}, &wire.ExcludeRequest{Addresses: []string{""}}},
		wire.Coordinator_Include_FullMethodName:      {"tx", "app1", "alice", &wire.IncludeRequest{Addresses: []string{"127.0.0.1:1"}}, &wire.IncludeRequest{Addresses: []string{""}}},
		wire.Coordinator_Configure_FullMethodName:    {"tx", "app1", "alice", &wire.ConfigureRequest{Key: "failure_wait", Value: "1ms"}, &wire.ConfigureRequest{}},
		wire.Coordinator_Retire_FullMethodName:       {"tx", "root", "node", &wire.RetireRequest{Tag: tag}, &wire.RetireRequest{}},
		wire.Coordinator_JoinCoordinators_FullMethodName: {"tx", "root", "node",
			&wire.JoinCoordinatorsRequest{Address: "127.0.0.1:1", RaftId: "intruder"}, &wire.JoinCoordinatorsRequest{}},
		wire.Coordinator_SetLogReplicas_FullMethodName: {"tx", "root", "node", &wire.SetLogReplicasRequest{}, &wire.SetLogReplicasRequest{Replicas: []string{""}}},
		wire.Coordinator_Auth_FullMethodName:           {"tx", "app1", "alice", grantRoot, list},

		// Operator calls to one node; Kill is served last (below).
		wire.Admin_Kill_FullMethodName: {"stash", "app1", "alice", &wire.KillRequest{Reason: "app1"}, &wire.KillRequest{Reason: "TestAuthMatrix"}},
		wire.Admin_Auth_FullMethodName: {"stash", "prom", "alice", grantRoot, list},

		// Backup: admin. The served start has no destination.
		wire.Backup_Start_FullMethodName:  {"tx", "app1", "alice", &wire.BackupStartRequest{Url: "file://" + backupDir}, &wire.BackupStartRequest{}},
		wire.Backup_Status_FullMethodName: {"tx", "prom", "alice", &wire.BackupStatusRequest{}, &wire.BackupStatusRequest{}},
		wire.Backup_Stop_FullMethodName:   {"tx", "app1", "alice", &wire.BackupStopRequest{}, &wire.BackupStopRequest{}},
	}
	// root has every client permission, and still no node's: the node
	// rows are refused to it, which the rows say; check they do.
	for m, r := range rows {
		if r.with == "node" && r.without != "root" {
			t.Errorf("%s: a node-only row must refuse root (every client permission)", m)
		}
	}

	// The state a refused call must leave as it was.
	state := func() string {
		var b strings.Builder
		v, err := wire.NewCoordinatorClient(connOf("node", "tx")).View(ctx, &wire.ViewRequest{})
		if err != nil || v.Error != nil {
			t.Fatalf("view: %v %v", err, v.GetError())
		}
		fmt.Fprintf(&b, "generation %d failure_wait %d excluded %v log %v\n", v.Generation, v.FailureWaitMs, v.Excluded, v.LogReplicas)
		for _, nd := range v.Nodes {
			fmt.Fprintf(&b, "node %s %s\n", nd.Id, nd.Address)
		}
		for _, s := range v.Stashes {
			fmt.Fprintf(&b, "stash %d %s retired %v\n", s.Tag, s.Node, s.Retired)
		}
		for _, c := range v.Coordinators {
			fmt.Fprintf(&b, "coordinator %s %s voter %v\n", c.Address, c.RaftId, c.Voter)
		}
		roles, err := wire.NewAdminClient(connOf("root", "tx")).Auth(ctx, list)
		if err != nil || roles.Error != nil {
			t.Fatalf("auth list: %v %v", err, roles.GetError())
		}
		for _, r := range roles.Roles {
			fmt.Fprintf(&b, "role %v\n", r)
		}
		bs, err := wire.NewBackupClient(connOf("root", "tx")).Status(ctx, &wire.BackupStatusRequest{})
		if err != nil {
			t.Fatalf("backup status: %v", err)
		}
		fmt.Fprintf(&b, "backup %v %s\n", bs.Error, bs.StatusJson)
		if ents, _ := os.ReadDir(backupDir); len(ents) > 0 {
			fmt.Fprintf(&b, "backup files %d\n", len(ents))
		}
		if err := root.ReadTransact(ctx, func(tr *distash.Tx) error {
			kvs, err := tr.GetRange([]byte("c/"), []byte("c0"), distash.RangeOptions{})
			for _, p := range kvs {
				if !strings.HasPrefix(string(p.Key), "c/served") {
					fmt.Fprintf(&b, "%s=%s\n", p.Key, p.Value)
				}
			}
			return err
		}); err != nil {
			t.Fatalf("read the data: %v", err)
		}
		return b.String()
	}

	services := wire.File_distash_proto.Services()
	var methods []string
	descs := map[string]protoreflect.MethodDescriptor{}
	for i := 0; i < services.Len(); i++ {
		sd := services.Get(i)
		for j := 0; j < sd.Methods().Len(); j++ {
			md := sd.Methods().Get(j)
			full := "/" + string(sd.FullName()) + "/" + string(md.Name())
			methods = append(methods, full)
			descs[full] = md
			if _, ok := rows[full]; !ok {
				t.Errorf("%s has no row in TestAuthMatrix: add who may and who may not call it", full)
			}
		}
	}
	if len(rows) != len(methods) {
		t.Errorf("%d rows for %d methods: a row names a method that does not exist", len(rows), len(methods))
	}
	sort.Strings(methods)
	before := state()
	for _, m := range methods {
		r := rows[m]
		err := invoke(ctx, connOf(r.without, r.on), descs[m], m, r.refuse)
		if !refused(err) {
			t.Errorf("%s by %s: %v, want permission_denied", m, r.without, err)
		} else if r.without != "node" && !strings.Contains(err.Error(), r.without) {
			t.Errorf("%s by %s: %q does not name the identity", m, r.without, err)
		}
		if after := state(); after != before {
			t.Fatalf("%s refused to %s changed the cluster:\nbefore:\n%s\nafter:\n%s", m, r.without, before, after)
		}
		if m == wire.Admin_Kill_FullMethodName {
			continue // served last: it stops the node
		}
		err = invoke(ctx, connOf(r.with, r.on), descs[m], m, r.serve)
		if refused(err) {
			t.Errorf("%s by %s: refused (%v), want served", m, r.with, err)
		}
		t.Logf("%-45s refused to %-7s served to %-5s (%v)", m, r.without, r.with, err)
		before = state()
	}

	// The view's configuration (roles and their members) shows only to
	// status and admin.
	for id, want := range map[string]bool{"app1": false, "prom": true, "alice": true, "node": true} {
		v, err := wire.NewCoordinatorClient(connOf(id, "tx")).View(ctx, &wire.ViewRequest{})
		if err != nil || v.Error != nil {
			t.Fatalf("view as %s: %v %v", id, err, v.GetError())
		}
		if got := strings.Contains(v.Config, "[auth]"); got != want {
			t.Errorf("view as %s shows the configuration: %v, want %v", id, got, want)
		}
	}

	// The HTTP paths: status for the console, its document and the
	// metrics (and any other path), admin for Go's profiles.
	httpGet := func(identity, path string) int {
		cert, key := n.pki.Client(t, identity)
		cl := &http.Client{Transport: &http.Transport{TLSClientConfig: clientTLS(t, cert, key, n.pki.CA)}, Timeout: 10 * time.Second}
		defer cl.CloseIdleConnections()
		resp, err := cl.Get("https://" + n.tx.HTTPAddr() + path)
		if err != nil {
			t.Fatalf("GET %s as %s: %v", path, identity, err)
		}
		defer resp.Body.Close()
		io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}
	for _, h := range []struct{ path, without, with string }{
		{"/metrics", "app1", "prom"},
		{"/", "app1", "prom"},
		{"/status.json", "alice", "prom"},
		{"/no-such-page", "app1", "prom"},
		{"/debug/pprof/", "prom", "alice"},
		{"/debug/pprof/cmdline", "app3", "alice"},
		{"/debug/pprof/symbol", "prom", "alice"},
	} {
		if code := httpGet(h.without, h.path); code != http.StatusForbidden {
			t.Errorf("GET %s as %s: %d, want 403", h.path, h.without, code)
		}
		if code := httpGet(h.with, h.path); code == http.StatusForbidden || code == http.StatusUnauthorized || code >= 500 {
			t.Errorf("GET %s as %s: %d, want served", h.path, h.with, code)
		}
	}

	// Nothing refused stopped a node; then alice's Kill is served.
	for name, srv := range map[string]*server.Server{"tx": n.tx, "stash": n.stash} {
		select {
		case err := <-srv.Failed():
			t.Fatalf("the %s node stopped: %v", name, err)
		default:
		}
	}
	if err := invoke(ctx, connOf("alice", "stash"), descs[wire.Admin_Kill_FullMethodName], wire.Admin_Kill_FullMethodName, rows[wire.Admin_Kill_FullMethodName].serve); err != nil {
		t.Fatalf("Kill by alice: %v", err)
	}
	select {
	case err := <-n.stash.Failed():
		if !errors.Is(err, server.ErrKilled) {
			t.Errorf("the stash node stopped with %v, want ErrKilled", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("alice's Kill did not stop the stash node")
	}
}

// invoke calls method md with req over conn and returns the error: gRPC's,
// or the one in the response's error field. A stream gets req as its one
// message and the first reply is awaited.
func invoke(ctx context.Context, conn *grpc.ClientConn, md protoreflect.MethodDescriptor, full string, req proto.Message) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out := newOf(md.Output())
	if md.IsStreamingClient() || md.IsStreamingServer() {
		st, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, full)
		if err != nil {
			return err
		}
		defer st.CloseSend()
		if err := st.SendMsg(req); err != nil {
			return err
		}
		if err := st.RecvMsg(out); err != nil {
			return err
		}
	} else if err := conn.Invoke(ctx, full, req, out); err != nil {
		return err
	}
	return findError(out.ProtoReflect())
}

// newOf is a new message of descriptor d.
func newOf(d protoreflect.MessageDescriptor) proto.Message {
	mt, err := protoregistry.GlobalTypes.FindMessageByName(d.FullName())
	if err != nil {
		panic(err)
	}
	return mt.New().Interface()
}
