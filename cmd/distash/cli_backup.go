package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	"github.com/distash/distash"
	"github.com/distash/distash/internal/backup"
	"github.com/distash/distash/internal/clusterstatus"
	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/wire"
)

// backupCmds are `distash cli backup ...` and `distash cli restore`
// (docs/backup.md).
func backupCmds(cluster *string, timeout *time.Duration, tlsf *tlsFlags) []*cobra.Command {
	// withBackup hands fn a client of the Backup service of the node that
	// holds the commit proxy.
	withBackup := func(cmd *cobra.Command, fn func(ctx context.Context, bc wire.BackupClient, out io.Writer) error) error {
		cl, err := tlsf.connect()
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), *timeout)
		defer cancel()
		addr, err := transactionNode(ctx, *cluster, cl)
		if err != nil {
			return tlsHint(err, cl.tls)
		}
		conn, err := grpc.NewClient(addr, cl.dialOptions()...)
		if err != nil {
			return err
		}
		defer conn.Close()
		return fn(ctx, wire.NewBackupClient(conn), cmd.OutOrStdout())
	}
	bk := &cobra.Command{
		Use:   "backup start|status|stop|verify",
		Short: "Continuous backup to a directory or S3 (docs/backup.md)",
	}
	var to string
	var pools []string
	var ephemeral bool
	start := &cobra.Command{
		Use: "start --to URL [--pools a,b] [--include-ephemeral]", Short: "Start a continuous backup of the durable pools", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if to == "" {
				return errors.New("backup start: --to URL is required (file:///dir or s3://bucket/prefix?endpoint=...)")
			}
			return withBackup(cmd, func(ctx context.Context, bc wire.BackupClient, out io.Writer) error {
				resp, err := bc.Start(ctx, &wire.BackupStartRequest{Url: to, Pools: pools, IncludeEphemeral: ephemeral}, grpc.WaitForReady(true))
				if err = rpcErr(err, resp.GetError()); err != nil {
					return err
				}
				fmt.Fprintf(out, "backup %s started at version %d to %s\n", resp.Id, resp.Version, to)
				return nil
			})
		},
	}
	start.Flags().StringVar(&to, "to", "", "destination: file:///dir or s3://bucket/prefix?endpoint=http://host:port&region=R")
	start.Flags().StringSliceVar(&pools, "pools", nil, "back up only these pools (default: every durable pool)")
	start.Flags().BoolVar(&ephemeral, "include-ephemeral", false, "back up ephemeral pools too")
	var asJSON bool
	status := &cobra.Command{
		Use: "status [--json]", Short: "Show the backup's state, restorable versions, bytes, lag and errors", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withBackup(cmd, func(ctx context.Context, bc wire.BackupClient, out io.Writer) error {
				resp, err := bc.Status(ctx, &wire.BackupStatusRequest{}, grpc.WaitForReady(true))
				if err = rpcErr(err, resp.GetError()); err != nil {
					return err
				}
				return printBackupStatus(out, resp.StatusJson, asJSON)
			})
		},
	}
	status.Flags().BoolVar(&asJSON, "json", false, "print the status as JSON")
	stop := &cobra.Command{
		Use: "stop", Short: "Stop the backup (its files stay restorable)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withBackup(cmd, func(ctx context.Context, bc wire.BackupClient, out io.Writer) error {
				resp, err := bc.Stop(ctx, &wire.BackupStopRequest{}, grpc.WaitForReady(true))
				if err = rpcErr(err, resp.GetError()); err != nil {
					return err
				}
				return printBackupStatus(out, resp.StatusJson, false)
			})
		},
	}
	var from string
	verify := &cobra.Command{
		Use: "verify --from URL", Short: "Check every file's checksum and that the backup's versions chain", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dest, err := backup.Open(from)
			if err != nil {
				return err
			}
			return backup.Verify(context.Background(), dest, cmd.OutOrStdout())
		},
	}
	verify.Flags().StringVar(&from, "from", "", "the backup's URL")
	bk.AddCommand(start, status, stop, verify)

	var version int64
	var timestamp string
	var prefixMap []string
	var rpools []string
	var rfrom string
	restore := &cobra.Command{
		Use:   "restore --from URL [--version V | --timestamp T] [--pools a,b] [--prefix-map old=new]",
		Short: "Restore a backup into a running cluster whose target ranges are empty",
		Long: `Restore a backup at a version (default: the last restorable one) into
a running cluster. The target ranges (each restored pool's prefix, after
--prefix-map) must be empty: a restore never mixes with data. --timestamp
takes RFC 3339 (2026-12-02T10:00:00Z) and restores the state as of then.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if version != 0 && timestamp != "" {
				return errors.New("restore: give --version or --timestamp, not both")
			}
			o := backup.RestoreOptions{Version: kv.Version(version), Pools: rpools, Progress: cmd.OutOrStdout()}
			if timestamp != "" {
				t, err := time.Parse(time.RFC3339Nano, timestamp)
				if err != nil {
					return fmt.Errorf("restore: --timestamp %q: want RFC 3339 (2026-12-02T10:00:00Z): %w", timestamp, err)
				}
				o.Timestamp = t
			}
			for _, p := range prefixMap {
				pm, err := backup.ParsePrefixMap([]string{p})
				if err != nil {
					return err
				}
				o.PrefixMap = append(o.PrefixMap, backup.PrefixRewrite{Old: unescape(string(pm[0].Old)), New: unescape(string(pm[0].New))})
			}
			dest, err := backup.Open(rfrom)
			if err != nil {
				return err
			}
			cl, err := tlsf.connect()
			if err != nil {
				return err
			}
			octx, cancel := context.WithTimeout(context.Background(), *timeout)
			defer cancel()
			db, err := distash.Open(octx, *cluster, cl.db()...)
			if err != nil {
				return tlsHint(err, cl.tls)
			}
			defer db.Close()
			_, err = backup.Restore(context.Background(), dest, db, o)
			return err
		},
	}
	restore.Flags().StringVar(&rfrom, "from", "", "the backup's URL")
	restore.Flags().Int64Var(&version, "version", 0, "restore this version (see backup status / verify for the range)")
	restore.Flags().StringVar(&timestamp, "timestamp", "", "restore the state as of this time (RFC 3339)")
	restore.Flags().StringSliceVar(&rpools, "pools", nil, "restore only these pools")
	restore.Flags().StringArrayVar(&prefixMap, "prefix-map", nil, "rewrite keys with prefix old to prefix new (old=new, \\xNN escapes; repeatable)")
	return []*cobra.Command{bk, restore}
}

// transactionNode returns the address of the node holding the commit
// proxy: the embedded server, or the current generation's stateless node.
func transactionNode(ctx context.Context, cluster string, cl cliClient) (string, error) {
	view, embedded, err := clusterstatus.FindClusterWith(ctx, cluster, cl.status())
	if err != nil {
		return "", err
	}
	if embedded != "" {
		return embedded, nil
	}
	if view.StatelessAddress == "" {
		return "", errors.New("the cluster has no transaction node now (recovering?): try again")
	}
	return view.StatelessAddress, nil
}

func rpcErr(err error, e *wire.Error) error {
	if err != nil {
		return err
	}
	if e != nil {
		return kv.Errorf(kv.Code(e.Code), "%s", e.Detail)
	}
	return nil
}

func printBackupStatus(out io.Writer, js string, raw bool) error {
	if raw {
		fmt.Fprintln(out, js)
		return nil
	}
	var st backup.Status
	if err := json.Unmarshal([]byte(js), &st); err != nil {
		return err
	}
	fmt.Fprintf(out, "state: %s\n", st.State)
	if st.ID == "" {
		return nil
	}
	fmt.Fprintf(out, "backup %s to %s\n", st.ID, st.URL)
	if st.Snapshot != "" {
		fmt.Fprintf(out, "snapshot: %s\n", st.Snapshot)
	}
	if st.RestorableTo > 0 {
		fmt.Fprintf(out, "restorable: version %d (%s) to %d (%s)\n", st.RestorableFrom, vtime(st.RestorableFrom), st.RestorableTo, vtime(st.RestorableTo))
	} else {
		fmt.Fprintln(out, "restorable: not yet (the first snapshot is not complete)")
	}
	fmt.Fprintf(out, "bytes: %d in %d range files and %d log files\n", st.Bytes, st.RangeFiles, st.LogFiles)
	fmt.Fprintf(out, "log copied to version %d; lag %.1fs behind the committed version\n", st.LogTo, float64(st.LagVersions)/kv.VersionsPerSecond)
	if st.LastError != "" {
		fmt.Fprintf(out, "last error (%s): %s\n", time.UnixMilli(st.ErrorAt).UTC().Format(time.RFC3339), st.LastError)
	}
	return nil
}

func vtime(v kv.Version) string { return time.UnixMicro(int64(v)).UTC().Format(time.RFC3339) }
