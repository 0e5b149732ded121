// Package raftstore is hashicorp/raft's log store and stable store on
// Pebble, the one durable raft store of the tree: the transaction log's
// replicas (internal/txlog) and the coordinators (internal/coord) keep
// their raft logs, terms and votes in it. A failed write or sync fails a
// store for good (see Open); damage found at open is a *fsys.DamageError
// naming the file.
package raftstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble"
	"github.com/hashicorp/raft"

	"github.com/distash/distash/internal/decode"
	"github.com/distash/distash/internal/engine/pebble/guard"
	"github.com/distash/distash/internal/fsys"
	"github.com/distash/distash/internal/version"
)

// Store is raft's LogStore and StableStore on Pebble. Storing a batch
// of raft records costs one WAL append and one fdatasync (bolt needs two
// fsyncs and B-tree page writes per commit), which is what bounds the
// commit rate of a single-machine log.
//
// Keys: 'l' + big-endian index -> encoded raft.Log; 's' + key -> stable value.
type Store struct {
	db    *pebble.DB
	dir   string
	guard *guard.Guard // a failed write or sync fails the store for good

	// use is held shared by every call that touches db and exclusively by
	// Close: raft's metrics goroutine reads the store (oldestLog) and can
	// outlive the replica's shutdown, and a Pebble DB panics when used
	// after Close.
	use    sync.RWMutex
	closed bool // Protected by use.

	mu          sync.Mutex
	first, last uint64 // 0, 0 when empty. Protected by mu.

	frozen     chan struct{} // closed by Close: releases the writes waitFrozen blocks
	frozenOnce sync.Once
}

var errKeyNotFound = errors.New("not found") // raft compares the text

// ErrCorrupt is returned (wrapped) when a stored raft record, key or
// stable value cannot be decoded.
// (The messages keep the names they had in txlog, where the store began.)
var ErrCorrupt = errors.New("txlog: corrupt record")

var (
	_ raft.LogStore    = (*Store)(nil)
	_ raft.StableStore = (*Store)(nil)
)

// FormatKind and FormatVersion state the store's format (Pebble's files,
// the keys and values this package writes in them) in a marker in its
// directory (fsys.OpenFormat); bump FormatVersion with any change to them.
const (
	FormatKind    = "raft-store"
	FormatVersion = 1
)

func init() { version.RegisterFormat(FormatKind, FormatVersion) }

// Open opens the store in dir through fs (nil: the OS's). A failed write or
// sync (a failed fsync, a full disk) fails the store for good: the call
// returns the error and every later write fails too, nothing is retried,
// and onFail is called once with the error. raft itself panics when its
// stable store (term and vote) cannot be written, and must not be told a
// vote is durable when it is not: after a failure those writes, when a
// *raft.Raft makes them, block instead, freezing the replica, which its
// owner then stops (Release, Close) or exits. With onFail nil the process
// exits with a message naming the store (guard.Exit): a log replica that
// cannot write is a node that must stop.
func Open(fs fsys.FS, dir string, onFail func(error)) (s *Store, err error) {
	if onFail == nil {
		onFail = func(err error) {
			guard.Exit(fmt.Sprintf("txlog: raft store %s failed, exiting: %v", dir, err))
		}
	}
	fs = fsys.Or(fs)
	if err := fsys.MkdirDurable(fs, dir); err != nil {
		return nil, fmt.Errorf("txlog: raft store: %w", err)
	}
	_, mark, err := fsys.OpenFormat(fs, dir, FormatKind, FormatVersion, nil)
	if err != nil {
		return nil, err
	}
	g := guard.New("txlog raft store "+dir, "github.com/distash/distash/internal/raftstore.", onFail)
	opts := &pebble.Options{
		Cache:                       pebble.NewCache(8 << 20),
		MemTableSize:                16 << 20,
		MemTableStopWritesThreshold: 4,
		Logger:                      g.Logger(),
		FS:                          g.FS(fs),
	}
	defer opts.Cache.Unref()
	db, err := openDB(dir, opts, g)
	if err != nil {
		return nil, err
	}
	s = &Store{db: db, dir: dir, guard: g, frozen: make(chan struct{})}
	if err := s.verify(); err != nil {
		db.Close()
		return nil, err
	}
	if err := mark(); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

// verify reads every key and value of the store once, at open, and sets
// first and last. Pebble checks a block's checksum when it reads it, so
// damage anywhere in the store is found here, as a *fsys.DamageError
// naming the file, rather than when raft reads the record: raft panics
// when a record it applies cannot be read. raft reads every record after
// its snapshot at start anyway, and the store holds little more
// (TrailingLogs before the snapshot).
func (s *Store) verify() (err error) {
	defer s.guard.Recover(&err)
	it, err := s.db.NewIter(nil)
	if err != nil {
		return storeErr(s.dir, err)
	}
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		if len(k) > 0 && k[0] == 'l' {
			i, err := parseLogKey(k)
			if err != nil {
				it.Close()
				return err
			}
			if s.first == 0 {
				s.first = i
			}
			s.last = i
		}
		if _, err := it.ValueAndErr(); err != nil {
			break
		}
	}
	err = it.Error()
	if cerr := it.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return storeErr(s.dir, err)
	}
	return nil
}

