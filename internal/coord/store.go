package coord

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/cockroachdb/pebble"
	"github.com/hashicorp/raft"
)

// store is raft's LogStore and StableStore on Pebble, every write synced.
// The coordinators write a few records per generation or registration, so
// it favours brevity over speed: records are JSON, and the first and last
// indexes are read from the keys. (txlog has a faster store, unexported.)
//
// Keys: 'l' + big-endian index -> JSON raft.Log; 's' + key -> stable value.
type store struct {
	db *pebble.DB

	// use is held shared by every call that touches db and exclusively by
	// Close: raft's metrics goroutine reads the store and can outlive the
	// node's shutdown, and a Pebble DB panics when used after Close.
	use    sync.RWMutex
	closed bool // Protected by use.
}

// errStoreClosed is what calls after Close return.
var errStoreClosed = errors.New("coord: raft store closed")

// enter starts a call that touches db; it fails once the store is closed.
// The caller runs s.use.RUnlock when done.
func (s *store) enter() error {
	s.use.RLock()
	if s.closed {
		s.use.RUnlock()
		return errStoreClosed
	}
	return nil
}

// errNotFound: raft's stable-store callers compare the text "not found".
var errNotFound = errors.New("not found")

func openStore(dir string) (*store, error) {
	db, err := pebble.Open(dir, &pebble.Options{Logger: quietLogger{}})
	if err != nil {
		return nil, fmt.Errorf("coord: open raft store %s: %w", dir, err)
	}
	return &store{db: db}, nil
}

type quietLogger struct{}

func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}
func (quietLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}

func logKey(i uint64) []byte { return binary.BigEndian.AppendUint64([]byte{'l'}, i) }

// edge returns the first (or last) stored index, 0 when there is none.
func (s *store) edge(last bool) (uint64, error) {
	if err := s.enter(); err != nil {
		return 0, err
	}
	defer s.use.RUnlock()
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
	if k := it.Key(); len(k) == 9 {
		return binary.BigEndian.Uint64(k[1:]), nil
	}
	return 0, fmt.Errorf("coord: raft store: bad log key %x", it.Key())
}

func (s *store) FirstIndex() (uint64, error) { return s.edge(false) }
func (s *store) LastIndex() (uint64, error)  { return s.edge(true) }

func (s *store) GetLog(index uint64, l *raft.Log) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.use.RUnlock()
	v, closer, err := s.db.Get(logKey(index))
	if errors.Is(err, pebble.ErrNotFound) {
		return raft.ErrLogNotFound
	}
	if err != nil {
		return err
	}
	defer closer.Close()
	*l = raft.Log{}
	if err := json.Unmarshal(v, l); err != nil {
		return fmt.Errorf("coord: raft log %d: %w", index, err)
	}
	if l.Index != index {
		return fmt.Errorf("coord: raft log %d holds index %d", index, l.Index)
	}
	return nil
}

func (s *store) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

func (s *store) StoreLogs(logs []*raft.Log) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.use.RUnlock()
	b := s.db.NewBatch()
	defer b.Close()
	for _, l := range logs {
		v, err := json.Marshal(l)
		if err != nil {
			return err
		}
		if err := b.Set(logKey(l.Index), v, nil); err != nil {
			return err
		}
	}
	return b.Commit(pebble.Sync)
}

func (s *store) DeleteRange(min, max uint64) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.use.RUnlock()
	return s.db.DeleteRange(logKey(min), logKey(max+1), pebble.Sync)
}

func (s *store) Set(key, val []byte) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.use.RUnlock()
	return s.db.Set(append([]byte{'s'}, key...), val, pebble.Sync)
}

func (s *store) Get(key []byte) ([]byte, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.use.RUnlock()
	v, closer, err := s.db.Get(append([]byte{'s'}, key...))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, errNotFound
	}
	if err != nil {
		return nil, err
	}
	defer closer.Close()
	return append([]byte(nil), v...), nil
}

func (s *store) SetUint64(key []byte, val uint64) error {
	return s.Set(key, binary.BigEndian.AppendUint64(nil, val))
}

func (s *store) GetUint64(key []byte) (uint64, error) {
	v, err := s.Get(key)
	if err != nil {
		return 0, err
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("coord: stable value %q has %d bytes, want 8", key, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

// Close waits for the calls in progress and closes the store; later calls
// fail with errStoreClosed.
func (s *store) Close() error {
	s.use.Lock()
	defer s.use.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	return s.db.Close()
}
