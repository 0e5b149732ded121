package clustertest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/distash/distash/internal/wire"
)

// ProcsOptions lay out a cluster of `distash server` processes.
type ProcsOptions struct {
	Binary string // the distash binary
	Dir    string // cluster.toml, and each node's directory (and log) under it
	TOML   string // the cluster's configuration
	Nodes  []Spec
	// Coordinators is how many transaction nodes, the first ones, are the
	// coordinators (0: all of them, at most 3).
	Coordinators int
	// Verbose adds -v: the nodes log at info level.
	Verbose bool
	// Logs writes each node's output to Dir/<name>.log; else it goes to
	// Output, each line prefixed with the node's name (nil: discarded).
	Logs   bool
	Output io.Writer
	// ReadyTimeout bounds the wait for a node to serve (default 90 s).
	ReadyTimeout time.Duration
	// StopTimeout is how long StopAll waits for a node to exit after
	// SIGTERM before it kills it (default 40 s: a server that cannot stop
	// exits after its own 30 s, printing its goroutines' stacks).
	StopTimeout time.Duration
	// HTTP picks a second free port per node, Proc.HTTPAddr (for --http).
	HTTP bool
}

// Procs is a cluster of `distash server` processes on loopback.
type Procs struct {
	Binary       string
	Dir          string
	Config       string // the path of cluster.toml
	Coordinators string // the cluster string
	Nodes        []*Proc
	readyTimeout time.Duration
	stopTimeout  time.Duration

	mu    sync.Mutex
	conns map[string]*grpc.ClientConn // by address, for Status
}

// NewProcs writes the configuration and picks a free port per node; no
// node is started yet (Start).
func NewProcs(o ProcsOptions) (*Procs, error) {
	cfg, err := WriteConfig(o.Dir, o.TOML)
	if err != nil {
		return nil, err
	}
	n := len(o.Nodes)
	if o.HTTP {
		n *= 2
	}
	// One call, so that no address is handed out twice.
	addrs, err := FreeAddrs(n)
	if err != nil {
		return nil, err
	}
	var coords []string
	for i, s := range o.Nodes {
		if s.Class == Transaction && (o.Coordinators == 0 && len(coords) < 3 || len(coords) < o.Coordinators) {
			coords = append(coords, addrs[i])
		}
	}
	c := &Procs{Binary: o.Binary, Dir: o.Dir, Config: cfg, Coordinators: strings.Join(coords, ","),
		readyTimeout: o.ReadyTimeout, stopTimeout: o.StopTimeout, conns: map[string]*grpc.ClientConn{}}
	if c.readyTimeout <= 0 {
		c.readyTimeout = 90 * time.Second
	}
	if c.stopTimeout <= 0 {
		c.stopTimeout = 40 * time.Second
	}
	for i, s := range o.Nodes {
		p := &Proc{Spec: s, Addr: addrs[i], Dir: filepath.Join(o.Dir, s.Name)}
		if o.HTTP {
			p.HTTPAddr = addrs[len(o.Nodes)+i]
		}
		p.Args = []string{"server", "--config", cfg, "--dir", p.Dir, "--listen", p.Addr, "--coordinators", c.Coordinators}
		if o.Verbose {
			p.Args = append(p.Args, "-v")
		}
		p.Args = append(p.Args, "--class", s.Class)
		if s.Pool != "" {
			p.Args = append(p.Args, "--pool", s.Pool)
		}
		if s.DC != "" {
			p.Args = append(p.Args, "--dc", s.DC)
		}
		if s.Zone != "" {
			p.Args = append(p.Args, "--zone", s.Zone)
		}
		if o.Logs {
			p.LogPath = filepath.Join(o.Dir, s.Name+".log")
		} else if o.Output != nil {
			p.Output = PrefixWriter(s.Name+": ", o.Output)
		}
		c.Nodes = append(c.Nodes, p)
	}
	return c, nil
}

// Node is the node named name, nil if none is.
func (c *Procs) Node(name string) *Proc {
	for _, n := range c.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// ByAddr is the node listening on addr, nil if none is.
func (c *Procs) ByAddr(addr string) *Proc {
	for _, n := range c.Nodes {
		if n.Addr == addr {
			return n
		}
	}
	return nil
}

// Start starts nodes (every node if none is given) together, since the
// first ones wait for a coordinator quorum, and waits until each serves.
func (c *Procs) Start(ctx context.Context, nodes ...*Proc) error {
	if len(nodes) == 0 {
		nodes = c.Nodes
	}
	for _, n := range nodes {
		if err := n.Start(c.Binary); err != nil {
			return fmt.Errorf("start %s: %w", n.Name, err)
		}
	}
	for _, n := range nodes {
		if err := n.WaitReady(ctx, c.readyTimeout); err != nil {
			return err
		}
	}
	return nil
}

// StopAll stops every running node at once (SIGTERM, then SIGKILL after
// ProcsOptions.StopTimeout) and closes the connections of Status. The error joins the nodes'
// that did not stop cleanly.
func (c *Procs) StopAll() error {
	var wg sync.WaitGroup
	errs := make([]error, len(c.Nodes))
	for i, n := range c.Nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = n.Stop(syscall.SIGTERM, c.stopTimeout)
		}()
	}
	wg.Wait()
	c.mu.Lock()
	for a, conn := range c.conns {
		conn.Close()
		delete(c.conns, a)
	}
	c.mu.Unlock()
	return errors.Join(errs...)
}

// Conn is a plaintext gRPC connection to the node at addr, kept until
// StopAll.
func (c *Procs) Conn(addr string) (*grpc.ClientConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if conn, ok := c.conns[addr]; ok {
		return conn, nil
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	c.conns[addr] = conn
	return conn, nil
}

// Status is the status of the node at addr (its own, not the cluster's).
func (c *Procs) Status(ctx context.Context, addr string) (*wire.StatusResponse, error) {
	conn, err := c.Conn(addr)
	if err != nil {
		return nil, err
	}
	return wire.NewDiStashClient(conn).Status(ctx, &wire.StatusRequest{})
}

// Stashes are the stash nodes, in layout order.
func (c *Procs) Stashes() []*Proc { return c.class(Stash) }

// Transactions are the transaction nodes, in layout order.
func (c *Procs) Transactions() []*Proc { return c.class(Transaction) }

func (c *Procs) class(class string) []*Proc {
	var out []*Proc
	for _, n := range c.Nodes {
		if n.Class == class {
			out = append(out, n)
		}
	}
	return out
}

// Workdir makes dir, or a temporary directory (prefix and a random
// suffix) if dir is "", for a benchmark's nodes. The cleanup removes it,
// unless keep: then it prints where it is to out.
func Workdir(dir, prefix string, keep bool, out io.Writer) (string, func(), error) {
	var err error
	if dir == "" {
		if dir, err = os.MkdirTemp("", prefix); err != nil {
			return "", nil, err
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", nil, err
	}
	return dir, func() {
		if keep {
			fmt.Fprintf(out, "nodes' directories and logs kept in %s\n", dir)
		} else {
			os.RemoveAll(dir)
		}
	}, nil
}

// Executable is bin, or this process's executable if bin is "" (a
// benchmark runs its nodes from its own binary).
func Executable(bin string) (string, error) {
	if bin != "" {
		return bin, nil
	}
	return os.Executable()
}
