package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/distash/distash/internal/coordrpc"
	"github.com/distash/distash/internal/wire"
)

// findCluster tells an embedded cluster from a multi-process one: the
// first address that answers is asked for the coordinators' view; an
// embedded server does not serve it (embedded is then its address).
func findCluster(ctx context.Context, cluster string, creds credentials.TransportCredentials, tlsConfig *tls.Config) (view *wire.ViewResponse, embedded string, err error) {
	var addrs []string
	for _, a := range strings.Split(cluster, ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, a)
		}
	}
	if len(addrs) == 0 {
		return nil, "", fmt.Errorf("empty cluster string")
	}
	if len(addrs) == 1 {
		// One address is an embedded cluster or a one-coordinator
		// cluster: ask, waiting for it to come up.
		conn, err := grpc.NewClient(addrs[0], grpc.WithTransportCredentials(creds))
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
			conn, err := grpc.NewClient(a, grpc.WithTransportCredentials(creds))
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
	cc, err := coordrpc.NewClient(cluster, coordrpc.ClientOptions{TLS: tlsConfig})
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

// clusterStatus puts together the status of a multi-process cluster: the
// controller's view (nodes, liveness, generation, roles) and every
// reachable node's own status (its roles, its log replica, its stash).
func clusterStatus(ctx context.Context, view *wire.ViewResponse, creds credentials.TransportCredentials) (*wire.StatusResponse, error) {
	type answer struct {
		st  *wire.StatusResponse
		err error
	}
	answers := make([]answer, len(view.Nodes))
	var wg sync.WaitGroup
	for i, n := range view.Nodes {
		if !n.Alive {
			continue
		}
		wg.Add(1)
		go func(i int, addr string) {
			defer wg.Done()
			nctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			st, err := statusOf(nctx, addr, creds)
			answers[i] = answer{st, err}
		}(i, n.Address)
	}
	wg.Wait()
	out := &wire.StatusResponse{Generation: view.Generation, Controller: view.Controller, LogReplicas: view.LogReplicas,
		LastRecoveryMicros: view.LastRecoveryMicros, LastRecoveryUnixMs: view.LastRecoveryUnixMs}
	served := map[uint32]bool{}
	now := time.Now()
	for i, n := range view.Nodes {
		a := answers[i]
		ns := &wire.NodeStatus{Id: n.Id, Address: n.Address, Class: n.Class, Pool: n.Pool, Dc: n.Dc, Zone: n.Zone,
			Machine: n.Machine, LastSeenUnixMs: n.LastSeenUnixMs, Health: "alive"}
		if !n.Alive || a.err != nil || a.st == nil {
			ns.Health = "unreachable"
			if n.LastSeenUnixMs > 0 {
				ns.UnreachableMs = now.Sub(time.UnixMilli(n.LastSeenUnixMs)).Milliseconds()
			}
		} else {
			if a.st.Node != nil {
				ns.Roles, ns.Generation, ns.LogDurableVersion = a.st.Node.Roles, a.st.Node.Generation, a.st.Node.LogDurableVersion
				ns.RecoveryMicros, ns.RecoveredVersion, ns.RecoveryUnixMs = a.st.Node.RecoveryMicros, a.st.Node.RecoveredVersion, a.st.Node.RecoveryUnixMs
			}
			if out.Pools == nil {
				out.Pools = a.st.Pools
			}
			if n.Address == view.StatelessAddress {
				out.CommittedVersion, out.Commits, out.Conflicts, out.TooOld, out.PoolFull = a.st.CommittedVersion, a.st.Commits, a.st.Conflicts, a.st.TooOld, a.st.PoolFull
				out.CommitBatches, out.RateLimit, out.RateLimitReason, out.Log = a.st.CommitBatches, a.st.RateLimit, a.st.RateLimitReason, a.st.Log
				out.Distribution = a.st.Distribution // the data distributor runs there
				out.StashShares = a.st.StashShares
			}
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
	excluded := map[uint32]bool{}
	for _, loc := range view.Stashes {
		excluded[loc.Tag] = loc.Excluded
	}
	for _, st := range out.Stashes {
		if sh := shares[st.Id]; sh != nil {
			st.Shards, st.Fetching = sh.Shards, sh.Fetching
		}
		st.Excluded = excluded[st.Id]
	}
	return out, nil
}

// printNodesTo prints the nodes of a multi-process cluster.
func printNodesTo(out io.Writer, st *wire.StatusResponse) {
	if len(st.Nodes) == 0 {
		return
	}
	fmt.Fprintf(out, "generation %d   controller %s   log replicas %s", st.Generation, st.Controller, strings.Join(st.LogReplicas, ","))
	if st.LastRecoveryUnixMs > 0 {
		fmt.Fprintf(out, "   last recovery %s, took %s", time.UnixMilli(st.LastRecoveryUnixMs).Format(time.RFC3339), time.Duration(st.LastRecoveryMicros)*time.Microsecond)
	}
	fmt.Fprint(out, "\n\n")
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "NODE\tADDRESS\tCLASS\tPOOL\tDC/ZONE\tHEALTH\tGEN\tLOG VERSION\tROLES")
	for _, n := range st.Nodes {
		health := n.Health
		if n.Health == "unreachable" && n.UnreachableMs > 0 {
			health += fmt.Sprintf(" for %s", (time.Duration(n.UnreachableMs) * time.Millisecond).Round(100*time.Millisecond))
		}
		logv := "-"
		if n.LogDurableVersion > 0 {
			logv = fmt.Sprint(n.LogDurableVersion)
		}
		pool := n.Pool
		if pool == "" {
			pool = "-"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s/%s\t%s\t%d\t%s\t%s\n", n.Id, n.Address, n.Class, pool, n.Dc, n.Zone, health, n.Generation, logv, strings.Join(n.Roles, ","))
	}
	w.Flush()
	fmt.Fprintln(out)
}