func openDB(dir string, opts *pebble.Options, g *guard.Guard) (db *pebble.DB, err error) {
	defer g.Recover(&err)
	db, err = pebble.Open(dir, opts)
	if err != nil {
		return nil, storeErr(dir, err)
	}
	return db, nil
}

// storeErr names the store; damage Pebble finds (a checksum that fails, a
// file the MANIFEST lists that is missing) is a *fsys.DamageError naming
// the file.
func storeErr(dir string, err error) error {
	if errors.Is(err, fsys.ErrDamaged) {
		return err
	}
	if de := guard.Damage(dir, "txlog raft store "+dir, err); de != nil {
		return de
	}
	return fmt.Errorf("txlog: raft store %s: %w", dir, err)
}

func logKey(i uint64) []byte {
	k := make([]byte, 9)
	k[0] = 'l'
	binary.BigEndian.PutUint64(k[1:], i)
	return k
}

// edge returns the first (or last) stored index, 0 when there is none.
func (s *Store) edge(last bool) (uint64, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{'l'}, UpperBound: []byte{'m'}})
	if err != nil {
		return 0, err
	}
	defer it.Close()
	ok := it.First()
	if last {
		ok = it.Last()
	}
	if !ok {
		return 0, it.Error()
	}
	return parseLogKey(it.Key())
}

// parseLogKey returns the index of a key of the raft log. The keys come from
// disk, so a short one (a damaged store, or a stray key written by something
// else between 'l' and 'm') is an error rather than an index out of range.
func parseLogKey(k []byte) (uint64, error) {
	if len(k) != 9 || k[0] != 'l' {
		return 0, fmt.Errorf("%w: raft log key %x is not 'l' and an 8-byte index", ErrCorrupt, k)
	}
	return binary.BigEndian.Uint64(k[1:]), nil
}

func (s *Store) FirstIndex() (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.first, nil
}

func (s *Store) LastIndex() (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last, nil
}

// errStoreClosed is what calls after Close return.
var errStoreClosed = errors.New("txlog: raft store closed")

// enter starts a call that touches db; it fails once the store is closed.
// The caller runs s.use.RUnlock when done.
func (s *Store) enter() error {
	s.use.RLock()
	if s.closed {
		s.use.RUnlock()
		return errStoreClosed
	}
	if err := s.guard.Err(); err != nil {
		s.use.RUnlock()
		return err
	}
	return nil
}

// Err is the error the store failed for good with, or nil while it works.
func (s *Store) Err() error { return s.guard.Err() }

// fail fails the store for good with err (the first error stays) and
// returns the recorded error.
func (s *Store) fail(err error) error { return s.guard.Fail(storeErr(s.dir, err)) }

