package dd

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/cockroachdb/datadriven"

	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/shardmap"
)

// TestPlanner runs the planner's scripts, testdata/*.txt: each states a
// pool, its stashes, shards and moves in flight, and what PlanPool does
// with them. `go test -run TestPlanner ./internal/dd -rewrite` writes the
// expectations anew (then read the diff). The directives:
//
//	pool name=p prefix=p/ replication=2 [ephemeral] [across-dcs] [shard-bytes=400]
//	     [write-split-rate=N] [max-moves=N] [imbalance=F] [failure-wait=1m]
//	     [map-version=N]
//	stashes      one a line: TAG [pool=P] [at=DC/ZONE] [addr=HOST:PORT] [down=DURATION] [excluded]
//	             [retired] [retired-here] [given-up] [unreachable]
//	shards       one a line, in key order: BEGIN END team=1,2 [dest=3] [bytes=N]
//	             [split-at=K] [rate=N] [rate-split-at=K] [dests=serving,fetching:N,copied,-]
//	             (a destination's answer may end @V: the version it had applied)
//	moves        the moves the distributor started, one a line:
//	             BEGIN END from=1,2 to=1,3 reason=R [bytes=N] [started=DURATION ago]
//	plan         prints the pool's status and the actions, each with its commit
//
// The time is fixed; down= and started= say how long before it.
func TestPlanner(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		s := &Snapshot{Now: time.Unix(100000, 0)}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			var err error
			switch d.Cmd {
			case "pool":
				err = scriptPool(s, d.CmdArgs)
			case "stashes":
				err = eachLine(d.Input, func(f []string) error { return scriptStash(s, f) }, func() { s.Stashes = map[kv.Tag]StashState{} })
			case "shards":
				err = eachLine(d.Input, func(f []string) error { return scriptShard(s, f) }, func() { s.Shards = nil })
			case "moves":
				err = eachLine(d.Input, func(f []string) error { return scriptMove(s, f) }, func() { s.Moves = map[string]Move{} })
			case "plan":
				return formatPlan(PlanPool(s))
			default:
				err = fmt.Errorf("unknown directive %q", d.Cmd)
			}
			if err != nil {
				t.Fatalf("%s: %v", d.Pos, err)
			}
			return ""
		})
	})
}

// eachLine resets a part of the snapshot, then calls f with the fields of
// every line of input that is not blank.
func eachLine(input string, f func([]string) error, reset func()) error {
	reset()
	for _, line := range strings.Split(input, "\n") {
		if fields := strings.Fields(line); len(fields) > 0 {
			if err := f(fields); err != nil {
				return fmt.Errorf("%q: %w", line, err)
			}
		}
	}
	return nil
}

// args parses key=value (or bare flag) fields.
func args(fields []string) map[string]string {
	out := map[string]string{}
	for _, f := range fields {
		k, v, _ := strings.Cut(f, "=")
		out[k] = v
	}
	return out
}

func scriptPool(s *Snapshot, cmdArgs []datadriven.CmdArg) error {
	a := map[string]string{}
	for _, c := range cmdArgs {
		a[c.Key] = strings.Join(c.Vals, ",")
	}
	r, err := strconv.Atoi(a["replication"])
	_, eph := a["ephemeral"]
	_, across := a["across-dcs"]
	s.Pool = PoolSettings{Name: a["name"], Prefix: []byte(a["prefix"]), Replication: r, Ephemeral: eph, AcrossDCs: across}
	s.FailureWait = time.Minute
	if v, ok := a["failure-wait"]; ok && err == nil {
		s.FailureWait, err = time.ParseDuration(v)
	}
	s.Limits = Limits{ShardBytes: 400}
	for k, dst := range map[string]any{"shard-bytes": &s.Limits.ShardBytes, "write-split-rate": &s.Limits.WriteSplitRate,
		"max-moves": &s.Limits.MaxMoves, "imbalance": &s.Limits.Imbalance} {
		if v, ok := a[k]; ok && err == nil {
			_, err = fmt.Sscan(v, dst)
		}
	}
	s.Limits = s.Limits.withDefaults()
	s.MapVersion = 0
	if v, ok := a["map-version"]; ok && err == nil {
		_, err = fmt.Sscan(v, &s.MapVersion)
	}
	return err
}

func scriptStash(s *Snapshot, f []string) error {
	tag, err := strconv.Atoi(f[0])
	a := args(f[1:])
	st := StashState{StashInfo: StashInfo{Tag: kv.Tag(tag), Pool: s.Pool.Name, Alive: true}}
	if p, ok := a["pool"]; ok {
		st.Pool = p
	}
	st.DC, st.Zone, _ = strings.Cut(a["at"], "/")
	if v, ok := a["down"]; ok && err == nil {
		var d time.Duration
		d, err = time.ParseDuration(v)
		st.Alive, st.DownSince = false, s.Now.Add(-d)
	}
	st.Address = a["addr"]
	_, st.Excluded = a["excluded"]
	_, st.Retired = a["retired"]
	_, st.RetiredHere = a["retired-here"]
	_, st.GivenUp = a["given-up"]
	_, st.Unreachable = a["unreachable"]
	s.Stashes[st.Tag] = st
	return err
}

