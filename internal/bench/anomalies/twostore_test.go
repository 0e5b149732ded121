package anomalies

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/distash/distash/internal/bench/peerserver"
)

// needServers skips the test when redis-server or PostgreSQL is missing.
func needServers(t *testing.T) {
	t.Helper()
	if err := CheckServers(); err != nil {
		t.Skipf("skipping the Redis/PostgreSQL setup: %v", err)
	}
}

// TestRedisPostgres starts the private servers, plays the race of Figure
// 7 on them step by step (it leaves the cache stale, as the paper says),
// runs the workload on them for a second, and checks that the servers are
// gone afterwards.
func TestRedisPostgres(t *testing.T) {
	needServers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	const clients = 8
	p, err := startPeers(ctx, clients)
	if err != nil {
		t.Fatal(err)
	}
	s, err := connectTwoStore(ctx, p, clients)
	if err != nil {
		p.stop()
		t.Fatal(err)
	}
	defer s.close()

	hit, _, later, a := figure7(t, ctx, s)
	if hit {
		t.Fatal("client 2's read hit the cache; the race needs a miss")
	}
	if a.Stale != 1 || a.StaleFill != 1 || a.MaxLag != 1 || later != 0 {
		t.Fatalf("Figure 7 on Redis/PostgreSQL: %+v, later read of version %d; want one entry one version stale, left by the fill, and served to the later read (version 0)", a, later)
	}

	o, err := Options{Clients: clients, Keys: 20, Duration: time.Second, Evict: 0.3, Seed: 2}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	r, err := runWorkload(ctx, s, SetupRedisPostgres, o)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	printTable(&out, Result{Options: o, Setups: []SetupResult{r}})
	t.Log("\n" + out.String())
	if r.Reads == 0 || r.Writes == 0 || r.Fills == 0 || r.Evictions == 0 || r.Errors != 0 {
		t.Fatalf("Redis/PostgreSQL run: %+v", r)
	}
	if r.Audit.Cached == 0 || r.Audit.Keys != 20 {
		t.Fatalf("audit: %+v", r.Audit)
	}
	// Whether the race shows in so short a run is up to chance; the step
	// by step replay above is the deterministic check.

	s.close()
	for _, proc := range []*peerserver.Process{p.redis.Process, p.postgres.Process} {
		select {
		case <-proc.Exited():
		default:
			t.Errorf("%s still running after stop", proc.Name)
		}
	}
	if _, err := os.Stat(p.dir); !os.IsNotExist(err) {
		t.Errorf("server directory %s not removed: %v", p.dir, err)
	}
}

// TestServersMissing: without the servers, Run fails at once, naming the
// Debian packages to install.
func TestServersMissing(t *testing.T) {
	oldGlob, oldDirs := peerserver.PGBinGlob, peerserver.RedisExtraDirs
	defer func() { peerserver.PGBinGlob, peerserver.RedisExtraDirs = oldGlob, oldDirs }()
	empty := t.TempDir()
	peerserver.PGBinGlob, peerserver.RedisExtraDirs = filepath.Join(empty, "*", "bin"), nil
	t.Setenv("PATH", empty)

	err := CheckServers()
	if !IsServersMissing(err) {
		t.Fatalf("CheckServers() = %v, want a missing-servers error", err)
	}
	var out bytes.Buffer
	_, err = Run(context.Background(), Options{Duration: time.Second}, &out)
	if !IsServersMissing(err) {
		t.Fatalf("Run without servers: %v, want a missing-servers error", err)
	}
	for _, want := range []string{"apt-get install -y redis-server postgresql", "redis-server", "postgres"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	t.Log(err)
	if out.Len() != 0 {
		t.Errorf("Run printed before failing:\n%s", out.String())
	}
}
