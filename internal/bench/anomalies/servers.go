package anomalies

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"

	"github.com/distash/distash/internal/bench/peerserver"
)

// InstallHint names the Debian packages the Redis/PostgreSQL setup needs.
const InstallHint = "apt-get update && apt-get install -y redis-server postgresql"

// findBinaries checks that redis-server and PostgreSQL's initdb and
// postgres are installed where peerserver looks for them.
func findBinaries() error {
	if runtime.GOOS != "linux" {
		return fmt.Errorf("anomalies: the %s setup runs on Linux only: %w", SetupRedisPostgres, errServersMissing)
	}
	var missing []string
	if _, err := peerserver.RedisBinary(); err != nil {
		missing = append(missing, "redis-server (Debian package redis-server)")
	}
	if _, _, err := peerserver.PostgresBinaries(); err != nil {
		missing = append(missing, "PostgreSQL's initdb and postgres (Debian package postgresql, in "+peerserver.PGBinGlob+")")
	}
	if len(missing) > 0 {
		return fmt.Errorf("anomalies: the %s setup needs %s, not found: install them with `%s`: %w",
			SetupRedisPostgres, strings.Join(missing, " and "), InstallHint, errServersMissing)
	}
	return nil
}

// CheckServers reports whether redis-server and PostgreSQL are installed
// where the Redis/PostgreSQL setup looks for them. Its error names the
// Debian packages to install.
func CheckServers() error { return findBinaries() }

// IsServersMissing reports whether err says the peers are not installed.
func IsServersMissing(err error) bool { return errors.Is(err, errServersMissing) }

// peers are a private redis-server and PostgreSQL cluster in a temporary
// directory.
type peers struct {
	dir       string
	redis     *peerserver.Redis
	redisAddr string
	postgres  *peerserver.Postgres
	pgConnStr string
	stopped   bool
}

// startPeers starts both servers; clients is the number of connections the
// workload will open to PostgreSQL.
func startPeers(ctx context.Context, clients int) (*peers, error) {
	if err := findBinaries(); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "distash-bench-anomalies-peers-")
	if err != nil {
		return nil, err
	}
	p := &peers{dir: dir}
	// The postgres user must reach its directory below this one.
	if err := os.Chmod(dir, 0o755); err != nil {
		p.stop()
		return nil, err
	}
	if p.redis, err = peerserver.StartRedis(ctx, dir); err != nil {
		p.stop()
		return nil, fmt.Errorf("anomalies: %w", err)
	}
	p.redisAddr = p.redis.Addr
	if p.postgres, err = peerserver.StartPostgres(ctx, dir, clients+20); err != nil {
		p.stop()
		return nil, fmt.Errorf("anomalies: %w", err)
	}
	p.pgConnStr = p.postgres.ConnStr
	return p, nil
}

// stop stops both servers (PostgreSQL with a fast shutdown) and removes
// their files.
func (p *peers) stop() {
	if p.stopped {
		return
	}
	p.stopped = true
	if p.postgres != nil {
		p.postgres.Stop()
	}
	if p.redis != nil {
		p.redis.Stop()
	}
	os.RemoveAll(p.dir)
}
