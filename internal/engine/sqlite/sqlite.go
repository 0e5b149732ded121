// Package sqliteengine is a durable storage engine on SQLite, through the
// pure-Go driver modernc.org/sqlite (driver name "sqlite").
//
// The data lives in Options.Dir/stash.db: table kv(k BLOB PRIMARY KEY,
// v BLOB) WITHOUT ROWID, whose BINARY collation orders keys like
// bytes.Compare, and a one-row table meta with the version and the exact
// live Keys and Bytes counters. The database runs in WAL journal mode with
// synchronous=FULL, so a commit is on stable storage when it returns.
//
// Writes go through a single dedicated connection: each Apply is one
// BEGIN IMMEDIATE ... COMMIT transaction of prepared statements that read
// the previous size of every key it sets or clears (and sum the pairs a
// clear-range removes) to keep the counters exact, then update meta.
// Reads use a separate pool of query-only connections; in WAL mode they
// never block on the writer, and each Scan is a single SELECT, i.e. a
// consistent snapshot, ordered by k ascending or descending.
package sqliteengine

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"

	"modernc.org/sqlite" // registers the "sqlite" database/sql driver

	"github.com/distash/distash/internal/engine"
	"github.com/distash/distash/internal/engine/keyfilter"
	"github.com/distash/distash/internal/fsys"
	"github.com/distash/distash/internal/kv"
)

// ErrClosed is returned by the methods of a closed engine.
var ErrClosed = errors.New("sqlite engine: closed")

// FileName is the name of the database file inside Options.Dir.
const FileName = "stash.db"

const schema = `
CREATE TABLE IF NOT EXISTS kv (k BLOB PRIMARY KEY, v BLOB NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS meta (
	id      INTEGER PRIMARY KEY CHECK (id = 0),
	version INTEGER NOT NULL,
	keys    INTEGER NOT NULL,
	bytes   INTEGER NOT NULL
);
INSERT OR IGNORE INTO meta (id, version, keys, bytes) VALUES (0, 0, 0, 0);
`

// Engine is a durable engine.Engine on SQLite. Create one with Open.
type Engine struct {
	path string    // the database file
	wdb  *sql.DB   // the writer's database handle, one connection
	wc   *sql.Conn // the writer connection
	rdb  *sql.DB   // the read pool
	mu   sync.Mutex
	size *sql.Stmt // writer: length of a key's value
	put  *sql.Stmt // writer: upsert
	del  *sql.Stmt // writer: delete one key
	agg  *sql.Stmt // writer: count and size of a range
	delr *sql.Stmt // writer: delete a range
	meta *sql.Stmt // writer: update meta

	get                     *sql.Stmt // reader
	fwd, fwdOpen, rev, revO *sql.Stmt // reader scans, bounded and unbounded above

	// filter answers Gets of absent keys without a query.
	filter    atomic.Pointer[keyfilter.Filter]
	negatives atomic.Int64 // Gets answered by the filter

	version atomic.Int64
	keys    atomic.Int64
	bytes   atomic.Int64
	closed  atomic.Bool
}

var _ engine.Engine = (*Engine)(nil)