// waitFrozen blocks raft's stable-store write on a failed store (see
// Open) until the store is released or closed, and then ends
// the calling goroutine instead of returning: raft panics on an error
// (setCurrentTerm) and must not hear of success. raft runs its loops in
// goroutines whose exit it waits for (Shutdown), so the replica's shutdown
// completes.
func (s *Store) waitFrozen() {
	<-s.frozen
	runtime.Goexit()
}

// Release lets the stable-store writes a failed store blocks end their
// goroutines: call it once the replica's raft is shutting down, before
// waiting for its shutdown.
func (s *Store) Release() { s.frozenOnce.Do(func() { close(s.frozen) }) }

// raftPrefix is the function name prefix of raft's own methods.
const raftPrefix = "github.com/hashicorp/raft.(*Raft)."

// calledByRaft reports whether a running *raft.Raft (a method of it is on
// the stack) made the call: raft.BootstrapCluster and other callers take
// an error, raft's loops cannot.
func calledByRaft() bool {
	pcs := make([]uintptr, 64)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(3, pcs)])
	for {
		f, more := frames.Next()
		if strings.HasPrefix(f.Function, raftPrefix) {
			return true
		}
		if !more {
			return false
		}
	}
}

func (s *Store) GetLog(index uint64, l *raft.Log) (err error) {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.use.RUnlock()
	defer s.guard.Recover(&err)
	v, closer, err := s.db.Get(logKey(index))
	if errors.Is(err, pebble.ErrNotFound) {
		return raft.ErrLogNotFound
	}
	if err != nil {
		return storeErr(s.dir, err)
	}
	defer closer.Close()
	if err := decodeRaftLog(v, l); err != nil {
		return fmt.Errorf("raft log %d: %w", index, err)
	}
	// A record stored under another index is as wrong as a garbled one, and
	// raft would otherwise take it for the record it asked for.
	if l.Index != index {
		return fmt.Errorf("raft log %d: %w: the record holds index %d", index, ErrCorrupt, l.Index)
	}
	return nil
}

func (s *Store) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

