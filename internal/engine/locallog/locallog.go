// Package locallog is the local log of a DRAM stash (a pool with
// local_log = true, the paper's §4): a memory engine whose contents are
// kept recoverable on the node's disk, so that a stash restarted after a
// crash reloads them instead of starting empty.
//
// Every Apply is written, before it is applied, as one checksummed record
// to the current log file, with one write call and no fsync: a killed
// process leaves it in the page cache, and a machine crash may lose the
// tail, which is fine because the stash checks what it recovers against
// the cluster's log (it pops its tag only up to the version this engine
// holds, so the cluster's log keeps everything after it; a stash that
// recovers less than it popped starts empty). Evictions are not logged:
// an evicted key is a miss, and a replay that brings it back brings its
// latest value.
//
// When the log files written since the last snapshot outgrow the snapshot
// (and Config.SnapshotBytes), a background snapshot is taken: the log
// rotates to a new file and a copy-on-write clone of the memory engine is
// written to a snapshot file (synced, then renamed into place), after
// which the older snapshot and log files are removed.
//
// Recovery loads the newest snapshot and replays the log files after it
// in order. A record cut short or failing its checksum ends its file (a
// torn tail); a later file is replayed only if its header says it starts
// at the version reached, so what is recovered is always the state at
// some version the stash applied, never a mixture. A damaged snapshot
// cannot be trusted at all: the engine starts empty and says why
// (Recovery.Discarded), and its files are removed.
//
// Files live in Options.Dir/locallog and go through Options.FS, the
// node's file-system seam (fault injection, device models).
package locallog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distash/distash/internal/engine"
	"github.com/distash/distash/internal/engine/memory"
	"github.com/distash/distash/internal/fsys"
	"github.com/distash/distash/internal/kv"
)

// Subdir is the directory, under engine.Options.Dir, that holds the files.
const Subdir = "locallog"

// DefaultSnapshotBytes is Config.SnapshotBytes's default.
const DefaultSnapshotBytes = 64 << 20

// Config tunes a local log.
type Config struct {
	// SnapshotBytes: a snapshot is taken once the log files written since
	// the last one pass both this and the last snapshot's size (so the
	// files stay within about twice the data, and replaying them at most
	// about as long as loading the snapshot). Default DefaultSnapshotBytes.
	SnapshotBytes int64
	// Memory is the memory engine's tuning (engine.Options.Tuning).
	Memory any
	// Logger receives what recovery cut or discarded, and snapshot
	// failures. Default slog.Default().
	Logger *slog.Logger
}

// Recovery is what Open found.
type Recovery struct {
	// Version is the version recovered (0: nothing recovered).
	Version kv.Version
	// Keys and Bytes are the engine's pairs and their key and value bytes
	// after recovery.
	Keys, Bytes int64
	// SnapshotVersion is the version of the snapshot loaded (0: none).
	SnapshotVersion kv.Version
	// Records is how many log records were replayed after it.
	Records int64
	// ReadBytes is the size of the files read.
	ReadBytes int64
	// Duration is how long Open took to load them.
	Duration time.Duration
	// Cut says where replay stopped early (a torn tail, a gap), "" if it
	// read every file to its end.
	Cut string
	// Discarded is why the files were not used at all (a damaged
	// snapshot): the engine started empty. "" otherwise.
	Discarded string
}

// Status is a local log's state for status displays.
type Status struct {
	Recovery
	// LogBytes is the size of the log and snapshot files now.
	LogBytes int64
	// LastSnapshotVersion is the version of the newest complete snapshot
	// (0: none yet); Snapshots counts those taken since Open.
	LastSnapshotVersion kv.Version
	Snapshots           int64
	// Failed is the last write or snapshot error, "" if none.
	Failed string
}

