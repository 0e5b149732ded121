package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/distash/distash"
	"github.com/distash/distash/internal/clusterstatus"
	"github.com/distash/distash/internal/statusjson"
	"github.com/distash/distash/internal/wire"
)

func cliCmd() *cobra.Command {
	var cluster string
	var timeout time.Duration
	var tlsf tlsFlags
	cmd := &cobra.Command{
		Use:   "cli",
		Short: "Talk to a running cluster: get, set, clear, getrange, status; configure, exclude, include, kill",
		Long: `Talk to a running cluster. Keys and values are strings in which \xNN
escapes stand for arbitrary bytes; output is printed the same way.
A cluster that serves mutual TLS needs --tls-cert, --tls-key and --tls-ca
(or $DISTASH_TLS_CERT, $DISTASH_TLS_KEY, $DISTASH_TLS_CA): this client's
certificate and key, and the CA that signed the server's certificate.`,
	}
	cmd.PersistentFlags().StringVar(&cluster, "cluster", envOr("DISTASH_CLUSTER", defaultCluster), "cluster address(es), host:port[,host:port] (env DISTASH_CLUSTER)")
	cmd.PersistentFlags().DurationVar(&timeout, "timeout", 10*time.Second, "give up after this long")
	tlsf.add(cmd.PersistentFlags(), "client", true)
	cmd.PersistentFlags().StringVar(&tlsf.token, "token", os.Getenv("DISTASH_TOKEN"), "bearer token (JWT) naming this client on a cluster with [auth] token_keys, for every verb (env DISTASH_TOKEN; docs/security.md)")

	withDB := func(fn func(ctx context.Context, db *distash.DB, out io.Writer, args []string) error) func(*cobra.Command, []string) error {
		return func(cmd *cobra.Command, args []string) error {
			cl, err := tlsf.connect()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			db, err := distash.Open(ctx, cluster, cl.db()...)
			if err != nil {
				return tlsHint(err, cl.tls)
			}
			defer db.Close()
			return fn(ctx, db, cmd.OutOrStdout(), args)
		}
	}
	get := &cobra.Command{
		Use: "get KEY", Short: "Print the value of KEY", Args: cobra.ExactArgs(1),
		RunE: withDB(func(ctx context.Context, db *distash.DB, out io.Writer, args []string) error {
			var v []byte
			err := db.ReadTransact(ctx, func(tr *distash.Tx) error {
				var err error
				v, err = tr.Get(unescape(args[0]))
				return err
			})
			if err != nil {
				return err
			}
			if v == nil {
				fmt.Fprintf(out, "%s: not found\n", escape(unescape(args[0])))
				return nil
			}
			fmt.Fprintln(out, escape(v))
			return nil
		}),
	}
	set := &cobra.Command{
		Use: "set KEY VALUE", Short: "Set KEY to VALUE", Args: cobra.ExactArgs(2),
		RunE: withDB(func(ctx context.Context, db *distash.DB, out io.Writer, args []string) error {
			var tr0 *distash.Tx
			err := db.Transact(ctx, func(tr *distash.Tx) error {
				tr0 = tr
				tr.Set(unescape(args[0]), unescape(args[1]))
				return nil
			})
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "committed at version %d\n", tr0.CommittedVersion())
			return nil
		}),
	}
	clear := &cobra.Command{
		Use: "clear KEY [END]", Short: "Clear KEY, or every key in [KEY, END)", Args: cobra.RangeArgs(1, 2),
		RunE: withDB(func(ctx context.Context, db *distash.DB, out io.Writer, args []string) error {
			err := db.Transact(ctx, func(tr *distash.Tx) error {
				if len(args) == 2 {
					tr.ClearRange(unescape(args[0]), unescape(args[1]))
				} else {
					tr.Clear(unescape(args[0]))
				}
				return nil
			})
			if err == nil {
				fmt.Fprintln(out, "cleared")
			}
			return err
		}),
	}
	var limit int
	var reverse bool
	getrange := &cobra.Command{
		Use: "getrange BEGIN END", Short: "Print the pairs in [BEGIN, END)", Args: cobra.ExactArgs(2),
		RunE: withDB(func(ctx context.Context, db *distash.DB, out io.Writer, args []string) error {
			var kvs []distash.KeyValue
			err := db.ReadTransact(ctx, func(tr *distash.Tx) error {
				var err error
				kvs, err = tr.GetRange(unescape(args[0]), unescape(args[1]), distash.RangeOptions{Limit: limit, Reverse: reverse})
				return err
			})
			if err != nil {
				return err
			}
			for _, p := range kvs {
				fmt.Fprintf(out, "%s = %s\n", escape(p.Key), escape(p.Value))
			}
			fmt.Fprintf(out, "(%d pairs)\n", len(kvs))
			return nil
		}),
	}
	getrange.Flags().IntVar(&limit, "limit", 100, "at most this many pairs (0: all)")
	getrange.Flags().BoolVar(&reverse, "reverse", false, "in reverse key order")

	status := &cobra.Command{
		Use: "status [json]", Short: "Show pools and stashes: bytes, keys, hits, misses, evictions", Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := tlsf.connect()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			st, err := clusterstatus.GatherWith(ctx, cluster, cl.status())
			if err != nil {
				return tlsHint(err, cl.tls)
			}
			if len(args) == 1 {
				if args[0] != "json" {
					return fmt.Errorf("status: unknown format %q (want json)", args[0])
				}
				b, err := statusjson.Marshal(st)
				if err != nil {
					return err
				}
				fmt.Fprintln(cmd.OutOrStdout(), string(b))
				return nil
			}
			printStatusTo(cmd.OutOrStdout(), st)
			return nil
		},
	}
	cmd.AddCommand(get, set, clear, getrange, status)
	cmd.AddCommand(adminCmds(&cluster, &timeout, &tlsf)...)
	cmd.AddCommand(backupCmds(&cluster, &timeout, &tlsf)...) // issue 23
	cmd.AddCommand(authCmds(&cluster, &timeout, &tlsf))      // issue 24
	return cmd
}

