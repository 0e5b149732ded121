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
//   - distash.layout: fields (default) or record, below.
//
// A YCSB record (table, key, fields) is stored in one of two layouts
// (distash.layout):
//
//   - record (the default): one key, <pool prefix><distash.prefix><table>/<key>,
//     whose value holds the fields in the encoding of EncodeFields (for
//     each field, sorted by name, the name's length as a uvarint, the
//     name, the value's length as a uvarint, the value). Read is one Get;
//     Update reads the record and rewrites it with the given fields
//     replaced, in one transaction (concurrent updates of one record
//     conflict and retry; an update of a missing record fails with
//     ErrNotFound); Insert writes the key (replacing a record of the same
//     key); Delete clears it.
//   - fields: that key (the base) holds the fields as Insert wrote them,
//     and an Update writes one override key per field,
//     <base key>\x00<field>, holding the field's value: a blind write — no
//     read, hence no read version and no conflict with concurrent updates
//     of the same record, one commit round trip (as an HSET in Redis). A
//     record is then the range [base, base\x01) and Read is one GetRange
//     of it (the base's fields, the overrides over them), slower than a
//     Get. An Update of a missing record writes overrides that reads
//     ignore (a record exists while its base key does); Insert and Delete
//     clear the record's range.
//
// Scan reads count records from the start key on, a page at a time, in one
// read transaction. The Batch* operations of go-ycsb's BatchDB each run in
// one transaction. Record keys may not contain a zero byte.
//
// New wraps an already open client (the benchmark `distash bench ycsb`
// uses it); the registered creator opens its own from the properties.
package ycsb

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"strings"

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
	PropLayout  = "distash.layout"
)

// The record layouts (property distash.layout, SetLayout).
const (
	// LayoutRecord (the default): the record is one key; an update reads
	// and rewrites it in one transaction (concurrent updates of one record
	// conflict and retry), a read is one Get.
	LayoutRecord = "record"
	// LayoutFields: a base key and one override key per updated field; an
	// update is a blind write, a read a range read.
	LayoutFields = "fields"
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
	if err := d.SetLayout(p.GetString(PropLayout, LayoutRecord)); err != nil {
		db.Close()
		return nil, err
	}
	return d, nil
}

// DB is the driver: a go-ycsb DB (and BatchDB) over a DiStash client.
type DB struct {
	db     *distash.DB
	prefix []byte
	owned  bool // Close closes db
	record bool // LayoutRecord (else LayoutFields)
}

// SetLayout chooses the record layout, LayoutRecord (the default) or
// LayoutFields, before the driver is used. Records written in one layout
// read back in the other only if never updated in the fields layout.
func (d *DB) SetLayout(layout string) error {
	switch layout {
	case LayoutFields:
		d.record = false
	case LayoutRecord, "":
		d.record = true
	default:
		return fmt.Errorf("distash ycsb: %s %q: want %s or %s", PropLayout, layout, LayoutFields, LayoutRecord)
	}
	return nil
}

var (
	_ goycsb.DB      = (*DB)(nil)
	_ goycsb.BatchDB = (*DB)(nil)
)

// New returns a driver that keeps its records under prefix (a pool's
// Key(...) for records in that pool) through db. Its Close does not close
// db.
func New(db *distash.DB, prefix []byte) *DB {
	return &DB{db: db, prefix: append([]byte(nil), prefix...), record: true}
}

// Key is the DiStash base key of record key of table.
func (d *DB) Key(table, key string) []byte {
	k := make([]byte, 0, len(d.prefix)+len(table)+1+len(key)+1)
	k = append(k, d.prefix...)
	k = append(k, table...)
	k = append(k, '/')
	return append(k, key...)
}

// fieldKey is the override key of field of the record at base.
func fieldKey(base []byte, field string) []byte {
	k := make([]byte, 0, len(base)+1+len(field))
	k = append(append(k, base...), 0)
	return append(k, field...)
}

// recordEnd is the end of the range of the record at base: base\x01.
func recordEnd(base []byte) []byte { return append(append([]byte(nil), base...), 1) }