// Engine is a memory engine with a local log. It implements engine.Engine,
// engine.Peeker, engine.Counted and engine.RecencyOrdered.
type Engine struct {
	mem  *memory.Engine
	fs   fsys.FS
	dir  string
	cfg  Config
	log  *slog.Logger
	rec  Recovery
	opts engine.Options

	// mu serializes Apply, rotation and Close.
	mu     sync.Mutex
	cur    fsys.File // the log file being written; nil after a failed write
	seq    uint64    // its sequence number
	curEnd int64     // the bytes written to it whole
	// prev names the file the next log file follows (header.prevSeq,
	// prevEnd).
	prev   header
	buf    []byte
	closed bool
	// sinceSnap is the log bytes written since the last snapshot began;
	// snapBytes the size of the last snapshot. Protected by mu.
	sinceSnap, snapBytes int64

	snapping  atomic.Bool
	snapWG    sync.WaitGroup
	stop      atomic.Bool
	logBytes  atomic.Int64 // size of the files now
	lastSnap  atomic.Int64 // version of the newest complete snapshot
	snapshots atomic.Int64
	failed    atomic.Pointer[string]
}

var (
	_ engine.Engine         = (*Engine)(nil)
	_ engine.Peeker         = (*Engine)(nil)
	_ engine.Counted        = (*Engine)(nil)
	_ engine.RecencyOrdered = (*Engine)(nil)
)

func logName(seq uint64) string  { return fmt.Sprintf("log-%016d", seq) }
func snapName(seq uint64) string { return fmt.Sprintf("snap-%016d", seq) }

// Dir returns the directory of the local log of a stash whose engine
// directory is dir.
func Dir(dir string) string { return filepath.Join(dir, Subdir) }

// Exists reports whether dir (an engine directory) holds local log files.
func Exists(f fsys.FS, dir string) bool {
	names, err := fsys.Or(f).List(Dir(dir))
	if err != nil {
		return false
	}
	for _, n := range names {
		if strings.HasPrefix(n, "log-") || strings.HasPrefix(n, "snap-") {
			return true
		}
	}
	return false
}

