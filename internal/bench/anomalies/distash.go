package anomalies

import (
	"context"
	"fmt"

	"github.com/distash/distash"
	"github.com/distash/distash/internal/embedded"
)

// Config is the DiStash cluster of the benchmark: a DRAM ephemeral cache
// pool and an SSD durable Pebble data pool, one stash each.
const Config = `
[cluster]
mvcc_window = "5s"

[log]
replicas = 1

[[pool]]
name = "cache"
prefix = "c/"
medium = "dram"
mode = "ephemeral"
engine = "memory"
stashes = 1
replication = 1
capacity = "256MiB"

[[pool]]
name = "data"
prefix = "d/"
medium = "ssd"
mode = "durable"
engine = "pebble"
stashes = 1
replication = 1
`

// distashBackend is the DiStash setup: an embedded cluster and one client
// handle shared by the clients (it is safe for concurrent use).
type distashBackend struct {
	c           *embedded.Cluster
	db          *distash.DB
	cache, data *distash.Pool
}

// startDiStash starts the embedded cluster under dir (a temporary
// directory if "").
func startDiStash(ctx context.Context, dir string) (*distashBackend, error) {
	c, err := embedded.StartTOML(ctx, Config, embedded.Options{Dir: dir, TempPattern: "distash-bench-anomalies-"})
	if err != nil {
		return nil, err
	}
	b := &distashBackend{c: c, db: c.DB}
	if b.cache, err = b.db.Pool("cache"); err == nil {
		b.data, err = b.db.Pool("data")
	}
	if err != nil {
		b.close()
		return nil, err
	}
	return b, nil
}

func (b *distashBackend) close() { b.c.Close() }

func (b *distashBackend) cacheKey(k string) []byte { return b.cache.Key([]byte(k)) }
func (b *distashBackend) dataKey(k string) []byte  { return b.data.Key([]byte(k)) }

// loadBatch is the number of keys load writes per transaction.
const loadBatch = 500

func (b *distashBackend) load(ctx context.Context, keys []string) error {
	for i := 0; i < len(keys); i += loadBatch {
		batch := keys[i:min(i+loadBatch, len(keys))]
		err := b.db.Transact(ctx, func(tr *distash.Tx) error {
			for _, k := range batch {
				tr.Set(b.dataKey(k), []byte(dataValue(0)))
				tr.Clear(b.cacheKey(k))
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func (b *distashBackend) servers(context.Context) string {
	return fmt.Sprintf("an embedded DiStash cluster (pools %s: %s %s %s, %s: %s %s %s; one stash each)",
		b.cache.Name(), b.cache.Medium(), mode(b.cache), b.cache.Engine(), b.data.Name(), b.data.Medium(), mode(b.data), b.data.Engine())
}

func mode(p *distash.Pool) string {
	if p.Durable() {
		return "durable"
	}
	return "ephemeral"
}

func (b *distashBackend) newClient(context.Context) (client, error) { return distashClient{b}, nil }

func (b *distashBackend) snapshot(ctx context.Context, keys []string) (cache, data map[string]string, err error) {
	ck := make([][]byte, len(keys))
	dk := make([][]byte, len(keys))
	for i, k := range keys {
		ck[i], dk[i] = b.cacheKey(k), b.dataKey(k)
	}
	err = b.db.ReadTransact(ctx, func(tr *distash.Tx) error {
		cache, data = map[string]string{}, map[string]string{}
		cv, err := tr.GetMulti(ck)
		if err != nil {
			return err
		}
		dv, err := tr.GetMulti(dk)
		if err != nil {
			return err
		}
		for i, k := range keys {
			if cv[i] != nil {
				cache[k] = string(cv[i])
			}
			if dv[i] != nil {
				data[k] = string(dv[i])
			}
		}
		return nil
	})
	return cache, data, err
}

// distashClient runs each operation as one DiStash transaction (Figure 5).
type distashClient struct{ b *distashBackend }

func (c distashClient) read(ctx context.Context, key string, beforeFill func()) (ver int64, origin byte, attempts int, err error) {
	ck, dk := c.b.cacheKey(key), c.b.dataKey(key)
	err = c.b.db.Transact(ctx, func(tr *distash.Tx) error {
		attempts++
		v, err := tr.Get(ck)
		if err != nil {
			return err
		}
		origin = 0
		if v != nil {
			var ok bool
			if ver, origin, ok = parseCache(string(v)); !ok {
				return fmt.Errorf("cache key %q holds %q, not a cached version", key, v)
			}
			return nil
		}
		d, err := tr.Get(dk)
		if err != nil {
			return err
		}
		var ok bool
		if ver, ok = parseData(string(d)); !ok {
			return fmt.Errorf("data key %q holds %q, not a version", key, d)
		}
		beforeFill()
		tr.Set(ck, []byte(cacheValue(string(d), originFill)))
		return nil
	})
	return ver, origin, attempts, err
}

func (c distashClient) write(ctx context.Context, key string) (ver int64, attempts int, err error) {
	ck, dk := c.b.cacheKey(key), c.b.dataKey(key)
	err = c.b.db.Transact(ctx, func(tr *distash.Tx) error {
		attempts++
		d, err := tr.Get(dk)
		if err != nil {
			return err
		}
		old, ok := parseData(string(d))
		if !ok {
			return fmt.Errorf("data key %q holds %q, not a version", key, d)
		}
		ver = old + 1
		nv := dataValue(ver)
		tr.Set(dk, []byte(nv))
		tr.Set(ck, []byte(cacheValue(nv, originWrite)))
		return nil
	})
	return ver, attempts, err
}

func (c distashClient) evict(ctx context.Context, key string) error {
	ck := c.b.cacheKey(key)
	return c.b.db.Transact(ctx, func(tr *distash.Tx) error {
		tr.Clear(ck)
		return nil
	})
}

func (distashClient) close() {}
