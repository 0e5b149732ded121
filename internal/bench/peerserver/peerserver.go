// Package peerserver starts private peer servers for the benchmarks that
// compare DiStash with other stores: redis-server, a PostgreSQL cluster
// (initdb into a private directory) and etcd, each on a free loopback port,
// from the Debian packages redis-server, postgresql and etcd-server. The
// servers are killed if the benchmark's process dies (Linux: Pdeathsig).
//
// The anomalies benchmark (Redis + PostgreSQL) and the YCSB benchmark
// (Redis, PostgreSQL, etcd) start theirs here.
package peerserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

// ErrMissing is wrapped by the errors of a server that is not installed.
var ErrMissing = errors.New("peer server not installed")

// Where the binaries are looked for besides PATH: Debian's postgresql
// packages put the server binaries in PGBinGlob. Variables for the tests.
var (
	PGBinGlob      = "/usr/lib/postgresql/*/bin"
	RedisExtraDirs = []string{"/usr/bin", "/usr/sbin"}
	EtcdExtraDirs  = []string{"/usr/bin", "/usr/sbin"}
)

// The Debian packages of the servers.
const (
	RedisPackage    = "redis-server"
	PostgresPackage = "postgresql"
	EtcdPackage     = "etcd-server"
)

func notLinux(what string) error {
	return fmt.Errorf("%s: the peer servers run on Linux only: %w", what, ErrMissing)
}

// RedisBinary finds redis-server on PATH or in RedisExtraDirs.
func RedisBinary() (string, error) {
	if runtime.GOOS != "linux" {
		return "", notLinux("redis-server")
	}
	if b := lookPath("redis-server", RedisExtraDirs...); b != "" {
		return b, nil
	}
	return "", fmt.Errorf("redis-server (Debian package %s) not found: %w", RedisPackage, ErrMissing)
}

// PostgresBinaries finds initdb and postgres in the newest PGBinGlob
// directory, else on PATH.
func PostgresBinaries() (initdb, postgres string, err error) {
	if runtime.GOOS != "linux" {
		return "", "", notLinux("PostgreSQL")
	}
	dirs, _ := filepath.Glob(PGBinGlob)
	sort.Slice(dirs, func(i, j int) bool { return pgMajor(dirs[i]) > pgMajor(dirs[j]) })
	for _, d := range dirs {
		i, p := filepath.Join(d, "initdb"), filepath.Join(d, "postgres")
		if isExecutable(i) && isExecutable(p) {
			return i, p, nil
		}
	}
	initdb, postgres = lookPath("initdb"), lookPath("postgres")
	if initdb == "" || postgres == "" {
		return "", "", fmt.Errorf("PostgreSQL's initdb and postgres (Debian package %s, in %s) not found: %w", PostgresPackage, PGBinGlob, ErrMissing)
	}
	return initdb, postgres, nil
}

// EtcdBinary finds etcd on PATH or in EtcdExtraDirs.
func EtcdBinary() (string, error) {
	if runtime.GOOS != "linux" {
		return "", notLinux("etcd")
	}
	if b := lookPath("etcd", EtcdExtraDirs...); b != "" {
		return b, nil
	}
	return "", fmt.Errorf("etcd (Debian package %s) not found: %w", EtcdPackage, ErrMissing)
}

// Install installs Debian packages with apt-get, best effort: only as root
// with apt-get on PATH, apt-get's output going to out. The caller checks
// for the binaries again afterwards.
func Install(ctx context.Context, out io.Writer, pkgs ...string) error {
	if len(pkgs) == 0 {
		return nil
	}
	apt, err := exec.LookPath("apt-get")
	if err != nil || runtime.GOOS != "linux" {
		return fmt.Errorf("cannot install %s: no apt-get", strings.Join(pkgs, " "))
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("cannot install %s: not root (run `apt-get install -y %s`)", strings.Join(pkgs, " "), strings.Join(pkgs, " "))
	}
	env := append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	run := func(args ...string) error {
		cmd := exec.CommandContext(ctx, apt, args...)
		cmd.Env, cmd.Stdout, cmd.Stderr = env, out, out
		return cmd.Run()
	}
	if err := run(append([]string{"install", "-y", "--no-install-recommends"}, pkgs...)...); err == nil {
		return nil
	}
	// The package lists may be stale or absent.
	if err := run("update"); err != nil {
		return fmt.Errorf("apt-get update: %w", err)
	}
	if err := run(append([]string{"install", "-y", "--no-install-recommends"}, pkgs...)...); err != nil {
		return fmt.Errorf("apt-get install %s: %w", strings.Join(pkgs, " "), err)
	}
	return nil
}