// Open opens (creating if needed) the engine stored in opts.Dir and
// restores its version and counters. The engine is durable whatever
// opts.Ephemeral says: it never evicts.
func Open(opts engine.Options) (_ *Engine, err error) {
	if opts.Dir == "" {
		return nil, errors.New("sqlite engine: Options.Dir is empty")
	}
	// The directory goes through the file-system seam; the database file
	// itself cannot (modernc's driver takes no writable VFS from Go, see
	// docs/architecture.md): SQLite opens it with the OS's calls.
	if err := fsys.Or(opts.FS).MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("sqlite engine: %w", err)
	}
	path := filepath.Join(opts.Dir, FileName)
	e := &Engine{path: path}
	defer func() {
		if err != nil {
			e.closeAll()
		}
	}()
	ctx := context.Background()

	e.wdb, err = sql.Open("sqlite", path+
		"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)")
	if err != nil {
		return nil, wrapErr(path, "open "+path, err)
	}
	e.wdb.SetMaxOpenConns(1)
	if e.wc, err = e.wdb.Conn(ctx); err != nil {
		return nil, wrapErr(path, "open "+path, err)
	}
	var mode string
	if err = e.wc.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return nil, wrapErr(path, "open "+path, err)
	}
	if mode != "wal" {
		return nil, fmt.Errorf("sqlite engine: journal mode is %q, want wal", mode)
	}
	var sync int
	if err = e.wc.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&sync); err != nil {
		return nil, wrapErr(path, "open "+path, err)
	}
	if sync != 2 {
		return nil, fmt.Errorf("sqlite engine: synchronous is %d, want 2 (FULL)", sync)
	}
	if _, err = e.wc.ExecContext(ctx, schema); err != nil {
		return nil, wrapErr(path, "create schema", err)
	}
	var version, keys, size int64
	if err = e.wc.QueryRowContext(ctx, "SELECT version, keys, bytes FROM meta WHERE id = 0").
		Scan(&version, &keys, &size); err != nil {
		return nil, wrapErr(path, "read meta", err)
	}
	e.version.Store(version)
	e.keys.Store(keys)
	e.bytes.Store(size)
	f := keyfilter.New(uint(2 * keys))
	if err = e.scanKeys(ctx, f); err != nil {
		return nil, err
	}
	e.filter.Store(f)

	for _, p := range []struct {
		s **sql.Stmt
		q string
	}{
		{&e.size, "SELECT length(v) FROM kv WHERE k = ?"},
		{&e.put, "INSERT INTO kv (k, v) VALUES (?, ?) ON CONFLICT (k) DO UPDATE SET v = excluded.v"},
		{&e.del, "DELETE FROM kv WHERE k = ?"},
		{&e.agg, "SELECT count(*), coalesce(sum(length(k) + length(v)), 0) FROM kv WHERE k >= ? AND k < ?"},
		{&e.delr, "DELETE FROM kv WHERE k >= ? AND k < ?"},
		{&e.meta, "UPDATE meta SET version = ?, keys = ?, bytes = ? WHERE id = 0"},
	} {
		if *p.s, err = e.wc.PrepareContext(ctx, p.q); err != nil {
			return nil, wrapErr(path, fmt.Sprintf("prepare %q", p.q), err)
		}
	}

	e.rdb, err = sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)&_pragma=query_only(1)")
	if err != nil {
		return nil, wrapErr(path, "open "+path, err)
	}
	// No limit on open read connections: a Scan callback may call Get, and
	// a bounded pool could then deadlock. Idle connections are capped.
	e.rdb.SetMaxIdleConns(4)
	for _, p := range []struct {
		s **sql.Stmt
		q string
	}{
		{&e.get, "SELECT v FROM kv WHERE k = ?"},
		{&e.fwd, "SELECT k, v FROM kv WHERE k >= ? AND k < ? ORDER BY k"},
		{&e.fwdOpen, "SELECT k, v FROM kv WHERE k >= ? ORDER BY k"},
		{&e.rev, "SELECT k, v FROM kv WHERE k >= ? AND k < ? ORDER BY k DESC"},
		{&e.revO, "SELECT k, v FROM kv WHERE k >= ? ORDER BY k DESC"},
	} {
		if *p.s, err = e.rdb.PrepareContext(ctx, p.q); err != nil {
			return nil, wrapErr(path, fmt.Sprintf("prepare %q", p.q), err)
		}
	}
	return e, nil
}

// SQLite's result codes that say what the disk did (primary codes: the
// low byte of an extended one).
const (
	sqliteCorrupt = 11 // SQLITE_CORRUPT: "database disk image is malformed"
	sqliteFull    = 13 // SQLITE_FULL: "database or disk is full"
	sqliteNotADB  = 26 // SQLITE_NOTADB: "file is not a database"
)

// wrapErr names the engine and the operation, and says what modernc's
// *sqlite.Error (a result code, no errno) means for the stash: a full
// disk matches fsys.IsNoSpace, as the other engines' errors do, so the
// stash can tell it from a broken disk; damage SQLite's structure checks
// find in the file is a *fsys.DamageError naming it.
func wrapErr(path, op string, err error) error {
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqliteFull:
			return fmt.Errorf("sqlite engine: %s: %w (%w)", op, err, syscall.ENOSPC)
		case sqliteCorrupt, sqliteNotADB:
			return &fsys.DamageError{Path: path, Reason: fmt.Sprintf("sqlite engine %s: %v", op, err)}
		}
	}
	return fmt.Errorf("sqlite engine: %s: %w", op, err)
}

// blob returns b as a non-nil slice: the driver binds a nil []byte as NULL.
func blob(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// Get returns a copy of key's value.
func (e *Engine) Get(key []byte) ([]byte, bool, error) {
	if e.closed.Load() {
		return nil, false, ErrClosed
	}
	if !e.filter.Load().MayContain(key) {
		e.negatives.Add(1)
		return nil, false, nil
	}
	var v []byte
	err := e.get.QueryRow(blob(key)).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, wrapErr(e.path, "get", err)
	}
	return blob(v), true, nil
}

// Scan calls fn for the pairs in [begin, end) of a consistent snapshot.
func (e *Engine) Scan(begin, end []byte, reverse bool, fn func(key, value []byte) bool) error {
	if e.closed.Load() {
		return ErrClosed
	}
	if end != nil && bytes.Compare(begin, end) >= 0 {
		return nil
	}
	var rows *sql.Rows
	var err error
	switch {
	case end == nil && !reverse:
		rows, err = e.fwdOpen.Query(blob(begin))
	case end == nil:
		rows, err = e.revO.Query(blob(begin))
	case !reverse:
		rows, err = e.fwd.Query(blob(begin), end)
	default:
		rows, err = e.rev.Query(blob(begin), end)
	}
	if err != nil {
		return wrapErr(e.path, "scan", err)
	}
	defer rows.Close()
	var k, v sql.RawBytes
	for rows.Next() {
		if err := rows.Scan(&k, &v); err != nil {
			return wrapErr(e.path, "scan", err)
		}
		if !fn(k, v) {
			return rows.Close()
		}
	}
	if err := rows.Err(); err != nil {
		return wrapErr(e.path, "scan", err)
	}
	return nil
}