// ErrBadKey is returned for a record key with a zero byte.
var ErrBadKey = errors.New("distash ycsb: a record key may not contain a zero byte")

func (d *DB) checkedKey(table, key string) ([]byte, error) {
	if strings.IndexByte(key, 0) >= 0 || strings.IndexByte(table, 0) >= 0 {
		return nil, ErrBadKey
	}
	return d.Key(table, key), nil
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
	base, err := d.checkedKey(table, key)
	if err != nil {
		return nil, err
	}
	var m map[string][]byte
	err = d.db.ReadTransact(ctx, func(tr *distash.Tx) error {
		var err error
		m, err = d.readRecord(tr, base, fields)
		return err
	})
	return m, err
}

// readRecord reads the record at base in tr.
func (d *DB) readRecord(tr *distash.Tx, base []byte, fields []string) (map[string][]byte, error) {
	if d.record {
		v, err := tr.Get(base)
		if err != nil {
			return nil, err
		}
		if v == nil {
			return nil, ErrNotFound
		}
		return DecodeFields(v, fields)
	}
	kvs, err := tr.GetRange(base, recordEnd(base), distash.RangeOptions{})
	if err != nil {
		return nil, err
	}
	if len(kvs) == 0 || len(kvs[0].Key) != len(base) {
		return nil, ErrNotFound
	}
	return decodeRecord(kvs, len(base), fields)
}

// decodeRecord decodes one record's pairs: its base key, then its
// overrides (keys of length baseLen+1+len(field)).
func decodeRecord(kvs []distash.KeyValue, baseLen int, fields []string) (map[string][]byte, error) {
	m, err := DecodeFields(kvs[0].Value, fields)
	if err != nil {
		return nil, err
	}
	for _, kv := range kvs[1:] {
		f := kv.Key[baseLen+1:]
		if len(fields) > 0 && !contains(fields, f) {
			continue
		}
		m[string(f)] = kv.Value
	}
	return m, nil
}