func pgMajor(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

func lookPath(name string, extraDirs ...string) string {
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, d := range extraDirs {
		if p := filepath.Join(d, name); isExecutable(p) {
			return p
		}
	}
	return ""
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Process is a started server.
type Process struct {
	Name   string
	cmd    *exec.Cmd
	exited chan struct{} // closed when the process has exited
	Log    string        // its log file
}

func startProcess(name string, cmd *exec.Cmd, log string) (*Process, error) {
	f, err := os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Process{Name: name, cmd: cmd, exited: make(chan struct{}), Log: log}
	go func() {
		cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// Pid is the server's process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Exited is closed when the server has exited.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// StopWith sends sig, and SIGKILL if the process has not exited after
// grace.
func (p *Process) StopWith(sig os.Signal, grace time.Duration) {
	select {
	case <-p.exited:
		return
	default:
	}
	p.cmd.Process.Signal(sig)
	select {
	case <-p.exited:
	case <-time.After(grace):
		p.cmd.Process.Kill()
		<-p.exited
	}
}

// failure describes a server that did not come up, with its log's tail.
func (p *Process) failure(err error) error {
	tail := ""
	if b, rerr := os.ReadFile(p.Log); rerr == nil {
		if len(b) > 2000 {
			b = b[len(b)-2000:]
		}
		tail = "\n" + strings.TrimSpace(string(b))
	}
	return fmt.Errorf("%s did not start: %w (log %s):%s", p.Name, err, p.Log, tail)
}

// waitReady calls probe until it succeeds, the process exits, or timeout.
func (p *Process) waitReady(ctx context.Context, timeout time.Duration, probe func(context.Context) error) error {
	deadline := time.Now().Add(timeout)
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		err := probe(pctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-p.exited:
			return p.failure(fmt.Errorf("exited: %v", p.cmd.ProcessState))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return p.failure(fmt.Errorf("not ready after %s: %w", timeout, err))
		}
	}
}

// Redis is a private redis-server.
type Redis struct {
	*Process
	Addr string // host:port
}

// StartRedis starts redis-server on a free loopback port without
// persistence (no RDB snapshots, no AOF), its files in dir/redis.
func StartRedis(ctx context.Context, dir string) (*Redis, error) {
	bin, err := RedisBinary()
	if err != nil {
		return nil, err
	}
	rdir := filepath.Join(dir, "redis")
	if err := os.Mkdir(rdir, 0o700); err != nil {
		return nil, err
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		cmd := exec.Command(bin,
			"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no",
			"--dir", rdir, "--daemonize", "no", "--logfile", "",
			"--databases", "1")
		cmd.Dir = rdir
		cmd.SysProcAttr = procAttr(-1, -1)
		proc, err := startProcess("redis-server", cmd, filepath.Join(rdir, "redis.log"))
		if err != nil {
			return nil, err
		}
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		rc := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true, MaxRetries: -1})
		err = proc.waitReady(ctx, 15*time.Second, func(ctx context.Context) error { return rc.Ping(ctx).Err() })
		rc.Close()
		if err == nil {
			return &Redis{Process: proc, Addr: addr}, nil
		}
		proc.StopWith(syscall.SIGKILL, time.Second)
		lastErr = err
	}
	return nil, lastErr
}

// Stop stops the server.
func (r *Redis) Stop() { r.StopWith(syscall.SIGTERM, 10*time.Second) }

// Postgres is a private PostgreSQL cluster.
type Postgres struct {
	*Process
	ConnStr string // a pgx connection string, user postgres, database postgres
}

// StartPostgres creates a cluster with initdb in dir/postgres (dir must be
// reachable by other users when running as root) and starts postgres on a
// free loopback port, with its unix socket in that directory, allowing
// maxConns connections. Run as root, both run as the "postgres" system
// user (PostgreSQL refuses root). The server is durable (fsync on).
func StartPostgres(ctx context.Context, dir string, maxConns int) (*Postgres, error) {
	initdbBin, postgresBin, err := PostgresBinaries()
	if err != nil {
		return nil, err
	}
	pdir := filepath.Join(dir, "postgres")
	if err := os.Mkdir(pdir, 0o700); err != nil {
		return nil, err
	}
	uid, gid := -1, -1
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("running as root, PostgreSQL must run as another user, and there is no 'postgres' system user (the Debian package %s creates it): %w", PostgresPackage, err)
		}
		uid, _ = strconv.Atoi(u.Uid)
		gid, _ = strconv.Atoi(u.Gid)
		if err := os.Chown(pdir, uid, gid); err != nil {
			return nil, err
		}
	}
	data, sock := filepath.Join(pdir, "data"), filepath.Join(pdir, "sock")
	if err := os.Mkdir(sock, 0o700); err != nil {
		return nil, err
	}
	if uid >= 0 {
		if err := os.Chown(sock, uid, gid); err != nil {
			return nil, err
		}
	}
	env := append(os.Environ(), "LC_ALL=C", "LANG=C", "PGTZ=UTC")
	initdb := exec.CommandContext(ctx, initdbBin, "-D", data, "-U", "postgres", "--auth=trust",
		"--encoding=UTF8", "--locale=C", "--no-sync")
	initdb.Dir, initdb.Env, initdb.SysProcAttr = pdir, env, procAttr(uid, gid)
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb %s: %w\n%s", data, err, strings.TrimSpace(string(out)))
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		cmd := exec.Command(postgresBin, "-D", data, "-p", strconv.Itoa(port), "-k", sock,
			"-c", "listen_addresses=127.0.0.1",
			"-c", fmt.Sprintf("max_connections=%d", maxConns))
		cmd.Dir, cmd.Env, cmd.SysProcAttr = pdir, env, procAttr(uid, gid)
		proc, err := startProcess("postgres", cmd, filepath.Join(dir, fmt.Sprintf("postgres-%d.log", attempt)))
		if err != nil {
			return nil, err
		}
		connStr := fmt.Sprintf("host=127.0.0.1 port=%d user=postgres dbname=postgres sslmode=disable connect_timeout=5", port)
		err = proc.waitReady(ctx, 60*time.Second, func(ctx context.Context) error {
			c, err := pgx.Connect(ctx, connStr)
			if err != nil {
				return err
			}
			return c.Close(ctx)
		})
		if err == nil {
			return &Postgres{Process: proc, ConnStr: connStr}, nil
		}
		proc.StopWith(syscall.SIGQUIT, 5*time.Second)
		lastErr = err
	}
	return nil, lastErr
}

