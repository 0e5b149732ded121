package anomalies

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

// twoStore is the Redis/PostgreSQL setup: the cache in Redis, the data in
// PostgreSQL's table kv(k text primary key, v text).
type twoStore struct {
	peers *peers
	rdb   *redis.Client
	admin *pgx.Conn // for load and snapshot
}

// startRedisPostgres starts private servers and connects to them.
func startRedisPostgres(ctx context.Context, clients int) (*twoStore, error) {
	p, err := startPeers(ctx, clients)
	if err != nil {
		return nil, err
	}
	return connectTwoStore(ctx, p, clients)
}

func connectTwoStore(ctx context.Context, p *peers, clients int) (*twoStore, error) {
	s := &twoStore{peers: p}
	s.rdb = redis.NewClient(&redis.Options{Addr: p.redisAddr, PoolSize: clients + 4, DisableIdentity: true})
	var err error
	if s.admin, err = pgx.Connect(ctx, p.pgConnStr); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// close disconnects and stops the servers; it may be called again.
func (s *twoStore) close() {
	if s.admin != nil {
		s.admin.Close(context.Background())
		s.admin = nil
	}
	if s.rdb != nil {
		s.rdb.Close()
		s.rdb = nil
	}
	if s.peers != nil {
		s.peers.stop()
	}
}

func (s *twoStore) load(ctx context.Context, keys []string) error {
	if err := s.rdb.FlushAll(ctx).Err(); err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	for _, q := range []string{
		`DROP TABLE IF EXISTS kv`,
		`CREATE TABLE kv (k text PRIMARY KEY, v text NOT NULL)`,
	} {
		if _, err := s.admin.Exec(ctx, q); err != nil {
			return fmt.Errorf("postgres: %s: %w", q, err)
		}
	}
	if _, err := s.admin.Exec(ctx, `INSERT INTO kv (k, v) SELECT unnest($1::text[]), $2`, keys, dataValue(0)); err != nil {
		return fmt.Errorf("postgres: insert: %w", err)
	}
	if _, err := s.admin.Exec(ctx, `VACUUM ANALYZE kv`); err != nil {
		return fmt.Errorf("postgres: vacuum: %w", err)
	}
	return nil
}

func (s *twoStore) servers(ctx context.Context) string {
	redisVersion, pgVersion := "?", "?"
	if info, err := s.rdb.InfoMap(ctx, "server").Result(); err == nil {
		if v := info["Server"]["redis_version"]; v != "" {
			redisVersion = v
		}
	}
	var v string
	if err := s.admin.QueryRow(ctx, `SHOW server_version`).Scan(&v); err == nil {
		pgVersion = v
	}
	return fmt.Sprintf("redis-server %s (no persistence) and PostgreSQL %s (default durability: fsync, synchronous_commit on), private, on loopback", redisVersion, pgVersion)
}

func (s *twoStore) newClient(ctx context.Context) (client, error) {
	conn, err := pgx.Connect(ctx, s.peers.pgConnStr)
	if err != nil {
		return nil, err
	}
	return &twoStoreClient{rdb: s.rdb, pg: conn}, nil
}

func (s *twoStore) snapshot(ctx context.Context, keys []string) (cache, data map[string]string, err error) {
	cache, data = map[string]string{}, map[string]string{}
	for i := 0; i < len(keys); i += loadBatch {
		batch := keys[i:min(i+loadBatch, len(keys))]
		vals, err := s.rdb.MGet(ctx, batch...).Result()
		if err != nil {
			return nil, nil, fmt.Errorf("redis: %w", err)
		}
		for j, v := range vals {
			if str, ok := v.(string); ok {
				cache[batch[j]] = str
			}
		}
	}
	rows, err := s.admin.Query(ctx, `SELECT k, v FROM kv`)
	if err != nil {
		return nil, nil, fmt.Errorf("postgres: %w", err)
	}
	var k, v string
	if _, err := pgx.ForEachRow(rows, []any{&k, &v}, func() error {
		data[k] = v
		return nil
	}); err != nil {
		return nil, nil, fmt.Errorf("postgres: %w", err)
	}
	return cache, data, nil
}

// twoStoreClient issues the separate transactions of the paper's Figure 6:
// a read is a Redis GET and, on a miss, a PostgreSQL SELECT and a Redis
// SET; a write is a PostgreSQL UPDATE and a Redis SET. Each statement is
// its own transaction (autocommit).
type twoStoreClient struct {
	rdb *redis.Client
	pg  *pgx.Conn
}

func (c *twoStoreClient) read(ctx context.Context, key string, beforeFill func()) (ver int64, origin byte, attempts int, err error) {
	// Transaction 1: look up the cache.
	v, err := c.rdb.Get(ctx, key).Result()
	if err == nil {
		var ok bool
		if ver, origin, ok = parseCache(v); !ok {
			return 0, 0, 1, fmt.Errorf("redis: key %q holds %q, not a cached version", key, v)
		}
		return ver, origin, 1, nil
	}
	if !errors.Is(err, redis.Nil) {
		return 0, 0, 1, fmt.Errorf("redis get: %w", err)
	}
	// Transaction 2: read the data.
	var d string
	if err := c.pg.QueryRow(ctx, `SELECT v FROM kv WHERE k = $1`, key).Scan(&d); err != nil {
		return 0, 0, 1, fmt.Errorf("postgres select: %w", err)
	}
	ver, ok := parseData(d)
	if !ok {
		return 0, 0, 1, fmt.Errorf("postgres: key %q holds %q, not a version", key, d)
	}
	beforeFill()
	// Transaction 3: fill the cache.
	if err := c.rdb.Set(ctx, key, cacheValue(d, originFill), 0).Err(); err != nil {
		return 0, 0, 1, fmt.Errorf("redis set: %w", err)
	}
	return ver, 0, 1, nil
}

func (c *twoStoreClient) write(ctx context.Context, key string) (ver int64, attempts int, err error) {
	// Transaction 1: update the data (an atomic read-modify-write of the
	// version).
	var nv string
	if err := c.pg.QueryRow(ctx, `UPDATE kv SET v = (v::bigint + 1)::text WHERE k = $1 RETURNING v`, key).Scan(&nv); err != nil {
		return 0, 1, fmt.Errorf("postgres update: %w", err)
	}
	ver, ok := parseData(nv)
	if !ok {
		return 0, 1, fmt.Errorf("postgres: key %q updated to %q, not a version", key, nv)
	}
	// Transaction 2: update the cache.
	if err := c.rdb.Set(ctx, key, cacheValue(nv, originWrite), 0).Err(); err != nil {
		return 0, 1, fmt.Errorf("redis set: %w", err)
	}
	return ver, 1, nil
}

func (c *twoStoreClient) evict(ctx context.Context, key string) error {
	return c.rdb.Del(ctx, key).Err()
}

func (c *twoStoreClient) close() { c.pg.Close(context.Background()) }