func (s *Store) StoreLogs(logs []*raft.Log) (err error) {
	if len(logs) == 0 {
		return nil
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.use.RUnlock()
	defer s.guard.Recover(&err)
	b := s.db.NewBatch()
	defer b.Close()
	for _, l := range logs {
		if err := b.Set(logKey(l.Index), encodeRaftLog(l), nil); err != nil {
			return err
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return s.fail(err)
	}
	s.mu.Lock()
	if s.first == 0 {
		s.first = logs[0].Index
	}
	if last := logs[len(logs)-1].Index; last > s.last {
		s.last = last
	}
	s.mu.Unlock()
	return nil
}

func (s *Store) DeleteRange(min, max uint64) (err error) {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.use.RUnlock()
	defer s.guard.Recover(&err)
	if err := s.db.DeleteRange(logKey(min), logKey(max+1), pebble.Sync); err != nil {
		return s.fail(err)
	}
	first, err := s.edge(false)
	if err != nil {
		return err
	}
	last, err := s.edge(true)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.first, s.last = first, last
	s.mu.Unlock()
	return nil
}

func stableKey(k []byte) []byte { return append([]byte{'s'}, k...) }

// Set writes a stable value (raft's term and vote). On a failed store a
// call by raft blocks for good: see waitFrozen.
func (s *Store) Set(key, val []byte) error {
	err := s.guard.Err()
	if err == nil {
		err = s.set(key, val)
	}
	if err != nil && s.guard.Err() != nil && calledByRaft() {
		s.waitFrozen()
	}
	return err
}

func (s *Store) set(key, val []byte) (err error) {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.use.RUnlock()
	defer s.guard.Recover(&err)
	if err := s.db.Set(stableKey(key), val, pebble.Sync); err != nil {
		return s.fail(err)
	}
	return nil
}

func (s *Store) Get(key []byte) (_ []byte, err error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.use.RUnlock()
	defer s.guard.Recover(&err)
	v, closer, err := s.db.Get(stableKey(key))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, errKeyNotFound
	}
	if err != nil {
		return nil, storeErr(s.dir, err)
	}
	defer closer.Close()
	return append([]byte(nil), v...), nil
}

func (s *Store) SetUint64(key []byte, val uint64) error {
	return s.Set(key, binary.BigEndian.AppendUint64(nil, val))
}

func (s *Store) GetUint64(key []byte) (uint64, error) {
	v, err := s.Get(key)
	if err != nil {
		return 0, err
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("txlog: stable value %q: %w: %d bytes, want 8", key, ErrCorrupt, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

// Close waits for the calls in progress and closes the store; later calls
// fail with errStoreClosed. Closing twice is harmless.
func (s *Store) Close() (err error) {
	s.Release()
	s.use.Lock()
	defer s.use.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if ferr := s.guard.Err(); ferr != nil {
		// Pebble's state after a fatal error is not to be trusted: close
		// it if it lets us, in the background.
		s.guard.Abandon(s.db.Close)
		return ferr
	}
	defer s.guard.Recover(&err)
	return s.db.Close()
}

// Raft log records in Pebble:
//
//	raftLog = index:uvarint term:uvarint type:byte appendedAt:varint dataLen:uvarint data extLen:uvarint extensions
//
// appendedAt is in Unix nanoseconds. Raft leaves it zero on the records it
// writes itself at bootstrap; the zero time.Time has no Unix nanosecond value
// (UnixNano is undefined before 1678), so it is stored as zeroAppendedAt, the
// value earlier versions of this store wrote for it (they read it back as a
// time in 1754): stores they wrote read back a zero time too. The instant
// zeroAppendedAt would otherwise stand for, 1754-08-30 22:43:41.128654848
// UTC, is never an append time.
const zeroAppendedAt int64 = -6795364578871345152

// encodeRaftLog returns the Pebble value of l.
func encodeRaftLog(l *raft.Log) []byte {
	at := zeroAppendedAt
	if !l.AppendedAt.IsZero() {
		at = l.AppendedAt.UnixNano()
	}
	b := make([]byte, 0, 4*binary.MaxVarintLen64+1+len(l.Data)+len(l.Extensions))
	b = binary.AppendUvarint(b, l.Index)
	b = binary.AppendUvarint(b, l.Term)
	b = append(b, byte(l.Type))
	b = binary.AppendVarint(b, at)
	b = binary.AppendUvarint(b, uint64(len(l.Data)))
	b = append(b, l.Data...)
	b = binary.AppendUvarint(b, uint64(len(l.Extensions)))
	return append(b, l.Extensions...)
}

// decodeRaftLog decodes a Pebble value into l. Data and Extensions are
// copies (b is Pebble's buffer, valid only until its closer is closed), nil
// when empty. Errors wrap ErrCorrupt and name the field that is wrong.
func decodeRaftLog(b []byte, l *raft.Log) error {
	r := &decode.Reader{B: b, Corrupt: ErrCorrupt}
	r.What = "raft record index"
	index := r.Uvarint()
	r.What = "raft record term"
	term := r.Uvarint()
	r.What = "raft record type"
	typ := raft.LogType(r.Byte())
	r.What = "raft record appended-at"
	at := r.Varint()
	r.What = "raft record data"
	data := r.Bytes(r.Uvarint())
	r.What = "raft record extensions"
	ext := r.Bytes(r.Uvarint())
	r.What = "raft record"
	if r.Err() == nil && r.Remaining() != 0 {
		r.Fail("%d trailing bytes", r.Remaining())
	}
	if r.Err() != nil {
		return r.Err()
	}
	l.Index, l.Term, l.Type = index, term, typ
	l.AppendedAt = time.Time{}
	if at != zeroAppendedAt {
		l.AppendedAt = time.Unix(0, at)
	}
	l.Data = bytes.Clone(data) // nil stays nil
	l.Extensions = bytes.Clone(ext)
	return nil
}
