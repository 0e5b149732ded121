package txlog

import (
	"context"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distash/distash/internal/clock"
	"github.com/distash/distash/internal/fsys"
	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/logentry"
	"github.com/distash/distash/internal/raftlog"
	"github.com/distash/distash/internal/raftstore"
	"github.com/distash/distash/internal/version"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// Peer is one replica of a log in network mode: its raft server id and the
// address its raft transport listens on.
type Peer struct{ ID, Addr string }

// NetworkOptions select network mode: this process runs one replica of a
// log whose replicas (one per transaction node) replicate over the network.
type NetworkOptions struct {
	LocalID string // this node's raft server id; must be one of Peers
	// Peers are every replica of the log (this one included), identical on
	// every node: a new directory bootstraps raft with them.
	Peers []Peer
	// Transport is built by the caller (e.g. raft.NewNetworkTransportWithConfig
	// over the node's stream layer) and listens on the local peer's Addr.
	// The Log owns it from Open on: raft closes it (raft.WithClose, i.e.
	// io.Closer) when the replica shuts down, and Open closes it if it fails.
	Transport raft.Transport
	// Join: a directory without raft state does not bootstrap; the
	// replica waits for the log's leader, which added it to the
	// configuration (AddVoter), to catch it up. A replica that did not
	// form the log must join: its id is new, and bootstrapping would write
	// a configuration the log never had.
	Join bool
}

// Options configure Open. Zero values mean the defaults.
type Options struct {
	// Dir holds the replicas: Dir/replica-<i> in embedded mode, Dir/replica
	// in network mode.
	Dir string
	// FS is the file system of txlog.meta and the replicas' raft stores;
	// nil means the OS's. (raft's snapshot store writes its files with the
	// OS's calls: hashicorp/raft's FileSnapshotStore takes no FS.)
	FS fsys.FS
	// OnFail is called once for each replica whose raft store fails for
	// good (a failed write or fsync, a full disk): nothing is acknowledged
	// from that replica again, and its raft is frozen (it would panic on
	// its next term or vote write). nil means the process exits with a
	// message naming the store, the clean way out for a node whose log
	// cannot write.
	OnFail func(error)
	// Replicas is the number of replicas: 1 (default) .. 7, all in this
	// process over raft.NewInmemTransport (embedded mode). In network mode
	// it is len(Network.Peers); 0 or that.
	Replicas int
	Tags     []kv.Tag // every tag that must pop before an entry can be dropped; nil on reopen keeps the recovered set
	Logger   *slog.Logger
	// Network, if set, selects network mode (see NetworkOptions and the
	// package documentation). A directory cannot change mode.
	Network *NetworkOptions
	// RaftTimeout is raft's heartbeat, election and leader lease timeout
	// (default 250ms in embedded mode, 500ms in network mode, where RPCs
	// cross real sockets and other processes).
	RaftTimeout time.Duration

	// SnapshotThreshold is how many raft log records since the last snapshot
	// a new one needs at least (default 4096), besides at least the
	// snapshot's size in bytes of them (the unpopped entries: see the
	// package doc); TrailingLogs how many records are kept behind a
	// snapshot (default 1024); SnapshotInterval how often a replica checks
	// (default 5s).
	SnapshotThreshold uint64
	TrailingLogs      uint64
	SnapshotInterval  time.Duration
	// PopInterval is how often changed pops are replicated (default 200ms).
	PopInterval time.Duration
	// LeaderTimeout bounds how long Open, Append and pop flushes wait for a
	// raft leader (default 10s).
	LeaderTimeout time.Duration
	// RaftCacheBytes bounds the data of the recent raft log records each
	// replica keeps in memory in front of its store (default 32 MiB, and
	// at most 1024 records).
	RaftCacheBytes int64
	// MemoryBytes is the budget of the entries each replica holds in memory
	// until every tag popped them (Stats.Memory; default 256 MiB). Past it,
	// OverMemoryBudget reports true and stashes flush what they applied
	// without waiting for their MVCC window to pass, so that they pop it.
	// Past twice it (a tag that stopped popping), the oldest entries spill
	// to files in the replica's directory (Stats.Spilled) until they hold
	// 8 MiB under that again.
	MemoryBytes int64
	// HoldBytes bounds what the log holds for a tag that stopped popping
	// (a dead stash): when the unpopped entries' memory and spilled bytes
	// pass it, the leader force-pops the tag furthest behind (never
	// kv.SystemTag) down to MemoryBytes (Stats.Dropped). Default
	// DefaultHoldFactor × MemoryBytes (4 GiB). While entries cannot spill
	// (a full or failing disk) the bound is at most MemoryHoldFactor ×
	// MemoryBytes.
	HoldBytes int64
	// MayDrop reports whether the hold bound may force-pop tag: false for
	// a tag whose entries no other copy holds (a durable stash none of
	// whose shards has another live replica), which the log keeps instead,
	// past HoldBytes, and reports (Withheld) so that the ratekeeper stops
	// the writes that would grow it. Nil: every tag but kv.SystemTag.
	MayDrop func(kv.Tag) bool
	// Clock times the log's own loop, the pop flushes (nil: the real
	// clock). Raft keeps real time, and so do the waits on it (a leader,
	// appends in flight at Close, a context's deadline).
	Clock clock.Clock
}

const maxReplicas = 7

// DefaultMemoryBytes is the default of Options.MemoryBytes.
const DefaultMemoryBytes = 256 << 20

// DefaultHoldFactor times MemoryBytes is the default of Options.HoldBytes:
// what the log holds for a stash that is down, mostly spilled to disk.
const DefaultHoldFactor = 16

// MemoryHoldFactor times MemoryBytes bounds what the log holds while its
// entries cannot spill (a full or failing disk): all of it in memory.
const MemoryHoldFactor = 4

var (
	// ErrClosed is returned by operations on a closed Log.
	ErrClosed = errors.New("txlog: closed")
	// ErrOutOfOrder is returned (through the Future) by Append for an entry
	// whose Version is not above the last appended one or whose PrevVersion
	// is not the last appended Version: a programming error of the caller.
	ErrOutOfOrder = errors.New("txlog: entry out of order")
	// ErrPrevVersion is returned (through the Future) when the replicated log
	// rejected an entry because its PrevVersion is not the version of the
	// last committed entry: an earlier append was lost (e.g. across a leader
	// change). The entry is definitely not in the log; call Resync.
	ErrPrevVersion = errors.New("txlog: prev version does not match the log")
	// ErrCommitUnknown wraps raft errors of an append (leadership lost,
	// shutdown): the entry may or may not be committed. Call Resync to learn
	// the log's last version.
	ErrCommitUnknown = errors.New("txlog: commit result unknown")
	// ErrNoLeader is returned when no raft leader appeared within
	// Options.LeaderTimeout; the entry was not submitted (definitely not
	// committed), nor will later appends be until Resync.
	ErrNoLeader = errors.New("txlog: no raft leader")
	// ErrNotLeader is returned in network mode by Append, Resync,
	// BeginGeneration, VerifyLeader and SyncPops on a replica that is not
	// the raft leader (or, for VerifyLeader, no longer leads a quorum). An
	// append that fails with it was not submitted (definitely not
	// committed) and does not block later appends.
	ErrNotLeader = errors.New("txlog: not the raft leader")
)

// pendingAppend is an append submitted to raft, waiting for its result.
type pendingAppend struct {
	finish  func(error)
	af      raft.ApplyFuture
	stopped <-chan struct{}  // closed once the replica af was submitted to is stopped
	store   *raftstore.Store // that replica's raft store
}

// Stats describe the log.
type Stats struct {
	Entries        int                   // unpopped entries held, in memory or spilled (per replica)
	Bytes          int64                 // their encoded size
	Memory         int64                 // their memory: Bytes plus the per-tag index, less what is spilled
	Spilled        int64                 // the encoded size of those spilled to disk
	SpilledEntries int                   // how many of Entries are spilled
	Popped         map[kv.Tag]kv.Version // replicated popped version per tag of the set
	MinPopped      kv.Version            // minimum over Popped
	Trimmed        kv.Version            // entries <= Trimmed are dropped
	LastVersion    kv.Version
	Leader         int // replica index of the raft leader, -1 if none (network mode: 0 if the local replica leads)
	Running        int // running replicas
	RaftLastIndex  uint64
	RaftFirstIndex uint64 // first raft log record still on the leader's disk
	LeaderID       string // raft server id of the leader as seen here, "" if none
	Epoch          uint64 // the log's generation (BeginGeneration)
	Network        bool   // network mode
	// Dropped holds the tags this Log force-popped because the log held
	// more than HoldBytes for them, with the version each was popped to
	// (since Open).
	Dropped map[kv.Tag]kv.Version
}

// HeldBytes is what the hold bound measures: the memory of the entries in
// memory and the encoded size of those spilled.
func (s Stats) HeldBytes() int64 { return s.Memory + s.Spilled }

// Log is the replicated log. See the package documentation.
type Log struct {
	opts   Options
	logger *slog.Logger
	hlog   hclog.Logger

	mu         sync.RWMutex // guards reps[i] start/stop
	reps       []*replica
	leaderHint atomic.Int32
	transOwned bool // a raft took Network.Transport over (under mu)

	appendMu     sync.Mutex
	lastAppended kv.Version
	unsubmitted  bool   // an append found no leader: fail the next ones until Resync
	epoch        uint64 // highest epoch BeginGeneration started here: older appends fail at once
	closing      bool
	pending      chan *pendingAppend
	complDone    chan struct{}

	popMu      sync.Mutex
	tags       []kv.Tag
	tagsSet    bool // tags come from Options.Tags or SetTags, not from recovery
	popPending map[kv.Tag]kv.Version
	popDirty   bool
	dropped    map[kv.Tag]kv.Version // force-popped tags (HoldBytes)
	// withheld is the tag the hold bound would drop but MayDrop keeps,
	// if withholding (the last flush's finding).
	withheld    kv.Tag
	withholding bool
	flushMu     sync.Mutex

	// Network mode: pops are replicated only once the local replica leads
	// and has merged the replicated pops (popReady); leaderTerm counts the
	// leadership changes so a stale merge is not marked ready.
	popReady   atomic.Bool
	leaderTerm atomic.Uint64

	subMu   sync.Mutex
	subs    map[chan bool]struct{}
	leading bool // last leadership state sent to subs

	notifyMu sync.Mutex
	notifyCh chan struct{}

	closeOnce sync.Once
	closed    chan struct{}
	stopPops  chan struct{}
	popsDone  chan struct{}
	closeErr  error
}

// Open opens (or creates) the log in opts.Dir, recovering every replica from
// its snapshot and raft log and bootstrapping a new raft cluster if the
// directory is empty. In embedded mode it waits until a leader has applied
// everything committed so far (LastVersion is then the recovered log's
// end). In network mode it returns once the local replica runs, without
// waiting for a leader (the other nodes may start later): LastVersion is
// what the local replica recovered, and a commit proxy chains from the
// version BeginGeneration returns.
func Open(opts Options) (*Log, error) {
	if opts.Dir == "" {
		return nil, errors.New("txlog: Options.Dir is required")
	}
	if n := opts.Network; n != nil {
		if err := checkNetwork(n, opts.Replicas); err != nil {
			if c, ok := n.Transport.(io.Closer); ok {
				c.Close()
			}
			return nil, err
		}
		opts.Replicas = len(n.Peers)
	}
	if opts.Replicas == 0 {
		opts.Replicas = 1
	}
	if opts.Replicas < 1 || opts.Replicas > maxReplicas {
		return nil, fmt.Errorf("txlog: Options.Replicas = %d, want 1..%d", opts.Replicas, maxReplicas)
	}
	if opts.SnapshotThreshold == 0 {
		opts.SnapshotThreshold = 4096
	}
	if opts.TrailingLogs == 0 {
		opts.TrailingLogs = 1024
	}
	if opts.SnapshotInterval == 0 {
		opts.SnapshotInterval = 5 * time.Second
	}
	opts.Clock = clock.Or(opts.Clock)
	if opts.PopInterval == 0 {
		opts.PopInterval = 200 * time.Millisecond
	}
	if opts.LeaderTimeout == 0 {
		opts.LeaderTimeout = 10 * time.Second
	}
	if opts.RaftTimeout <= 0 {
		opts.RaftTimeout = 250 * time.Millisecond
		if opts.Network != nil {
			opts.RaftTimeout = 500 * time.Millisecond
		}
	}
	if opts.RaftCacheBytes <= 0 {
		opts.RaftCacheBytes = DefaultRaftCacheBytes
	}
	if opts.MemoryBytes <= 0 {
		opts.MemoryBytes = DefaultMemoryBytes
	}
	if opts.HoldBytes <= 0 {
		opts.HoldBytes = DefaultHoldFactor * opts.MemoryBytes
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	logger = logger.With("component", "txlog")
	l := &Log{
		opts:       opts,
		logger:     logger,
		hlog:       raftlog.New(logger, "raft"), // errors only, rate-limited: elections are routine
		pending:    make(chan *pendingAppend, 8192),
		complDone:  make(chan struct{}),
		popPending: make(map[kv.Tag]kv.Version),
		dropped:    make(map[kv.Tag]kv.Version),
		notifyCh:   make(chan struct{}),
		subs:       make(map[chan bool]struct{}),
		closed:     make(chan struct{}),
		stopPops:   make(chan struct{}),
		popsDone:   make(chan struct{}),
	}
	l.leaderHint.Store(-1)
	if n := opts.Network; n != nil {
		var addr string
		for _, p := range n.Peers {
			if p.ID == n.LocalID {
				addr = p.Addr
			}
		}
		l.reps = []*replica{{
			id:   raft.ServerID(n.LocalID),
			addr: raft.ServerAddress(addr),
			dir:  filepath.Join(opts.Dir, "replica"),
		}}
	} else {
		for i := 0; i < opts.Replicas; i++ {
			id := fmt.Sprintf("replica-%d", i)
			l.reps = append(l.reps, &replica{
				index: i,
				id:    raft.ServerID(id),
				addr:  raft.ServerAddress(id),
				dir:   filepath.Join(opts.Dir, id),
			})
		}
	}
	go l.complete()
	fail := func(err error) (*Log, error) {
		l.shutdown()
		return nil, err
	}
	if err := fsys.MkdirDurable(opts.FS, opts.Dir); err != nil {
		return fail(err)
	}
	if err := checkMeta(fsys.Or(opts.FS), opts.Dir, opts.Replicas, opts.Network); err != nil {
		return fail(err)
	}
	l.mu.Lock()
	for i := range l.reps {
		if err := l.startReplicaLocked(i, true); err != nil {
			l.mu.Unlock()
			return fail(err)
		}
	}
	l.mu.Unlock()
	if !l.network() {
		ctx, cancel := context.WithTimeout(context.Background(), opts.LeaderTimeout)
		defer cancel()
		if _, err := l.Resync(ctx); err != nil {
			return fail(err)
		}
	} else {
		l.lastAppended = l.reps[0].fsm.lastVersion()
	}
	st := l.bestFSM().state()
	l.popMu.Lock()
	for t, v := range st.Popped {
		l.popPending[t] = v
	}
	if opts.Tags != nil {
		l.tags = normTags(opts.Tags)
		l.tagsSet = true
	} else {
		for t := range st.Popped {
			l.tags = append(l.tags, t)
		}
		l.tags = normTags(l.tags)
	}
	l.popDirty = len(l.tags) != len(st.Popped)
	for _, t := range l.tags {
		if _, ok := st.Popped[t]; !ok {
			l.popDirty = true
		}
	}
	ntags := len(l.tags) // read under popMu: a replica leading already may set them (takePops)
	l.popMu.Unlock()
	if !l.network() {
		if err := l.flushPops(opts.LeaderTimeout); err != nil {
			return fail(err)
		}
	}
	go l.popLoop()
	logger.Info("txlog open", "dir", opts.Dir, "replicas", opts.Replicas, "network", l.network(),
		"last_version", st.Last, "epoch", st.Epoch, "entries", st.Entries, "tags", ntags)
	return l, nil
}

// checkNetwork validates the network options (replicas is Options.Replicas).
func checkNetwork(n *NetworkOptions, replicas int) error {
	if n.Transport == nil {
		return errors.New("txlog: NetworkOptions.Transport is required")
	}
	if len(n.Peers) == 0 || len(n.Peers) > maxReplicas {
		return fmt.Errorf("txlog: %d peers, want 1..%d", len(n.Peers), maxReplicas)
	}
	if replicas != 0 && replicas != len(n.Peers) {
		return fmt.Errorf("txlog: Options.Replicas = %d but there are %d peers", replicas, len(n.Peers))
	}
	ids, addrs := map[string]bool{}, map[string]bool{}
	for _, p := range n.Peers {
		if p.ID == "" || p.Addr == "" {
			return fmt.Errorf("txlog: peer %+v lacks an id or address", p)
		}
		if ids[p.ID] || addrs[p.Addr] {
			return fmt.Errorf("txlog: peer %+v listed twice", p)
		}
		ids[p.ID], addrs[p.Addr] = true, true
	}
	if !ids[n.LocalID] {
		return fmt.Errorf("txlog: local id %q is not among the peers", n.LocalID)
	}
	return nil
}

func (l *Log) network() bool { return l.opts.Network != nil }

func normTags(tags []kv.Tag) []kv.Tag {
	out := slices.Clone(tags)
	slices.Sort(out)
	return slices.Compact(out)
}

// FormatKind and FormatVersion are the format of a log replica's directory:
// txlog.meta, and the entries and snapshots its raft group writes (the
// raft store under it has its own, raftstore.FormatVersion). The version
// is a line of txlog.meta; bump it with any change to their encoding.
const (
	FormatKind    = "txlog"
	FormatVersion = 1
)

func init() { version.RegisterFormat(FormatKind, FormatVersion) }

// checkMeta records the replica count and mode of a new log and rejects
// reopening it with another count or mode: a network replica's directory
// holds one replica whose raft configuration names the peers, an embedded
// log's holds every replica. An embedded log's file is "replicas=N", as
// before network mode existed; a network one adds "mode=network" and the
// local id.
//
// The file is checksummed (fsys.WriteChecked); one written before
// checksums is read as it is.
func checkMeta(fs fsys.FS, dir string, replicas int, network *NetworkOptions) error {
	path := fs.PathJoin(dir, "txlog.meta")
	want := "format=" + strconv.Itoa(FormatVersion) + "\nreplicas=" + strconv.Itoa(replicas) + "\n"
	if network != nil {
		want += "mode=network\nid=" + network.LocalID + "\n"
	}
	b, _, err := fsys.ReadChecked(fs, path)
	if errors.Is(err, iofs.ErrNotExist) {
		return fsys.WriteChecked(fs, path, []byte(want))
	}
	if err != nil {
		return err
	}
	meta := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return fmt.Errorf("txlog: bad %s: %q", path, b)
		}
		meta[k] = v
	}
	// A file without a format line was written before format versions:
	// Unversioned, which is version 1.
	got := fsys.Unversioned
	if f, ok := meta["format"]; ok {
		if got, err = strconv.Atoi(f); err != nil {
			return fmt.Errorf("txlog: bad %s: %q", path, b)
		}
	}
	if err := version.CheckFormat(FormatKind, got, FormatVersion); err != nil {
		var fe *version.FormatError
		if errors.As(err, &fe) {
			fe.Path = path
		}
		return err
	}
	n, err := strconv.Atoi(meta["replicas"])
	if err != nil {
		return fmt.Errorf("txlog: bad %s: %q", path, b)
	}
	switch mode := meta["mode"]; {
	case mode == "" && network != nil:
		return fmt.Errorf("txlog: %s holds an embedded log, opened in network mode", dir)
	case mode == "network" && network == nil:
		return fmt.Errorf("txlog: %s holds a network log replica, opened in embedded mode", dir)
	case mode != "" && mode != "network":
		return fmt.Errorf("txlog: bad %s: mode %q", path, mode)
	case network != nil && meta["id"] != network.LocalID:
		return fmt.Errorf("txlog: %s holds the replica of %q, opened as %q", dir, meta["id"], network.LocalID)
	}
	if n != replicas {
		return fmt.Errorf("txlog: %s holds a log of %d replicas, opened with %d", dir, n, replicas)
	}
	return nil
}

