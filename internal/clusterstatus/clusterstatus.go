// Package clusterstatus gathers the status of a whole cluster, as
// `distash cli status` shows it and as a node's web console serves it:
// an embedded cluster answers for itself; a multi-process cluster's
// status is put together from the coordinators' view (nodes, liveness,
// generation, roles) and the status of every reachable node. It lives
// apart from the CLI so that any node's HTTP server can serve the same
// cluster-wide figures.
package clusterstatus

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/distash/distash/internal/coordrpc"
	"github.com/distash/distash/internal/protover"
	"github.com/distash/distash/internal/wire"
)

// Creds returns the gRPC transport credentials for tlsConfig: TLS if
// set, plaintext otherwise.
func Creds(tlsConfig *tls.Config) credentials.TransportCredentials {
	if tlsConfig != nil {
		return credentials.NewTLS(tlsConfig)
	}
	return insecure.NewCredentials()
}

// Gather returns the status of the cluster at cluster (a comma-separated
// list of addresses: an embedded server's, or coordinators'): the
// embedded server's own status, or the cluster-wide status of a
// multi-process cluster (FromView).
func Gather(ctx context.Context, cluster string, tlsConfig *tls.Config) (*wire.StatusResponse, error) {
	return GatherWith(ctx, cluster, Options{TLS: tlsConfig})
}

// Options configure GatherWith.
type Options struct {
	TLS *tls.Config
	// Dialer, if set, opens every connection instead of TCP (an
	// in-process network in tests); it gets the address as given.
	Dialer func(ctx context.Context, addr string) (net.Conn, error)
	// PerRPC, if set, are credentials every call presents (a bearer
	// token: distash.TokenCredentials).
	PerRPC credentials.PerRPCCredentials
}

func (o Options) dial(addr string) (*grpc.ClientConn, error) {
	opts := append([]grpc.DialOption{grpc.WithTransportCredentials(Creds(o.TLS))}, protover.This.DialOptions()...)
	if o.PerRPC != nil {
		opts = append(opts, grpc.WithPerRPCCredentials(o.PerRPC))
	}
	if o.Dialer != nil {
		opts = append(opts, grpc.WithContextDialer(o.Dialer))
		addr = "passthrough:///" + addr
	}
	return grpc.NewClient(addr, opts...)
}

// StatusOf asks each node over a connection of its own, with o's TLS,
// dialer and credentials (Dialing with a dialer and a token).
func (o Options) StatusOf() StatusOf {
	return func(ctx context.Context, addr string) (*wire.StatusResponse, error) {
		conn, err := o.dial(addr)
		if err != nil {
			return nil, err
		}
		defer conn.Close()
		st, err := wire.NewDiStashClient(conn).Status(ctx, &wire.StatusRequest{}, grpc.WaitForReady(true))
		if err != nil {
			return nil, fmt.Errorf("status from %s: %w", addr, err)
		}
		return st, nil
	}
}

// GatherWith is Gather with a dialer. When no controller answers a
// multi-process cluster's coordinators, it asks each coordinator for its
// own copy of the cluster state: the status then says which coordinators
// answered and that the coordinators have no quorum (or no controller),
// and shows the freshest copy marked stale, with its age, and every node
// as it answers now (FromLocalViews).
func GatherWith(ctx context.Context, cluster string, o Options) (*wire.StatusResponse, error) {
	of := o.StatusOf()
	addrs := splitCluster(cluster)
	if len(addrs) > 1 {
		// A view from the controller, else the coordinators' own copies,
		// without waiting for a controller that may never come.
		if v := firstView(ctx, addrs, o); v != nil {
			return FromView(ctx, v, of)
		}
		if locals := LocalViews(ctx, addrs, o); len(locals) > 0 {
			return FromLocalViews(ctx, addrs, locals, of)
		}
	}
	view, embedded, err := findCluster(ctx, cluster, o)
	if err != nil {
		return nil, err
	}
	if embedded != "" {
		return of(ctx, embedded)
	}
	return FromView(ctx, view, of)
}

func splitCluster(cluster string) []string {
	var addrs []string
	for _, a := range strings.Split(cluster, ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, a)
		}
	}
	return addrs
}

