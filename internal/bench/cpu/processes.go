package cpu

import (
	"context"
	"fmt"
	"io"
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
		if profile {
			for _, n := range procs.Nodes {
				n.Args = append(n.Args, "--http", n.HTTPAddr, "--pprof")
			}
		}
		if err := procs.Start(ctx); err != nil {
			stop()
			return nil, err
		}
		pc := &ProcessCluster{Cluster: procs.Coordinators, Stop: stop}
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
