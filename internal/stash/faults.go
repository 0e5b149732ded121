package stash

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/distash/distash/internal/fsys"
	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/loadsample"
)

// How a stash meets a faulty disk:
//
//   - A full disk (an engine write or a metadata file fails with
//     fsys.IsNoSpace) is waited out: the stash enters the disk-full state
//     (DiskFull; one log line), stops flushing (and, once its MVCC window
//     is at its budget, applying: the window and the log hold what it has
//     not made durable, within their bounds), keeps serving the reads it
//     can (the versions it applied), and retries the write every
//     diskFullRetry. A write that succeeds ends the state. When the retry
//     still fails while a probe file of probeBytes can be written, the
//     engine is stuck on its error rather than the disk full: the stash
//     fails with the error, and the server reopens it from its files.
//   - Damage (a *fsys.DamageError: a metadata file that fails its
//     checksum, a missing ownership file while the engine holds data, a
//     directory removed while the stash runs) fails the stash for good:
//     it cannot vouch for its data. The server reports it damaged and
//     rebuilds it from its replicas where there are any.
//   - Any other write error (EIO, a failed fsync) fails the stash; the
//     server reopens it from its files, so nothing it wrote is trusted
//     beyond what the reopened engine reads back (a failed fsync is never
//     retried on the same file).

// diskFullRetry is how often a stash whose disk is full retries its
// write (a variable for tests).
var diskFullRetry = 2 * time.Second

// probeBytes is the size of the file a disk-full stash writes to tell a
// disk with room again from an engine stuck on its error.
const probeBytes = 1 << 20

const probeFile = "space-probe.tmp"

// diskFullError is the error of a write a stash did not make because its
// disk is full: the stash waits and retries, it does not fail.
type diskFullError struct {
	tag kv.Tag
	err error // matches fsys.IsNoSpace
}

func (e *diskFullError) Error() string {
	return fmt.Sprintf("stash %d: the disk is full: %v", e.tag, e.err)
}

func (e *diskFullError) Unwrap() error { return e.err }

func isDiskFull(err error) bool {
	var df *diskFullError
	return errors.As(err, &df)
}

// diskState is the disk-full state of a stash.
type diskState struct {
	mu      sync.Mutex
	since   time.Time // zero while the disk has room
	cause   error     // Protected by mu.
	nextTry time.Time // Protected by mu.
}

// DiskFull reports whether the stash found its disk full and is waiting
// for room, since when, and the error that said so.
func (s *Stash) DiskFull() (since time.Time, cause error, full bool) {
	s.disk.mu.Lock()
	defer s.disk.mu.Unlock()
	return s.disk.since, s.disk.cause, !s.disk.since.IsZero()
}

// diskFullWait returns a *diskFullError while the disk is full and the
// next retry is not due; nil when the caller may write (the disk has room,
// or it is time to retry).
func (s *Stash) diskFullWait() error {
	s.disk.mu.Lock()
	defer s.disk.mu.Unlock()
	if s.disk.since.IsZero() || !s.clock.Now().Before(s.disk.nextTry) {
		return nil
	}
	return &diskFullError{tag: s.opts.Tag, err: s.disk.cause}
}

// noteDiskFull enters (or stays in) the disk-full state after err, a
// write that failed with fsys.IsNoSpace, and returns the *diskFullError
// the caller returns. It logs and calls Options.OnDiskFull once per
// episode.
func (s *Stash) noteDiskFull(err error) error {
	s.disk.mu.Lock()
	first := s.disk.since.IsZero()
	if first {
		s.disk.since = s.clock.Now()
	}
	s.disk.cause = err
	s.disk.nextTry = s.clock.Now().Add(diskFullRetry)
	s.disk.mu.Unlock()
	if first {
		s.opts.Logger.Error("stash's disk is full: it stops applying the log and serves the reads it can; it retries the write until there is room",
			"tag", s.opts.Tag, "pool", s.opts.Pool, "dir", s.opts.Dir, "retry", diskFullRetry, "err", err)
		if s.opts.OnDiskFull != nil {
			s.opts.OnDiskFull(err)
		}
	}
	return &diskFullError{tag: s.opts.Tag, err: err}
}

// diskRoomAgain ends the disk-full state after a write succeeded.
func (s *Stash) diskRoomAgain() {
	s.disk.mu.Lock()
	since := s.disk.since
	s.disk.since, s.disk.cause = time.Time{}, nil
	s.disk.mu.Unlock()
	if !since.IsZero() {
		s.opts.Logger.Warn("stash's disk has room again: it applies the log again", "tag", s.opts.Tag, "pool", s.opts.Pool,
			"full_for", s.clock.Since(since).Round(time.Millisecond))
	}
}

// writeFailed classifies a failed write of the engine (or of the ownership
// file) during a flush. A full disk returns a *diskFullError (the caller
// waits and retries), unless the disk was full already and a probe file
// now fits: then the engine is stuck on its error and the stash must be
// reopened, so the error is returned as a failure. Other errors fail the
// stash.
func (s *Stash) writeFailed(err error) error {
	if !fsys.IsNoSpace(err) {
		return err
	}
	if _, _, full := s.DiskFull(); full && s.probeRoom() {
		return fmt.Errorf("stash %d: its disk has room again but its engine still fails its writes, so it is reopened: %w", s.opts.Tag, err)
	}
	return s.noteDiskFull(err)
}

// probeRoom reports whether a file of probeBytes can be written and
// synced in the stash's directory (it is removed after).
func (s *Stash) probeRoom() bool {
	if s.opts.Dir == "" {
		return false
	}
	f := s.fs()
	path := filepath.Join(s.opts.Dir, probeFile)
	file, err := f.Create(path)
	if err != nil {
		return false
	}
	defer f.Remove(path)
	_, err = file.Write(make([]byte, probeBytes))
	if err == nil {
		err = file.Sync()
	}
	if cerr := file.Close(); err == nil {
		err = cerr
	}
	return err == nil
}

// checkFiles fails with a *fsys.DamageError when the ownership file of a
// durable stash is gone while it runs (its directory was removed, say):
// the engine's next new file would fail in the middle of a write, and a
// restart could not tell what the stash owns.
func (s *Stash) checkFiles() error {
	if s.opts.Dir == "" || !s.keepsData() {
		return nil
	}
	path := filepath.Join(s.opts.Dir, ownershipFile)
	ok, err := fsys.Exists(s.fs(), path)
	if err != nil {
		return fmt.Errorf("stash %d: check %s: %w", s.opts.Tag, path, err)
	}
	if !ok {
		return fsys.Damaged(path, "missing while the stash runs (its directory %s or the file was removed)", s.opts.Dir)
	}
	return nil
}

// fs is the file system of the stash's directory.
func (s *Stash) fs() fsys.FS { return fsys.Or(s.opts.FS) }

// NewFailed returns a stash that failed before it could open: err says why
// (a *fsys.DamageError for files it cannot vouch for). It serves nothing
// (reads answer stash_unavailable), its Run returns err at once, and it
// has no engine to close. The server keeps it in the stash's place so that
// status, metrics and reads tell what happened.
func NewFailed(opts Options, err error) *Stash {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &Stash{opts: opts, win: newWindow(), appliedCh: make(chan struct{}), failedC: make(chan struct{}),
		jobs: map[uint64]*fetchJob{}, sample: loadsample.NewByteSample(opts.SampleUnit),
		writes: loadsample.NewWriteRate(opts.SampleUnit, 0), fetchWake: make(chan struct{}, 1)}
	s.closed.Store(true)
	s.fail(err)
	return s
}
