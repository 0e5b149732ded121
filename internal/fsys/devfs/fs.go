package devfs

import (
	"errors"
	"io"
	"os"

	"github.com/cockroachdb/pebble/vfs"

	"github.com/distash/distash/internal/fsys"
)

// Wrap returns an FS over inner whose files' reads, writes and syncs go
// through the device. Everything else passes through unchanged. Wrap may
// be called many times (a stash's engine and its own files): the FSs share
// the device.
func (d *Device) Wrap(inner fsys.FS) fsys.FS { return &FS{d: d, inner: fsys.Or(inner)} }

// FS is an fsys.FS whose files go through a Device.
type FS struct {
	d     *Device
	inner fsys.FS
}

var _ fsys.FS = (*FS)(nil)

// Unwrap returns the wrapped FS (faultfs finds a crashable in-memory FS
// under a device through it).
func (fs *FS) Unwrap() fsys.FS { return fs.inner }

// Device returns the FS's device.
func (fs *FS) Device() *Device { return fs.d }

func (fs *FS) wrap(f fsys.File, err error) (fsys.File, error) {
	if err != nil {
		return nil, err
	}
	return &file{d: fs.d, f: f}, nil
}

// Create implements fsys.FS.
func (fs *FS) Create(name string) (fsys.File, error) { return fs.wrap(fs.inner.Create(name)) }

// Link implements fsys.FS.
func (fs *FS) Link(oldname, newname string) error { return fs.inner.Link(oldname, newname) }

// Open implements fsys.FS.
func (fs *FS) Open(name string, opts ...vfs.OpenOption) (fsys.File, error) {
	f, err := fs.wrap(fs.inner.Open(name))
	if err == nil {
		// The options (Pebble's fadvise) apply to the wrapped file, which
		// hides its descriptor: they become no-ops, as on faultfs.
		for _, o := range opts {
			o.Apply(f)
		}
	}
	return f, err
}

// OpenReadWrite implements fsys.FS.
func (fs *FS) OpenReadWrite(name string, opts ...vfs.OpenOption) (fsys.File, error) {
	f, err := fs.wrap(fs.inner.OpenReadWrite(name))
	if err == nil {
		for _, o := range opts {
			o.Apply(f)
		}
	}
	return f, err
}

// OpenDir implements fsys.FS.
func (fs *FS) OpenDir(name string) (fsys.File, error) { return fs.wrap(fs.inner.OpenDir(name)) }

// Remove implements fsys.FS.
func (fs *FS) Remove(name string) error { return fs.inner.Remove(name) }

// RemoveAll implements fsys.FS.
func (fs *FS) RemoveAll(name string) error { return fs.inner.RemoveAll(name) }

// Rename implements fsys.FS.
func (fs *FS) Rename(oldname, newname string) error { return fs.inner.Rename(oldname, newname) }

// ReuseForWrite implements fsys.FS.
func (fs *FS) ReuseForWrite(oldname, newname string) (fsys.File, error) {
	return fs.wrap(fs.inner.ReuseForWrite(oldname, newname))
}

// MkdirAll implements fsys.FS.
func (fs *FS) MkdirAll(dir string, perm os.FileMode) error { return fs.inner.MkdirAll(dir, perm) }

// Lock implements fsys.FS.
func (fs *FS) Lock(name string) (io.Closer, error) { return fs.inner.Lock(name) }

// List implements fsys.FS.
func (fs *FS) List(dir string) ([]string, error) { return fs.inner.List(dir) }

// Stat implements fsys.FS.
func (fs *FS) Stat(name string) (os.FileInfo, error) { return fs.inner.Stat(name) }

// PathBase implements fsys.FS.
func (fs *FS) PathBase(p string) string { return fs.inner.PathBase(p) }

// PathJoin implements fsys.FS.
func (fs *FS) PathJoin(elem ...string) string { return fs.inner.PathJoin(elem...) }

// PathDir implements fsys.FS.
func (fs *FS) PathDir(p string) string { return fs.inner.PathDir(p) }

// GetDiskUsage implements fsys.FS.
func (fs *FS) GetDiskUsage(p string) (vfs.DiskUsage, error) { return fs.inner.GetDiskUsage(p) }

// file is a file opened through an FS: its reads, writes and syncs are
// charged to the device after the wrapped file did them.
type file struct {
	d *Device
	f fsys.File
}

var _ fsys.File = (*file)(nil)

func (f *file) Close() error { return f.f.Close() }

func (f *file) Read(p []byte) (int, error) {
	t := nanotime()
	n, err := f.f.Read(p)
	if n > 0 {
		f.d.io(kindRead, n, t)
	}
	return n, err
}

func (f *file) ReadAt(p []byte, off int64) (int, error) {
	t := nanotime()
	n, err := f.f.ReadAt(p, off)
	if n > 0 {
		f.d.io(kindRead, n, t)
	}
	return n, err
}

func (f *file) Write(p []byte) (int, error) {
	t := nanotime()
	n, err := f.f.Write(p)
	if n > 0 {
		f.d.io(kindWrite, n, t)
	}
	return n, err
}

func (f *file) WriteAt(p []byte, off int64) (int, error) {
	t := nanotime()
	n, err := f.f.WriteAt(p, off)
	if n > 0 {
		f.d.io(kindWrite, n, t)
	}
	return n, err
}

func (f *file) Preallocate(off, n int64) error { return f.f.Preallocate(off, n) }

func (f *file) Stat() (os.FileInfo, error) { return f.f.Stat() }

func (f *file) sync(err error, t int64) error {
	if err == nil {
		f.d.io(kindSync, 0, t)
	}
	return err
}

func (f *file) Sync() error {
	t := nanotime()
	return f.sync(f.f.Sync(), t)
}

func (f *file) SyncData() error {
	t := nanotime()
	return f.sync(f.f.SyncData(), t)
}

func (f *file) SyncTo(length int64) (bool, error) {
	t := nanotime()
	full, err := f.f.SyncTo(length)
	return full, f.sync(err, t)
}

// Prefetch does nothing: a read-ahead the device is not asked for.
func (f *file) Prefetch(off, n int64) error { return nil }

// Fd returns vfs.InvalidFd: code with a raw-descriptor path (Pebble's
// syncing file, flash's O_DIRECT reads) takes its portable path, through
// the device.
func (f *file) Fd() uintptr { return vfs.InvalidFd }

// Truncate truncates the file when the wrapped file can; it costs nothing
// (metadata).
func (f *file) Truncate(size int64) error {
	t, ok := f.f.(interface{ Truncate(int64) error })
	if !ok {
		return &os.PathError{Op: "truncate", Err: errors.ErrUnsupported}
	}
	return t.Truncate(size)
}
