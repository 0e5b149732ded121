// Package guard keeps Pebble's fatal errors from taking the process down
// with a goroutine dump. Pebble (v1.1) treats a failed WAL write or sync,
// a failed MANIFEST write or sync and a failed directory sync as
// unrecoverable: it calls its Logger's Fatalf or panics, from the
// committing goroutine or from a background flush or compaction. A Guard
// sits in those paths:
//
//   - in a goroutine running one of the caller's API methods (the frames
//     named by the Guard's prefix are on its stack), the fatal error
//     unwinds to the method's deferred Recover and becomes its error;
//   - in one of Pebble's background goroutines, nothing can be returned:
//     the Guard logs the cause, naming the store, and ends the process
//     with that message (Exit), which is what a supervisor can act on.
//
// Either way the Guard records the error first (Err), and its owner fails
// every later call with it: after a failed fsync nothing may be reported
// durable again, and Pebble's state after such a panic is not to be used
// (its commit pipeline may hold locks).
package guard

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/vfs"
)

// Exit ends the process after a fatal error in a background goroutine of
// Pebble, with msg on standard error. Tests replace it.
var Exit = func(msg string) {
	fmt.Fprintln(os.Stderr, msg)
	os.Exit(1)
}

// Guard guards one Pebble database.
type Guard struct {
	what   string // "pebble engine /data/stash/x", for messages
	prefix string // function name prefix of the owner's API frames
	err    atomic.Pointer[error]
	failed chan struct{} // closed once err is set
	onFail func(error)
	// abandoned: the owner gave the failed store up (Abandon); a fatal
	// error of its goroutines only ends them.
	abandoned atomic.Bool
	// locks are the store's directory locks, taken through FS: Abandon
	// releases them, so the store can be reopened in this process while
	// the failed one's Close may never finish.
	locksMu sync.Mutex
	locks   []io.Closer
}

// New returns a Guard for the store described by what, whose API methods'
// function names start with prefix (as runtime reports them, e.g.
// "github.com/distash/distash/internal/engine/pebble.(*Engine)."). onFail,
// if not nil, is called once, with the first fatal error, before the
// error is returned or the process exits.
func New(what, prefix string, onFail func(error)) *Guard {
	return &Guard{what: what, prefix: prefix, onFail: onFail, failed: make(chan struct{})}
}

// Err returns the first fatal error, nil if there was none.
func (g *Guard) Err() error {
	if p := g.err.Load(); p != nil {
		return *p
	}
	return nil
}

// Failed is closed once the store has failed (Err is not nil).
func (g *Guard) Failed() <-chan struct{} { return g.failed }

// Fail records err as the store's fatal error (the first one stays) and
// returns the recorded one.
func (g *Guard) Fail(err error) error {
	if g.err.CompareAndSwap(nil, &err) {
		close(g.failed)
		slog.Error(g.what+": failed for good", "err", err)
		if g.onFail != nil {
			g.onFail(err)
		}
	}
	return g.Err()
}

// fatal is the panic value of a fatal error raised by the Guard.
type fatal struct{ err error }

// inAPI reports whether the calling goroutine is inside one of the
// owner's API methods.
func (g *Guard) inAPI() bool {
	pcs := make([]uintptr, 256)
	n := runtime.Callers(3, pcs)
	frames := runtime.CallersFrames(pcs[:n])
	for {
		f, more := frames.Next()
		if strings.HasPrefix(f.Function, g.prefix) {
			return true
		}
		if !more {
			return false
		}
	}
}

// Abandon closes a failed store's database in the background, as far as
// Pebble lets it (after a fatal error its commit pipeline may hold a
// lock): a fatal error or a panic on the way only ends that goroutine.
func (g *Guard) Abandon(close func() error) {
	g.abandoned.Store(true)
	g.locksMu.Lock()
	for _, l := range g.locks {
		l.Close()
	}
	g.locksMu.Unlock()
	go func() {
		defer func() { recover() }()
		close()
	}()
}

// fatalf handles a fatal error raised inside Pebble.
func (g *Guard) fatalf(err error) {
	first := g.Err() == nil
	err = g.Fail(err)
	if g.inAPI() {
		panic(fatal{err})
	}
	if g.abandoned.Load() || !first {
		// The store failed already and its owner fails every call with
		// that error: this goroutine only has to stop.
		runtime.Goexit()
	}
	Exit(fmt.Sprintf("%s: fatal error in a background goroutine, exiting: %v", g.what, err))
	// Exit returned (a test): stop this goroutine without unwinding into
	// Pebble's code, which must not continue.
	runtime.Goexit()
}

