// Package ycsb is a go-ycsb (github.com/pingcap/go-ycsb) driver for
// DiStash. Importing it registers the database "distash":
//
//	import _ "github.com/distash/distash/ycsb"
//
// after which go-ycsb's `-p` properties select it (`go-ycsb load distash
// -P workloads/workloada -p distash.cluster=host:port,...` in a go-ycsb
// binary built with this import). Its properties:
//
//   - distash.cluster: the cluster string (coordinators, host:port,...);
//     required.
//   - distash.pool: the name of the pool the records go to; its prefix is
//     put before every key. Default: no pool prefix (see distash.prefix).
//   - distash.prefix: a key prefix of its own, after the pool's (default
//     "").
//   - distash.dc: the client's data center (distash.WithDC), if any.
//
// A YCSB record (table, key, fields) is ONE DiStash key,
// <pool prefix><distash.prefix><table>/<key>, whose value holds the fields
// in the encoding of EncodeFields: for each field, sorted by name, the
// name's length as a uvarint, the name, the value's length as a uvarint,
// the value. Read and Scan return the requested fields (all if none is
// named); Update reads the record and rewrites it with the given fields
// replaced, in one transaction (go-ycsb's core workload updates one field
// unless writeallfields=true); Insert writes a whole record (replacing
// one of the same key); Delete clears the key; Scan reads count records
// from the start key on with one GetRange. The Batch* operations of
// go-ycsb's BatchDB each run in one transaction.
//
// New wraps an already open client (the benchmark `distash bench ycsb`
// uses it); the registered creator opens its own from the properties.
package ycsb

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"

	"github.com/magiconair/properties"
	goycsb "github.com/pingcap/go-ycsb/pkg/ycsb"

	"github.com/distash/distash"
)

// The properties the registered creator reads.
const (
	PropCluster = "distash.cluster"
	PropPool    = "distash.pool"
	PropPrefix  = "distash.prefix"
	PropDC      = "distash.dc"
)

// ErrNotFound is returned by Read, Update and BatchRead for a record that
// does not exist.
var ErrNotFound = errors.New("distash ycsb: record not found")

func init() {
	goycsb.RegisterDBCreator("distash", Creator{})
}

// Creator is go-ycsb's DBCreator for DiStash, registered as "distash".
type Creator struct{}

// Create opens a client to the cluster of the distash.cluster property.
func (Creator) Create(p *properties.Properties) (goycsb.DB, error) {
	cluster := p.GetString(PropCluster, "")
	if cluster == "" {
		return nil, fmt.Errorf("distash ycsb: property %s (the cluster's coordinators, host:port,...) is required", PropCluster)
	}
	var opts []distash.Option
	if dc := p.GetString(PropDC, ""); dc != "" {
		opts = append(opts, distash.WithDC(dc))
	}
	db, err := distash.Open(context.Background(), cluster, opts...)
	if err != nil {
		return nil, err
	}
	prefix := []byte(p.GetString(PropPrefix, ""))
	if name := p.GetString(PropPool, ""); name != "" {
		pool, err := db.Pool(name)
		if err != nil {
			db.Close()
			return nil, err
		}
		prefix = pool.Key(prefix)
	}
	d := New(db, prefix)
	d.owned = true
	return d, nil
}

// DB is the driver: a go-ycsb DB (and BatchDB) over a DiStash client.
type DB struct {
	db     *distash.DB
	prefix []byte
	owned  bool // Close closes db
}

var (
	_ goycsb.DB      = (*DB)(nil)
	_ goycsb.BatchDB = (*DB)(nil)
)

// New returns a driver that keeps its records under prefix (a pool's
// Key(...) for records in that pool) through db. Its Close does not close
// db.
func New(db *distash.DB, prefix []byte) *DB {
	return &DB{db: db, prefix: append([]byte(nil), prefix...)}
}

// Key is the DiStash key of record key of table.
func (d *DB) Key(table, key string) []byte {
	k := make([]byte, 0, len(d.prefix)+len(table)+1+len(key))
	k = append(k, d.prefix...)
	k = append(k, table...)
	k = append(k, '/')
	return append(k, key...)
}

// Close closes the client if the creator opened it.
func (d *DB) Close() error {
	if d.owned {
		return d.db.Close()
	}
	return nil
}

// InitThread implements goycsb.DB: threads share the client.
func (d *DB) InitThread(ctx context.Context, _, _ int) context.Context { return ctx }

// CleanupThread implements goycsb.DB.
func (d *DB) CleanupThread(context.Context) {}

// Read returns the fields of a record (all if fields is empty).
func (d *DB) Read(ctx context.Context, table, key string, fields []string) (map[string][]byte, error) {
	var v []byte
	err := d.db.ReadTransact(ctx, func(tr *distash.Tx) error {
		var err error
		v, err = tr.Get(d.Key(table, key))
		return err
	})
	if err != nil {
		return nil, err
	}
	if v == nil {
		return nil, ErrNotFound
	}
	return DecodeFields(v, fields)
}

