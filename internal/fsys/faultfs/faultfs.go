// Package faultfs is a fault-injecting fsys.FS for tests: it wraps any FS
// (the operating system's, or Pebble's strict in-memory FS) and, by rules
// switched on and off while the code under test runs, makes its operations
// fail the way disks fail:
//
//   - an error (EIO by default) on reads, writes, syncs, opens, removals,
//     renames or metadata operations, chosen by operation kind and by a
//     glob on the file's name or path (Fail, Heal);
//   - short (torn) writes: a write that writes the first half of its bytes
//     and then returns the error (Rule.Partial);
//   - a small disk: once a byte budget of file growth is spent, writes
//     write what still fits and fail with ENOSPC, which fsys.IsNoSpace
//     recognises; removing files or raising the budget frees space again
//     (SetSpace);
//   - a crash (Crash, over NewMem's strict in-memory FS): every write not
//     made durable by a sync is dropped, exactly, and the files and locks
//     held before the crash are dead, as those of a killed process are.
//
// Counters tell what the code under test did (Count) and how many faults
// were injected (Injected). Files opened through an FS report no OS file
// descriptor (Fd returns vfs.InvalidFd), so code with a raw-descriptor fast
// path takes its portable path and every byte goes through the rules.
package faultfs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/cockroachdb/pebble/vfs"

	"github.com/distash/distash/internal/fsys"
)

// Op is a set of operation kinds.
type Op uint32

const (
	// OpRead is File.Read and File.ReadAt.
	OpRead Op = 1 << iota
	// OpWrite is File.Write and File.WriteAt (and Preallocate).
	OpWrite
	// OpSync is File.Sync, SyncData and SyncTo, on files and directories.
	OpSync
	// OpOpen is FS.Create, Open, OpenReadWrite, OpenDir, ReuseForWrite and Lock.
	OpOpen
	// OpRemove is FS.Remove and RemoveAll.
	OpRemove
	// OpRename is FS.Rename and Link.
	OpRename
	// OpMeta is FS.Stat, List, MkdirAll and File.Stat.
	OpMeta

	// OpAll is every operation kind.
	OpAll = OpRead | OpWrite | OpSync | OpOpen | OpRemove | OpRename | OpMeta
)

var opNames = []string{"read", "write", "sync", "open", "remove", "rename", "meta"}

func (o Op) String() string {
	s := ""
	for i, n := range opNames {
		if o&(1<<i) != 0 {
			if s != "" {
				s += "|"
			}
			s += n
		}
	}
	if s == "" {
		return "none"
	}
	return s
}

// Rule says which operations fail and how.
type Rule struct {
	// Ops are the operation kinds the rule applies to; 0 means OpAll.
	Ops Op
	// Path is a glob (path.Match) matched against the file's base name and
	// its whole path; "" matches every file. "*.seg", "MANIFEST-*",
	// "*.log" and "*/raft/*" are typical.
	Path string
	// Err is the error returned (wrapped in an *os.PathError naming the
	// file); nil means EIO.
	Err error
	// Partial makes a failing write write the first half of its bytes
	// before returning the error: a short write, which a crash then leaves
	// as a torn tail.
	Partial bool
	// Skip lets this many matching operations succeed before the rule
	// fires.
	Skip int
	// Times retires the rule after it has failed this many operations; 0
	// means it fails every matching operation until Heal.
	Times int
}

type rule struct {
	Rule
	seen, fired int
}

// ErrCrashed is what a file opened before Crash returns: its process is
// dead.
var ErrCrashed = errors.New("faultfs: file of a crashed process")

// FS is a fault-injecting fsys.FS. Its methods are safe for concurrent use.
type FS struct {
	base fsys.FS

	mu    sync.Mutex
	rules []*rule
	space int64 // free bytes; < 0: unlimited
	gen   uint64
	locks []io.Closer // locks taken in the current generation

	injected atomic.Int64
	counts   [7]atomic.Int64

	files sync.Map // *file -> struct{}: open files, renamed with their file
}

var _ fsys.FS = (*FS)(nil)

// New returns an FS over base that passes everything through until told
// otherwise.
func New(base fsys.FS) *FS { return &FS{base: fsys.Or(base), space: -1} }

