package anomalies

import (
	"context"
	"errors"
	"fmt"
	"net"
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

// InstallHint names the Debian packages the Redis/PostgreSQL setup needs.
const InstallHint = "apt-get update && apt-get install -y redis-server postgresql"

// Where the peers' binaries are looked for besides PATH: Debian's
// postgresql packages put the server binaries in pgBinGlob. Variables for
// the tests.
var (
	pgBinGlob      = "/usr/lib/postgresql/*/bin"
	redisExtraDirs = []string{"/usr/bin", "/usr/sbin"}
)

// binaries are the peer servers' executables.
type binaries struct {
	redisServer      string
	initdb, postgres string
}

// findBinaries finds redis-server on PATH (or in /usr/bin, /usr/sbin) and
// initdb and postgres in the newest /usr/lib/postgresql/*/bin, else on PATH.
func findBinaries() (binaries, error) {
	if runtime.GOOS != "linux" {
		return binaries{}, fmt.Errorf("anomalies: the %s setup runs on Linux only: %w", SetupRedisPostgres, errServersMissing)
	}
	var b binaries
	var missing []string
	b.redisServer = lookPath("redis-server", redisExtraDirs...)
	if b.redisServer == "" {
		missing = append(missing, "redis-server (Debian package redis-server)")
	}
	dirs, _ := filepath.Glob(pgBinGlob)
	sort.Slice(dirs, func(i, j int) bool { return pgMajor(dirs[i]) > pgMajor(dirs[j]) })
	for _, d := range dirs {
		i, p := filepath.Join(d, "initdb"), filepath.Join(d, "postgres")
		if isExecutable(i) && isExecutable(p) {
			b.initdb, b.postgres = i, p
			break
		}
	}
	if b.postgres == "" {
		b.initdb, b.postgres = lookPath("initdb"), lookPath("postgres")
	}
	if b.initdb == "" || b.postgres == "" {
		missing = append(missing, "PostgreSQL's initdb and postgres (Debian package postgresql, in "+pgBinGlob+")")
	}
	if len(missing) > 0 {
		return b, fmt.Errorf("anomalies: the %s setup needs %s, not found: install them with `%s`: %w",
			SetupRedisPostgres, strings.Join(missing, " and "), InstallHint, errServersMissing)
	}
	return b, nil
}

// CheckServers reports whether redis-server and PostgreSQL are installed
// where the Redis/PostgreSQL setup looks for them. Its error names the
// Debian packages to install.
func CheckServers() error {
	_, err := findBinaries()
	return err
}

// IsServersMissing reports whether err says the peers are not installed.
func IsServersMissing(err error) bool { return errors.Is(err, errServersMissing) }

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

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// process is a started server.
type process struct {
	name   string
	cmd    *exec.Cmd
	exited chan struct{} // closed when the process has exited
	log    string        // its log file
}

func startProcess(name string, cmd *exec.Cmd, log string) (*process, error) {
	f, err := os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("anomalies: start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, exited: make(chan struct{}), log: log}
	go func() {
		cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// stop sends sig, and SIGKILL if the process has not exited after grace.
func (p *process) stop(sig os.Signal, grace time.Duration) {
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
func (p *process) failure(err error) error {
	tail := ""
	if b, rerr := os.ReadFile(p.log); rerr == nil {
		if len(b) > 2000 {
			b = b[len(b)-2000:]
		}
		tail = "\n" + strings.TrimSpace(string(b))
	}
	return fmt.Errorf("anomalies: %s did not start: %w (log %s):%s", p.name, err, p.log, tail)
}

// waitReady calls probe until it succeeds, the process exits, or timeout.
func (p *process) waitReady(ctx context.Context, timeout time.Duration, probe func(context.Context) error) error {
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

// peers are a private redis-server and PostgreSQL cluster in a temporary
// directory.
type peers struct {
	dir       string
	redis     *process
	redisAddr string
	postgres  *process
	pgConnStr string
	pgUID     int // -1: this process's user
	pgGID     int
	stopped   bool
}

// startPeers starts both servers; clients is the number of connections the
// workload will open to PostgreSQL.
func startPeers(ctx context.Context, clients int) (*peers, error) {
	bins, err := findBinaries()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "distash-bench-anomalies-peers-")
	if err != nil {
		return nil, err
	}
	p := &peers{dir: dir, pgUID: -1, pgGID: -1}
	// The postgres user must reach its directory below this one.
	if err := os.Chmod(dir, 0o755); err != nil {
		p.stop()
		return nil, err
	}
	if err := p.startRedis(ctx, bins.redisServer); err != nil {
		p.stop()
		return nil, err
	}
	if err := p.startPostgres(ctx, bins, clients); err != nil {
		p.stop()
		return nil, err
	}
	return p, nil
}

// startRedis starts redis-server on a free loopback port, without
// persistence (no RDB snapshots, no AOF).
func (p *peers) startRedis(ctx context.Context, bin string) error {
	rdir := filepath.Join(p.dir, "redis")
	if err := os.Mkdir(rdir, 0o700); err != nil {
		return err
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		port, err := freePort()
		if err != nil {
			return err
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
			return err
		}
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		rc := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true, MaxRetries: -1})
		err = proc.waitReady(ctx, 15*time.Second, func(ctx context.Context) error { return rc.Ping(ctx).Err() })
		rc.Close()
		if err == nil {
			p.redis, p.redisAddr = proc, addr
			return nil
		}
		proc.stop(syscall.SIGKILL, time.Second)
		lastErr = err
	}
	return lastErr
}

// startPostgres creates a cluster with initdb and starts postgres on a free
// loopback port with its unix socket in the temporary directory. Run as
// root, both run as the "postgres" system user (PostgreSQL refuses root).
func (p *peers) startPostgres(ctx context.Context, bins binaries, clients int) error {
	pdir := filepath.Join(p.dir, "postgres")
	if err := os.Mkdir(pdir, 0o700); err != nil {
		return err
	}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return fmt.Errorf("anomalies: running as root, PostgreSQL must run as another user, and there is no 'postgres' system user (the Debian package postgresql creates it; `%s`): %w", InstallHint, err)
		}
		p.pgUID, _ = strconv.Atoi(u.Uid)
		p.pgGID, _ = strconv.Atoi(u.Gid)
		if err := os.Chown(pdir, p.pgUID, p.pgGID); err != nil {
			return err
		}
	}
	data, sock := filepath.Join(pdir, "data"), filepath.Join(pdir, "sock")
	if err := os.Mkdir(sock, 0o700); err != nil {
		return err
	}
	if p.pgUID >= 0 {
		if err := os.Chown(sock, p.pgUID, p.pgGID); err != nil {
			return err
		}
	}
	env := append(os.Environ(), "LC_ALL=C", "LANG=C", "PGTZ=UTC")
	initdb := exec.CommandContext(ctx, bins.initdb, "-D", data, "-U", "postgres", "--auth=trust",
		"--encoding=UTF8", "--locale=C", "--no-sync")
	initdb.Dir, initdb.Env, initdb.SysProcAttr = pdir, env, procAttr(p.pgUID, p.pgGID)
	if out, err := initdb.CombinedOutput(); err != nil {
		return fmt.Errorf("anomalies: initdb %s: %w\n%s", data, err, strings.TrimSpace(string(out)))
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		port, err := freePort()
		if err != nil {
			return err
		}
		cmd := exec.Command(bins.postgres, "-D", data, "-p", strconv.Itoa(port), "-k", sock,
			"-c", "listen_addresses=127.0.0.1",
			"-c", fmt.Sprintf("max_connections=%d", clients+20))
		cmd.Dir, cmd.Env, cmd.SysProcAttr = pdir, env, procAttr(p.pgUID, p.pgGID)
		proc, err := startProcess("postgres", cmd, filepath.Join(p.dir, fmt.Sprintf("postgres-%d.log", attempt)))
		if err != nil {
			return err
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
			p.postgres, p.pgConnStr = proc, connStr
			return nil
		}
		proc.stop(syscall.SIGQUIT, 5*time.Second)
		lastErr = err
	}
	return lastErr
}

// stop stops both servers (PostgreSQL with a fast shutdown) and removes
// their files.
func (p *peers) stop() {
	if p.stopped {
		return
	}
	p.stopped = true
	if p.postgres != nil {
		p.postgres.stop(syscall.SIGINT, 15*time.Second)
	}
	if p.redis != nil {
		p.redis.stop(syscall.SIGTERM, 10*time.Second)
	}
	os.RemoveAll(p.dir)
}