func printStatusTo(out io.Writer, st *wire.StatusResponse) {
	for _, w := range st.Warnings {
		fmt.Fprintf(out, "WARNING: %s\n", w)
	}
	if len(st.Warnings) > 0 {
		fmt.Fprintln(out)
	}
	printNodesTo(out, st)
	if st.BuildVersion != "" {
		fmt.Fprintf(out, "protocol %s   build %s\n", protocolRange(st.ProtocolMin, st.ProtocolMax), buildOf(st.BuildVersion, st.BuildCommit))
	} else if st.ProtocolMax > 0 {
		fmt.Fprintf(out, "protocol %s (every node that answers speaks it)\n", protocolRange(st.ProtocolMin, st.ProtocolMax))
	}
	switch st.Auth {
	case "trusted-network":
		fmt.Fprintln(out, "auth: trusted-network mode (no [auth]): every connection may read, write and administer everything")
	case "enforced":
		fmt.Fprintln(out, "auth: enforced: identities and grants of [auth] (distash cli auth list)")
	}
	spilled := ""
	if n := st.Log.GetEntriesSpilled(); n > 0 {
		spilled = fmt.Sprintf(", %d spilled to disk (%.1f MiB)", n, float64(st.Log.GetBytesSpilled())/(1<<20))
	}
	fmt.Fprintf(out, "committed version %d   commits %d   conflicts %d   too old %d   pool full %d   log: %d replica(s), %d entries in memory%s\n\n",
		st.CommittedVersion, st.Commits, st.Conflicts, st.TooOld, st.PoolFull, st.Log.GetReplicas(), st.Log.GetEntriesInMemory(), spilled)
	if st.RateLimit > 0 {
		fmt.Fprintf(out, "ratekeeper: limiting to %.0f transactions/s: %s\n\n", st.RateLimit, st.RateLimitReason)
	}
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "POOL\tPREFIX\tMEDIUM\tMODE\tENGINE\tSTASHES\tR\tCAPACITY/STASH")
	for _, p := range st.Pools {
		capacity := "unlimited"
		if p.CapacityBytes > 0 {
			capacity = humanize.IBytes(uint64(p.CapacityBytes))
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\n", p.Name, escape(p.Prefix), p.Medium, p.Mode, p.Engine, p.Stashes, p.Replication, capacity)
	}
	w.Flush()
	fmt.Fprintln(out)
	modes := map[string]string{}
	for _, p := range st.Pools {
		modes[p.Name] = p.Mode
	}
	printDistributionTo(out, st)
	w = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "STASH\tPOOL\tKEYS\tBYTES\tSHARDS\tWINDOW\tREADS\tHITS\tMISSES\tEVICTIONS\tFILTERED\tVERSION\tHEALTH")
	for _, s := range st.Stashes {
		hits, misses, ev := "-", "-", "-"
		if modes[s.Pool] == "ephemeral" {
			hits, misses, ev = strconv.FormatInt(s.Hits, 10), strconv.FormatInt(s.Misses, 10), strconv.FormatInt(s.Evictions, 10)
		}
		health := s.Health
		if s.Restarts > 0 {
			health += fmt.Sprintf(" (%d restarts)", s.Restarts)
		}
		switch {
		case s.GivenUp:
			health += ", failed (data given up)"
		case s.Excluded:
			health += ", excluded"
		}
		shards := strconv.Itoa(int(s.Shards))
		if s.Fetching > 0 {
			shards += fmt.Sprintf(" (%d fetching)", s.Fetching)
		}
		fmt.Fprintf(w, "%d\t%s-%d\t%d\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%d\t%d\t%s\n", s.Id, s.Pool, s.Index, s.Keys, humanize.IBytes(uint64(s.Bytes)),
			shards, humanize.IBytes(uint64(s.WindowBytes)), s.Reads, hits, misses, ev, s.FilterNegatives, s.Version, health)
	}
	w.Flush()
	for _, s := range st.Stashes {
		if s.LastError == "" {
			continue
		}
		since := ""
		if s.HealthSinceUnixMs > 0 {
			since = fmt.Sprintf(" since %s", time.UnixMilli(s.HealthSinceUnixMs).Format(time.RFC3339))
		}
		fmt.Fprintf(out, "  %s-%d is %s%s; last failure: %s\n", s.Pool, s.Index, s.Health, since, s.LastError)
	}
	engines := map[string]string{}
	for _, p := range st.Pools {
		engines[p.Name] = p.Engine
	}
	header := false
	for _, s := range st.Stashes {
		if len(s.EngineCounters) == 0 {
			continue
		}
		if !header {
			fmt.Fprintln(out, "\nEngine counters:")
			header = true
		}
		parts := make([]string, len(s.EngineCounters))
		for i, c := range s.EngineCounters {
			v := strconv.FormatInt(c.Value, 10)
			if strings.HasSuffix(c.Name, "_bytes") {
				v = humanize.IBytes(uint64(max(c.Value, 0)))
			}
			parts[i] = strings.ReplaceAll(c.Name, "_", " ") + " " + v
		}
		fmt.Fprintf(out, "  %s-%d (%s): %s\n", s.Pool, s.Index, engines[s.Pool], strings.Join(parts, ", "))
	}
	printDevicesTo(out, st)
}

