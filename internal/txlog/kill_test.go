package txlog

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/logentry"
	"github.com/distash/distash/internal/testutil/subprocess"
)

const (
	killDirEnv      = "TXLOG_KILL9_DIR"
	killReplicasEnv = "TXLOG_KILL9_REPLICAS"
)

// TestKill9Child is the child process of TestKill9Durability: it appends
// entries 1, 2, 3, ... pipelined, prints "acked <v>" for each acknowledged
// one, pops now and then, snapshots often, and runs until it is killed.
func TestKill9Child(t *testing.T) {
	dir := os.Getenv(killDirEnv)
	if dir == "" {
		t.Skip("helper process of TestKill9Durability")
	}
	replicas, _ := strconv.Atoi(os.Getenv(killReplicasEnv))
	opts := testOptions(dir, replicas, 1, 2)
	opts.SnapshotThreshold = 300
	opts.SnapshotInterval = 50 * time.Millisecond
	opts.TrailingLogs = 100
	l, err := Open(opts)
	if err != nil {
		fmt.Println("open failed:", err)
		os.Exit(2)
	}
	out := bufio.NewWriter(os.Stdout)
	fmt.Fprintf(out, "start %d\n", l.LastVersion())
	out.Flush()
	v := l.LastVersion()
	var window []*logentry.Future
	for i := 0; i < 1_000_000; i++ {
		e := &logentry.Entry{Version: v + 1, PrevVersion: v, Mutations: []logentry.TaggedMutation{mut(fmt.Sprint(v+1), 1, 2)}}
		v++
		window = append(window, l.Append(e))
		if len(window) < 64 {
			continue
		}
		f := window[0]
		window = window[1:]
		if err := f.Wait(context.Background()); err != nil {
			fmt.Fprintf(out, "error %d %v\n", f.Version(), err)
			out.Flush()
			os.Exit(3)
		}
		// Acknowledged: it must survive the kill.
		fmt.Fprintf(out, "acked %d\n", f.Version())
		out.Flush()
		if f.Version()%500 == 0 {
			l.Pop(1, f.Version()-300)
			l.Pop(2, f.Version()-400)
		}
	}
	// The parent kills it long before; if not, it waits for the kill (or
	// the -test.timeout the parent gave it) rather than exit, which the
	// parent would take for a crash.
	select {}
}

func TestKill9Durability(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a subprocess")
	}
	for _, replicas := range []int{1, 3} {
		t.Run(fmt.Sprintf("replicas=%d", replicas), func(t *testing.T) {
			dir := t.TempDir()
			var acked []kv.Version
			// Raft snapshots on a timer: the child keeps appending until
			// one exists, so the kill always hits a log with a snapshot.
			snapshotTaken := func() bool {
				snaps, _ := os.ReadDir(filepath.Join(dir, "replica-0", "snapshots"))
				return len(snaps) > 0
			}
			for round := 0; round < 2; round++ { // kill, recover, append more, kill again
				acked = append(acked, runAndKill(t, dir, replicas, 1500, snapshotTaken)...)
			}
			if snaps, _ := os.ReadDir(filepath.Join(dir, "replica-0", "snapshots")); len(snaps) == 0 {
				t.Errorf("the child took no raft snapshot")
			}
			l := openLog(t, testOptions(dir, replicas, 1, 2))
			defer l.Close()
			last := l.LastVersion()
			got := entryVersions(l)
			s := l.Stats()
			t.Logf("%d acked over 2 kills; recovered last %d, %d entries in memory, trimmed %d", len(acked), last, len(got), s.Trimmed)
			if len(got) == 0 || got[0] != s.Trimmed+1 || got[len(got)-1] != last {
				t.Fatalf("recovered entries [%v..] do not cover (%d, %d]", got[:min(1, len(got))], s.Trimmed, last)
			}
			for i := 1; i < len(got); i++ {
				if got[i] != got[i-1]+1 {
					t.Fatalf("recovered log not contiguous: %d after %d", got[i], got[i-1])
				}
			}
			for i, v := range acked {
				if i > 0 && v <= acked[i-1] {
					t.Fatalf("acked versions out of order: %d after %d", v, acked[i-1])
				}
				if v > last {
					t.Fatalf("acknowledged version %d lost (log ends at %d)", v, last)
				}
			}
			// every acknowledged version above the trim point is readable
			msgs, _ := mustPeek(t, l, 1, s.Trimmed, 0)
			present := map[kv.Version]bool{}
			for _, m := range msgs {
				present[m.Version] = true
			}
			for _, v := range acked {
				if v > s.Trimmed && !present[v] {
					t.Fatalf("acknowledged version %d not readable", v)
				}
			}
		})
	}
}

// runAndKill runs the child on dir until it acknowledged killAfter entries
// and ready reports true, SIGKILLs it, and returns every version it
// acknowledged.
func runAndKill(t *testing.T, dir string, replicas, killAfter int, ready func() bool) []kv.Version {
	t.Helper()
	cmd := subprocess.Command("TestKill9Child", killDirEnv+"="+dir, killReplicasEnv+"="+strconv.Itoa(replicas))
	cmd.Args = append(cmd.Args, "-test.timeout=2m")
	p := subprocess.Start(t, cmd)
	deadline := time.Now().Add(60 * time.Second)
	v, err := strconv.ParseInt(p.WaitFor("start ", time.Until(deadline)), 10, 64)
	if err != nil {
		t.Fatalf("bad start line: %v", err)
	}
	start := kv.Version(v)
	var acked []kv.Version
	record := func(line string) {
		rest, ok := strings.CutPrefix(line, "acked ")
		if !ok {
			t.Errorf("child: %s", line)
			return
		}
		v, err := strconv.ParseInt(rest, 10, 64)
		if err != nil {
			t.Fatalf("bad line %q", line)
		}
		acked = append(acked, kv.Version(v))
	}
	for len(acked) < killAfter || !ready() {
		line, err := p.Next(time.Until(deadline))
		if errors.Is(err, subprocess.ErrTimeout) {
			p.Kill()
			t.Fatalf("the child acknowledged %d entries in 60s (wanted %d, and a snapshot: %v)", len(acked), killAfter, ready())
		}
		if err != nil {
			_, werr := p.Wait()
			t.Fatalf("child exited before the kill: %v", werr)
		}
		record(line)
	}
	// Lines written between the kill and the death were acknowledged too.
	for _, line := range p.Kill() {
		record(line)
	}
	if len(acked) > 0 && acked[0] != start+1 {
		t.Fatalf("child started at %d but acked %d first", start, acked[0])
	}
	return acked
}