// NewMem returns an FS over a strict in-memory FS (vfs.NewStrictMem), which
// keeps apart what was synced: Crash drops exactly the rest.
func NewMem() *FS { return New(vfs.NewStrictMem()) }

// Base returns the wrapped FS.
func (fs *FS) Base() fsys.FS { return fs.base }

// Fail adds a rule. Rules are checked in the order they were added; the
// first that fires decides the error.
func (fs *FS) Fail(r Rule) {
	if r.Ops == 0 {
		r.Ops = OpAll
	}
	fs.mu.Lock()
	fs.rules = append(fs.rules, &rule{Rule: r})
	fs.mu.Unlock()
}

// Heal removes every rule and the space limit.
func (fs *FS) Heal() {
	fs.mu.Lock()
	fs.rules = nil
	fs.space = -1
	fs.mu.Unlock()
}

// SetSpace sets the free space of the disk to n bytes; negative means
// unlimited. Growing a file spends space; removing, truncating by Create
// or renaming over a file frees its size. A write that does not fit
// writes what fits and fails with ENOSPC.
func (fs *FS) SetSpace(n int64) {
	fs.mu.Lock()
	fs.space = n
	fs.mu.Unlock()
}

// Space returns the free space left, negative when unlimited.
func (fs *FS) Space() int64 {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.space
}

// Injected returns how many faults were injected (rule failures and
// ENOSPC errors).
func (fs *FS) Injected() int64 { return fs.injected.Load() }

// Count returns how many operations of the kinds in op were attempted.
func (fs *FS) Count(op Op) int64 {
	var n int64
	for i := range fs.counts {
		if op&(1<<i) != 0 {
			n += fs.counts[i].Load()
		}
	}
	return n
}

// Crash simulates a kill -9 followed by a power loss: every file and lock
// opened so far becomes dead (its operations fail with ErrCrashed, its
// Close does nothing) and the base FS, which must be a strict in-memory FS
// (NewMem), drops every write, creation, rename and removal not made
// durable by a sync (the strict in-memory FS may be under other wrappers
// that have an Unwrap method, such as a devfs device). Rules and the
// space limit stay; the code under test then reopens its files as a
// restarted process would.
func (fs *FS) Crash() {
	fs.Kill()
	// The in-memory FS may sit under other wrappers (a devfs device).
	base := fs.base
	for {
		u, ok := base.(interface{ Unwrap() fsys.FS })
		if !ok {
			break
		}
		base = u.Unwrap()
	}
	m, ok := base.(*vfs.MemFS)
	if !ok {
		panic(fmt.Sprintf("faultfs: Crash needs a strict in-memory base FS (NewMem), not %T", fs.base))
	}
	m.ResetToSyncedState()
}

// Kill simulates a kill -9 without a power loss: every file and lock
// opened so far becomes dead, as in Crash, but what was written stays, as
// the kernel's page cache keeps it. Any base FS will do.
func (fs *FS) Kill() {
	fs.mu.Lock()
	fs.gen++
	locks := fs.locks
	fs.locks = nil
	fs.mu.Unlock()
	for _, l := range locks {
		l.Close()
	}
}