// printDevicesTo prints one line per stash that emulates a device
// ([pool.device]): utilisation, queue, I/O counts, bytes and latencies.
func printDevicesTo(out io.Writer, st *wire.StatusResponse) {
	header := false
	for _, s := range st.Stashes {
		d := s.Device
		if d == nil {
			continue
		}
		if !header {
			fmt.Fprintln(out, "\nEmulated devices:")
			header = true
		}
		us := func(v float64) string {
			return time.Duration(v * float64(time.Microsecond)).Round(time.Microsecond).String()
		}
		fmt.Fprintf(out, "  %s-%d (%s): %.0f%% busy, queue %d (%d in service), %d reads %s, %d writes %s, %d syncs; read p50 %s p99 %s, write p99 %s, sync p99 %s\n",
			s.Pool, s.Index, d.Profile, 100*d.BusyFraction, d.QueueLength, d.InService,
			d.Reads, humanize.IBytes(uint64(max(d.ReadBytes, 0))), d.Writes, humanize.IBytes(uint64(max(d.WrittenBytes, 0))), d.Syncs,
			us(d.ReadP50Us), us(d.ReadP99Us), us(d.WriteP99Us), us(d.SyncP99Us))
	}
}

// printDistributionTo prints the data distributor's view of each pool:
// shards, teams, replicas missing, moves in flight and queued.
func printDistributionTo(out io.Writer, st *wire.StatusResponse) {
	if len(st.Distribution) == 0 {
		return
	}
	fmt.Fprintln(out, "Data distribution:")
	for _, d := range st.Distribution {
		fmt.Fprintf(out, "  %s: %d shards on %d teams, ~%s (sampled), R=%d; %d under-replicated, %d moving (%s left), %d queued; %d moves done; failure wait %s\n",
			d.Pool, d.Shards, d.Teams, humanize.IBytes(uint64(max(d.Bytes, 0))), d.Replication, d.UnderReplicated, d.Moving,
			humanize.IBytes(uint64(max(d.MovingBytesLeft, 0))), d.Queued, d.MovesDone, time.Duration(d.FailureWaitMs)*time.Millisecond)
		if d.Warning != "" {
			fmt.Fprintf(out, "    warning: %s\n", d.Warning)
		}
		for _, r := range d.Queue {
			state := "queued"
			if r.InFlight {
				state = "moving"
			}
			to := fmt.Sprint(r.To)
			if r.Reason == "split" {
				to = "split"
			}
			fmt.Fprintf(out, "    %-7s %-9s [%s, %s)  %v -> %s  %s\n", state, r.Reason, escape(r.Begin), escape(r.End), r.From, to, humanize.IBytes(uint64(max(r.Bytes, 0))))
		}
	}
	fmt.Fprintln(out)
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// unescape turns \xNN escapes into bytes.
func unescape(s string) []byte {
	var out []byte
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && s[i+1] == 'x' {
			if b, err := strconv.ParseUint(s[i+2:i+4], 16, 8); err == nil {
				out = append(out, byte(b))
				i += 3
				continue
			}
		}
		out = append(out, s[i])
	}
	return out
}

// escape prints bytes as text with \xNN for the unprintable, as status
// json prints prefixes.
func escape(b []byte) string { return statusjson.Escape(b) }
