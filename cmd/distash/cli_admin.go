package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/distash/distash/internal/clusterstatus"
	"github.com/distash/distash/internal/coord"
	"github.com/distash/distash/internal/coordrpc"
	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/wire"
)

// defaultExcludeWait bounds `exclude --wait` when --timeout is not given:
// moving a stash's shards takes as long as copying its bytes.
const defaultExcludeWait = time.Hour

// adminCmds are the operator verbs of a multi-process cluster: configure,
// exclude, include, kill. cluster, timeout and tlsf are cli's persistent
// flags.
func adminCmds(cluster *string, timeout *time.Duration, tlsf *tlsFlags) []*cobra.Command {
	// withCoordinators connects to the coordinators of a multi-process
	// cluster and hands fn the controller's view; an embedded cluster is
	// refused with an error saying why.
	withCoordinators := func(cmd *cobra.Command, verb string, wait time.Duration,
		fn func(ctx context.Context, cc *coordrpc.Client, view *wire.ViewResponse, out io.Writer) error) error {
		cl, err := tlsf.connect()
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		view, err := coordinatorView(ctx, verb, *cluster, cl)
		if err != nil {
			return tlsHint(err, cl.tls)
		}
		cc, err := coordrpc.NewClient(*cluster, cl.coordinators())
		if err != nil {
			return err
		}
		defer cc.Close()
		return fn(ctx, cc, view, cmd.OutOrStdout())
	}

	configure := &cobra.Command{
		Use:   "configure failure_wait=DURATION | pool=NAME replication=N",
		Short: "Change a live setting of a multi-process cluster",
		Long: `Change a setting of a running multi-process cluster, kept by the
coordinators in place of the configuration file's value:

  distash cli configure failure_wait=5s           # how long a stash may be down before its shards are re-replicated
  distash cli configure pool=data replication=3   # replicas of each shard of pool data (1 to the pool's stash slots)

"default" as the value goes back to the configuration file's value.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := coord.ParseConfigure(args)
			if err != nil {
				return err
			}
			return withCoordinators(cmd, "configure", *timeout, func(ctx context.Context, cc *coordrpc.Client, view *wire.ViewResponse, out io.Writer) error {
				was, err := checkConfigure(view, c)
				if err != nil {
					return err
				}
				if err := cc.Configure(ctx, c.Pool, c.Key, c.Value); err != nil {
					return err
				}
				v, err := cc.View(ctx)
				if err != nil {
					return fmt.Errorf("configured, but reading the setting back failed: %w", err)
				}
				now, _ := configuredValue(v, c)
				if c.Pool != "" {
					fmt.Fprintf(out, "pool %s: %s is now %s (was %s)\n", c.Pool, c.Key, now, was)
				} else {
					fmt.Fprintf(out, "%s is now %s (was %s)\n", c.Key, now, was)
				}
				return nil
			})
		},
	}

	var wait, failed bool
	exclude := &cobra.Command{
		Use:   "exclude ADDR [ADDR...]",
		Short: "Move every shard off the stashes at these addresses (host:port)",
		Long: `Exclude the stash nodes at these addresses (host:port, as in
"distash cli status"): the data distributor moves their shards to other
stashes; they keep serving until then. With --wait, wait (up to --timeout,
default 1h here) until every stash on the excluded addresses holds no
shard, printing how many are left each second: then they can be stopped
("distash cli kill ADDR"). "distash cli include ADDR" undoes it.

With --failed, the stashes at these addresses are gone for good (a lost
disk or machine) and their data is given up: their tags are retired at
once, so the log stops keeping writes for them and the shards they shared
with live stashes are re-replicated from those without waiting. A durable
shard whose only replicas were there loses its data: it starts empty on
other stashes. --failed always waits (up to --timeout, default 1h) until
no shard names those stashes; writes to such a shard acknowledged before
it returns may be lost, writes after it are kept. If a stash node at
such an address comes back, it drops what it held and joins as a new
stash; "distash cli include ADDR" lets it take shards again.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkAddrArgs(args, false); err != nil {
				return err
			}
			d := *timeout
			if (wait || failed) && !cmd.Flags().Changed("timeout") {
				d = defaultExcludeWait
			}
			return withCoordinators(cmd, "exclude", d, func(ctx context.Context, cc *coordrpc.Client, view *wire.ViewResponse, out io.Writer) error {
				if failed {
					cl, err := tlsf.connect()
					if err != nil {
						return err
					}
					return excludeFailed(ctx, out, cc, cl, view, args, d)
				}
				if _, err := cc.Exclude(ctx, args); err != nil {
					return err
				}
				for _, a := range args {
					fmt.Fprintf(out, "excluded %s: its shards move to other stashes; run `distash cli include %s` to undo\n", a, a)
					if len(stashesAt(view, []string{a})) == 0 {
						fmt.Fprintf(out, "  (no stash node is registered at %s now)\n", a)
					}
				}
				if !wait {
					return nil
				}
				cl, err := tlsf.connect()
				if err != nil {
					return err
				}
				return waitExcluded(ctx, out, *cluster, cl, args, d)
			})
		},
	}
	exclude.Flags().BoolVar(&wait, "wait", false, "wait until the stashes at these addresses hold no shard (up to --timeout; default 1h)")
	exclude.Flags().BoolVar(&failed, "failed", false, "the stashes at these addresses are gone for good: retire them and give up their data (durable shards held only there start empty); waits like --wait")

	include := &cobra.Command{
		Use:   "include ADDR [ADDR...] | all",
		Short: "Undo exclude: the stashes at these addresses may hold shards again",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			all := len(args) == 1 && args[0] == "all"
			if !all {
				if err := checkAddrArgs(args, true); err != nil {
					return err
				}
			}
			return withCoordinators(cmd, "include", *timeout, func(ctx context.Context, cc *coordrpc.Client, view *wire.ViewResponse, out io.Writer) error {
				left, err := cc.Include(ctx, args)
				if err != nil {
					return err
				}
				if all {
					if len(view.Excluded) == 0 {
						fmt.Fprintln(out, "no address was excluded")
					} else {
						fmt.Fprintf(out, "included %s: their stashes may hold shards again\n", strings.Join(view.Excluded, ", "))
					}
				} else {
					for _, a := range args {
						if slices.Contains(view.Excluded, a) {
							fmt.Fprintf(out, "included %s: its stashes may hold shards again\n", a)
						} else {
							fmt.Fprintf(out, "%s was not excluded\n", a)
						}
					}
				}
				if len(left) > 0 {
					fmt.Fprintf(out, "still excluded: %s\n", strings.Join(left, ", "))
				}
				return nil
			})
		},
	}

	kill := &cobra.Command{
		Use:   "kill ADDR",
		Short: "Stop the node process at ADDR (host:port) of a multi-process cluster",
		Long: `Stop the "distash server" node at ADDR: it stops serving and its process
exits with status 0. Exclude its stashes first ("distash cli exclude ADDR
--wait") if the cluster should keep every shard's replication.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			addr := args[0]
			if err := checkAddrArgs(args, false); err != nil {
				return err
			}
			cl, err := tlsf.connect()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(context.Background(), *timeout)
			defer cancel()
			if err := killNode(ctx, addr, cl); err != nil {
				return tlsHint(err, cl.tls)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "asked %s to stop: its process exits; `distash cli status` shows the node unreachable\n", addr)
			return nil
		},
	}
	return []*cobra.Command{configure, exclude, include, kill}
}

// errEmbedded refuses an admin verb on an embedded cluster.
func errEmbedded(verb, addr string) error {
	return fmt.Errorf("`distash cli %s` needs a multi-process cluster (nodes started with --coordinators, docs/cluster.md): "+
		"%s is an embedded cluster (distash server without --coordinators), whose stashes and settings are fixed by its configuration", verb, addr)
}

// coordinatorView returns the controller's view, or an error if cluster is
// an embedded cluster.
func coordinatorView(ctx context.Context, verb, cluster string, cl cliClient) (*wire.ViewResponse, error) {
	view, embedded, err := clusterstatus.FindClusterWith(ctx, cluster, cl.status())
	if err != nil {
		return nil, err
	}
	if embedded != "" {
		return nil, errEmbedded(verb, embedded)
	}
	return view, nil
}

// checkAddrArgs checks addresses given on the command line.
func checkAddrArgs(addrs []string, include bool) error {
	for _, a := range addrs {
		if a == "all" && include {
			return errors.New(`include: "all" stands alone: it includes every excluded address`)
		}
		host, port, err := net.SplitHostPort(a)
		if err != nil || host == "" || port == "" {
			return fmt.Errorf("%q is not an address host:port (as `distash cli status` shows them)", a)
		}
	}
	return nil
}

// checkConfigure checks c against the controller's view (the pool exists;
// replication is at most its slots) and returns the setting in force.
func checkConfigure(view *wire.ViewResponse, c coord.Command) (string, error) {
	if c.Key == coord.KeyReplication {
		slots := -1
		var pools []string
		for _, p := range view.Slots {
			pools = append(pools, p.Pool)
			if p.Pool == c.Pool {
				slots = len(p.Nodes)
			}
		}
		if slots < 0 {
			sort.Strings(pools)
			return "", fmt.Errorf("configure: pool=%s: no such pool (pools: %s)", c.Pool, strings.Join(pools, ", "))
		}
		var n int
		if c.Value != "default" {
			if _, err := fmt.Sscan(c.Value, &n); err == nil && n > slots {
				return "", fmt.Errorf("configure: pool=%s %s=%d: the pool has %d stash slots, so at most %d", c.Pool, c.Key, n, slots, slots)
			}
		}
	}
	return configuredValue(view, c)
}

// configuredValue is the value in force of c's setting in view.
func configuredValue(view *wire.ViewResponse, c coord.Command) (string, error) {
	switch c.Key {
	case coord.KeyFailureWait:
		return (time.Duration(view.FailureWaitMs) * time.Millisecond).String(), nil
	case coord.KeyReplication:
		for _, r := range view.Replication {
			if r.Pool == c.Pool {
				return fmt.Sprint(r.Replication), nil
			}
		}
		return "?", nil
	}
	return "", fmt.Errorf("configure: unknown key %q", c.Key)
}

// stashesAt returns the stash slots whose node is at one of addrs.
func stashesAt(view *wire.ViewResponse, addrs []string) []*wire.StashLocation {
	var out []*wire.StashLocation
	for _, l := range view.Stashes {
		if l.Node != "" && slices.Contains(addrs, l.Address) {
			out = append(out, l)
		}
	}
	return out
}

// shardsLeft counts the shards the stashes at addrs still hold, as the
// cluster's status reports them (StashStatus.shards; the largest figure
// when several nodes report a stash). ready is false until the data
// distributor reports at all (StatusResponse.distribution).
func shardsLeft(view *wire.ViewResponse, st *wire.StatusResponse, addrs []string) (total int, per map[string]int, ready bool) {
	per = map[string]int{}
	tags := map[uint32]string{}
	for _, l := range stashesAt(view, addrs) {
		tags[l.Tag] = l.Address
		per[l.Address] += 0
	}
	most := map[uint32]int{}
	for _, s := range st.Stashes {
		if _, ok := tags[s.Id]; ok {
			most[s.Id] = max(most[s.Id], int(s.Shards))
		}
	}
	for tag, n := range most {
		per[tags[tag]] += n
		total += n
	}
	return total, per, len(st.Distribution) > 0
}

// waitExcluded polls the cluster's status every second until the stashes
// at addrs hold no shard, printing what is left; an error when ctx ends
// first.
func waitExcluded(ctx context.Context, out io.Writer, cluster string, cl cliClient, addrs []string, limit time.Duration) error {
	start := time.Now()
	last := "the cluster's status was not read yet"
	for {
		view, embedded, err := clusterstatus.FindClusterWith(ctx, cluster, cl.status())
		if err == nil && embedded != "" {
			return errEmbedded("exclude", embedded)
		}
		if err == nil {
			var st *wire.StatusResponse
			if st, err = clusterstatus.FromView(ctx, view, cl.status().StatusOf()); err == nil {
				total, per, ready := shardsLeft(view, st, addrs)
				switch {
				case !ready:
					last = "the data distributor has not reported yet"
				case total == 0:
					fmt.Fprintf(out, "done after %s: the stashes at %s hold no shard; they can be stopped (`distash cli kill ADDR`)\n",
						time.Since(start).Round(time.Second), strings.Join(addrs, ", "))
					return nil
				default:
					var parts []string
					for _, a := range addrs {
						if n, ok := per[a]; ok {
							parts = append(parts, fmt.Sprintf("%s: %d", a, n))
						}
					}
					last = fmt.Sprintf("%d shards left (%s)", total, strings.Join(parts, ", "))
				}
			}
		}
		if err != nil {
			last = err.Error()
		}
		fmt.Fprintf(out, "%s  %s\n", time.Since(start).Round(time.Second), last)
		select {
		case <-ctx.Done():
			return fmt.Errorf("exclude --wait: gave up after %s (--timeout): %s; the addresses stay excluded", limit, last)
		case <-time.After(time.Second):
		}
	}
}

// killNode asks the node at addr to stop (Admin.Kill).
func killNode(ctx context.Context, addr string, cl cliClient) error {
	conn, err := grpc.NewClient(addr, cl.dialOptions()...)
	if err != nil {
		return err
	}
	defer conn.Close()
	resp, err := wire.NewAdminClient(conn).Kill(ctx, &wire.KillRequest{Reason: "distash cli kill"}, grpc.WaitForReady(true))
	switch status.Code(err) {
	case codes.OK:
		return resp.Error.Err()
	case codes.Unimplemented:
		return fmt.Errorf("%s does not serve `distash cli kill`: it is an embedded cluster (distash server without --coordinators), or not a distash node; stop its process instead", addr)
	}
	return fmt.Errorf("kill %s: %w", addr, err)
}

// excludeFailed declares the stashes at addrs failed (exclude --failed)
// and waits until no shard names one of them, printing how many do each
// second: from then on every shard they held has live stashes, or had its
// data given up and started empty, so a write acknowledged later is kept.
func excludeFailed(ctx context.Context, out io.Writer, cc *coordrpc.Client, cl cliClient, view *wire.ViewResponse, addrs []string, limit time.Duration) error {
	alive, err := cc.ExcludeFailed(ctx, addrs)
	for kv.CodeOf(err) == kv.CodeProcessBehind { // a controller that just took over
		fmt.Fprintf(out, "%s; retrying\n", err)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Second):
		}
		alive, err = cc.ExcludeFailed(ctx, addrs)
	}
	if err != nil {
		return err
	}
	for _, a := range addrs {
		if slices.Contains(alive, a) {
			fmt.Fprintf(out, "declared %s failed, but the controller heard from its stash node lately: it keeps its stash and data, and is excluded, its shards moving off it (`distash cli include %s` undoes that); only stashes retired there before are given up. To give it up, stop it (`distash cli kill %s`) and, once the controller counts it dead (a few seconds), run this again\n", a, a, a)
			continue
		}
		fmt.Fprintf(out, "declared %s failed: its stashes are retired and their data given up; their shards move to live stashes, and a durable shard held only there starts empty (its data is lost)\n", a)
		if len(stashesAt(view, []string{a})) == 0 {
			fmt.Fprintf(out, "  (no stash node is registered at %s now: only stashes retired there before are given up)\n", a)
		}
	}
	start := time.Now()
	last := "the shard map was not read yet"
	for {
		left, err := shardsOnGivenUp(ctx, cc, cl, addrs)
		switch {
		case err != nil:
			last = err.Error()
		case left == 0:
			fmt.Fprintf(out, "done after %s: no shard names a stash at %s; writes acknowledged from now on are kept\n",
				time.Since(start).Round(time.Second), strings.Join(addrs, ", "))
			return nil
		default:
			last = fmt.Sprintf("%d shards still name a stash given up", left)
		}
		fmt.Fprintf(out, "%s  %s\n", time.Since(start).Round(time.Second), last)
		select {
		case <-ctx.Done():
			return fmt.Errorf("exclude --failed: gave up waiting after %s (--timeout): %s; the addresses stay failed and the data distributor goes on", limit, last)
		case <-time.After(time.Second):
		}
	}
}

// shardsOnGivenUp counts the shards of the shard map (as the transaction
// node serving the cluster's roles has it) whose team names a stash that
// was at one of addrs and whose data was given up.
func shardsOnGivenUp(ctx context.Context, cc *coordrpc.Client, cl cliClient, addrs []string) (int, error) {
	view, err := cc.View(ctx)
	if err != nil {
		return 0, err
	}
	gone := map[uint32]bool{}
	for _, l := range view.Stashes {
		if l.GivenUp && (slices.Contains(addrs, l.Address) || slices.Contains(addrs, l.RetiredAt)) {
			gone[l.Tag] = true
		}
	}
	if view.StatelessAddress == "" {
		return 0, errors.New("the cluster's roles are not running (a recovery is under way)")
	}
	conn, err := grpc.NewClient(view.StatelessAddress, cl.dialOptions()...)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	resp, err := wire.NewDiStashClient(conn).Locations(ctx, &wire.LocationsRequest{Begin: []byte{}, End: []byte{0xff, 0xff}})
	if err == nil {
		err = resp.Error.Err()
	}
	if err != nil {
		return 0, fmt.Errorf("read the shard map at %s: %w", view.StatelessAddress, err)
	}
	n := 0
	for _, sh := range resp.Shards {
		if slices.ContainsFunc(sh.Stashes, func(t uint32) bool { return gone[t] }) {
			n++
		}
	}
	return n, nil
}