// Open recovers the engine from opts.Dir's local log (an empty engine if
// there is none) and starts a new log file. opts are the memory engine's
// (Ephemeral, CapacityBytes, Eviction); opts.Tuning is ignored for
// cfg.Memory. An error means the directory could not be read or written;
// damage is not an error (see Recovery.Discarded).
func Open(opts engine.Options, cfg Config) (*Engine, error) {
	if opts.Dir == "" {
		return nil, errors.New("locallog: no directory")
	}
	if cfg.SnapshotBytes <= 0 {
		cfg.SnapshotBytes = DefaultSnapshotBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	mopts := opts
	mopts.Tuning = cfg.Memory
	mem, err := memory.Open(mopts)
	if err != nil {
		return nil, err
	}
	e := &Engine{mem: mem, fs: fsys.Or(opts.FS), dir: Dir(opts.Dir), cfg: cfg, log: cfg.Logger, opts: opts}
	if err := e.fs.MkdirAll(e.dir, 0o755); err != nil {
		return nil, fmt.Errorf("locallog: %w", err)
	}
	// The directory's entry must survive a power loss for the snapshots
	// synced into it to.
	if err := fsys.SyncDir(e.fs, opts.Dir); err != nil {
		return nil, fmt.Errorf("locallog: %w", err)
	}
	// The log and snapshot files' format (format.go) is stated by a
	// marker in the engine directory (the files' own directory holds only
	// them): a newer one is refused before a file is read.
	_, mark, err := fsys.OpenFormat(e.fs, opts.Dir, FormatKind, FormatVersion, e.log)
	if err != nil {
		e.mem.Close()
		return nil, err
	}
	start := time.Now()
	if err := e.recover(); err != nil {
		e.mem.Close()
		return nil, err
	}
	e.rec.Duration = time.Since(start)
	st := e.mem.Stats()
	e.rec.Version, e.rec.Keys, e.rec.Bytes = e.mem.Version(), st.Keys, st.Bytes
	e.lastSnap.Store(int64(e.rec.SnapshotVersion))
	if err := e.openLog(); err != nil {
		e.mem.Close()
		return nil, err
	}
	if err := mark(); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

// files lists the directory's log and snapshot files by sequence number,
// removing leftovers of unfinished snapshots.
func (e *Engine) files() (logs, snaps []uint64, err error) {
	names, err := e.fs.List(e.dir)
	if err != nil {
		return nil, nil, fmt.Errorf("locallog: list %s: %w", e.dir, err)
	}
	for _, n := range names {
		switch {
		case strings.HasSuffix(n, ".tmp"):
			e.fs.Remove(filepath.Join(e.dir, n))
		case strings.HasPrefix(n, "log-"):
			if s, err := strconv.ParseUint(n[4:], 10, 64); err == nil {
				logs = append(logs, s)
			}
		case strings.HasPrefix(n, "snap-"):
			if s, err := strconv.ParseUint(n[5:], 10, 64); err == nil {
				snaps = append(snaps, s)
			}
		}
	}
	slices.Sort(logs)
	slices.Sort(snaps)
	return logs, snaps, nil
}

// recover loads the newest snapshot and replays the logs after it, and
// sets e.seq and e.prev for the next log file, having removed every file
// it did not use.
func (e *Engine) recover() error {
	logs, snaps, err := e.files()
	if err != nil {
		return err
	}
	var snapSeq uint64
	if len(snaps) > 0 {
		snapSeq = snaps[len(snaps)-1]
		if err := e.loadSnapshot(snapSeq); err != nil {
			var de *fsys.DamageError
			if !errors.As(err, &de) {
				return err
			}
			// A snapshot that cannot be read whole cannot be trusted, nor
			// can the logs after it be replayed without it.
			e.rec.Discarded = err.Error()
			e.log.Error("local log: the snapshot is damaged; the stash starts empty", "dir", e.dir, "err", err)
			if err := e.reset(); err != nil {
				return err
			}
			if err := e.removeAll(logs, snaps); err != nil {
				return err
			}
			e.seq = snapSeq + 1
			if len(logs) > 0 {
				e.seq = max(e.seq, logs[len(logs)-1]+1)
			}
			return nil
		}
	}
	// Replay the chain of logs that follow each other from the snapshot.
	var lastSeq uint64
	var lastEnd int64
	used := map[uint64]bool{}
	for _, s := range logs {
		if s < snapSeq {
			continue
		}
		ok, end, err := e.replay(s, len(used) == 0, snapSeq, lastSeq, lastEnd)
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		used[s] = true
		lastSeq, lastEnd = s, end
	}
	for _, s := range snaps {
		if s != snapSeq {
			e.fs.Remove(filepath.Join(e.dir, snapName(s)))
		}
	}
	for _, s := range logs {
		if used[s] {
			e.addSize(logName(s))
		} else {
			e.fs.Remove(filepath.Join(e.dir, logName(s)))
		}
	}
	if snapSeq != 0 {
		e.snapBytes = e.addSize(snapName(snapSeq))
	}
	switch {
	case lastSeq != 0: // every later file was removed
		e.seq, e.prev = lastSeq+1, header{prevSeq: lastSeq, prevEnd: lastEnd}
	case snapSeq != 0: // the snapshot's own log was not there or not used
		e.seq = snapSeq
	default:
		e.seq = 1
		if len(logs) > 0 {
			e.seq = logs[len(logs)-1] + 1
		}
	}
	return nil
}

// addSize adds the size of a file kept to logBytes and returns it.
func (e *Engine) addSize(name string) int64 {
	if fi, err := e.fs.Stat(filepath.Join(e.dir, name)); err == nil {
		e.logBytes.Add(fi.Size())
		return fi.Size()
	}
	return 0
}

// reset replaces the memory engine by an empty one.
func (e *Engine) reset() error {
	e.mem.Close()
	mopts := e.opts
	mopts.Tuning = e.cfg.Memory
	m, err := memory.Open(mopts)
	if err != nil {
		return err
	}
	e.mem = m
	e.rec.SnapshotVersion, e.rec.Records = 0, 0
	return nil
}

// removeAll removes the given files.
func (e *Engine) removeAll(logs, snaps []uint64) error {
	for _, s := range logs {
		if err := e.fs.Remove(filepath.Join(e.dir, logName(s))); err != nil {
			return fmt.Errorf("locallog: %w", err)
		}
	}
	for _, s := range snaps {
		if err := e.fs.Remove(filepath.Join(e.dir, snapName(s))); err != nil {
			return fmt.Errorf("locallog: %w", err)
		}
	}
	return nil
}

// loadSnapshot loads snapshot seq into the (empty) memory engine. A
// snapshot that is not whole and intact returns a *fsys.DamageError.
func (e *Engine) loadSnapshot(seq uint64) error {
	path := filepath.Join(e.dir, snapName(seq))
	f, err := e.fs.Open(path)
	if err != nil {
		return fmt.Errorf("locallog: %w", err)
	}
	defer f.Close()
	rd := newReader(f)
	damaged := func(format string, args ...any) error { return fsys.Damaged(path, format, args...) }
	p, err := rd.next()
	if err != nil {
		if errors.Is(err, errTorn) || err == io.EOF {
			return damaged("no snapshot header: %v", err)
		}
		return fmt.Errorf("locallog: read %s: %w", path, err)
	}
	h, err := decodeHeader(p, recSnapshot)
	if err != nil || h.seq != seq {
		return damaged("bad snapshot header (seq %d, %v)", h.seq, err)
	}
	v := h.version
	var pairs uint64
	batch := &engine.Batch{}
	for {
		p, err := rd.next()
		if err != nil {
			if errors.Is(err, errTorn) || err == io.EOF {
				return damaged("snapshot cut short after %d pairs: %v", pairs, err)
			}
			return fmt.Errorf("locallog: read %s: %w", path, err)
		}
		switch p[0] {
		case recPairs:
			d := decoder{p: p[1:]}
			n := d.uvarint()
			batch.Writes = batch.Writes[:0]
			for i := uint64(0); i < n && d.err == nil; i++ {
				k := d.bytes()
				val := d.bytes()
				if val == nil {
					val = []byte{}
				}
				batch.Writes = append(batch.Writes, engine.Write{Key: k, Value: val, Cost: uint32(d.uvarint())})
			}
			if d.err != nil || len(d.p) != 0 {
				return damaged("bad pairs record at offset %d", rd.off)
			}
			batch.Version = v
			if err := e.mem.Apply(batch); err != nil {
				return err
			}
			pairs += n
		case recEnd:
			d := decoder{p: p[1:]}
			if n := d.uvarint(); d.err != nil || n != pairs {
				return damaged("snapshot end says %d pairs, read %d", n, pairs)
			}
			if _, err := rd.next(); err != io.EOF {
				return damaged("records after the snapshot's end")
			}
			// An empty snapshot still records its version.
			if err := e.mem.Apply(&engine.Batch{Version: v}); err != nil {
				return err
			}
			e.rec.SnapshotVersion = v
			e.rec.ReadBytes += rd.off
			return nil
		default:
			return damaged("unexpected record kind %q at offset %d", p[0], rd.off)
		}
	}
}

// replay applies log seq if it follows what was recovered so far: as the
// first file after snapshot snapSeq, the snapshot's own log (the one the
// snapshot rotated to); as the first file without a snapshot, one that
// follows nothing; otherwise the file that names (lastSeq, lastEnd) as its
// predecessor. ok is false when seq is not used (Recovery.Cut says why);
// end is the offset after its last good record. A torn or damaged record
// ends the file: only a file written after it, naming that offset, is
// replayed next.
func (e *Engine) replay(seq uint64, first bool, snapSeq, lastSeq uint64, lastEnd int64) (ok bool, end int64, err error) {
	path := filepath.Join(e.dir, logName(seq))
	f, err := e.fs.Open(path)
	if err != nil {
		return false, 0, fmt.Errorf("locallog: %w", err)
	}
	defer f.Close()
	rd := newReader(f)
	defer func() { e.rec.ReadBytes += rd.off }()
	cut := func(format string, args ...any) (bool, int64, error) {
		e.rec.Cut = logName(seq) + ": " + fmt.Sprintf(format, args...)
		e.log.Warn("local log: replay stopped early; the stash recovers the version it reached and catches up from the cluster's log",
			"dir", e.dir, "version", e.mem.Version(), "cut", e.rec.Cut)
		return false, 0, nil
	}
	p, err := rd.next()
	if err != nil {
		if errors.Is(err, errTorn) || err == io.EOF {
			return cut("no header (%v)", err)
		}
		return false, 0, fmt.Errorf("locallog: read %s: %w", path, err)
	}
	h, err := decodeHeader(p, recHeader)
	switch {
	case err != nil || h.seq != seq:
		return cut("bad header (seq %d, %v)", h.seq, err)
	case h.version != e.mem.Version():
		return cut("starts at version %d, but recovery reached %d", h.version, e.mem.Version())
	case first && snapSeq != 0 && seq != snapSeq:
		return cut("does not follow snapshot %d", snapSeq)
	case first && snapSeq == 0 && h.prevSeq != 0:
		return cut("follows %s, which is gone", logName(h.prevSeq))
	case !first && (h.prevSeq != lastSeq || h.prevEnd != lastEnd):
		return cut("follows %s at offset %d, but %s ends at offset %d", logName(h.prevSeq), h.prevEnd, logName(lastSeq), lastEnd)
	}
	for {
		good := rd.off
		p, err := rd.next()
		if err == io.EOF {
			return true, good, nil
		}
		if err != nil {
			if errors.Is(err, errTorn) {
				// The tail the process was writing when it died (or after
				// which it started a new file).
				e.rec.Cut = logName(seq) + ": " + err.Error()
				return true, good, nil
			}
			return false, 0, fmt.Errorf("locallog: read %s: %w", path, err)
		}
		var b *engine.Batch
		if p[0] == recBatch {
			b, err = decodeBatch(p)
		} else {
			err = fmt.Errorf("record kind %q", p[0])
		}
		if err == nil && b.Version < e.mem.Version() {
			err = fmt.Errorf("version %d after version %d", b.Version, e.mem.Version())
		}
		if err != nil {
			e.rec.Cut = fmt.Sprintf("%s: bad record at offset %d: %v", logName(seq), good, err)
			return true, good, nil
		}
		if err := e.mem.Apply(b); err != nil {
			return false, 0, err
		}
		e.rec.Records++
	}
}

// openLog starts log file e.seq, following e.prev, with its header.
// Called with mu held (or before the engine is shared).
func (e *Engine) openLog() error {
	path := filepath.Join(e.dir, logName(e.seq))
	f, err := e.fs.Create(path)
	if err != nil {
		return fmt.Errorf("locallog: %w", err)
	}
	h := e.prev
	h.seq, h.version = e.seq, e.mem.Version()
	rec := appendRecord(nil, h.payload(recHeader))
	if _, err := f.Write(rec); err != nil {
		f.Close()
		e.fs.Remove(path)
		return fmt.Errorf("locallog: write %s: %w", path, err)
	}
	e.cur, e.curEnd = f, int64(len(rec))
	e.logBytes.Add(int64(len(rec)))
	e.sinceSnap += int64(len(rec))
	return nil
}

// leave closes the current log file: the next one follows it at the
// bytes written to it whole. Called with mu held.
func (e *Engine) leave() {
	if e.cur == nil {
		return
	}
	e.cur.Close()
	e.cur = nil
	e.prev = header{prevSeq: e.seq, prevEnd: e.curEnd}
	e.seq++
}

// Apply writes b to the log, then applies it to the memory engine. A
// failed write applies nothing and returns the error (matching
// fsys.IsNoSpace on a full disk); the next Apply starts a new log file,
// since the failed one may end in a torn record.
func (e *Engine) Apply(b *engine.Batch) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return memory.ErrClosed
	}
	if e.cur == nil {
		if err := e.openLog(); err != nil {
			e.noteFailure(err)
			return err
		}
	}
	e.buf = appendBatch(e.buf, b)
	if _, err := e.cur.Write(e.buf); err != nil {
		err = fmt.Errorf("locallog: write %s: %w", logName(e.seq), err)
		e.leave()
		e.noteFailure(err)
		return err
	}
	n := int64(len(e.buf))
	if cap(e.buf) > 4<<20 {
		e.buf = nil // do not pin a large batch's buffer
	}
	e.curEnd += n
	e.logBytes.Add(n)
	e.sinceSnap += n
	if err := e.mem.Apply(b); err != nil {
		return err
	}
	if e.sinceSnap > max(e.cfg.SnapshotBytes, e.snapBytes) && e.snapping.CompareAndSwap(false, true) {
		e.startSnapshot()
	}
	return nil
}

