package coord

import (
	"io"
	"sync"

	"github.com/hashicorp/raft"
)

// fsm adapts State to raft.FSM.
type fsm struct {
	mu    sync.RWMutex
	state *State
}

// applied is an FSM response: raft hands it back to the Apply caller on
// the leader.
type applied struct {
	res Result
	err error
}

func (f *fsm) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	c, err := decodeCommand(l.Data)
	if err != nil {
		// Every replica fails the same way: the state stays the same on all.
		return applied{res: Result{Slot: -1}, err: err}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	res, err := f.state.Apply(c)
	return applied{res: res, err: err}
}

func (f *fsm) current() *State {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.state.Clone()
}

func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	b, err := EncodeState(f.state)
	if err != nil {
		return nil, err
	}
	return snapshot(b), nil
}

func (f *fsm) Restore(r io.ReadCloser) error {
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	s, err := DecodeState(b)
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.state = s
	f.mu.Unlock()
	return nil
}

type snapshot []byte

func (s snapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (snapshot) Release() {}