// firstView asks each coordinator in turn for the controller's view (2 s
// each); nil if none has one.
func firstView(ctx context.Context, addrs []string, o Options) *wire.ViewResponse {
	for _, a := range addrs {
		conn, err := o.dial(a)
		if err != nil {
			continue
		}
		actx, cancel := context.WithTimeout(ctx, 2500*time.Millisecond)
		v, err := wire.NewCoordinatorClient(conn).View(actx, &wire.ViewRequest{})
		cancel()
		conn.Close()
		if err == nil && v.Error == nil {
			return v
		}
	}
	return nil
}

// LocalViews asks every coordinator at once for its own copy of the
// cluster state (ViewRequest.local), by address; the ones that do not
// answer, or are of a binary without local views, are absent.
func LocalViews(ctx context.Context, addrs []string, o Options) map[string]*wire.ViewResponse {
	var mu sync.Mutex
	var wg sync.WaitGroup
	out := map[string]*wire.ViewResponse{}
	for _, a := range addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := o.dial(a)
			if err != nil {
				return
			}
			defer conn.Close()
			actx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			v, err := wire.NewCoordinatorClient(conn).View(actx, &wire.ViewRequest{Local: true})
			if err == nil && v.Error == nil && v.Local {
				mu.Lock()
				out[a] = v
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return out
}

// FromLocalViews is the status of a multi-process cluster whose
// coordinators have no controller: locals are the coordinators' own copies
// of the state, by address (LocalViews). The freshest copy (the one whose
// coordinator heard from a leader last) stands for the view, marked stale
// with its age; every node it lists is asked for its status, whatever the
// copy says of its liveness; the coordinators that answered are the live
// ones.
func FromLocalViews(ctx context.Context, addrs []string, locals map[string]*wire.ViewResponse, of StatusOf) (*wire.StatusResponse, error) {
	var from string
	for a, v := range locals {
		if from == "" || v.LeaderContactUnixMs > locals[from].LeaderContactUnixMs ||
			v.LeaderContactUnixMs == locals[from].LeaderContactUnixMs && a < from {
			from = a
		}
	}
	v := locals[from]
	for _, m := range v.Coordinators {
		_, m.Alive = locals[m.Address]
	}
	st, err := fromView(ctx, v, of, true)
	if err != nil {
		return nil, err
	}
	st.ViewStale, st.ViewFrom, st.ViewAgeMs = true, from, -1
	if v.LeaderContactUnixMs > 0 {
		st.ViewAgeMs = max(time.Since(time.UnixMilli(v.LeaderContactUnixMs)).Milliseconds(), 0)
	}
	var answered []string
	for a := range locals {
		answered = append(answered, a)
	}
	sort.Strings(answered)
	age := "it never heard from a leader"
	if st.ViewAgeMs >= 0 {
		age = "last confirmed by a leader " + ms(st.ViewAgeMs) + " ago"
	}
	warn := fmt.Sprintf("no controller answers: %d of %d coordinators answer (%s); the view below is %s's own copy of the cluster state, %s (stale); node health is what each node answers now",
		len(answered), len(addrs), strings.Join(answered, ", "), from, age)
	st.Warnings = append([]string{warn}, st.Warnings...)
	return st, nil
}

// ms prints a duration in milliseconds to a tenth of a second.
func ms(d int64) string {
	return (time.Duration(d) * time.Millisecond).Round(100 * time.Millisecond).String()
}

// StatusOf returns the status the node at addr gives of itself.
type StatusOf func(ctx context.Context, addr string) (*wire.StatusResponse, error)

// Dialing asks each node over a connection of its own (Of): for a client
// that asks once. A node that serves the console asks over the
// connections it keeps to the other nodes instead.
func Dialing(creds credentials.TransportCredentials) StatusOf {
	return func(ctx context.Context, addr string) (*wire.StatusResponse, error) { return Of(ctx, addr, creds) }
}

// Of returns the status one server (an embedded cluster, or one node)
// gives of itself, waiting for it to come up.
func Of(ctx context.Context, addr string, creds credentials.TransportCredentials) (*wire.StatusResponse, error) {
	conn, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(creds)}, protover.This.DialOptions()...)...)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	st, err := wire.NewDiStashClient(conn).Status(ctx, &wire.StatusRequest{}, grpc.WaitForReady(true))
	if err != nil {
		return nil, fmt.Errorf("status from %s: %w", addr, err)
	}
	return st, nil
}

