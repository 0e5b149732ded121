package cpu

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"strconv"
	"time"

	"github.com/distash/distash/config"
	"github.com/distash/distash/internal/clustertest"
)

// ProcessOptions configure the nodes of the processes mode.
type ProcessOptions struct {
	Binary  string // the distash binary run as `server` (default: this executable)
	Dir     string // the nodes' files and logs (default: temporary)
	Keep    bool   // keep Dir at the end
	Verbose bool   // the nodes log at info level (into Dir/<node>.log)
	// GOMAXPROCS of each node: "" Go's default (every CPU), "auto" the
	// machine's CPUs shared out among the nodes (at least 1 each), or a
	// number. Nodes on machines of their own each have every CPU; nodes
	// sharing one small machine each size their scheduler to all of it,
	// and spend CPU waking and parking threads that find no work
	// (docs/benchmarks.md, "Processes against embedded in the same
	// minutes").
	GOMAXPROCS string
}

// NodeGOMAXPROCS resolves ProcessOptions.GOMAXPROCS for nodes nodes on a
// machine of cpus CPUs: 0 for Go's default.
func NodeGOMAXPROCS(s string, nodes, cpus int) (int, error) {
	switch s {
	case "", "0":
		return 0, nil
	case "auto":
		return max(1, cpus/max(1, nodes)), nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("cpu: node GOMAXPROCS %q: want auto, 0 (Go's default) or a number of CPUs", s)
	}
	return n, nil
}

// Processes returns an Options.Processes that starts the processes mode's
// cluster: one transaction node per log replica (at least one; the first
// three are the coordinators) and one stash node per stash of each pool,
// on loopback, with --http and --pprof when profiling.
func Processes(po ProcessOptions) func(ctx context.Context, toml string, profile bool, out io.Writer) (*ProcessCluster, error) {
	return func(ctx context.Context, toml string, profile bool, out io.Writer) (*ProcessCluster, error) {
		cfg, err := config.Parse([]byte(toml))
		if err != nil {
			return nil, err
		}
		bin, err := clustertest.Executable(po.Binary)
		if err != nil {
			return nil, err
		}
		dir, cleanup, err := clustertest.Workdir(po.Dir, "distash-bench-cpu-", po.Keep, out)
		if err != nil {
			return nil, err
		}
		var specs []clustertest.Spec
		add := func(name, class, pool string) {
			specs = append(specs, clustertest.Spec{Name: name, Class: class, Pool: pool, DC: "dc1", Zone: "z-" + name})
		}
		for i := range max(1, cfg.Log.Replicas) {
			add(fmt.Sprintf("tx%d", i+1), clustertest.Transaction, "")
		}
		for _, p := range cfg.Pools {
			for j := range p.Stashes {
				add(fmt.Sprintf("%s%d", p.Name, j+1), clustertest.Stash, p.Name)
			}
		}
		procsEach, err := NodeGOMAXPROCS(po.GOMAXPROCS, len(specs), runtime.NumCPU())
		if err != nil {
			cleanup()
			return nil, err
		}
		procs, err := clustertest.NewProcs(clustertest.ProcsOptions{Binary: bin, Dir: dir, TOML: toml, Nodes: specs,
			Verbose: po.Verbose, Logs: true, HTTP: profile, StopTimeout: 10 * time.Second})
		if err != nil {
			cleanup()
			return nil, err
		}
		stop := func() {
			_ = procs.StopAll()
			cleanup()
		}
		note := "nodes at Go's default GOMAXPROCS (every CPU)"
		if procsEach > 0 {
			note = fmt.Sprintf("nodes at GOMAXPROCS %d each (%d nodes, %d CPUs)", procsEach, len(specs), runtime.NumCPU())
			for _, n := range procs.Nodes {
				n.Env = []string{"GOMAXPROCS=" + strconv.Itoa(procsEach)}
			}
		}
		if profile {
			for _, n := range procs.Nodes {
				n.Args = append(n.Args, "--http", n.HTTPAddr, "--pprof")
			}
		}
		if err := procs.Start(ctx); err != nil {
			stop()
			return nil, err
		}
		pc := &ProcessCluster{Cluster: procs.Coordinators, Stop: stop, Note: note}
		for _, n := range procs.Nodes {
			node := Node{Name: n.Name, CPU: n.CPU}
			if profile {
				node.PprofURL = "http://" + n.HTTPAddr + "/debug/pprof/"
			}
			pc.Nodes = append(pc.Nodes, node)
		}
		return pc, nil
	}
}