// complete resolves futures in append order.
func (l *Log) complete() {
	defer close(l.complDone)
	for p := range l.pending {
		err := awaitFuture(p.af, p.stopped)
		if err != nil {
			err = fmt.Errorf("%w: %w", ErrCommitUnknown, err)
			// A store that failed for good deposes its leader: appends
			// still in flight then fail with raft's "leadership lost",
			// which says nothing of the disk. Name the cause.
			if serr := p.store.Err(); serr != nil && !errors.Is(err, serr) {
				err = fmt.Errorf("%w (the replica's raft store failed: %w)", err, serr)
			}
		} else if re, ok := p.af.Response().(error); ok && re != nil {
			err = re
		}
		p.finish(err)
	}
}

// awaitFuture waits for a raft future of a replica. Raft never answers
// futures still queued when it shuts down, so once the replica is stopped
// it gives up with raft.ErrRaftShutdown (the waiting goroutine is then
// leaked: at most the few futures that were queued).
func awaitFuture(rf raft.Future, stopped <-chan struct{}) error {
	errc := make(chan error, 1)
	go func() { errc <- rf.Error() }()
	select {
	case err := <-errc:
		return err
	case <-stopped:
		select {
		case err := <-errc:
			return err
		default:
			return raft.ErrRaftShutdown
		}
	}
}