// Stop stops the server with a fast shutdown.
func (p *Postgres) Stop() { p.StopWith(syscall.SIGINT, 15*time.Second) }

// Etcd is a private single-member etcd.
type Etcd struct {
	*Process
	Endpoint string // host:port of the client URL
}

// StartEtcd starts a single-member etcd on free loopback ports (client and
// peer), its data in dir/etcd. It is durable (fsync per commit, etcd's
// default).
func StartEtcd(ctx context.Context, dir string) (*Etcd, error) {
	bin, err := EtcdBinary()
	if err != nil {
		return nil, err
	}
	edir := filepath.Join(dir, "etcd")
	if err := os.Mkdir(edir, 0o700); err != nil {
		return nil, err
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		cport, err := FreePort()
		if err != nil {
			return nil, err
		}
		pport, err := FreePort()
		if err != nil {
			return nil, err
		}
		curl := fmt.Sprintf("http://127.0.0.1:%d", cport)
		purl := fmt.Sprintf("http://127.0.0.1:%d", pport)
		cmd := exec.Command(bin, "--name", "bench",
			"--data-dir", filepath.Join(edir, fmt.Sprintf("data-%d", attempt)),
			"--listen-client-urls", curl, "--advertise-client-urls", curl,
			"--listen-peer-urls", purl, "--initial-advertise-peer-urls", purl,
			"--initial-cluster", "bench="+purl, "--initial-cluster-state", "new",
			"--log-level", "warn")
		cmd.Dir = edir
		cmd.Env = append(os.Environ(), "ETCD_UNSUPPORTED_ARCH="+runtime.GOARCH)
		cmd.SysProcAttr = procAttr(-1, -1)
		proc, err := startProcess("etcd", cmd, filepath.Join(edir, fmt.Sprintf("etcd-%d.log", attempt)))
		if err != nil {
			return nil, err
		}
		err = proc.waitReady(ctx, 30*time.Second, func(ctx context.Context) error {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, curl+"/health", nil)
			if err != nil {
				return err
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return err
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"true"`) {
				return fmt.Errorf("health: %s %s", resp.Status, b)
			}
			return nil
		})
		if err == nil {
			return &Etcd{Process: proc, Endpoint: fmt.Sprintf("127.0.0.1:%d", cport)}, nil
		}
		proc.StopWith(syscall.SIGKILL, time.Second)
		lastErr = err
	}
	return nil, lastErr
}

// Stop stops the server.
func (e *Etcd) Stop() { e.StopWith(syscall.SIGTERM, 10*time.Second) }