// Apply writes b and the new version and counters in one transaction,
// committed (and, with synchronous=FULL, synced) before it returns.
func (e *Engine) Apply(b *engine.Batch) (err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed.Load() {
		return ErrClosed
	}
	ctx := context.Background()
	if _, err := e.wc.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return wrapErr(e.path, "begin", err)
	}
	defer func() {
		if err != nil {
			e.wc.ExecContext(ctx, "ROLLBACK")
			err = wrapErr(e.path, "apply", err)
		}
	}()
	keys, size := e.keys.Load(), e.bytes.Load()
	for i := range b.Writes {
		w := &b.Writes[i]
		key := blob(w.Key)
		if w.IsClearRange() {
			if bytes.Compare(key, w.End) >= 0 {
				continue
			}
			var n, sz int64
			if err := e.agg.QueryRowContext(ctx, key, w.End).Scan(&n, &sz); err != nil {
				return err
			}
			if n == 0 {
				continue
			}
			if _, err := e.delr.ExecContext(ctx, key, w.End); err != nil {
				return err
			}
			keys -= n
			size -= sz
			continue
		}
		var old int64
		found := true
		if err := e.size.QueryRowContext(ctx, key).Scan(&old); errors.Is(err, sql.ErrNoRows) {
			found = false
		} else if err != nil {
			return err
		}
		if w.IsClear() {
			if found {
				if _, err := e.del.ExecContext(ctx, key); err != nil {
					return err
				}
				keys--
				size -= int64(len(key)) + old
			}
			continue
		}
		e.filter.Load().Add(key) // before the key becomes visible
		if _, err := e.put.ExecContext(ctx, key, blob(w.Value)); err != nil {
			return err
		}
		if found {
			size += int64(len(w.Value)) - old
		} else {
			keys++
			size += int64(len(key) + len(w.Value))
		}
	}
	if _, err := e.meta.ExecContext(ctx, int64(b.Version), keys, size); err != nil {
		return err
	}
	if _, err := e.wc.ExecContext(ctx, "COMMIT"); err != nil {
		return err
	}
	e.version.Store(int64(b.Version))
	e.keys.Store(keys)
	e.bytes.Store(size)
	if e.filter.Load().Full() {
		// Rebuild from the table; e.mu keeps writers out meanwhile, and
		// readers use the old filter until the new one replaces it.
		nf := keyfilter.New(uint(2 * keys))
		if err := e.scanKeys(ctx, nf); err != nil {
			return err
		}
		e.filter.Store(nf)
	}
	return nil
}

// scanKeys adds every stored key to f.
func (e *Engine) scanKeys(ctx context.Context, f *keyfilter.Filter) error {
	rows, err := e.wc.QueryContext(ctx, "SELECT k FROM kv")
	if err != nil {
		return wrapErr(e.path, "build key filter", err)
	}
	defer rows.Close()
	for rows.Next() {
		var k []byte
		if err := rows.Scan(&k); err != nil {
			return wrapErr(e.path, "build key filter", err)
		}
		f.Add(k)
	}
	if err := rows.Err(); err != nil {
		return wrapErr(e.path, "build key filter", err)
	}
	return nil
}

// Version returns the version of the last Apply.
func (e *Engine) Version() kv.Version { return kv.Version(e.version.Load()) }

// Stats returns the live pair count and bytes; Evictions is always 0.
func (e *Engine) Stats() engine.Stats {
	return engine.Stats{Keys: e.keys.Load(), Bytes: e.bytes.Load(), FilterNegatives: e.negatives.Load()}
}

// Close closes the statements and connections. A second Close returns nil.
// Close must not run concurrently with other methods; calls made after it
// return ErrClosed.
func (e *Engine) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed.Swap(true) {
		return nil
	}
	return e.closeAll()
}

func (e *Engine) closeAll() error {
	var errs []error
	for _, s := range []*sql.Stmt{e.get, e.fwd, e.fwdOpen, e.rev, e.revO,
		e.size, e.put, e.del, e.agg, e.delr, e.meta} {
		if s != nil {
			errs = append(errs, s.Close())
		}
	}
	if e.rdb != nil {
		errs = append(errs, e.rdb.Close())
	}
	if e.wc != nil {
		errs = append(errs, e.wc.Close())
	}
	if e.wdb != nil {
		errs = append(errs, e.wdb.Close())
	}
	return errors.Join(errs...)
}