// check counts an operation of kind op on name and returns the error of
// the first rule that fires, and whether it asks for a partial write.
func (fs *FS) check(op Op, opName, name string) (error, bool) {
	for i := range fs.counts {
		if op == 1<<i {
			fs.counts[i].Add(1)
		}
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for i, r := range fs.rules {
		if r.Ops&op == 0 || !matches(r.Path, name) {
			continue
		}
		r.seen++
		if r.seen <= r.Skip {
			continue
		}
		r.fired++
		if r.Times > 0 && r.fired >= r.Times {
			fs.rules = append(fs.rules[:i:i], fs.rules[i+1:]...)
		}
		fs.injected.Add(1)
		err := r.Err
		if err == nil {
			err = syscall.EIO
		}
		return &os.PathError{Op: opName, Path: name, Err: err}, r.Partial
	}
	return nil, false
}

func matches(pattern, name string) bool {
	if pattern == "" {
		return true
	}
	if ok, _ := path.Match(pattern, name); ok {
		return true
	}
	ok, _ := path.Match(pattern, path.Base(name))
	return ok
}

// spend takes up to n bytes of space and returns how many it got.
func (fs *FS) spend(n int64) int64 {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.space < 0 {
		return n
	}
	got := min(n, fs.space)
	fs.space -= got
	return got
}

// free gives n bytes of space back.
func (fs *FS) free(n int64) {
	fs.mu.Lock()
	if fs.space >= 0 && n > 0 {
		fs.space += n
	}
	fs.mu.Unlock()
}

func (fs *FS) limited() bool {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.space >= 0
}

func (fs *FS) noSpace(opName, name string) error {
	fs.injected.Add(1)
	return &os.PathError{Op: opName, Path: name, Err: syscall.ENOSPC}
}

// sizeOf returns the size of the file name, 0 if it does not exist.
func (fs *FS) sizeOf(name string) int64 {
	fi, err := fs.base.Stat(name)
	if err != nil || fi.IsDir() {
		return 0
	}
	return fi.Size()
}

// treeSize returns the bytes of the files under name.
func (fs *FS) treeSize(name string) int64 {
	fi, err := fs.base.Stat(name)
	if err != nil {
		return 0
	}
	if !fi.IsDir() {
		return fi.Size()
	}
	names, _ := fs.base.List(name)
	var n int64
	for _, c := range names {
		n += fs.treeSize(fs.base.PathJoin(name, c))
	}
	return n
}

func (fs *FS) wrap(f fsys.File, name string, pos int64) *file {
	fs.mu.Lock()
	gen := fs.gen
	fs.mu.Unlock()
	w := &file{fs: fs, f: f, name: name, gen: gen, pos: pos}
	fs.files.Store(w, struct{}{})
	return w
}

func (fs *FS) dead(gen uint64) bool {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return gen != fs.gen
}

// Create implements fsys.FS.
func (fs *FS) Create(name string) (fsys.File, error) {
	if err, _ := fs.check(OpOpen, "create", name); err != nil {
		return nil, err
	}
	old := fs.sizeOf(name)
	f, err := fs.base.Create(name)
	if err != nil {
		return nil, err
	}
	fs.free(old)
	return fs.wrap(f, name, 0), nil
}

// Link implements fsys.FS.
func (fs *FS) Link(oldname, newname string) error {
	if err, _ := fs.check(OpRename, "link", newname); err != nil {
		return err
	}
	return fs.base.Link(oldname, newname)
}

// Open implements fsys.FS.
func (fs *FS) Open(name string, opts ...vfs.OpenOption) (fsys.File, error) {
	if err, _ := fs.check(OpOpen, "open", name); err != nil {
		return nil, err
	}
	f, err := fs.base.Open(name, opts...)
	if err != nil {
		return nil, err
	}
	return fs.wrap(f, name, 0), nil
}

// OpenReadWrite implements fsys.FS.
func (fs *FS) OpenReadWrite(name string, opts ...vfs.OpenOption) (fsys.File, error) {
	if err, _ := fs.check(OpOpen, "open", name); err != nil {
		return nil, err
	}
	f, err := fs.base.OpenReadWrite(name, opts...)
	if err != nil {
		return nil, err
	}
	return fs.wrap(f, name, 0), nil
}

// OpenDir implements fsys.FS.
func (fs *FS) OpenDir(name string) (fsys.File, error) {
	if err, _ := fs.check(OpOpen, "open", name); err != nil {
		return nil, err
	}
	f, err := fs.base.OpenDir(name)
	if err != nil {
		return nil, err
	}
	return fs.wrap(f, name, 0), nil
}

// Remove implements fsys.FS.
func (fs *FS) Remove(name string) error {
	if err, _ := fs.check(OpRemove, "remove", name); err != nil {
		return err
	}
	n := fs.sizeOf(name)
	if err := fs.base.Remove(name); err != nil {
		return err
	}
	fs.free(n)
	return nil
}

// RemoveAll implements fsys.FS.
func (fs *FS) RemoveAll(name string) error {
	if err, _ := fs.check(OpRemove, "remove", name); err != nil {
		return err
	}
	var n int64
	if fs.limited() {
		n = fs.treeSize(name)
	}
	err := fs.base.RemoveAll(name)
	fs.free(n)
	return err
}

// Rename implements fsys.FS.
func (fs *FS) Rename(oldname, newname string) error {
	if err, _ := fs.check(OpRename, "rename", newname); err != nil {
		return err
	}
	n := fs.sizeOf(newname)
	if err := fs.base.Rename(oldname, newname); err != nil {
		return err
	}
	fs.free(n)
	// A file open under the old name is now the file of the new one:
	// rules by path follow it.
	fs.files.Range(func(k, _ any) bool {
		if f := k.(*file); f.path() == oldname {
			f.mu.Lock()
			f.name = newname
			f.mu.Unlock()
		}
		return true
	})
	return nil
}

// ReuseForWrite implements fsys.FS.
func (fs *FS) ReuseForWrite(oldname, newname string) (fsys.File, error) {
	if err, _ := fs.check(OpOpen, "open", newname); err != nil {
		return nil, err
	}
	f, err := fs.base.ReuseForWrite(oldname, newname)
	if err != nil {
		return nil, err
	}
	return fs.wrap(f, newname, 0), nil
}

// MkdirAll implements fsys.FS.
func (fs *FS) MkdirAll(dir string, perm os.FileMode) error {
	if err, _ := fs.check(OpMeta, "mkdir", dir); err != nil {
		return err
	}
	return fs.base.MkdirAll(dir, perm)
}

// Lock implements fsys.FS. Crash releases the locks taken before it.
func (fs *FS) Lock(name string) (io.Closer, error) {
	if err, _ := fs.check(OpOpen, "lock", name); err != nil {
		return nil, err
	}
	l, err := fs.base.Lock(name)
	if err != nil {
		return nil, err
	}
	fl := &lock{c: l}
	fs.mu.Lock()
	fs.locks = append(fs.locks, fl)
	fs.mu.Unlock()
	return fl, nil
}

type lock struct {
	once sync.Once
	c    io.Closer
	err  error
}

func (l *lock) Close() error {
	l.once.Do(func() { l.err = l.c.Close() })
	return l.err
}

// List implements fsys.FS.
func (fs *FS) List(dir string) ([]string, error) {
	if err, _ := fs.check(OpMeta, "list", dir); err != nil {
		return nil, err
	}
	return fs.base.List(dir)
}

// Stat implements fsys.FS.
func (fs *FS) Stat(name string) (os.FileInfo, error) {
	if err, _ := fs.check(OpMeta, "stat", name); err != nil {
		return nil, err
	}
	return fs.base.Stat(name)
}

// PathBase implements fsys.FS.
func (fs *FS) PathBase(p string) string { return fs.base.PathBase(p) }

// PathJoin implements fsys.FS.
func (fs *FS) PathJoin(elem ...string) string { return fs.base.PathJoin(elem...) }

// PathDir implements fsys.FS.
func (fs *FS) PathDir(p string) string { return fs.base.PathDir(p) }

// GetDiskUsage implements fsys.FS; with a space limit, AvailBytes is the
// free space left.
func (fs *FS) GetDiskUsage(p string) (vfs.DiskUsage, error) {
	du, err := fs.base.GetDiskUsage(p)
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.space >= 0 {
		return vfs.DiskUsage{AvailBytes: uint64(fs.space), TotalBytes: du.TotalBytes, UsedBytes: du.UsedBytes}, nil
	}
	return du, err
}

// file is a file opened through an FS.
type file struct {
	fs  *FS
	f   fsys.File
	gen uint64

	mu   sync.Mutex
	name string // changed by a Rename of the file
	pos  int64  // of Write
}

func (f *file) path() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.name
}

