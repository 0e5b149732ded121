package ycsb

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	goycsb "github.com/pingcap/go-ycsb/pkg/ycsb"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	dycsb "github.com/distash/distash/ycsb"
)

// errNotFound is what the peers' adapters return for a missing record.
var errNotFound = errors.New("record not found")

// nopThreads gives a DB go-ycsb's per-thread hooks that do nothing.
type nopThreads struct{}

func (nopThreads) InitThread(ctx context.Context, _, _ int) context.Context { return ctx }
func (nopThreads) CleanupThread(context.Context)                            {}

// redisDB stores a record as a hash at "<table>/<key>" and keeps the keys
// of a table in a sorted set named after the table (all scores 0, so
// ZRANGEBYLEX orders them) for Scan. Insert and Delete update both in one
// MULTI/EXEC; Update is one HSET of the given fields.
type redisDB struct {
	nopThreads
	c *redis.Client
}

func newRedisDB(addr string, threads int) *redisDB {
	return &redisDB{c: redis.NewClient(&redis.Options{Addr: addr, PoolSize: threads + 4, DisableIdentity: true})}
}

func (r *redisDB) Close() error { return r.c.Close() }

func rkey(table, key string) string { return table + "/" + key }

func (r *redisDB) Read(ctx context.Context, table, key string, fields []string) (map[string][]byte, error) {
	return r.read(ctx, r.c, table, key, fields)
}

func (r *redisDB) read(ctx context.Context, c redis.Cmdable, table, key string, fields []string) (map[string][]byte, error) {
	if len(fields) == 0 {
		m, err := c.HGetAll(ctx, rkey(table, key)).Result()
		if err != nil {
			return nil, err
		}
		if len(m) == 0 {
			return nil, errNotFound
		}
		res := make(map[string][]byte, len(m))
		for f, v := range m {
			res[f] = []byte(v)
		}
		return res, nil
	}
	vs, err := c.HMGet(ctx, rkey(table, key), fields...).Result()
	if err != nil {
		return nil, err
	}
	res := make(map[string][]byte, len(fields))
	for i, v := range vs {
		if s, ok := v.(string); ok {
			res[fields[i]] = []byte(s)
		}
	}
	if len(res) == 0 {
		return nil, errNotFound
	}
	return res, nil
}

func (r *redisDB) Scan(ctx context.Context, table, startKey string, count int, fields []string) ([]map[string][]byte, error) {
	keys, err := r.c.ZRangeByLex(ctx, table, &redis.ZRangeBy{Min: "[" + startKey, Max: "+", Count: int64(count)}).Result()
	if err != nil {
		return nil, err
	}
	pipe := r.c.Pipeline()
	var hall []*redis.MapStringStringCmd
	var hm []*redis.SliceCmd
	for _, k := range keys {
		if len(fields) == 0 {
			hall = append(hall, pipe.HGetAll(ctx, rkey(table, k)))
		} else {
			hm = append(hm, pipe.HMGet(ctx, rkey(table, k), fields...))
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, err
	}
	res := make([]map[string][]byte, 0, len(keys))
	for _, c := range hall {
		m := make(map[string][]byte)
		for f, v := range c.Val() {
			m[f] = []byte(v)
		}
		res = append(res, m)
	}
	for _, c := range hm {
		m := make(map[string][]byte)
		for i, v := range c.Val() {
			if s, ok := v.(string); ok {
				m[fields[i]] = []byte(s)
			}
		}
		res = append(res, m)
	}
	return res, nil
}

func hsetArgs(values map[string][]byte) []any {
	args := make([]any, 0, 2*len(values))
	for f, v := range values {
		args = append(args, f, v)
	}
	return args
}

func (r *redisDB) Update(ctx context.Context, table, key string, values map[string][]byte) error {
	return r.c.HSet(ctx, rkey(table, key), hsetArgs(values)...).Err()
}

func (r *redisDB) Insert(ctx context.Context, table, key string, values map[string][]byte) error {
	_, err := r.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, rkey(table, key), hsetArgs(values)...)
		p.ZAdd(ctx, table, redis.Z{Member: key})
		return nil
	})
	return err
}

func (r *redisDB) Delete(ctx context.Context, table, key string) error {
	_, err := r.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, rkey(table, key))
		p.ZRem(ctx, table, key)
		return nil
	})
	return err
}

// pgDB stores a table as a PostgreSQL table (ycsb_key text primary key,
// field0 ... fieldN-1 bytea), one connection per thread; each statement is
// its own transaction (autocommit). Insert is an upsert, so that inserting
// a key again (workloads D and E insert the same new keys) replaces it as
// in the other stores.
type pgDB struct {
	connStr string
	fields  map[string]bool // the valid field names
}

