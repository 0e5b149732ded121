package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/distash/distash/internal/wire"
)

// printNodesTo prints the nodes of a multi-process cluster.
func printNodesTo(out io.Writer, st *wire.StatusResponse) {
	if len(st.Nodes) == 0 {
		return
	}
	if st.ViewStale {
		age := "never confirmed by a leader"
		if st.ViewAgeMs >= 0 {
			age = fmt.Sprintf("%s old", (time.Duration(st.ViewAgeMs) * time.Millisecond).Round(100*time.Millisecond))
		}
		fmt.Fprintf(out, "STALE VIEW (no controller): %s's copy, %s\n", st.ViewFrom, age)
	}
	fmt.Fprintf(out, "generation %d   controller %s   log replicas %s", st.Generation, st.Controller, strings.Join(st.LogReplicas, ","))
	if m := st.CoordinatorMembership; m != nil {
		fmt.Fprintf(out, "   coordinators %d/%d answering", m.Alive, m.Members)
		if !m.Quorum {
			fmt.Fprint(out, " (NO QUORUM)")
		}
	}
	if m := st.LogMembership; m != nil {
		fmt.Fprintf(out, "   log %d/%d alive", m.Alive, m.Members)
		if !m.Quorum {
			fmt.Fprint(out, " (NO QUORUM)")
		}
	}
	if st.LastRecoveryUnixMs > 0 {
		fmt.Fprintf(out, "   last recovery %s, took %s", time.UnixMilli(st.LastRecoveryUnixMs).Format(time.RFC3339), time.Duration(st.LastRecoveryMicros)*time.Microsecond)
	}
	fmt.Fprint(out, "\n\n")
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "NODE\tADDRESS\tCLASS\tPOOL\tDC/ZONE\tHEALTH\tGEN\tLOG VERSION\tPROTOCOL\tBUILD\tROLES")
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
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s/%s\t%s\t%d\t%s\t%s\t%s\t%s\n", n.Id, n.Address, n.Class, pool, n.Dc, n.Zone, health, n.Generation, logv,
			protocolRange(n.ProtocolMin, n.ProtocolMax), buildOf(n.BuildVersion, n.BuildCommit), strings.Join(n.Roles, ","))
	}
	w.Flush()
	fmt.Fprintln(out)
}

// protocolRange prints a range of protocol versions: "1-2", "2", "-"
// when unknown (a node that did not answer, or of a release before
// versions were stated) and "none" when empty (nodes with no version in
// common).
func protocolRange(lo, hi int32) string {
	switch {
	case hi == 0:
		return "-"
	case lo > hi:
		return "none"
	case lo == hi:
		return fmt.Sprint(hi)
	}
	return fmt.Sprintf("%d-%d", lo, hi)
}

// buildOf prints a build: its module version and commit.
func buildOf(v, commit string) string {
	switch {
	case v == "":
		return "-"
	case commit == "":
		return v
	}
	return v + "@" + commit
}
