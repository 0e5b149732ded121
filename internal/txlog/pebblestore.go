package txlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cockroachdb/pebble"
	"github.com/hashicorp/raft"
)

// pebbleStore is raft's LogStore and StableStore on Pebble. Storing a batch
// of raft records costs one WAL append and one fdatasync (bolt needs two
// fsyncs and B-tree page writes per commit), which is what bounds the
// commit rate of a single-machine log.
//
// Keys: 'l' + big-endian index -> encoded raft.Log; 's' + key -> stable value.
type pebbleStore struct {
	db *pebble.DB

	mu          sync.Mutex
	first, last uint64 // 0, 0 when empty. Protected by mu.
}

var errKeyNotFound = errors.New("not found") // raft compares the text

func openPebbleStore(dir string) (*pebbleStore, error) {
	opts := &pebble.Options{
		Cache:                       pebble.NewCache(8 << 20),
		MemTableSize:                16 << 20,
		MemTableStopWritesThreshold: 4,
		Logger:                      quietPebbleLogger{},
	}
	defer opts.Cache.Unref()
	db, err := pebble.Open(dir, opts)
	if err != nil {
		return nil, fmt.Errorf("txlog: open raft store %s: %w", dir, err)
	}
	s := &pebbleStore{db: db}
	if s.first, err = s.edge(false); err != nil {
		db.Close()
		return nil, err
	}
	if s.last, err = s.edge(true); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

type quietPebbleLogger struct{}

func (quietPebbleLogger) Infof(string, ...any)  {}
func (quietPebbleLogger) Errorf(string, ...any) {}
func (quietPebbleLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}

func logKey(i uint64) []byte {
	k := make([]byte, 9)
	k[0] = 'l'
	binary.BigEndian.PutUint64(k[1:], i)
	return k
}

// edge returns the first (or last) stored index, 0 when there is none.
func (s *pebbleStore) edge(last bool) (uint64, error) {
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
	return binary.BigEndian.Uint64(it.Key()[1:]), nil
}

func (s *pebbleStore) FirstIndex() (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.first, nil
}

func (s *pebbleStore) LastIndex() (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last, nil
}

func (s *pebbleStore) GetLog(index uint64, l *raft.Log) error {
	v, closer, err := s.db.Get(logKey(index))
	if errors.Is(err, pebble.ErrNotFound) {
		return raft.ErrLogNotFound
	}
	if err != nil {
		return err
	}
	defer closer.Close()
	return decodeRaftLog(v, l)
}

func (s *pebbleStore) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

func (s *pebbleStore) StoreLogs(logs []*raft.Log) error {
	if len(logs) == 0 {
		return nil
	}
	b := s.db.NewBatch()
	defer b.Close()
	for _, l := range logs {
		if err := b.Set(logKey(l.Index), encodeRaftLog(l), nil); err != nil {
			return err
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return err
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

func (s *pebbleStore) DeleteRange(min, max uint64) error {
	if err := s.db.DeleteRange(logKey(min), logKey(max+1), pebble.Sync); err != nil {
		return err
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

func (s *pebbleStore) Set(key, val []byte) error {
	return s.db.Set(stableKey(key), val, pebble.Sync)
}

func (s *pebbleStore) Get(key []byte) ([]byte, error) {
	v, closer, err := s.db.Get(stableKey(key))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, errKeyNotFound
	}
	if err != nil {
		return nil, err
	}
	defer closer.Close()
	return append([]byte(nil), v...), nil
}

func (s *pebbleStore) SetUint64(key []byte, val uint64) error {
	return s.Set(key, binary.BigEndian.AppendUint64(nil, val))
}

func (s *pebbleStore) GetUint64(key []byte) (uint64, error) {
	v, err := s.Get(key)
	if err != nil {
		return 0, err
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("txlog: stable value %q has %d bytes, want 8", key, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

func (s *pebbleStore) Close() error { return s.db.Close() }

// encodeRaftLog: index, term, type, appended-at (unix ns), data, extensions.
func encodeRaftLog(l *raft.Log) []byte {
	b := make([]byte, 0, 32+len(l.Data)+len(l.Extensions))
	b = binary.AppendUvarint(b, l.Index)
	b = binary.AppendUvarint(b, l.Term)
	b = append(b, byte(l.Type))
	b = binary.AppendVarint(b, l.AppendedAt.UnixNano())
	b = binary.AppendUvarint(b, uint64(len(l.Data)))
	b = append(b, l.Data...)
	b = binary.AppendUvarint(b, uint64(len(l.Extensions)))
	return append(b, l.Extensions...)
}

func decodeRaftLog(b []byte, l *raft.Log) error {
	bad := errors.New("txlog: corrupt raft record")
	var n int
	if l.Index, n = binary.Uvarint(b); n <= 0 {
		return bad
	}
	b = b[n:]
	if l.Term, n = binary.Uvarint(b); n <= 0 || len(b) <= n {
		return bad
	}
	b = b[n:]
	l.Type = raft.LogType(b[0])
	b = b[1:]
	at, n := binary.Varint(b)
	if n <= 0 {
		return bad
	}
	l.AppendedAt = time.Unix(0, at)
	b = b[n:]
	next := func() ([]byte, error) {
		size, n := binary.Uvarint(b)
		if n <= 0 || uint64(len(b)-n) < size {
			return nil, bad
		}
		out := append([]byte(nil), b[n:n+int(size)]...)
		b = b[n+int(size):]
		return out, nil
	}
	var err error
	if l.Data, err = next(); err != nil {
		return err
	}
	if l.Extensions, err = next(); err != nil {
		return err
	}
	if len(l.Extensions) == 0 {
		l.Extensions = nil
	}
	return nil
}
