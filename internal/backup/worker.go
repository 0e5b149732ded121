package backup

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"sync"
	"time"

	"github.com/distash/distash"
	"github.com/distash/distash/internal/backup/blog"
	"github.com/distash/distash/internal/kv"
)

// Progress is the worker's durable progress (ProgressKey), written in a
// system transaction after the files it counts are durable at the
// destination. A worker that starts (after a crash, a recovery, on another
// node) resumes from it: files beyond it are written again under the same
// names, replacing themselves.
type Progress struct {
	ID string `json:"id"`
	// The snapshot's next chunk begins at Cursor in Ranges[RangeIndex].
	RangeIndex   int    `json:"range_index"`
	Cursor       []byte `json:"cursor"`
	RangeFiles   int    `json:"range_files"`
	SnapshotDone bool   `json:"snapshot_done"`
	LogFiles     int    `json:"log_files"`
	// LogTo is the last version whose logged mutations are copied; the
	// mutation log holds only later ones.
	LogTo kv.Version `json:"log_to"`
}

// SystemCommit commits a system transaction: muts, failing with a conflict
// if a key of reads was written after readVersion.
type SystemCommit func(ctx context.Context, readVersion kv.Version, reads []kv.KeyRange, muts []kv.Mutation) (kv.Version, error)

// WorkerOptions configure a Worker.
type WorkerOptions struct {
	// DB returns a client of the cluster (the worker reads the backed-up
	// ranges and its system keys through it).
	DB func(ctx context.Context) (*distash.DB, error)
	// Commit commits system transactions (progress, clears of the
	// mutation log).
	Commit SystemCommit
	// Committed returns the cluster's committed version (for the lag).
	Committed func() kv.Version
	Logger    *slog.Logger
	// ChunkBytes bounds a range file's data (default 1 MiB): one read.
	ChunkBytes int
	// Interval is how long the worker waits when it has nothing to copy
	// (default 500ms).
	Interval time.Duration
	// Active, if set, reports whether a backup is configured (the commit
	// proxy copies mutations for one). While it is false the worker does
	// not touch the cluster: a cluster without a backup pays nothing.
	Active func() bool
}

// Worker copies a running backup to its destination: the snapshot of the
// backed-up ranges, chunk by chunk, then the mutation log, as the commit
// proxy records it. One runs on the node holding the commit proxy.
type Worker struct {
	opts WorkerOptions

	mu     sync.Mutex
	status Status // Protected by mu.

	// The destination and manifest of the backup being copied; only Run's
	// goroutine touches them.
	dest     Destination
	manifest *Manifest
}

// Status is what `backup status` shows.
type Status struct {
	State string `json:"state"` // none, snapshot, running, stopped, error
	ID    string `json:"id,omitempty"`
	URL   string `json:"url,omitempty"`
	// Restorable versions (0 until the first snapshot is done); versions
	// are microseconds since the Unix epoch, so they are also wall-clock
	// times.
	RestorableFrom kv.Version `json:"restorable_from"`
	RestorableTo   kv.Version `json:"restorable_to"`
	Bytes          int64      `json:"bytes"`
	RangeFiles     int        `json:"range_files"`
	LogFiles       int        `json:"log_files"`
	// SnapshotDone and, while the snapshot runs, how far it got.
	SnapshotDone bool       `json:"snapshot_done"`
	Snapshot     string     `json:"snapshot,omitempty"`
	LogTo        kv.Version `json:"log_to"`
	// LagVersions is the committed version minus LogTo.
	LagVersions kv.Version `json:"lag_versions"`
	LastError   string     `json:"last_error,omitempty"`
	ErrorAt     int64      `json:"error_unix_ms,omitempty"`
	StartedMs   int64      `json:"started_unix_ms,omitempty"`
}

// NewWorker returns a worker; start it with Run.
func NewWorker(o WorkerOptions) *Worker {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.ChunkBytes <= 0 {
		o.ChunkBytes = 1 << 20
	}
	if o.Interval <= 0 {
		o.Interval = 500 * time.Millisecond
	}
	return &Worker{opts: o, status: Status{State: "none"}}
}

// Status returns the worker's view of the backup.
func (w *Worker) Status() Status {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.status
	if s.State != "none" && w.opts.Committed != nil {
		s.LagVersions = max(0, w.opts.Committed()-s.LogTo)
	}
	return s
}