type pgConnKey struct{}

type pgConn struct {
	c   *pgx.Conn
	err error
}

func newPgDB(ctx context.Context, connStr, table string, fieldCount int) (*pgDB, error) {
	d := &pgDB{connStr: connStr, fields: make(map[string]bool)}
	cols := []string{"ycsb_key text PRIMARY KEY"}
	for i := range fieldCount {
		f := fmt.Sprintf("field%d", i)
		d.fields[f] = true
		cols = append(cols, f+" bytea")
	}
	c, err := pgx.Connect(ctx, connStr)
	if err != nil {
		return nil, err
	}
	defer c.Close(ctx)
	_, err = c.Exec(ctx, fmt.Sprintf("DROP TABLE IF EXISTS %s; CREATE TABLE %s (%s)",
		pgx.Identifier{table}.Sanitize(), pgx.Identifier{table}.Sanitize(), strings.Join(cols, ", ")))
	return d, err
}

func (d *pgDB) Close() error { return nil }

func (d *pgDB) InitThread(ctx context.Context, _, _ int) context.Context {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(cctx, d.connStr)
	return context.WithValue(ctx, pgConnKey{}, &pgConn{c: c, err: err})
}

func (d *pgDB) CleanupThread(ctx context.Context) {
	if pc, ok := ctx.Value(pgConnKey{}).(*pgConn); ok && pc.c != nil {
		pc.c.Close(context.Background())
	}
}

func (d *pgDB) conn(ctx context.Context) (*pgx.Conn, error) {
	pc, ok := ctx.Value(pgConnKey{}).(*pgConn)
	if !ok {
		return nil, errors.New("postgres: no connection (InitThread not called)")
	}
	return pc.c, pc.err
}

// columns returns the named fields (all if none), checked and sorted.
func (d *pgDB) columns(fields []string) ([]string, error) {
	if len(fields) == 0 {
		for f := range d.fields {
			fields = append(fields, f)
		}
	}
	cols := append([]string(nil), fields...)
	sort.Strings(cols)
	for _, f := range cols {
		if !d.fields[f] {
			return nil, fmt.Errorf("postgres: unknown field %q", f)
		}
	}
	return cols, nil
}

func (d *pgDB) query(ctx context.Context, sql string, cols []string, args ...any) ([]map[string][]byte, error) {
	c, err := d.conn(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := c.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var res []map[string][]byte
	vals := make([][]byte, len(cols))
	dest := make([]any, len(cols))
	for i := range vals {
		dest[i] = &vals[i]
	}
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		m := make(map[string][]byte, len(cols))
		for i, f := range cols {
			m[f] = vals[i]
			vals[i] = nil
		}
		res = append(res, m)
	}
	return res, rows.Err()
}

func (d *pgDB) Read(ctx context.Context, table, key string, fields []string) (map[string][]byte, error) {
	cols, err := d.columns(fields)
	if err != nil {
		return nil, err
	}
	res, err := d.query(ctx, fmt.Sprintf("SELECT %s FROM %s WHERE ycsb_key = $1", strings.Join(cols, ", "), pgx.Identifier{table}.Sanitize()), cols, key)
	if err != nil {
		return nil, err
	}
	if len(res) == 0 {
		return nil, errNotFound
	}
	return res[0], nil
}

func (d *pgDB) Scan(ctx context.Context, table, startKey string, count int, fields []string) ([]map[string][]byte, error) {
	cols, err := d.columns(fields)
	if err != nil {
		return nil, err
	}
	return d.query(ctx, fmt.Sprintf("SELECT %s FROM %s WHERE ycsb_key >= $1 ORDER BY ycsb_key LIMIT $2",
		strings.Join(cols, ", "), pgx.Identifier{table}.Sanitize()), cols, startKey, count)
}

func (d *pgDB) Update(ctx context.Context, table, key string, values map[string][]byte) error {
	c, err := d.conn(ctx)
	if err != nil {
		return err
	}
	cols, err := d.columns(keysOf(values))
	if err != nil {
		return err
	}
	sets := make([]string, len(cols))
	args := make([]any, 0, len(cols)+1)
	for i, f := range cols {
		sets[i] = fmt.Sprintf("%s = $%d", f, i+1)
		args = append(args, values[f])
	}
	args = append(args, key)
	tag, err := c.Exec(ctx, fmt.Sprintf("UPDATE %s SET %s WHERE ycsb_key = $%d", pgx.Identifier{table}.Sanitize(), strings.Join(sets, ", "), len(cols)+1), args...)
	if err == nil && tag.RowsAffected() == 0 {
		err = errNotFound
	}
	return err
}

