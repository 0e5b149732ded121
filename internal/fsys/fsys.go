// Package fsys is the product's one file-system seam. Every file DiStash
// reads or writes — engines, the raft log stores, the flash engine's
// segments, stash and node metadata, cluster.toml, coordinator state — goes
// through an FS, so tests can inject disk faults (EIO, ENOSPC, failed
// fsyncs, torn writes, crashes that drop unsynced data) and a pool can
// emulate its device, without the code under test knowing.
//
// FS is Pebble's vfs.FS: Pebble and its raft store already speak it, and
// its errorfs and strict in-memory FS come with it. Default is the
// operating system's files, with nothing added.
//
// Small metadata files are written with WriteChecked, which frames the
// payload with a header carrying its length and CRC-32C, and read with
// ReadChecked, which fails with a *DamageError naming the file when the
// file is truncated, extended or flipped. A replica that meets a
// DamageError cannot vouch for its data: it fails loudly and is rebuilt.
package fsys

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"

	"github.com/cockroachdb/pebble/vfs"
)

// FS is the file-system interface every file of the product goes through.
type FS = vfs.FS

// File is a file opened through an FS.
type File = vfs.File

// Default is the operating system's file system.
var Default FS = vfs.Default

// Or returns f, or Default when f is nil: options structs leave FS unset
// for the real disk.
func Or(f FS) FS {
	if f == nil {
		return Default
	}
	return f
}

// DamageError says a file's content cannot be trusted: its checksum,
// length or sequence does not match what was written, or it is missing
// where it must exist.
type DamageError struct {
	Path   string
	Reason string
}

func (e *DamageError) Error() string {
	return fmt.Sprintf("damaged file %s: %s", e.Path, e.Reason)
}

// ErrDamaged matches every *DamageError with errors.Is.
var ErrDamaged = errors.New("damaged file")

// Is makes errors.Is(err, ErrDamaged) true for a *DamageError.
func (e *DamageError) Is(target error) bool { return target == ErrDamaged }

// Damaged returns a *DamageError for path.
func Damaged(path, format string, args ...any) error {
	return &DamageError{Path: path, Reason: fmt.Sprintf(format, args...)}
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Checksum is the CRC-32C every checked file and record of the product uses.
func Checksum(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// header starts every file WriteChecked writes: the magic, the payload's
// length and CRC-32C, then a newline, so the file stays readable text when
// the payload is.
const headerMagic = "distash-file v1 "

func header(payload []byte) []byte {
	return fmt.Appendf(nil, "%slen=%d crc32c=%08x\n", headerMagic, len(payload), Checksum(payload))
}

// WriteChecked writes payload to path atomically and durably: a temporary
// file in the same directory, written with a checksummed header and
// synced, renamed over path, and the directory synced. Any failure,
// fsync's included, is returned: the caller must not act as if the file
// were written.
func WriteChecked(f FS, path string, payload []byte) error {
	return WriteAtomic(f, path, append(header(payload), payload...))
}

// WriteAtomic writes data to path atomically and durably (temporary file,
// sync, rename, directory sync), without a header.
func WriteAtomic(f FS, path string, data []byte) error {
	f = Or(f)
	tmp := path + ".tmp"
	file, err := f.Create(tmp)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := file.Write(data); err != nil {
		file.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := file.Sync(); err != nil {
		file.Close()
		return fmt.Errorf("sync %s: %w", path, err)
	}
	if err := file.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return SyncDir(f, f.PathDir(path))
}

// SyncDir fsyncs a directory, making the creations, renames and removals
// in it durable.
func SyncDir(f FS, dir string) error {
	d, err := Or(f).OpenDir(dir)
	if err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}

// MkdirDurable makes dir (and its missing parents) and syncs its parent:
// Pebble syncs its own directory, not the directory's entry in its
// parent, and without that a crash soon after the log was made can take
// all of it.
func MkdirDurable(f FS, dir string) error {
	f = Or(f)
	if err := f.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return SyncDir(f, f.PathDir(dir))
}

// ReadFile reads a whole file through f.
func ReadFile(f FS, path string) ([]byte, error) {
	file, err := Or(f).Open(path)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	return io.ReadAll(file)
}

// ReadChecked reads a file written by WriteChecked and returns its
// payload. A file that does not exist returns an error matching
// fs.ErrNotExist. A file whose header, length or checksum does not match
// returns a *DamageError naming it. legacy is true for a file written
// before checksums (no header): its payload is returned as it is, and the
// caller validates what it can.
func ReadChecked(f FS, path string) (payload []byte, legacy bool, err error) {
	b, err := ReadFile(f, path)
	if err != nil {
		return nil, false, err
	}
	return parseChecked(path, b)
}

func parseChecked(path string, b []byte) ([]byte, bool, error) {
	if len(b) == 0 {
		return nil, false, Damaged(path, "empty (truncated to nothing)")
	}
	if !bytes.HasPrefix(b, []byte(headerMagic)) {
		first := b
		if nl := bytes.IndexByte(b, '\n'); nl >= 0 {
			first = b[:nl]
		}
		if bytes.Contains(first, []byte(" crc32c=")) || bytes.HasPrefix(b, []byte(headerMagic[:8])) {
			return nil, false, Damaged(path, "header is damaged: %q", first)
		}
		return b, true, nil
	}
	nl := bytes.IndexByte(b, '\n')
	if nl < 0 {
		return nil, false, Damaged(path, "header is truncated")
	}
	var n int
	var sum uint32
	if _, err := fmt.Sscanf(string(b[len(headerMagic):nl]), "len=%d crc32c=%08x", &n, &sum); err != nil {
		return nil, false, Damaged(path, "header is damaged: %q", b[:nl])
	}
	payload := b[nl+1:]
	switch {
	case len(payload) < n:
		return nil, false, Damaged(path, "truncated: %d of %d bytes", len(payload), n)
	case len(payload) > n:
		return nil, false, Damaged(path, "%d bytes where %d were written", len(payload), n)
	case Checksum(payload) != sum:
		return nil, false, Damaged(path, "checksum mismatch (crc32c %08x, want %08x)", Checksum(payload), sum)
	}
	return payload, false, nil
}

// Exists reports whether path exists.
func Exists(f FS, path string) (bool, error) {
	_, err := Or(f).Stat(path)
	if err == nil {
		return true, nil
	}
	if errors.Is(err, fs.ErrNotExist) || os.IsNotExist(err) {
		return false, nil
	}
	return false, err
}

// IsNoSpace reports whether err is (or wraps) a full disk: ENOSPC, or
// EDQUOT for a full quota.
func IsNoSpace(err error) bool {
	return errors.Is(err, errNoSpace) || errors.Is(err, errQuota)
}

// LockFile is the name of the lock file LockDir holds in a data directory.
const LockFile = "LOCK.distash"

// LockDir takes the exclusive lock of a data directory (an advisory lock
// on dir/LOCK.distash, released when the process exits however it exits).
// A second process on the same directory gets an error saying so, before
// it has touched anything.
func LockDir(f FS, dir string) (io.Closer, error) {
	f = Or(f)
	if err := f.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	l, err := f.Lock(f.PathJoin(dir, LockFile))
	if err != nil {
		return nil, fmt.Errorf("data directory %s is in use by another process (lock %s: %v)", dir, LockFile, err)
	}
	return l, nil
}