var _ fsys.File = (*file)(nil)

func (f *file) crashed(op string) error {
	if f.fs.dead(f.gen) {
		return &os.PathError{Op: op, Path: f.path(), Err: ErrCrashed}
	}
	return nil
}

func (f *file) Close() error {
	f.fs.files.Delete(f)
	if f.fs.dead(f.gen) {
		return nil
	}
	return f.f.Close()
}

func (f *file) Read(p []byte) (int, error) {
	if err := f.crashed("read"); err != nil {
		return 0, err
	}
	if err, _ := f.fs.check(OpRead, "read", f.path()); err != nil {
		return 0, err
	}
	return f.f.Read(p)
}

func (f *file) ReadAt(p []byte, off int64) (int, error) {
	if err := f.crashed("read"); err != nil {
		return 0, err
	}
	if err, _ := f.fs.check(OpRead, "read", f.path()); err != nil {
		return 0, err
	}
	return f.f.ReadAt(p, off)
}

// write writes p at off (Write when off < 0) under the rules and the
// space limit.
func (f *file) write(p []byte, off int64) (int, error) {
	if err := f.crashed("write"); err != nil {
		return 0, err
	}
	at := off
	if off < 0 {
		f.mu.Lock()
		at = f.pos
		f.mu.Unlock()
	}
	ferr, partial := f.fs.check(OpWrite, "write", f.path())
	want := p
	if ferr != nil {
		if !partial {
			return 0, ferr
		}
		want = p[:len(p)/2]
	}
	if f.fs.limited() {
		grow := max(0, at+int64(len(want))-f.fs.sizeOf(f.path()))
		if got := f.fs.spend(grow); got < grow {
			want = want[:max(0, int64(len(want))-(grow-got))]
			if ferr == nil {
				ferr = f.fs.noSpace("write", f.path())
			}
		}
	}
	var n int
	var err error
	if off < 0 {
		n, err = f.f.Write(want)
		f.mu.Lock()
		f.pos += int64(n)
		f.mu.Unlock()
	} else {
		n, err = f.f.WriteAt(want, off)
	}
	if err == nil {
		err = ferr
	}
	return n, err
}