// Append submits e to the raft leader and returns at once (it blocks only
// while no leader is known, or when raft's apply queue is full). It must be
// called by one goroutine, in increasing Version order, with e.PrevVersion
// the previous entry's Version (LastVersion after Open or Resync). e is
// encoded before Append returns and may be reused.
func (l *Log) Append(e *logentry.Entry) *logentry.Future {
	f, finish := logentry.NewFuture(e.Version)
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	if l.closing {
		finish(ErrClosed)
		return f
	}
	// Before the order check: a deposed proxy's entry does not chain from
	// what the new one appends, and must not disturb its chain.
	if e.Epoch < l.epoch {
		finish(fmt.Errorf("%w: entry %d of epoch %d after generation %d began", logentry.ErrStaleEpoch, e.Version, e.Epoch, l.epoch))
		return f
	}
	if e.Version <= l.lastAppended || e.PrevVersion != l.lastAppended {
		finish(fmt.Errorf("%w: entry %d with prev %d after %d", ErrOutOfOrder, e.Version, e.PrevVersion, l.lastAppended))
		return f
	}
	if l.network() {
		// Never wait for a leader: the caller must find the node that leads.
		r := l.leader()
		if r == nil {
			finish(ErrNotLeader)
			return f
		}
		l.lastAppended = e.Version
		l.pending <- &pendingAppend{finish: finish, af: r.raft.Apply(encodeEntry(e), 0), stopped: r.stopped, store: r.store}
		return f
	}
	l.lastAppended = e.Version
	if l.unsubmitted {
		// It would chain onto an entry that is not in the log.
		finish(fmt.Errorf("%w: an earlier append was not submitted, Resync first", ErrNoLeader))
		return f
	}
	buf := encodeEntry(e)
	r := l.waitLeader(l.opts.LeaderTimeout)
	if r == nil {
		l.unsubmitted = true
		finish(ErrNoLeader)
		return f
	}
	l.pending <- &pendingAppend{finish: finish, af: r.raft.Apply(buf, 0), stopped: r.stopped, store: r.store}
	return f
}