func (d *pgDB) Insert(ctx context.Context, table, key string, values map[string][]byte) error {
	c, err := d.conn(ctx)
	if err != nil {
		return err
	}
	cols, err := d.columns(keysOf(values))
	if err != nil {
		return err
	}
	ph := make([]string, len(cols))
	sets := make([]string, len(cols))
	args := []any{key}
	for i, f := range cols {
		ph[i] = fmt.Sprintf("$%d", i+2)
		sets[i] = fmt.Sprintf("%s = EXCLUDED.%s", f, f)
		args = append(args, values[f])
	}
	_, err = c.Exec(ctx, fmt.Sprintf("INSERT INTO %s (ycsb_key, %s) VALUES ($1, %s) ON CONFLICT (ycsb_key) DO UPDATE SET %s",
		pgx.Identifier{table}.Sanitize(), strings.Join(cols, ", "), strings.Join(ph, ", "), strings.Join(sets, ", ")), args...)
	return err
}

func (d *pgDB) Delete(ctx context.Context, table, key string) error {
	c, err := d.conn(ctx)
	if err != nil {
		return err
	}
	_, err = c.Exec(ctx, fmt.Sprintf("DELETE FROM %s WHERE ycsb_key = $1", pgx.Identifier{table}.Sanitize()), key)
	return err
}

func keysOf(m map[string][]byte) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

// etcdDB stores a record as one etcd key "<table>/<key>" whose value holds
// the fields in the DiStash driver's encoding (dycsb.EncodeFields). Update
// reads the record and writes it back in a transaction conditional on its
// mod revision, retrying on a conflict; Scan is one range read with a
// limit. One client (one gRPC connection) is shared by the threads.
type etcdDB struct {
	nopThreads
	c *clientv3.Client
}

func newEtcdDB(endpoint string) (*etcdDB, error) {
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	return &etcdDB{c: c}, nil
}

func (e *etcdDB) Close() error { return e.c.Close() }

func (e *etcdDB) Read(ctx context.Context, table, key string, fields []string) (map[string][]byte, error) {
	r, err := e.c.Get(ctx, rkey(table, key))
	if err != nil {
		return nil, err
	}
	if len(r.Kvs) == 0 {
		return nil, errNotFound
	}
	return dycsb.DecodeFields(r.Kvs[0].Value, fields)
}

func (e *etcdDB) Scan(ctx context.Context, table, startKey string, count int, fields []string) ([]map[string][]byte, error) {
	r, err := e.c.Get(ctx, rkey(table, startKey), clientv3.WithRange(table+"0"), clientv3.WithLimit(int64(count))) // '0' follows '/'
	if err != nil {
		return nil, err
	}
	res := make([]map[string][]byte, 0, len(r.Kvs))
	for _, kv := range r.Kvs {
		m, err := dycsb.DecodeFields(kv.Value, fields)
		if err != nil {
			return nil, err
		}
		res = append(res, m)
	}
	return res, nil
}

func (e *etcdDB) Update(ctx context.Context, table, key string, values map[string][]byte) error {
	k := rkey(table, key)
	for {
		r, err := e.c.Get(ctx, k)
		if err != nil {
			return err
		}
		if len(r.Kvs) == 0 {
			return errNotFound
		}
		rec, err := dycsb.DecodeFields(r.Kvs[0].Value, nil)
		if err != nil {
			return err
		}
		for f, v := range values {
			rec[f] = v
		}
		t, err := e.c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", r.Kvs[0].ModRevision)).
			Then(clientv3.OpPut(k, string(dycsb.EncodeFields(rec)))).Commit()
		if err != nil {
			return err
		}
		if t.Succeeded {
			return nil
		}
	}
}

func (e *etcdDB) Insert(ctx context.Context, table, key string, values map[string][]byte) error {
	_, err := e.c.Put(ctx, rkey(table, key), string(dycsb.EncodeFields(values)))
	return err
}

func (e *etcdDB) Delete(ctx context.Context, table, key string) error {
	_, err := e.c.Delete(ctx, rkey(table, key))
	return err
}

var (
	_ goycsb.DB = (*redisDB)(nil)
	_ goycsb.DB = (*pgDB)(nil)
	_ goycsb.DB = (*etcdDB)(nil)
)