func (f *file) Write(p []byte) (int, error) { return f.write(p, -1) }

func (f *file) WriteAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, &os.PathError{Op: "write", Path: f.path(), Err: os.ErrInvalid}
	}
	return f.write(p, off)
}

func (f *file) Preallocate(off, n int64) error {
	if err := f.crashed("preallocate"); err != nil {
		return err
	}
	if err, _ := f.fs.check(OpWrite, "preallocate", f.path()); err != nil {
		return err
	}
	return f.f.Preallocate(off, n)
}

func (f *file) Stat() (os.FileInfo, error) {
	if err := f.crashed("stat"); err != nil {
		return nil, err
	}
	if err, _ := f.fs.check(OpMeta, "stat", f.path()); err != nil {
		return nil, err
	}
	return f.f.Stat()
}

func (f *file) sync(op string) error {
	if err := f.crashed(op); err != nil {
		return err
	}
	if err, _ := f.fs.check(OpSync, op, f.path()); err != nil {
		return err
	}
	return nil
}

func (f *file) Sync() error {
	if err := f.sync("sync"); err != nil {
		return err
	}
	return f.f.Sync()
}

func (f *file) SyncData() error {
	if err := f.sync("sync"); err != nil {
		return err
	}
	return f.f.SyncData()
}

func (f *file) SyncTo(length int64) (bool, error) {
	if err := f.sync("sync"); err != nil {
		return false, err
	}
	return f.f.SyncTo(length)
}

func (f *file) Prefetch(off, n int64) error { return nil }

// Fd returns vfs.InvalidFd: no caller may go around the faults with the
// raw descriptor.
func (f *file) Fd() uintptr { return vfs.InvalidFd }

// Truncate truncates the file when the wrapped file can (an OS file can,
// an in-memory one cannot); it is a write under the rules.
func (f *file) Truncate(size int64) error {
	if err := f.crashed("truncate"); err != nil {
		return err
	}
	t, ok := f.f.(interface{ Truncate(int64) error })
	if !ok {
		return &os.PathError{Op: "truncate", Path: f.path(), Err: errors.ErrUnsupported}
	}
	if err, _ := f.fs.check(OpWrite, "truncate", f.path()); err != nil {
		return err
	}
	old := f.fs.sizeOf(f.path())
	if err := t.Truncate(size); err != nil {
		return err
	}
	f.fs.free(old - size)
	return nil
}