// Resync waits for a leader to apply every committed entry and makes its
// last version the one the next Append must chain from (PrevVersion). Call
// it from the appending goroutine after an append failed, once no append is
// in flight. In network mode it does not wait for a leader: on a replica
// that does not lead it fails with ErrNotLeader.
func (l *Log) Resync(ctx context.Context) (kv.Version, error) {
	if l.network() {
		r := l.leader()
		if r == nil {
			return 0, ErrNotLeader
		}
		if err := awaitFutureCtx(ctx, r.raft.Barrier(ctxTimeout(ctx, l.opts.LeaderTimeout)), r.stopped); err != nil {
			return 0, leaderErr(ctx, err)
		}
		v := r.fsm.lastVersion()
		l.appendMu.Lock()
		l.lastAppended, l.unsubmitted = v, false
		l.appendMu.Unlock()
		return v, nil
	}
	for {
		r := l.waitLeaderCtx(ctx)
		if r == nil {
			if err := ctx.Err(); err != nil {
				return 0, fmt.Errorf("%w: %w", ErrNoLeader, err)
			}
			return 0, ErrClosed
		}
		timeout := l.opts.LeaderTimeout
		if dl, ok := ctx.Deadline(); ok {
			timeout = time.Until(dl)
		}
		if err := awaitFuture(r.raft.Barrier(timeout), r.stopped); err != nil {
			if ctx.Err() != nil {
				return 0, fmt.Errorf("txlog: resync: %w", err)
			}
			continue // leadership moved: retry
		}
		v := r.fsm.lastVersion()
		l.appendMu.Lock()
		l.lastAppended, l.unsubmitted = v, false
		l.appendMu.Unlock()
		return v, nil
	}
}

