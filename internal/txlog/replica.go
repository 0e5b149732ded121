package txlog

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"time"

	"github.com/distash/distash/internal/fsys"
	"github.com/distash/distash/internal/raftstore"
	"github.com/hashicorp/raft"
)

// replica is one raft server of the log, with its own directory, stores,
// transport and state machine.
type replica struct {
	index int
	id    raft.ServerID
	addr  raft.ServerAddress
	dir   string

	running bool
	stopped chan struct{} // closed when the running raft has shut down
	raft    *raft.Raft
	fsm     *fsm
	store   *raftstore.Store
	logs    raft.LogStore
	snaps   *raft.FileSnapshotStore
	trans   raft.Transport
	mem     *transport // trans in embedded mode; nil in network mode
}

// replicaRef is what callers outside l.mu may use of a running replica: a
// stopped replica's raft only fails further calls.
type replicaRef struct {
	index   int
	id      raft.ServerID
	addr    raft.ServerAddress
	stopped <-chan struct{}
	raft    *raft.Raft
	fsm     *fsm
	store   *raftstore.Store
	logs    raft.LogStore
}

func (r *replica) ref() *replicaRef {
	return &replicaRef{index: r.index, id: r.id, addr: r.addr, stopped: r.stopped, raft: r.raft, fsm: r.fsm, store: r.store, logs: r.logs}
}

func (l *Log) raftConfig(r *replica) *raft.Config {
	c := raft.DefaultConfig()
	c.LocalID = r.id
	// Fast failure detection and elections: one machine, or a local network.
	c.HeartbeatTimeout = l.opts.RaftTimeout
	c.ElectionTimeout = l.opts.RaftTimeout
	c.LeaderLeaseTimeout = l.opts.RaftTimeout
	c.CommitTimeout = 5 * time.Millisecond
	c.MaxAppendEntries = 512
	c.BatchApplyCh = true
	// Snapshots are the log's decision (snapshotLoop), not raft's own
	// count of records: raft's check is left with a threshold it never
	// reaches.
	c.SnapshotThreshold = math.MaxInt64
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
	if err := fsys.MkdirDurable(l.opts.FS, r.dir); err != nil {
		return err
	}
	// raft's log and stable store: Pebble, one fdatasync per stored batch.
	var onFail func(error)
	if f := l.opts.OnFail; f != nil {
		onFail = func(err error) { f(fmt.Errorf("txlog: replica %s: %w", r.id, err)) }
	}
	store, err := raftstore.Open(l.opts.FS, filepath.Join(r.dir, "raft"), onFail)
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
	var (
		trans raft.Transport
		mem   *transport
	)
	if n := l.opts.Network; n != nil {
		trans = n.Transport
	} else {
		mem = newTransport(r.addr)
		trans = mem
	}
	conf := l.raftConfig(r)
	// raft blocks on NotifyCh until it is read: watchLeadership reads it
	// until the replica is stopped.
	notifyCh := make(chan bool, 1)
	conf.NotifyCh = notifyCh
	if bootstrap && (l.opts.Network == nil || !l.opts.Network.Join) {
		has, err := raft.HasExistingState(logs, store, snaps)
		if err != nil {
			return fmt.Errorf("txlog: replica %d: %w", i, err)
		}
		if !has {
			var cfg raft.Configuration
			if n := l.opts.Network; n != nil {
				// Every node bootstraps the same configuration: raft
				// accepts that, and no node has to start first.
				for _, p := range n.Peers {
					cfg.Servers = append(cfg.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.Addr)})
				}
			} else {
				for _, o := range l.reps {
					cfg.Servers = append(cfg.Servers, raft.Server{Suffrage: raft.Voter, ID: o.id, Address: o.addr})
				}
			}
			if err := raft.BootstrapCluster(conf, logs, store, snaps, trans, cfg); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
				return fmt.Errorf("txlog: replica %d: bootstrap: %w", i, err)
			}
		}
	}
	f := newFSM(i, l.logger, l.notify)
	spill, err := newSpillConfig(fsys.Or(l.opts.FS), filepath.Join(r.dir, "spill"), l.opts.MemoryBytes)
	if err != nil {
		return fmt.Errorf("txlog: replica %d: %w", i, err)
	}
	f.startSpill(spill)
	f.onSpillDamage = func() { go l.rebuildSpilled(i, f) }
	rf, err := raft.NewRaft(conf, f, logs, store, snaps, trans)
	if err != nil {
		return fmt.Errorf("txlog: replica %d: %w", i, err)
	}
	r.raft, r.fsm, r.store, r.logs, r.snaps, r.trans, r.mem = rf, f, store, logs, snaps, trans, mem
	l.transOwned = true // raft closes it when it shuts down
	r.running = true
	r.stopped = make(chan struct{})
	go l.watchLeadership(notifyCh, r.stopped)
	go l.snapshotLoop(rf, f, r.stopped)
	if mem != nil {
		for _, o := range l.reps {
			if o != r && o.running {
				o.mem.connect(mem)
				mem.connect(o.mem)
			}
		}
	}
	return nil
}

