package txlog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/raft"
)

// replica is one raft server of the log, with its own directory, stores,
// in-memory transport and state machine.
type replica struct {
	index int
	id    raft.ServerID
	addr  raft.ServerAddress
	dir   string

	running bool
	stopped chan struct{} // closed when the running raft has shut down
	raft    *raft.Raft
	fsm     *fsm
	store   *pebbleStore
	logs    raft.LogStore
	snaps   *raft.FileSnapshotStore
	trans   *transport
}

// replicaRef is what callers outside l.mu may use of a running replica: a
// stopped replica's raft only fails further calls.
type replicaRef struct {
	index   int
	stopped <-chan struct{}
	raft    *raft.Raft
	fsm     *fsm
	logs    raft.LogStore
}

func (r *replica) ref() *replicaRef {
	return &replicaRef{index: r.index, stopped: r.stopped, raft: r.raft, fsm: r.fsm, logs: r.logs}
}

func (l *Log) raftConfig(r *replica) *raft.Config {
	c := raft.DefaultConfig()
	c.LocalID = r.id
	// One machine: fast failure detection and elections.
	c.HeartbeatTimeout = 250 * time.Millisecond
	c.ElectionTimeout = 250 * time.Millisecond
	c.LeaderLeaseTimeout = 250 * time.Millisecond
	c.CommitTimeout = 5 * time.Millisecond
	c.MaxAppendEntries = 512
	c.BatchApplyCh = true
	c.SnapshotThreshold = l.opts.SnapshotThreshold
	c.TrailingLogs = l.opts.TrailingLogs
	c.SnapshotInterval = l.opts.SnapshotInterval
	c.Logger = l.hlog.Named(string(r.id))
	c.NoLegacyTelemetry = true
	return c
}

// startReplicaLocked opens replica i from its directory (bootstrapping the
// cluster configuration if the directory holds no raft state and bootstrap
// is set) and connects it to the running replicas. l.mu must be held.
func (l *Log) startReplicaLocked(i int, bootstrap bool) (err error) {
	r := l.reps[i]
	if r.running {
		return fmt.Errorf("txlog: replica %d is running", i)
	}
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		return err
	}
	// raft's log and stable store: Pebble, one fdatasync per stored batch.
	store, err := openPebbleStore(filepath.Join(r.dir, "raft"))
	if err != nil {
		return fmt.Errorf("txlog: replica %d: %w", i, err)
	}
	defer func() {
		if err != nil {
			store.Close()
		}
	}()
	logs := newLogCache(store, logCacheRecords, l.opts.RaftCacheBytes)
	snaps, err := raft.NewFileSnapshotStoreWithLogger(r.dir, 2, l.hlog.Named(string(r.id)+"-snap"))
	if err != nil {
		return fmt.Errorf("txlog: replica %d: snapshot store: %w", i, err)
	}
	trans := newTransport(r.addr)
	conf := l.raftConfig(r)
	if bootstrap {
		has, err := raft.HasExistingState(logs, store, snaps)
		if err != nil {
			return fmt.Errorf("txlog: replica %d: %w", i, err)
		}
		if !has {
			var cfg raft.Configuration
			for _, o := range l.reps {
				cfg.Servers = append(cfg.Servers, raft.Server{Suffrage: raft.Voter, ID: o.id, Address: o.addr})
			}
			if err := raft.BootstrapCluster(conf, logs, store, snaps, trans, cfg); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
				return fmt.Errorf("txlog: replica %d: bootstrap: %w", i, err)
			}
		}
	}
	f := newFSM(i, l.logger, l.notify)
	rf, err := raft.NewRaft(conf, f, logs, store, snaps, trans)
	if err != nil {
		return fmt.Errorf("txlog: replica %d: %w", i, err)
	}
	r.raft, r.fsm, r.store, r.logs, r.snaps, r.trans = rf, f, store, logs, snaps, trans
	r.running = true
	r.stopped = make(chan struct{})
	for _, o := range l.reps {
		if o != r && o.running {
			o.trans.connect(r.trans)
			r.trans.connect(o.trans)
		}
	}
	return nil
}

// stopReplicaLocked crashes replica i: it disconnects its transport, shuts
// its raft down (sf, if not nil, is the future of a Shutdown already
// initiated) and closes its stores. l.mu must be held.
func (l *Log) stopReplicaLocked(i int, sf raft.Future) error {
	r := l.reps[i]
	if !r.running {
		return fmt.Errorf("txlog: replica %d is not running", i)
	}
	r.running = false
	for _, o := range l.reps {
		if o.running {
			o.trans.disconnect(r.addr)
		}
	}
	r.trans.disconnectAll()
	if sf == nil {
		sf = r.raft.Shutdown()
	}
	err := sf.Error()
	close(r.stopped) // raft answers no more futures: stop waiting for them
	if cerr := r.store.Close(); err == nil {
		err = cerr
	}
	r.raft, r.fsm, r.store, r.logs, r.snaps, r.trans = nil, nil, nil, nil, nil, nil
	return err
}

// StopReplica crashes replica i (for tests): its transport is disconnected,
// its raft shut down and its stores closed. Appends in flight on it (if it
// led) fail with ErrCommitUnknown.
func (l *Log) StopReplica(i int) error {
	if i < 0 || i >= len(l.reps) {
		return fmt.Errorf("txlog: no replica %d", i)
	}
	select {
	case <-l.closed:
		return ErrClosed
	default:
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stopReplicaLocked(i, nil)
}

// StartReplica restarts a stopped replica from its directory; raft catches
// it up from the leader.
func (l *Log) StartReplica(i int) error {
	if i < 0 || i >= len(l.reps) {
		return fmt.Errorf("txlog: no replica %d", i)
	}
	select {
	case <-l.closed:
		return ErrClosed
	default:
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.startReplicaLocked(i, false)
}