// FindCluster tells an embedded cluster from a multi-process one: the
// first address that answers is asked for the coordinators' view; an
// embedded server does not serve it (embedded is then its address).
func FindCluster(ctx context.Context, cluster string, creds credentials.TransportCredentials, tlsConfig *tls.Config) (view *wire.ViewResponse, embedded string, err error) {
	return findCluster(ctx, cluster, Options{TLS: tlsConfig})
}

// FindClusterWith is FindCluster with o's TLS, dialer and credentials.
func FindClusterWith(ctx context.Context, cluster string, o Options) (view *wire.ViewResponse, embedded string, err error) {
	return findCluster(ctx, cluster, o)
}

func findCluster(ctx context.Context, cluster string, o Options) (view *wire.ViewResponse, embedded string, err error) {
	addrs := splitCluster(cluster)
	if len(addrs) == 0 {
		return nil, "", fmt.Errorf("empty cluster string")
	}
	if len(addrs) == 1 {
		// One address is an embedded cluster or a one-coordinator
		// cluster: ask, waiting for it to come up.
		conn, err := o.dial(addrs[0])
		if err != nil {
			return nil, "", err
		}
		defer conn.Close()
		v, err := wire.NewCoordinatorClient(conn).View(ctx, &wire.ViewRequest{}, grpc.WaitForReady(true))
		if status.Code(err) == codes.Unimplemented {
			return nil, addrs[0], nil
		}
		if err == nil && v.Error == nil {
			return v, "", nil
		}
	} else {
		for _, a := range addrs {
			conn, err := o.dial(a)
			if err != nil {
				continue
			}
			actx, cancel := context.WithTimeout(ctx, 2*time.Second)
			v, err := wire.NewCoordinatorClient(conn).View(actx, &wire.ViewRequest{})
			cancel()
			conn.Close()
			if status.Code(err) == codes.Unimplemented {
				return nil, a, nil
			}
			if err == nil && v.Error == nil {
				return v, "", nil
			}
		}
	}
	cc, err := coordrpc.NewClient(cluster, coordrpc.ClientOptions{TLS: o.TLS, Dialer: o.Dialer, PerRPC: o.PerRPC})
	if err != nil {
		return nil, "", err
	}
	defer cc.Close()
	v, err := cc.View(ctx)
	if err != nil {
		return nil, "", fmt.Errorf("ask the coordinators %s: %w", cluster, err)
	}
	return v, "", nil
}

// FromView puts together the status of a multi-process cluster: the
// controller's view (nodes, liveness, generation, roles) and every
// reachable node's own status (its roles, its log replica, its stash),
// asked with of.
func FromView(ctx context.Context, view *wire.ViewResponse, of StatusOf) (*wire.StatusResponse, error) {
	return fromView(ctx, view, of, false)
}