func (e *Engine) noteFailure(err error) {
	s := err.Error()
	e.failed.Store(&s)
}

// startSnapshot rotates the log and writes a snapshot of the state at the
// rotation in the background. Called with mu held and snapping set.
func (e *Engine) startSnapshot() {
	e.leave()
	seq := e.seq
	if err := e.openLog(); err != nil {
		// Apply tries again with the next batch; the snapshot waits.
		e.noteFailure(err)
		e.snapping.Store(false)
		return
	}
	e.sinceSnap = 0
	v, walk := e.mem.Snapshot()
	e.snapWG.Add(1)
	go func() {
		defer e.snapWG.Done()
		defer e.snapping.Store(false)
		size, err := e.writeSnapshot(seq, v, walk)
		if err != nil {
			if !e.stop.Load() {
				e.noteFailure(err)
				e.log.Warn("local log: snapshot failed; the log files are kept and replayed instead", "dir", e.dir, "err", err)
			}
			return
		}
		e.mu.Lock()
		e.snapBytes = size
		e.mu.Unlock()
		e.lastSnap.Store(int64(v))
		e.snapshots.Add(1)
		// The snapshot covers every file before it.
		logs, snaps, err := e.files()
		if err != nil {
			return
		}
		for _, s := range logs {
			if s < seq {
				e.removeCounted(logName(s))
			}
		}
		for _, s := range snaps {
			if s < seq {
				e.removeCounted(snapName(s))
			}
		}
	}()
}