// Scan returns up to count records from startKey on, in key order.
func (d *DB) Scan(ctx context.Context, table, startKey string, count int, fields []string) ([]map[string][]byte, error) {
	begin, err := d.checkedKey(table, startKey)
	if err != nil {
		return nil, err
	}
	end := d.Key(table, "")
	end[len(end)-1]++ // just past "<table>/"
	var res []map[string][]byte
	err = d.db.ReadTransact(ctx, func(tr *distash.Tx) error {
		res = res[:0]
		from := begin
		var rec []distash.KeyValue // the record being assembled: its base, then overrides
		baseLen := 0
		flush := func() error {
			if len(rec) == 0 {
				return nil
			}
			m, err := decodeRecord(rec, baseLen, fields)
			if err != nil {
				return err
			}
			res = append(res, m)
			rec = rec[:0]
			return nil
		}
		for len(res) < count {
			// A page holds the records wanted and most of their overrides.
			page := 2*(count-len(res)) + 16
			kvs, err := tr.GetRange(from, end, distash.RangeOptions{Limit: page})
			if err != nil {
				return err
			}
			for _, kv := range kvs {
				if len(rec) > 0 && len(kv.Key) > baseLen && kv.Key[baseLen] == 0 && bytes.HasPrefix(kv.Key, rec[0].Key) {
					rec = append(rec, kv) // an override of the record
					continue
				}
				if err := flush(); err != nil {
					return err
				}
				if len(res) == count {
					return nil
				}
				if bytes.IndexByte(kv.Key[len(d.prefix):], 0) >= 0 {
					continue // an override without its base (an Update of a missing record)
				}
				rec, baseLen = append(rec, kv), len(kv.Key)
			}
			if len(kvs) < page {
				return flush() // the table's end
			}
			from = kvs[len(kvs)-1].Key
			from = append(from[:len(from):len(from)], 0) // just after it
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(res) > count {
		res = res[:count]
	}
	return res, nil
}

// Update replaces the given fields of a record, keeping the others: a
// blind write of the fields' override keys, one transaction.
func (d *DB) Update(ctx context.Context, table, key string, values map[string][]byte) error {
	base, err := d.checkedKey(table, key)
	if err != nil {
		return err
	}
	return d.db.Transact(ctx, func(tr *distash.Tx) error { return d.update(tr, base, values) })
}

func (d *DB) update(tr *distash.Tx, base []byte, values map[string][]byte) error {
	if !d.record {
		for f, v := range values {
			tr.Set(fieldKey(base, f), v)
		}
		return nil
	}
	// The transaction writes: it may read at a version this client
	// already knows rather than ask for one (one round trip less); its
	// commit checks the read, so the update stays strictly serializable.
	tr.Options().SetRecentReadVersion()
	old, err := tr.Get(base)
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
	tr.Set(base, EncodeFields(rec))
	return nil
}

// Insert writes a whole record (replacing any of the same key).
func (d *DB) Insert(ctx context.Context, table, key string, values map[string][]byte) error {
	base, err := d.checkedKey(table, key)
	if err != nil {
		return err
	}
	v := EncodeFields(values)
	return d.db.Transact(ctx, func(tr *distash.Tx) error {
		d.insert(tr, base, v)
		return nil
	})
}

func (d *DB) insert(tr *distash.Tx, base, v []byte) {
	if !d.record {
		tr.ClearRange(base, recordEnd(base)) // the overrides of an earlier record
	}
	tr.Set(base, v)
}

// clear removes the record at base: its key, and in the fields layout its
// overrides.
func (d *DB) clear(tr *distash.Tx, base []byte) {
	if d.record {
		tr.Clear(base)
		return
	}
	tr.ClearRange(base, recordEnd(base))
}

// Delete removes a record.
func (d *DB) Delete(ctx context.Context, table, key string) error {
	base, err := d.checkedKey(table, key)
	if err != nil {
		return err
	}
	return d.db.Transact(ctx, func(tr *distash.Tx) error {
		d.clear(tr, base)
		return nil
	})
}

// bases returns the base keys of keys of table.
func (d *DB) bases(table string, keys []string) ([][]byte, error) {
	out := make([][]byte, len(keys))
	for i, k := range keys {
		var err error
		if out[i], err = d.checkedKey(table, k); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// BatchInsert writes the records in one transaction.
func (d *DB) BatchInsert(ctx context.Context, table string, keys []string, values []map[string][]byte) error {
	bases, err := d.bases(table, keys)
	if err != nil {
		return err
	}
	enc := make([][]byte, len(values))
	for i, v := range values {
		enc[i] = EncodeFields(v)
	}
	return d.db.Transact(ctx, func(tr *distash.Tx) error {
		for i, b := range bases {
			d.insert(tr, b, enc[i])
		}
		return nil
	})
}

// BatchRead reads the records in one transaction.
func (d *DB) BatchRead(ctx context.Context, table string, keys []string, fields []string) ([]map[string][]byte, error) {
	bases, err := d.bases(table, keys)
	if err != nil {
		return nil, err
	}
	res := make([]map[string][]byte, len(keys))
	err = d.db.ReadTransact(ctx, func(tr *distash.Tx) error {
		for i, b := range bases {
			m, err := d.readRecord(tr, b, fields)
			if err != nil {
				if errors.Is(err, ErrNotFound) {
					return fmt.Errorf("%w: %s", ErrNotFound, keys[i])
				}
				return err
			}
			res[i] = m
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// BatchUpdate updates the records in one transaction.
func (d *DB) BatchUpdate(ctx context.Context, table string, keys []string, values []map[string][]byte) error {
	bases, err := d.bases(table, keys)
	if err != nil {
		return err
	}
	return d.db.Transact(ctx, func(tr *distash.Tx) error {
		for i, b := range bases {
			if err := d.update(tr, b, values[i]); err != nil {
				return err
			}
		}
		return nil
	})
}

// BatchDelete removes the records in one transaction.
func (d *DB) BatchDelete(ctx context.Context, table string, keys []string) error {
	bases, err := d.bases(table, keys)
	if err != nil {
		return err
	}
	return d.db.Transact(ctx, func(tr *distash.Tx) error {
		for _, b := range bases {
			d.clear(tr, b)
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