// snapshotLoop takes rf's snapshots, every SnapshotInterval at most, when
// they are due (fsm.snapshotDue: SnapshotThreshold records and at least the
// snapshot's size appended since the last one), until stopped.
func (l *Log) snapshotLoop(rf *raft.Raft, f *fsm, stopped <-chan struct{}) {
	t := l.opts.Clock.NewTicker(l.opts.SnapshotInterval)
	defer t.Stop()
	for {
		select {
		case <-stopped:
			return
		case <-t.C():
		}
		if !f.snapshotDue(int64(l.opts.SnapshotThreshold)) {
			continue
		}
		if err := rf.Snapshot().Error(); err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) && !errors.Is(err, raft.ErrRaftShutdown) {
			l.logger.Warn("txlog: raft snapshot failed", "replica", f.replica, "err", err)
		}
	}
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
	if r.mem != nil {
		for _, o := range l.reps {
			if o.running {
				o.mem.disconnect(r.addr)
			}
		}
		r.mem.disconnectAll()
	}
	// In network mode raft's shutdown closes the transport (raft.WithClose).
	if sf == nil {
		sf = r.raft.Shutdown()
	}
	// A raft frozen on its failed store (raftstore.Store.Set) shuts
	// down only once its blocked write is let go.
	r.store.Release()
	err := sf.Error()
	close(r.stopped) // raft answers no more futures: stop waiting for them
	if cerr := r.store.Close(); err == nil {
		err = cerr
	}
	r.fsm.closeSpill()
	r.raft, r.fsm, r.store, r.logs, r.snaps, r.trans, r.mem = nil, nil, nil, nil, nil, nil, nil
	return err
}

// errNetworkReplica: in network mode raft closes the caller's transport
// when its replica stops, so the replica cannot be restarted in place.
var errNetworkReplica = errors.New("txlog: StopReplica and StartReplica are for embedded mode; close and reopen the Log")

// StopReplica crashes replica i (for tests): its transport is disconnected,
// its raft shut down and its stores closed. Appends in flight on it (if it
// led) fail with ErrCommitUnknown. Embedded mode only.
func (l *Log) StopReplica(i int) error {
	if l.network() {
		return errNetworkReplica
	}
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
// it up from the leader. Embedded mode only.
func (l *Log) StartReplica(i int) error {
	if l.network() {
		return errNetworkReplica
	}
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

// rebuildSpilled rebuilds replica i's state machine f, one of whose
// spilled entries did not read back (a damaged or unreadable spill file),
// from the replica's newest raft snapshot and the raft log after it: what
// raft holds durably, as a restart would load it.
func (l *Log) rebuildSpilled(i int, f *fsm) {
	l.mu.RLock()
	r := l.reps[i]
	if !r.running || r.fsm != f {
		l.mu.RUnlock()
		return
	}
	snaps, logs := r.snaps, r.logs
	l.mu.RUnlock()
	err := func() error {
		metas, err := snaps.List()
		if err != nil {
			return err
		}
		if len(metas) == 0 {
			return f.rebuild(nil, 0, logs.GetLog)
		}
		meta, rc, err := snaps.Open(metas[0].ID)
		if err != nil {
			return err
		}
		defer rc.Close()
		return f.rebuild(rc, meta.Index, logs.GetLog)
	}()
	if err != nil {
		l.logger.Error("txlog: cannot rebuild the replica's state after a spilled entry did not read back: restart its node", "replica", r.id, "err", err)
		return
	}
	l.logger.Warn("txlog: rebuilt the replica's state from its raft snapshot and log after a spilled entry did not read back", "replica", r.id)
}