// Scan returns up to count records from startKey on, in key order.
func (d *DB) Scan(ctx context.Context, table, startKey string, count int, fields []string) ([]map[string][]byte, error) {
	var kvs []distash.KeyValue
	end := d.Key(table, "")
	end[len(end)-1]++ // just past "<table>/"
	err := d.db.ReadTransact(ctx, func(tr *distash.Tx) error {
		var err error
		kvs, err = tr.GetRange(d.Key(table, startKey), end, distash.RangeOptions{Limit: count})
		return err
	})
	if err != nil {
		return nil, err
	}
	res := make([]map[string][]byte, 0, len(kvs))
	for _, kv := range kvs {
		m, err := DecodeFields(kv.Value, fields)
		if err != nil {
			return nil, err
		}
		res = append(res, m)
	}
	return res, nil
}

// Update replaces the given fields of a record, keeping the others, in one
// transaction.
func (d *DB) Update(ctx context.Context, table, key string, values map[string][]byte) error {
	return d.db.Transact(ctx, func(tr *distash.Tx) error { return d.update(tr, table, key, values) })
}

func (d *DB) update(tr *distash.Tx, table, key string, values map[string][]byte) error {
	k := d.Key(table, key)
	old, err := tr.Get(k)
	if err != nil {
		return err
	}
	if old == nil {
		return ErrNotFound
	}
	rec, err := DecodeFields(old, nil)
	if err != nil {
		return err
	}
	for f, v := range values {
		rec[f] = v
	}
	tr.Set(k, EncodeFields(rec))
	return nil
}

// Insert writes a whole record (replacing any of the same key).
func (d *DB) Insert(ctx context.Context, table, key string, values map[string][]byte) error {
	v := EncodeFields(values)
	return d.db.Transact(ctx, func(tr *distash.Tx) error {
		tr.Set(d.Key(table, key), v)
		return nil
	})
}

// Delete removes a record.
func (d *DB) Delete(ctx context.Context, table, key string) error {
	return d.db.Transact(ctx, func(tr *distash.Tx) error {
		tr.Clear(d.Key(table, key))
		return nil
	})
}

// BatchInsert writes the records in one transaction.
func (d *DB) BatchInsert(ctx context.Context, table string, keys []string, values []map[string][]byte) error {
	enc := make([][]byte, len(values))
	for i, v := range values {
		enc[i] = EncodeFields(v)
	}
	return d.db.Transact(ctx, func(tr *distash.Tx) error {
		for i, k := range keys {
			tr.Set(d.Key(table, k), enc[i])
		}
		return nil
	})
}

// BatchRead reads the records in one transaction (one GetMulti).
func (d *DB) BatchRead(ctx context.Context, table string, keys []string, fields []string) ([]map[string][]byte, error) {
	dk := make([][]byte, len(keys))
	for i, k := range keys {
		dk[i] = d.Key(table, k)
	}
	var vs [][]byte
	err := d.db.ReadTransact(ctx, func(tr *distash.Tx) error {
		var err error
		vs, err = tr.GetMulti(dk)
		return err
	})
	if err != nil {
		return nil, err
	}
	res := make([]map[string][]byte, len(vs))
	for i, v := range vs {
		if v == nil {
			return nil, fmt.Errorf("%w: %s", ErrNotFound, keys[i])
		}
		if res[i], err = DecodeFields(v, fields); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// BatchUpdate updates the records in one transaction.
func (d *DB) BatchUpdate(ctx context.Context, table string, keys []string, values []map[string][]byte) error {
	return d.db.Transact(ctx, func(tr *distash.Tx) error {
		for i, k := range keys {
			if err := d.update(tr, table, k, values[i]); err != nil {
				return err
			}
		}
		return nil
	})
}

// BatchDelete removes the records in one transaction.
func (d *DB) BatchDelete(ctx context.Context, table string, keys []string) error {
	return d.db.Transact(ctx, func(tr *distash.Tx) error {
		for _, k := range keys {
			tr.Clear(d.Key(table, k))
		}
		return nil
	})
}

// EncodeFields encodes a record's fields: for each field in name order,
// uvarint(len(name)) name uvarint(len(value)) value.
func EncodeFields(fields map[string][]byte) []byte {
	names := make([]string, 0, len(fields))
	n := 0
	for f, v := range fields {
		names = append(names, f)
		n += len(f) + len(v) + 2*binary.MaxVarintLen32
	}
	sort.Strings(names)
	b := make([]byte, 0, n)
	for _, f := range names {
		v := fields[f]
		b = binary.AppendUvarint(b, uint64(len(f)))
		b = append(b, f...)
		b = binary.AppendUvarint(b, uint64(len(v)))
		b = append(b, v...)
	}
	return b
}

// DecodeFields decodes what EncodeFields encoded, keeping only the named
// fields (all if none is named). The values alias b.
func DecodeFields(b []byte, fields []string) (map[string][]byte, error) {
	m := make(map[string][]byte, max(len(fields), 10))
	for len(b) > 0 {
		name, rest, err := chunk(b)
		if err != nil {
			return nil, err
		}
		val, rest, err := chunk(rest)
		if err != nil {
			return nil, err
		}
		b = rest
		if len(fields) > 0 && !contains(fields, name) {
			continue
		}
		m[string(name)] = val
	}
	return m, nil
}

func chunk(b []byte) (c, rest []byte, err error) {
	n, k := binary.Uvarint(b)
	if k <= 0 || uint64(len(b)-k) < n {
		return nil, nil, errors.New("distash ycsb: corrupt record encoding")
	}
	return b[k : k+int(n) : k+int(n)], b[k+int(n):], nil
}

func contains(fields []string, name []byte) bool {
	for _, f := range fields {
		if f == string(name) {
			return true
		}
	}
	return false
}