// fromView is FromView; askAll asks every node, not only those the view
// says are alive (a stale view's liveness says nothing).
func fromView(ctx context.Context, view *wire.ViewResponse, of StatusOf, askAll bool) (*wire.StatusResponse, error) {
	type answer struct {
		st  *wire.StatusResponse
		err error
	}
	answers := make([]answer, len(view.Nodes))
	var wg sync.WaitGroup
	for i, n := range view.Nodes {
		if !n.Alive && !askAll {
			continue
		}
		wg.Add(1)
		go func(i int, addr string) {
			defer wg.Done()
			nctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			st, err := of(nctx, addr)
			answers[i] = answer{st, err}
		}(i, n.Address)
	}
	wg.Wait()
	for _, a := range answers {
		// On a cluster with [auth] the view is open to any grant, the
		// nodes' status only to status: a caller without it is refused,
		// not shown every node as unreachable.
		if status.Code(a.err) == codes.PermissionDenied {
			return nil, a.err
		}
	}
	out := &wire.StatusResponse{Generation: view.Generation, Controller: view.Controller, LogReplicas: view.LogReplicas,
		LastRecoveryMicros: view.LastRecoveryMicros, LastRecoveryUnixMs: view.LastRecoveryUnixMs}
	served := map[uint32]bool{}
	now := time.Now()
	for i, n := range view.Nodes {
		a := answers[i]
		ns := &wire.NodeStatus{Id: n.Id, Address: n.Address, Class: n.Class, Pool: n.Pool, Dc: n.Dc, Zone: n.Zone,
			Machine: n.Machine, LastSeenUnixMs: n.LastSeenUnixMs, Health: "alive"}
		if !n.Alive && !askAll || a.err != nil || a.st == nil {
			ns.Health = "unreachable"
			if n.LastSeenUnixMs > 0 {
				ns.UnreachableMs = now.Sub(time.UnixMilli(n.LastSeenUnixMs)).Milliseconds()
			}
		} else {
			if a.st.Node != nil {
				ns.Roles, ns.Generation, ns.LogDurableVersion = a.st.Node.Roles, a.st.Node.Generation, a.st.Node.LogDurableVersion
				ns.RecoveryMicros, ns.RecoveredVersion, ns.RecoveryUnixMs = a.st.Node.RecoveryMicros, a.st.Node.RecoveredVersion, a.st.Node.RecoveryUnixMs
				ns.ProtocolMin, ns.ProtocolMax = a.st.Node.ProtocolMin, a.st.Node.ProtocolMax
				ns.BuildVersion, ns.BuildCommit = a.st.Node.BuildVersion, a.st.Node.BuildCommit
				// The cluster-wide range: what every node that
				// answers speaks (a node of a release before
				// versions were stated shows 0: left out).
				if ns.ProtocolMax > 0 {
					if out.ProtocolMax == 0 {
						out.ProtocolMin, out.ProtocolMax = ns.ProtocolMin, ns.ProtocolMax
					} else {
						out.ProtocolMin, out.ProtocolMax = max(out.ProtocolMin, ns.ProtocolMin), min(out.ProtocolMax, ns.ProtocolMax)
					}
				}
			}
			if out.Pools == nil {
				out.Pools = a.st.Pools
			}
			if out.Auth == "" || a.st.Auth == "trusted-network" {
				out.Auth = a.st.Auth // a node without [auth] makes the cluster's trusted-network
			}
			if n.Address == view.StatelessAddress {
				out.CommittedVersion, out.Commits, out.Conflicts, out.TooOld, out.PoolFull = a.st.CommittedVersion, a.st.Commits, a.st.Conflicts, a.st.TooOld, a.st.PoolFull
				out.CommitBatches, out.RateLimit, out.RateLimitReason, out.Log = a.st.CommitBatches, a.st.RateLimit, a.st.RateLimitReason, a.st.Log
				out.Distribution = a.st.Distribution // the data distributor runs there
				out.StashShares = a.st.StashShares
				out.CommitP50Ms, out.CommitP99Ms, out.GrvP50Ms, out.GrvP99Ms = a.st.CommitP50Ms, a.st.CommitP99Ms, a.st.GrvP50Ms, a.st.GrvP99Ms
			}
			// Reads are served by every stash node: the slowest node's
			// percentiles stand for the cluster's.
			out.ReadP50Ms, out.ReadP99Ms = max(out.ReadP50Ms, a.st.ReadP50Ms), max(out.ReadP99Ms, a.st.ReadP99Ms)
			for _, s := range a.st.Stashes {
				out.Stashes = append(out.Stashes, s)
				served[s.Id] = true
			}
		}
		out.Nodes = append(out.Nodes, ns)
	}
	// Stashes whose node is down (or whose slot is free) still show;
	// replaced ones (no slot) do not.
	for _, loc := range view.Stashes {
		if served[loc.Tag] || loc.Slot < 0 {
			continue
		}
		health := "unreachable"
		if loc.Node == "" {
			health = "no node"
		}
		out.Stashes = append(out.Stashes, &wire.StashStatus{Id: loc.Tag, Pool: loc.Pool, Index: loc.Slot, Health: health, Node: loc.Node, Address: loc.Address})
	}
	sort.SliceStable(out.Stashes, func(i, j int) bool { return out.Stashes[i].Id < out.Stashes[j].Id })
	// Each stash's part of the shard map, as the data distributor sees it,
	// and whether an operator excluded it.
	shares := map[uint32]*wire.StashShare{}
	for _, sh := range out.StashShares {
		shares[sh.Id] = sh
	}
	excluded, givenUp := map[uint32]bool{}, map[uint32]bool{}
	for _, loc := range view.Stashes {
		excluded[loc.Tag], givenUp[loc.Tag] = loc.Excluded, loc.GivenUp
	}
	for _, st := range out.Stashes {
		if sh := shares[st.Id]; sh != nil {
			st.Shards, st.Fetching = sh.Shards, sh.Fetching
		}
		st.Excluded, st.GivenUp = excluded[st.Id], givenUp[st.Id]
	}
	membership(out, view)
	return out, nil
}