// leader returns a running replica that believes it leads, or nil.
func (l *Log) leader() *replicaRef {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if h := l.leaderHint.Load(); h >= 0 {
		if r := l.reps[h]; r.running && r.raft.State() == raft.Leader {
			return r.ref()
		}
	}
	for _, r := range l.reps {
		if r.running && r.raft.State() == raft.Leader {
			l.leaderHint.Store(int32(r.index))
			return r.ref()
		}
	}
	return nil
}

// ctxTimeout is the time left before ctx's deadline, or def.
func ctxTimeout(ctx context.Context, def time.Duration) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		return max(time.Until(dl), time.Millisecond)
	}
	return def
}

// awaitFutureCtx is awaitFuture that also gives up when ctx is done.
func awaitFutureCtx(ctx context.Context, rf raft.Future, stopped <-chan struct{}) error {
	errc := make(chan error, 1)
	go func() { errc <- awaitFuture(rf, stopped) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// leaderErr maps the failure of a raft future of a leader-only operation:
// ctx's error if ctx is done, else ErrNotLeader wrapping raft's error
// (leadership lost, or the replica shut down).
func leaderErr(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil && errors.Is(err, cerr) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrNotLeader, err)
}

// BeginGeneration starts generation epoch of the log for a new commit proxy
// and returns the version it must chain its appends from (the PrevVersion
// of its first Entry, whose Epoch must be epoch): the last version of the
// committed log, which holds every acknowledged append of earlier
// generations (the recovery point). It runs only on the leader
// (ErrNotLeader otherwise): a raft barrier makes the leader apply
// everything committed in earlier terms, then a replicated generation
// command raises the log's epoch, after which every replica rejects entries
// of lower epochs (ErrStaleEpoch), deterministically. An epoch not above
// the log's fails with ErrStaleEpoch. If the generation command's fate is
// unknown (leadership lost: ErrNotLeader wrapping raft's error) the
// generation may have begun; retry with a higher epoch.
func (l *Log) BeginGeneration(ctx context.Context, epoch uint64) (kv.Version, error) {
	if epoch == 0 {
		return 0, fmt.Errorf("%w: generation epochs start at 1", logentry.ErrStaleEpoch)
	}
	select {
	case <-l.closed:
		return 0, ErrClosed
	default:
	}
	r := l.leader()
	if r == nil {
		return 0, ErrNotLeader
	}
	timeout := ctxTimeout(ctx, l.opts.LeaderTimeout)
	if err := awaitFutureCtx(ctx, r.raft.Barrier(timeout), r.stopped); err != nil {
		return 0, leaderErr(ctx, err)
	}
	if cur := r.fsm.currentEpoch(); cur >= epoch {
		return 0, fmt.Errorf("%w: generation %d, the log is at epoch %d", logentry.ErrStaleEpoch, epoch, cur)
	}
	l.appendMu.Lock()
	if l.closing {
		l.appendMu.Unlock()
		return 0, ErrClosed
	}
	// From now on this Log fails older appends at once, so none slips
	// between the generation command and the chain reset below.
	l.epoch = max(l.epoch, epoch)
	af := r.raft.Apply(encodeGeneration(epoch), timeout)
	l.appendMu.Unlock()
	if err := awaitFutureCtx(ctx, af, r.stopped); err != nil {
		return 0, leaderErr(ctx, err)
	}
	var v kv.Version
	switch resp := af.Response().(type) {
	case error:
		return 0, resp
	case kv.Version:
		v = resp
	default:
		return 0, fmt.Errorf("txlog: generation %d: unexpected response %v", epoch, resp)
	}
	l.appendMu.Lock()
	l.lastAppended, l.unsubmitted = v, false
	l.appendMu.Unlock()
	l.logger.Info("txlog generation began", "epoch", epoch, "version", v)
	return v, nil
}

// VerifyLeader confirms that the local replica still leads a quorum (raft's
// VerifyLeader: a round of heartbeats), so that a deposed leader never
// hands out a stale read version. ErrNotLeader when it does not (or ctx's
// error).
func (l *Log) VerifyLeader(ctx context.Context) error {
	r := l.leader()
	if r == nil {
		return ErrNotLeader
	}
	if err := awaitFutureCtx(ctx, r.raft.VerifyLeader(), r.stopped); err != nil {
		return leaderErr(ctx, err)
	}
	return nil
}

// TransferLeadership asks raft to hand the leadership of the local leader
// replica to another replica (the most up to date): a node that cannot
// serve as the log's leader's node (its system stash is lost) lets
// another one lead. ErrNotLeader when no local replica leads.
func (l *Log) TransferLeadership(ctx context.Context) error {
	r := l.leader()
	if r == nil {
		return ErrNotLeader
	}
	if err := awaitFutureCtx(ctx, r.raft.LeadershipTransfer(), r.stopped); err != nil {
		return leaderErr(ctx, err)
	}
	return nil
}

// Gone returns the version up to which tag's messages may have been
// dropped by trims (a Peek after a lower version fails with ErrTrimmed),
// as this Log's most advanced replica knows it.
func (l *Log) Gone(tag kv.Tag) kv.Version {
	f := l.bestFSM()
	if f == nil {
		return 0
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	return max(f.goneFloor, f.gone[tag])
}

// IsLeader reports whether a replica of this Log is the raft leader (in
// network mode: the local replica).
func (l *Log) IsLeader() bool { return l.leader() != nil }

// Leader returns the raft server id and address of the leader as this Log
// sees it ("", "" if none is known). In network mode it is the local
// replica's view, which may name another node.
func (l *Log) Leader() (id, addr string) {
	if !l.network() {
		if r := l.leader(); r != nil {
			return string(r.id), string(r.addr)
		}
		return "", ""
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	r := l.reps[0]
	if !r.running {
		return "", ""
	}
	a, i := r.raft.LeaderWithID()
	return string(i), string(a)
}

// Subscribe returns a channel that receives IsLeader's value whenever it
// changes, starting with its value now. The channel holds one value and
// a newer state replaces an unread one, so a slow reader skips flips but
// always ends on the latest state. cancel stops the notifications; the
// channel is never closed (it last says false when the Log closes).
func (l *Log) Subscribe() (ch <-chan bool, cancel func()) {
	c := make(chan bool, 1)
	l.subMu.Lock()
	l.leading = l.IsLeader()
	for o := range l.subs { // they must not miss a change folded in here
		select {
		case <-o:
		default:
		}
		o <- l.leading
	}
	c <- l.leading
	l.subs[c] = struct{}{}
	l.subMu.Unlock()
	return c, func() {
		l.subMu.Lock()
		delete(l.subs, c)
		l.subMu.Unlock()
	}
}

// publishLeadership sends IsLeader to the subscribers if it changed. It is
// computed and sent under one lock, so the last value sent is the latest.
func (l *Log) publishLeadership() {
	l.subMu.Lock()
	defer l.subMu.Unlock()
	v := l.IsLeader()
	if v == l.leading {
		return
	}
	l.leading = v
	for c := range l.subs {
		select { // replace an unread notification with the newer one
		case <-c:
		default:
		}
		c <- v
	}
}

// watchLeadership follows one replica's raft leadership notifications
// (raft blocks until they are read) until it is stopped.
func (l *Log) watchLeadership(ch <-chan bool, stopped <-chan struct{}) {
	for {
		select {
		case leading := <-ch:
			if l.network() {
				l.popMu.Lock()
				term := l.leaderTerm.Add(1)
				l.popReady.Store(false)
				l.popMu.Unlock()
				if leading {
					go l.takePops(term)
				}
			}
			l.publishLeadership()
		case <-stopped:
			l.publishLeadership()
			return
		}
	}
}

// takePops prepares a network replica that became leader (term counts
// leadership changes) to replicate pops: once it has applied everything
// committed before its term, it merges the replicated popped versions into
// its pending ones (so a flush never carries less than the log holds, nor a
// smaller recovered tag set) and lets the pop loop flush.
func (l *Log) takePops(term uint64) {
	r := l.leader()
	if r == nil {
		return
	}
	if err := awaitFuture(r.raft.Barrier(l.opts.LeaderTimeout), r.stopped); err != nil {
		return // leadership lost (or no quorum): the next term retries
	}
	st := r.fsm.state()
	l.popMu.Lock()
	defer l.popMu.Unlock()
	if l.leaderTerm.Load() != term {
		return
	}
	for t, v := range st.Popped {
		if v > l.popPending[t] {
			l.popPending[t] = v
		}
	}
	if !l.tagsSet {
		for t := range st.Popped {
			l.tags = append(l.tags, t)
		}
		l.tags = normTags(l.tags)
	}
	l.popDirty = l.popDirty || len(l.tags) != len(st.Popped)
	for _, t := range l.tags {
		if v, ok := st.Popped[t]; !ok || v != l.popPending[t] {
			l.popDirty = true
		}
	}
	l.popReady.Store(true)
}

func (l *Log) waitLeader(timeout time.Duration) *replicaRef {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return l.waitLeaderCtx(ctx)
}

func (l *Log) waitLeaderCtx(ctx context.Context) *replicaRef {
	if r := l.leader(); r != nil {
		return r
	}
	// Raft's leadership changes in real time: poll it on the real clock.
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-l.closed:
			return nil
		case <-t.C:
		}
		if r := l.leader(); r != nil {
			return r
		}
	}
}

// bestFSM returns the state machine of the running replica that has applied
// the most (the leader on ties), or nil.
func (l *Log) bestFSM() *fsm {
	l.mu.RLock()
	defer l.mu.RUnlock()
	var best *fsm
	for _, r := range l.reps {
		if !r.running {
			continue
		}
		if best == nil || r.fsm.lastVersion() > best.lastVersion() ||
			(r.fsm.lastVersion() == best.lastVersion() && r.raft.State() == raft.Leader) {
			best = r.fsm
		}
	}
	return best
}

func (l *Log) waitCh() <-chan struct{} {
	l.notifyMu.Lock()
	defer l.notifyMu.Unlock()
	return l.notifyCh
}

// notify wakes every waiting Peek (called after each applied batch).
func (l *Log) notify() {
	l.notifyMu.Lock()
	close(l.notifyCh)
	l.notifyCh = make(chan struct{})
	l.notifyMu.Unlock()
}

// Peek blocks until the log's committed end version is above after (or ctx
// is done), then returns tag's messages with versions in (after, end] and
// end, the version up to which the caller now has everything of its tag
// (even with no messages). With maxBytes > 0 it stops early after about
// maxBytes (at least one message); end is then the last message's version.
// The returned mutations share memory with the log: do not modify them.
func (l *Log) Peek(ctx context.Context, tag kv.Tag, after kv.Version, maxBytes int) ([]logentry.Message, kv.Version, error) {
	for {
		ch := l.waitCh()
		select {
		case <-l.closed:
			return nil, after, ErrClosed
		default:
		}
		if f := l.bestFSM(); f != nil && f.lastVersion() > after {
			return f.peek(tag, after, maxBytes)
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, after, ctx.Err()
		case <-l.closed:
			return nil, after, ErrClosed
		}
	}
}

// Pop records that tag's stash made everything <= upTo durable. Pops are
// batched and replicated every PopInterval; once every tag of the set has
// popped past an entry, every replica drops it.
func (l *Log) Pop(tag kv.Tag, upTo kv.Version) {
	l.popMu.Lock()
	defer l.popMu.Unlock()
	if upTo > l.popPending[tag] {
		l.popPending[tag] = upTo
		l.popDirty = true
	}
}

// Popped returns the highest version popped for tag (replicated or not yet).
func (l *Log) Popped(tag kv.Tag) kv.Version {
	l.popMu.Lock()
	defer l.popMu.Unlock()
	return l.popPending[tag]
}

// SetTags replaces the set of tags that must pop before an entry is dropped
// (replicated with the next pop flush). A new tag starts at its last popped
// version (0 if never popped), holding back trimming until it pops.
func (l *Log) SetTags(tags []kv.Tag) {
	l.popMu.Lock()
	defer l.popMu.Unlock()
	l.tags = normTags(tags)
	l.tagsSet = true
	l.popDirty = true
}

// Tags returns the current tag set. In network mode, without Options.Tags
// or SetTags, it is the set recovered by Open, completed from the
// replicated one when the local replica becomes leader.
func (l *Log) Tags() []kv.Tag {
	l.popMu.Lock()
	defer l.popMu.Unlock()
	return slices.Clone(l.tags)
}

// SyncPops replicates pending pops and tag changes now. In network mode
// only the leader replicates pops: elsewhere (and on a new leader until it
// has merged the replicated pops, a moment after its election) it fails
// with ErrNotLeader.
func (l *Log) SyncPops(ctx context.Context) error {
	select {
	case <-l.closed:
		return ErrClosed
	default:
	}
	done := make(chan error, 1)
	go func() { done <- l.flushPops(l.opts.LeaderTimeout) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l *Log) flushPops(timeout time.Duration) error {
	l.flushMu.Lock()
	defer l.flushMu.Unlock()
	var lead *replicaRef
	if l.network() {
		// Followers keep their pops; a new leader flushes once takePops
		// merged the replicated ones.
		if lead = l.leader(); lead == nil || !l.popReady.Load() {
			return fmt.Errorf("txlog: replicate pops: %w", ErrNotLeader)
		}
		l.enforceHold(lead.fsm)
	} else if r := l.leader(); r != nil {
		l.enforceHold(r.fsm)
	}
	l.popMu.Lock()
	if !l.popDirty {
		l.popMu.Unlock()
		return nil
	}
	pops := make([]TagVersion, 0, len(l.tags))
	for _, t := range l.tags {
		pops = append(pops, TagVersion{Tag: t, Version: l.popPending[t]})
	}
	l.popDirty = false
	l.popMu.Unlock()
	err := func() error {
		r := lead
		if r == nil {
			if r = l.waitLeader(timeout); r == nil {
				return ErrNoLeader
			}
		}
		af := r.raft.Apply(encodePop(pops), timeout)
		if err := awaitFuture(af, r.stopped); err != nil {
			return err
		}
		if re, ok := af.Response().(error); ok && re != nil {
			return re
		}
		return nil
	}()
	if err != nil {
		l.popMu.Lock()
		l.popDirty = true
		l.popMu.Unlock()
		return fmt.Errorf("txlog: replicate pops: %w", err)
	}
	return nil
}

func (l *Log) popLoop() {
	defer close(l.popsDone)
	t := l.opts.Clock.NewTicker(l.opts.PopInterval)
	defer t.Stop()
	for {
		select {
		case <-l.stopPops:
			return
		case <-t.C():
			if err := l.flushPops(l.opts.LeaderTimeout); err != nil && !errors.Is(err, ErrNotLeader) {
				l.logger.Warn("txlog: pop flush failed", "err", err)
			}
		}
	}
}

// systemTag is shardmap.SystemTag, the system stash's tag: the hold bound
// never drops it (txlog does not import shardmap).
const systemTag kv.Tag = 0

// enforceHold force-pops, when the leader's state machine f holds more
// than HoldBytes of unpopped entries, the tag furthest behind (never
// systemTag, nor one MayDrop keeps) up to the version that brings it back
// to MemoryBytes. When only kept tags are behind, it drops nothing and
// records the furthest behind (Withheld). If
// another tag is behind that version too, the next flushes drop it in turn
// while the log stays over HoldBytes.
func (l *Log) enforceHold(f *fsm) {
	hold := l.opts.HoldBytes
	if f.spillBlocked() {
		// What cannot spill stays in memory: the bound is memory's.
		hold = min(hold, MemoryHoldFactor*l.opts.MemoryBytes)
	}
	v, over := f.holdTrimPoint(hold, l.opts.MemoryBytes)
	if !over {
		l.popMu.Lock()
		l.withholding = false
		l.popMu.Unlock()
		return
	}
	var (
		victim, kept kv.Tag
		from, keptAt kv.Version
		found, keep  bool
	)
	l.popMu.Lock()
	tags := slices.Clone(l.tags)
	pending := make([]kv.Version, len(tags))
	for i, t := range tags {
		pending[i] = l.popPending[t]
	}
	l.popMu.Unlock()
	// MayDrop looks at the shard map and liveness: asked outside popMu.
	droppable := make([]bool, len(tags))
	for i, t := range tags {
		p := pending[i]
		if t == systemTag || p >= v {
			continue
		}
		droppable[i] = l.opts.MayDrop == nil || l.opts.MayDrop(t)
		if !droppable[i] && (!keep || p < keptAt) {
			kept, keptAt, keep = t, p, true
		}
	}
	if keep {
		// Nothing is trimmed past a kept tag: dropping others beyond it
		// would lose their entries and free nothing.
		v = keptAt
	}
	for i, t := range tags {
		if p := pending[i]; droppable[i] && p < v && (!found || p < from) {
			victim, from, found = t, p, true
		}
	}
	l.popMu.Lock()
	if found && l.popPending[victim] < v {
		l.popPending[victim] = v
		l.dropped[victim] = v
		l.popDirty = true
	}
	wasWithholding, wasWithheld := l.withholding, l.withheld
	l.withheld, l.withholding = kept, keep
	l.popMu.Unlock()
	if found {
		l.logger.Warn("txlog: log holds too much for a tag that does not pop: force-popped it",
			"tag", victim, "from", from, "to", v, "hold_bytes", l.opts.HoldBytes)
	}
	if keep && (!wasWithholding || wasWithheld != kept) {
		l.logger.Warn("txlog: log holds too much for a tag that does not pop, whose entries no other copy holds: keeping them, and writes are throttled until its stash pops",
			"tag", kept, "from", keptAt, "hold_bytes", l.opts.HoldBytes)
	}
}

// Withheld reports the tag the hold bound would force-pop but keeps
// (Options.MayDrop is false for it), as of the last pop flush while this
// replica led: the log then holds more than HoldBytes, and only that
// tag's stash popping (or MayDrop allowing it) brings it back.
func (l *Log) Withheld() (kv.Tag, bool) {
	l.popMu.Lock()
	defer l.popMu.Unlock()
	return l.withheld, l.withholding
}

// OverMemoryBudget reports whether the most advanced running replica holds
// more than Options.MemoryBytes of entries not popped by every tag. The log
// can only drop what every tag popped, and stashes pop what they flushed,
// so when it is over budget stashes should flush everything they applied.
func (l *Log) OverMemoryBudget() bool {
	f := l.bestFSM()
	if f == nil {
		return false
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.mem > l.opts.MemoryBytes
}

// LastVersion is the version of the last committed entry applied by the
// most advanced running replica.
func (l *Log) LastVersion() kv.Version {
	if f := l.bestFSM(); f != nil {
		return f.lastVersion()
	}
	return 0
}

// Stats describes the most advanced running replica and the leader.
func (l *Log) Stats() Stats {
	s := Stats{Leader: -1}
	if f := l.bestFSM(); f != nil {
		st := f.state()
		s.Entries, s.Bytes, s.Memory, s.Spilled, s.SpilledEntries, s.Popped, s.MinPopped, s.Trimmed, s.LastVersion = st.Entries, st.Bytes, st.Memory, st.Spilled, st.SpilledEntries, st.Popped, st.MinPopped, st.Trimmed, st.Last
		s.Epoch = st.Epoch
	}
	s.Network = l.network()
	s.LeaderID, _ = l.Leader()
	l.popMu.Lock()
	s.Dropped = maps.Clone(l.dropped)
	l.popMu.Unlock()
	l.mu.RLock()
	for _, r := range l.reps {
		if r.running {
			s.Running++
		}
	}
	l.mu.RUnlock()
	if r := l.leader(); r != nil {
		s.Leader = r.index
		s.RaftLastIndex = r.raft.LastIndex()
		s.RaftFirstIndex, _ = r.logs.FirstIndex()
	}
	return s
}

// Held returns, per tag of the set, the entries the most advanced running
// replica holds that the tag has not popped (metrics: a tag whose stash
// stopped popping holds the log's memory). Nil without a running replica.
func (l *Log) Held() map[kv.Tag]Held {
	if f := l.bestFSM(); f != nil {
		return f.held()
	}
	return nil
}

// Snapshot asks every running replica to take a raft snapshot now (and
// compact its raft log down to TrailingLogs records). Meant for tests and
// operators; raft also snapshots on its own.
func (l *Log) Snapshot() error {
	l.mu.RLock()
	defer l.mu.RUnlock()
	var errs []error
	for _, r := range l.reps {
		if !r.running {
			continue
		}
		if err := r.raft.Snapshot().Error(); err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) {
			errs = append(errs, fmt.Errorf("replica %d: %w", r.index, err))
		}
	}
	return errors.Join(errs...)
}

// Close replicates pending pops, waits briefly for in-flight appends, and
// shuts every replica down. Appends and peeks after Close fail with
// ErrClosed.
func (l *Log) Close() error {
	l.closeOnce.Do(func() {
		close(l.stopPops)
		<-l.popsDone
		if err := l.flushPops(min(l.opts.LeaderTimeout, 2*time.Second)); err != nil && !errors.Is(err, ErrNotLeader) {
			l.logger.Warn("txlog: final pop flush failed", "err", err)
		}
		l.closeErr = l.shutdown()
	})
	return l.closeErr
}

// shutdown stops appends, peeks and every replica.
func (l *Log) shutdown() error {
	l.appendMu.Lock()
	if !l.closing {
		l.closing = true
		close(l.pending)
	}
	l.appendMu.Unlock()
	select {
	case <-l.complDone:
	case <-time.After(5 * time.Second): // raft's futures: real time
	}
	close(l.closed)
	var errs []error
	l.mu.Lock()
	// Initiate every shutdown first, so no replica spends its last moments
	// trying to reach peers already gone.
	sfs := make([]raft.Future, len(l.reps))
	for _, r := range l.reps {
		if r.running {
			sfs[r.index] = r.raft.Shutdown()
		}
	}
	for _, r := range l.reps {
		if r.running {
			errs = append(errs, l.stopReplicaLocked(r.index, sfs[r.index]))
		}
	}
	if n := l.opts.Network; n != nil && !l.transOwned {
		// Open failed before raft ran: the transport is still ours.
		if c, ok := n.Transport.(io.Closer); ok {
			errs = append(errs, c.Close())
		}
	}
	l.mu.Unlock()
	<-l.complDone
	return errors.Join(errs...)
}