func (e *Engine) removeCounted(name string) {
	path := filepath.Join(e.dir, name)
	if fi, err := e.fs.Stat(path); err == nil {
		if e.fs.Remove(path) == nil {
			e.logBytes.Add(-fi.Size())
		}
	}
}

// errStopped ends a snapshot of an engine being closed.
var errStopped = errors.New("locallog: closed while taking a snapshot")

// writeSnapshot writes snapshot seq of version v: to a temporary file,
// synced, renamed into place, the directory synced. It returns its size.
func (e *Engine) writeSnapshot(seq uint64, v kv.Version, walk func(func(k, val []byte, cost uint32) bool)) (int64, error) {
	path := filepath.Join(e.dir, snapName(seq))
	tmp := path + ".tmp"
	f, err := e.fs.Create(tmp)
	if err != nil {
		return 0, fmt.Errorf("locallog: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			f.Close()
			e.fs.Remove(tmp)
		}
	}()
	var size int64
	var werr error
	write := func(b []byte) bool {
		if _, err := f.Write(b); err != nil {
			werr = fmt.Errorf("locallog: write %s: %w", tmp, err)
			return false
		}
		size += int64(len(b))
		return true
	}
	if !write(appendRecord(nil, header{seq: seq, version: v}.payload(recSnapshot))) {
		return 0, werr
	}
	const chunkBytes = 256 << 10
	var pairs, n uint64
	var body []byte
	var buf []byte
	emit := func() bool {
		if n == 0 {
			return true
		}
		buf = frame(buf)
		buf = append(buf, recPairs)
		buf = binary.AppendUvarint(buf, n)
		buf = append(buf, body...)
		body, n = body[:0], 0
		return write(seal(buf))
	}
	walk(func(k, val []byte, cost uint32) bool {
		if e.stop.Load() {
			werr = errStopped
			return false
		}
		body = appendBytes(body, k)
		body = appendBytes(body, val)
		body = binary.AppendUvarint(body, uint64(cost))
		n++
		pairs++
		if len(body) >= chunkBytes {
			return emit()
		}
		return true
	})
	if werr != nil {
		return 0, werr
	}
	if !emit() {
		return 0, werr
	}
	end := binary.AppendUvarint([]byte{recEnd}, pairs)
	if !write(appendRecord(nil, end)) {
		return 0, werr
	}
	if err := f.Sync(); err != nil {
		return 0, fmt.Errorf("locallog: sync %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return 0, fmt.Errorf("locallog: close %s: %w", tmp, err)
	}
	ok = true
	if err := e.fs.Rename(tmp, path); err != nil {
		e.fs.Remove(tmp)
		return 0, fmt.Errorf("locallog: %w", err)
	}
	if err := fsys.SyncDir(e.fs, e.dir); err != nil {
		return 0, fmt.Errorf("locallog: %w", err)
	}
	e.logBytes.Add(size)
	return size, nil
}

// Get reads key (a reference for the eviction order).
func (e *Engine) Get(key []byte) ([]byte, bool, error) { return e.mem.Get(key) }

// GetShared reads key without copying its value (engine.SharedGetter).
func (e *Engine) GetShared(key []byte) ([]byte, bool, error) { return e.mem.GetShared(key) }

// Peek reads key without side effects.
func (e *Engine) Peek(key []byte) ([]byte, bool, error) { return e.mem.Peek(key) }

// Scan scans the memory engine.
func (e *Engine) Scan(begin, end []byte, reverse bool, fn func(key, value []byte) bool) error {
	return e.mem.Scan(begin, end, reverse, fn)
}

// Version is the version of the last Apply (after Open: the version
// recovered).
func (e *Engine) Version() kv.Version { return e.mem.Version() }

// Stats are the memory engine's.
func (e *Engine) Stats() engine.Stats { return e.mem.Stats() }

// Coldest is the memory engine's eviction order.
func (e *Engine) Coldest(n int) [][]byte { return e.mem.Coldest(n) }

// Counters are the memory engine's and the local log's: the size of its
// files and the version of its last snapshot.
func (e *Engine) Counters() []engine.Counter {
	return append(e.mem.Counters(),
		engine.Counter{Name: "local_log_bytes", Value: e.logBytes.Load()},
		engine.Counter{Name: "local_log_snapshot_version", Value: e.lastSnap.Load()})
}

// NoteStartedEmpty records, for Status, why the stash this engine serves
// started empty although it had a local log (Recovery.Discarded). Call it
// before the engine is shared.
func (e *Engine) NoteStartedEmpty(why string) { e.rec.Discarded = why }

// FS is the file system the engine's files go through.
func (e *Engine) FS() fsys.FS { return e.fs }

// Recovered is what Open found.
func (e *Engine) Recovered() Recovery { return e.rec }

// Status returns the local log's state.
func (e *Engine) Status() Status {
	st := Status{Recovery: e.rec, LogBytes: e.logBytes.Load(),
		LastSnapshotVersion: kv.Version(e.lastSnap.Load()), Snapshots: e.snapshots.Load()}
	if p := e.failed.Load(); p != nil {
		st.Failed = *p
	}
	return st
}

// Close stops a snapshot in progress, syncs and closes the log file (a
// clean stop then survives a power loss too) and drops the memory
// engine's data.
func (e *Engine) Close() error {
	e.stop.Store(true)
	e.snapWG.Wait()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil
	}
	e.closed = true
	if e.cur != nil {
		e.cur.Sync() // best effort: recovery copes with a lost tail
		e.cur.Close()
		e.cur = nil
	}
	return e.mem.Close()
}

// Remove removes the local log under dir (an engine directory): a stash
// that must start empty does so before it opens its engine.
func Remove(f fsys.FS, dir string) error {
	return fsys.Or(f).RemoveAll(Dir(dir))
}