// Run copies until ctx ends.
func (w *Worker) Run(ctx context.Context) {
	backoff := w.opts.Interval
	for ctx.Err() == nil {
		busy, err := w.step(ctx)
		wait := w.opts.Interval
		switch {
		case err != nil && ctx.Err() == nil:
			w.opts.Logger.Warn("backup worker", "err", err)
			w.mu.Lock()
			w.status.LastError, w.status.ErrorAt = err.Error(), time.Now().UnixMilli()
			w.mu.Unlock()
			backoff = min(2*backoff, 10*time.Second)
			wait = backoff
		case err == nil && busy:
			backoff = w.opts.Interval
			continue
		default:
			backoff = w.opts.Interval
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
}

// idle forgets the backup the worker copied, if any: none is configured.
func (w *Worker) idle() {
	w.dest, w.manifest = nil, nil
	w.mu.Lock()
	if w.status.State != "none" && w.status.State != "stopped" {
		w.status = Status{State: "none"}
	}
	w.mu.Unlock()
}

// state reads the backup's configuration and progress at one version.
func state(ctx context.Context, db *distash.DB) (cfg *blog.Config, prog *Progress, rv kv.Version, err error) {
	err = db.ReadTransact(ctx, func(tr *distash.Tx) error {
		tr.Options().SetReadSystemKeys()
		v, err := tr.ReadVersion()
		if err != nil {
			return err
		}
		rv = kv.Version(v)
		vals, err := tr.Snapshot().GetMulti([][]byte{blog.ConfigKey, blog.ProgressKey})
		if err != nil {
			return err
		}
		cfg, prog = nil, nil
		if vals[0] != nil {
			if cfg, err = blog.DecodeConfig(vals[0]); err != nil {
				return err
			}
		}
		if vals[1] != nil {
			prog = &Progress{}
			if err := json.Unmarshal(vals[1], prog); err != nil {
				return fmt.Errorf("backup: progress record: %w", err)
			}
		}
		return nil
	})
	return cfg, prog, rv, err
}

// step does one unit of work: a snapshot chunk, or a copy of the mutation
// log. busy reports that there may be more to do at once.
func (w *Worker) step(ctx context.Context) (busy bool, err error) {
	if w.opts.Active != nil && !w.opts.Active() {
		w.idle()
		return false, nil
	}
	db, err := w.opts.DB(ctx)
	if err != nil {
		return false, err
	}
	cfg, prog, rv, err := state(ctx, db)
	if err != nil {
		return false, err
	}
	if cfg == nil || prog == nil || prog.ID != cfg.ID {
		w.idle()
		return false, nil
	}
	if err := w.load(ctx, cfg, prog); err != nil {
		return false, err
	}
	if !prog.SnapshotDone {
		err = w.snapshotChunk(ctx, db, cfg, prog, rv)
		busy = true
	} else {
		busy, err = w.copyLog(ctx, db, cfg, prog, rv)
	}
	if err == nil {
		w.publish(cfg, prog, "")
	}
	return busy, err
}

// load opens the destination and its manifest for cfg, trimmed to what
// prog counts as durable.
func (w *Worker) load(ctx context.Context, cfg *blog.Config, prog *Progress) error {
	if w.manifest == nil || w.manifest.BackupID != cfg.ID {
		dest, err := Open(cfg.URL)
		if err != nil {
			return err
		}
		m := &Manifest{Format: FormatVersion, BackupID: cfg.ID, ClusterID: cfg.ClusterID, Pools: cfg.Pools, Ranges: cfg.Ranges,
			StartVersion: cfg.Version, StartedUnixMs: cfg.StartedUnixMs, LogEnd: cfg.Version}
		b, err := dest.Get(ctx, ManifestName)
		switch {
		case err == nil:
			old, err := decodeManifest(b)
			if err != nil {
				return err
			}
			if old.BackupID != cfg.ID {
				return fmt.Errorf("backup: %s holds another backup (%s)", cfg.URL, old.BackupID)
			}
			m = old
		case !errors.Is(err, fs.ErrNotExist):
			return err
		}
		w.dest, w.manifest = dest, m
	}
	m := w.manifest
	// Files written after the last progress commit are written again.
	if len(m.RangeFiles) > prog.RangeFiles {
		m.RangeFiles = m.RangeFiles[:prog.RangeFiles]
	}
	if len(m.LogFiles) > prog.LogFiles {
		m.LogFiles = m.LogFiles[:prog.LogFiles]
	}
	m.SnapshotDone, m.LogEnd = prog.SnapshotDone, prog.LogTo
	if len(m.RangeFiles) != prog.RangeFiles || len(m.LogFiles) != prog.LogFiles {
		return fmt.Errorf("backup: the manifest at %s lists fewer files than the progress record counts (%d range, %d log; progress %d, %d)",
			cfg.URL, len(m.RangeFiles), len(m.LogFiles), prog.RangeFiles, prog.LogFiles)
	}
	return nil
}

// putManifest writes the manifest, replacing the previous one.
func (w *Worker) putManifest(ctx context.Context) error {
	w.manifest.UpdatedUnixMs = time.Now().UnixMilli()
	return w.dest.Put(ctx, ManifestName, encodeManifest(w.manifest))
}

// saveProgress commits prog, failing if another worker moved it since rv.
func (w *Worker) saveProgress(ctx context.Context, rv kv.Version, prog *Progress, extra ...kv.Mutation) error {
	b, _ := json.Marshal(prog)
	muts := append(extra, kv.Mutation{Type: kv.MutSet, Key: blog.ProgressKey, Param: b})
	_, err := w.opts.Commit(ctx, rv, []kv.KeyRange{kv.PointRange(blog.ProgressKey)}, muts)
	return err
}

// snapshotChunk copies the next chunk of the snapshot: one snapshot read of
// at most ChunkBytes (within the MVCC window) into one range file.
func (w *Worker) snapshotChunk(ctx context.Context, db *distash.DB, cfg *blog.Config, prog *Progress, rv kv.Version) error {
	r := cfg.Ranges[prog.RangeIndex]
	begin := prog.Cursor
	if begin == nil {
		begin = r.Begin
	}
	var pairs []pair
	var version kv.Version
	end := r.End
	err := db.ReadTransact(ctx, func(tr *distash.Tx) error {
		v, err := tr.ReadVersion()
		if err != nil {
			return err
		}
		version, pairs, end = kv.Version(v), pairs[:0], r.End
		limit := 1024
		size := 0
		from := begin
		for {
			kvs, err := tr.Snapshot().GetRange(from, r.End, distash.RangeOptions{Limit: limit})
			if err != nil {
				return err
			}
			for _, p := range kvs {
				pairs = append(pairs, pair{p.Key, p.Value})
				size += len(p.Key) + len(p.Value)
				if size >= w.opts.ChunkBytes {
					end = append(append([]byte(nil), p.Key...), 0)
					return nil
				}
			}
			if len(kvs) < limit {
				return nil
			}
			from = append(append([]byte(nil), kvs[len(kvs)-1].Key...), 0)
		}
	})
	if err != nil {
		return fmt.Errorf("backup: snapshot read of [%q, %q): %w", begin, r.End, err)
	}
	name := fmt.Sprintf("ranges/%08d.range", prog.RangeFiles)
	data := encodeRange(begin, end, version, pairs)
	if err := w.dest.Put(ctx, name, data); err != nil {
		return err
	}
	w.manifest.RangeFiles = append(w.manifest.RangeFiles, RangeFile{FileInfo: fileInfo(name, data), Begin: begin, End: end, Version: version})
	next := *prog
	next.RangeFiles++
	next.Cursor = end
	if bytes.Equal(end, r.End) {
		next.RangeIndex++
		next.Cursor = nil
		if next.RangeIndex == len(cfg.Ranges) {
			next.SnapshotDone = true
			w.manifest.SnapshotDone = true
		}
	}
	if err := w.putManifest(ctx); err != nil {
		return err
	}
	if err := w.saveProgress(ctx, rv, &next); err != nil {
		return err
	}
	*prog = next
	return nil
}

// maxLogParts bounds the mutation log keys one copy reads (each at most
// 64 KiB).
const maxLogParts = 64

// copyLog copies the mutation log from prog.LogTo to the read version rv
// (or less, if there is much) into a log file, then clears what it copied.
func (w *Worker) copyLog(ctx context.Context, db *distash.DB, cfg *blog.Config, prog *Progress, rv kv.Version) (busy bool, err error) {
	lr := blog.LogRange(cfg.ID)
	from := blog.LogVersionKey(cfg.ID, prog.LogTo+1)
	var kvs []distash.KeyValue
	var to kv.Version
	err = db.ReadTransact(ctx, func(tr *distash.Tx) error {
		tr.Options().SetReadSystemKeys()
		v, err := tr.ReadVersion()
		if err != nil {
			return err
		}
		to = kv.Version(v)
		kvs, err = tr.Snapshot().GetRange(from, lr.End, distash.RangeOptions{Limit: maxLogParts})
		if err != nil || len(kvs) < maxLogParts {
			return err
		}
		// More than one read's worth: stop before the last version read
		// (its parts may go on), unless it is the only one.
		last, _, err := blog.ParseLogKey(cfg.ID, kvs[len(kvs)-1].Key)
		if err != nil {
			return err
		}
		first, _, _ := blog.ParseLogKey(cfg.ID, kvs[0].Key)
		if first != last {
			for len(kvs) > 0 {
				v, _, _ := blog.ParseLogKey(cfg.ID, kvs[len(kvs)-1].Key)
				if v != last {
					break
				}
				kvs = kvs[:len(kvs)-1]
			}
			to = last - 1
			return nil
		}
		kvs, err = tr.Snapshot().GetRange(from, blog.LogVersionKey(cfg.ID, last+1), distash.RangeOptions{})
		to = last
		return err
	})
	if err != nil {
		return false, fmt.Errorf("backup: read the mutation log: %w", err)
	}
	if to <= prog.LogTo {
		return false, nil
	}
	var entries []logEntry
	for _, p := range kvs {
		v, part, err := blog.ParseLogKey(cfg.ID, p.Key)
		if err != nil {
			return false, err
		}
		if n := len(entries); n > 0 && entries[n-1].version == v {
			entries[n-1].muts = append(entries[n-1].muts, p.Value...)
			continue
		}
		if part != 0 {
			return false, fmt.Errorf("backup: mutation log of version %d begins at part %d", v, part)
		}
		entries = append(entries, logEntry{version: v, muts: append([]byte(nil), p.Value...)})
	}
	next := *prog
	next.LogTo = to
	if len(entries) > 0 {
		// The file begins where the previous one ended: the versions
		// between that and LogTo were copied without a file, as they hold
		// no backed-up mutation, so the files chain without gaps.
		fileFrom := cfg.Version
		if n := len(w.manifest.LogFiles); n > 0 {
			fileFrom = w.manifest.LogFiles[n-1].To
		}
		name := fmt.Sprintf("logs/%08d.log", prog.LogFiles)
		data := encodeLog(fileFrom, to, entries)
		if err := w.dest.Put(ctx, name, data); err != nil {
			return false, err
		}
		w.manifest.LogFiles = append(w.manifest.LogFiles, LogFile{FileInfo: fileInfo(name, data), From: fileFrom, To: to})
		next.LogFiles++
	} else if to-prog.LogTo < kv.VersionsPerSecond {
		// Nothing was committed in the ranges: advance the restorable
		// end at most once a second, not at every poll.
		return false, nil
	}
	w.manifest.LogEnd = to
	if err := w.putManifest(ctx); err != nil {
		return false, err
	}
	clear := kv.Mutation{Type: kv.MutClearRange, Key: lr.Begin, Param: blog.LogVersionKey(cfg.ID, to+1)}
	if err := w.saveProgress(ctx, rv, &next, clear); err != nil {
		return false, err
	}
	*prog = next
	return len(kvs) >= maxLogParts/2, nil
}

// redact hides a password in a URL.
func redact(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return u.Redacted()
	}
	return raw
}

// publish updates the status from the manifest and progress.
func (w *Worker) publish(cfg *blog.Config, prog *Progress, errText string) {
	m := w.manifest
	s := Status{State: "running", ID: cfg.ID, URL: redact(cfg.URL), Bytes: m.Bytes(), RangeFiles: len(m.RangeFiles), LogFiles: len(m.LogFiles),
		SnapshotDone: prog.SnapshotDone, LogTo: prog.LogTo, StartedMs: cfg.StartedUnixMs}
	if !prog.SnapshotDone {
		s.State = "snapshot"
		s.Snapshot = fmt.Sprintf("range %d of %d, at %q", prog.RangeIndex+1, len(cfg.Ranges), prog.Cursor)
	}
	s.RestorableFrom, s.RestorableTo, _ = m.Restorable()
	w.mu.Lock()
	s.LastError, s.ErrorAt = w.status.LastError, w.status.ErrorAt
	if errText != "" {
		s.LastError = errText
	}
	w.status = s
	w.mu.Unlock()
}