func scriptShard(s *Snapshot, f []string) error {
	if len(f) < 2 {
		return fmt.Errorf("want BEGIN END ...")
	}
	a := args(f[2:])
	sh := ShardState{Shard: shardmap.Shard{Begin: []byte(f[0]), End: []byte(f[1]), Pool: s.Pool.Name}}
	var err error
	sh.Team, err = parseTags(a["team"])
	if v, ok := a["dest"]; ok && err == nil {
		sh.Dest, err = parseTags(v)
	}
	m := &sh.Metrics
	for k, dst := range map[string]any{"bytes": &m.Bytes, "rate": &m.WriteRate} {
		if v, ok := a[k]; ok && err == nil {
			_, err = fmt.Sscan(v, dst)
		}
	}
	if v, ok := a["split-at"]; ok {
		m.SplitKey = []byte(v)
	}
	if v, ok := a["rate-split-at"]; ok {
		m.WriteSplitKey = []byte(v)
	}
	if v, ok := a["dests"]; ok && err == nil {
		sh.Dests, err = parseDests(v)
	}
	s.Shards = append(s.Shards, sh)
	return err
}

// parseDests parses destinations' answers: STATE[:FETCHED], or - for none.
func parseDests(v string) ([]*Metrics, error) {
	var out []*Metrics
	for _, d := range strings.Split(v, ",") {
		if d == "-" {
			out = append(out, nil)
			continue
		}
		d, applied, hasApplied := strings.Cut(d, "@")
		state, fetched, ok := strings.Cut(d, ":")
		m := &Metrics{State: state}
		if hasApplied {
			if _, err := fmt.Sscan(applied, &m.Applied); err != nil {
				return nil, err
			}
		}
		if ok {
			if _, err := fmt.Sscan(fetched, &m.FetchedBytes); err != nil {
				return nil, err
			}
		}
		out = append(out, m)
	}
	return out, nil
}

func scriptMove(s *Snapshot, f []string) error {
	if len(f) < 2 {
		return fmt.Errorf("want BEGIN END ...")
	}
	a := args(f[2:])
	mv := Move{Relocation: Relocation{Begin: []byte(f[0]), End: []byte(f[1]), Pool: s.Pool.Name, Reason: a["reason"]}, Started: s.Now}
	from, err := parseTags(a["from"])
	to, err2 := parseTags(a["to"])
	mv.From, mv.To, err = from, to, cmpErr(err, err2)
	if v, ok := a["bytes"]; ok && err == nil {
		_, err = fmt.Sscan(v, &mv.Bytes)
	}
	if v, ok := a["started"]; ok && err == nil {
		var d time.Duration
		d, err = time.ParseDuration(v)
		mv.Started = s.Now.Add(-d)
	}
	s.Moves[string(mv.Begin)] = mv
	return err
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

func parseTags(v string) ([]kv.Tag, error) {
	var out []kv.Tag
	for _, f := range strings.Split(v, ",") {
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, err
		}
		out = append(out, kv.Tag(n))
	}
	return out, nil
}

// formatPlan prints the status the plan leaves (every commit succeeding)
// and its actions, each followed by the commit it makes.
func formatPlan(p *PoolPlan) string {
	st := p.status(p.Actions)
	var b strings.Builder
	fmt.Fprintf(&b, "status: %d shards, %d teams, %d bytes, %d under-replicated; %d moving (%d bytes left), %d queued\n",
		st.Shards, st.Teams, st.Bytes, st.UnderReplicated, st.Moving, st.MovingBytesLeft, st.Queued)
	if st.Warning != "" {
		fmt.Fprintf(&b, "warning: %s\n", st.Warning)
	}
	for _, a := range p.Actions {
		b.WriteString(formatAction(a))
		for _, sh := range a.Set {
			fmt.Fprintf(&b, "\n  set [%s, %s) team=%s", key(sh.Begin), key(sh.End), tags(sh.Team))
			if sh.Moving() {
				fmt.Fprintf(&b, " dest=%s", tags(sh.Dest))
			}
		}
		for _, k := range a.Clear {
			fmt.Fprintf(&b, "\n  clear %s", key(k))
		}
		b.WriteString("\n")
	}
	return b.String()
}

func formatAction(a Action) string {
	r := a.Move.Relocation
	var b strings.Builder
	fmt.Fprintf(&b, "%s [%s, %s) %s", a.Kind, key(r.Begin), key(r.End), tags(r.From))
	if r.To != nil {
		fmt.Fprintf(&b, " -> %s", tags(r.To))
	}
	if r.Split != nil {
		fmt.Fprintf(&b, " at %s", key(r.Split))
	}
	fmt.Fprintf(&b, " (%s", r.Reason)
	if r.Priority != 0 {
		fmt.Fprintf(&b, ", priority %d", r.Priority)
	}
	fmt.Fprintf(&b, ", %d bytes)", r.Bytes)
	switch {
	case a.Kind == ActContinue && a.Copying:
		fmt.Fprintf(&b, ": copying, %d bytes left", a.BytesLeft)
	case a.Kind == ActContinue:
		fmt.Fprintf(&b, ": not copying, %d bytes left", a.BytesLeft)
	case a.Kind == ActFinish || a.Kind == ActCancel:
		fmt.Fprintf(&b, " started %s ago", time.Unix(100000, 0).Sub(a.Move.Started))
	}
	if a.Why != "" {
		fmt.Fprintf(&b, ": %s", a.Why)
	}
	return b.String()
}

func tags(ts []kv.Tag) string {
	s := make([]string, len(ts))
	for i, t := range ts {
		s[i] = strconv.Itoa(int(t))
	}
	return strings.Join(s, ",")
}

// key prints a key as it is when printable, else quoted.
func key(k []byte) string {
	for _, r := range string(k) {
		if !unicode.IsPrint(r) || r == ' ' {
			return strconv.Quote(string(k))
		}
	}
	return string(k)
}