// Recover turns a panic raised inside Pebble during an API method into
// the method's error; use it as `defer g.Recover(&err)`. Every panic that
// unwinds out of Pebble is taken as fatal: the store is failed for good.
func (g *Guard) Recover(errp *error) {
	r := recover()
	if r == nil {
		return
	}
	var err error
	switch v := r.(type) {
	case fatal:
		err = v.err
	case error:
		err = g.Fail(fmt.Errorf("%s: %w", g.what, v))
	default:
		err = g.Fail(fmt.Errorf("%s: panic in pebble: %v", g.what, v))
	}
	*errp = err
}

// Logger returns a pebble.Logger that drops informational messages, passes
// errors to slog and handles Fatalf as a fatal error.
func (g *Guard) Logger() Logger { return Logger{g} }

// Logger is a Guard's pebble.Logger.
type Logger struct{ g *Guard }

// Infof drops Pebble's informational messages (WAL replay on every reopen).
func (Logger) Infof(string, ...any) {}

// Errorf logs Pebble's errors.
func (l Logger) Errorf(format string, args ...any) {
	slog.Error(l.g.what + ": " + fmt.Sprintf(format, args...))
}

// Fatalf handles a fatal error: see the package documentation. The
// error keeps the cause Pebble formats into the message (it uses %v), so
// a full disk still matches fsys.IsNoSpace.
func (l Logger) Fatalf(format string, args ...any) {
	err := &fatalError{msg: fmt.Sprintf(format, args...)}
	for _, a := range args {
		if e, ok := a.(error); ok {
			err.cause = e
			break
		}
	}
	l.g.fatalf(err)
}

type fatalError struct {
	msg   string
	cause error
}

func (e *fatalError) Error() string { return e.msg }
func (e *fatalError) Unwrap() error { return e.cause }

// FS returns fs with its directories' Sync guarded: Pebble panics on a
// failed directory sync (of its MANIFEST's directory), and the Guard
// handles it first. Files are fs's own, untouched.
func (g *Guard) FS(fs vfs.FS) vfs.FS { return guardedFS{FS: fs, g: g} }

type guardedFS struct {
	vfs.FS
	g *Guard
}

// errAbandoned is what an abandoned store's file-system calls return: its
// goroutines must not create, rename or remove files that a store reopened
// in the same directory now owns.
var errAbandoned = errors.New("store abandoned after a fatal error")

func (fs guardedFS) check() error {
	if fs.g.abandoned.Load() {
		return errAbandoned
	}
	return nil
}

// Lock takes the lock through the wrapped FS and remembers it for
// Abandon. The Closer it returns releases the lock once, whether Abandon
// or the store's own Close comes first (releasing twice would free a lock
// a reopened store holds by then).
func (fs guardedFS) Lock(name string) (io.Closer, error) {
	if err := fs.check(); err != nil {
		return nil, err
	}
	l, err := fs.FS.Lock(name)
	if err != nil {
		return nil, err
	}
	once := &onceCloser{c: l}
	fs.g.locksMu.Lock()
	fs.g.locks = append(fs.g.locks, once)
	fs.g.locksMu.Unlock()
	return once, nil
}

type onceCloser struct {
	once sync.Once
	c    io.Closer
	err  error
}

func (o *onceCloser) Close() error {
	o.once.Do(func() { o.err = o.c.Close() })
	return o.err
}

func (fs guardedFS) Create(name string) (vfs.File, error) {
	if err := fs.check(); err != nil {
		return nil, err
	}
	return fs.FS.Create(name)
}

func (fs guardedFS) Link(oldname, newname string) error {
	if err := fs.check(); err != nil {
		return err
	}
	return fs.FS.Link(oldname, newname)
}

func (fs guardedFS) OpenReadWrite(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	if err := fs.check(); err != nil {
		return nil, err
	}
	return fs.FS.OpenReadWrite(name, opts...)
}

func (fs guardedFS) Remove(name string) error {
	if err := fs.check(); err != nil {
		return err
	}
	return fs.FS.Remove(name)
}

func (fs guardedFS) RemoveAll(name string) error {
	if err := fs.check(); err != nil {
		return err
	}
	return fs.FS.RemoveAll(name)
}

func (fs guardedFS) Rename(oldname, newname string) error {
	if err := fs.check(); err != nil {
		return err
	}
	return fs.FS.Rename(oldname, newname)
}

func (fs guardedFS) ReuseForWrite(oldname, newname string) (vfs.File, error) {
	if err := fs.check(); err != nil {
		return nil, err
	}
	return fs.FS.ReuseForWrite(oldname, newname)
}

func (fs guardedFS) OpenDir(name string) (vfs.File, error) {
	if err := fs.check(); err != nil {
		return nil, err
	}
	d, err := fs.FS.OpenDir(name)
	if err != nil {
		return nil, err
	}
	return guardedDir{File: d, g: fs.g}, nil
}

type guardedDir struct {
	vfs.File
	g *Guard
}

func (d guardedDir) Sync() error {
	err := d.File.Sync()
	if err != nil {
		d.g.fatalf(fmt.Errorf("sync directory: %w", err))
	}
	return err
}
