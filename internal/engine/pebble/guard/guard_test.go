package guard

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/vfs"

	"github.com/distash/distash/internal/fsys"
	"github.com/distash/distash/internal/fsys/faultfs"
)

// store stands for a guarded store: its methods are the API frames the
// Guard looks for.
type store struct{ g *Guard }

const storePrefix = "github.com/distash/distash/internal/engine/pebble/guard.(*store)."

// call runs f, which stands for Pebble's code, as an API method does.
func (s *store) call(f func()) (err error) {
	if err := s.g.Err(); err != nil {
		return err
	}
	defer s.g.Recover(&err)
	f()
	return nil
}

// inside runs f as an API method that was inside Pebble before the store
// failed.
func (s *store) inside(f func()) (err error) {
	defer s.g.Recover(&err)
	f()
	return nil
}

// failures records onFail's calls.
type failures struct {
	mu   sync.Mutex
	errs []error
}

func (f *failures) onFail(err error) {
	f.mu.Lock()
	f.errs = append(f.errs, err)
	f.mu.Unlock()
}

func (f *failures) get() []error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]error(nil), f.errs...)
}

func newStore() (*store, *failures) {
	f := &failures{}
	return &store{g: New("test store /data/x", storePrefix, f.onFail)}, f
}

// replaceExit replaces Exit for the test and returns its messages.
func replaceExit(t *testing.T) func() []string {
	var (
		mu   sync.Mutex
		msgs []string
	)
	exit := Exit
	Exit = func(msg string) {
		mu.Lock()
		msgs = append(msgs, msg)
		mu.Unlock()
	}
	t.Cleanup(func() { Exit = exit })
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), msgs...)
	}
}

// TestRecoverInAPI: a fatal error raised inside an API method (Pebble's
// Fatalf, or any panic) unwinds to its Recover and becomes the method's
// error, keeping its cause; the store is failed for good, onFail is
// called once, and a second call fails with the first error.
func TestRecoverInAPI(t *testing.T) {
	exits := replaceExit(t)
	s, fails := newStore()
	enospc := &os.PathError{Op: "write", Path: "/data/x/000002.log", Err: syscall.ENOSPC}
	after := false
	err := s.call(func() {
		s.g.Logger().Fatalf("pebble: fatal commit error: %v", enospc)
		after = true
	})
	if err == nil || after {
		t.Fatalf("Fatalf in an API method: err %v, code after it ran: %v", err, after)
	}
	if !fsys.IsNoSpace(err) || !strings.Contains(err.Error(), "fatal commit error") {
		t.Fatalf("err %v: want the message and the cause (ENOSPC)", err)
	}
	if !errors.Is(s.g.Err(), syscall.ENOSPC) {
		t.Fatalf("Err() = %v", s.g.Err())
	}
	// A second call fails with the first error, without running.
	ran := false
	if err2 := s.call(func() { ran = true }); err2 != err || ran {
		t.Fatalf("second call: %v (ran %v); want the first error %v", err2, ran, err)
	}
	// A second fatal error, of a call that was inside Pebble already,
	// returns the first error too.
	if err3 := s.inside(func() { s.g.Logger().Fatalf("another: %v", errors.New("EIO")) }); err3 != err {
		t.Fatalf("second fatal error: %v; want the first, %v", err3, err)
	}
	if f := fails.get(); len(f) != 1 || f[0] != err {
		t.Fatalf("onFail calls %v; want one, with %v", f, err)
	}
	if len(exits()) != 0 {
		t.Fatalf("Exit called for a fatal error inside the API: %q", exits())
	}
}

// TestRecoverPanics: a plain panic inside an API method becomes an error
// naming the store and fails it for good.
func TestRecoverPanics(t *testing.T) {
	replaceExit(t)
	for _, v := range []any{errors.New("pebble: invariant"), "index out of range"} {
		s, fails := newStore()
		err := s.call(func() { panic(v) })
		if err == nil || !strings.Contains(err.Error(), "test store /data/x") || !strings.Contains(err.Error(), fmt.Sprint(v)) {
			t.Fatalf("panic(%v): err %v; want one naming the store and the panic", v, err)
		}
		if e, ok := v.(error); ok && !errors.Is(err, e) {
			t.Fatalf("panic(%v): err %v does not wrap it", v, err)
		}
		if s.g.Err() != err || len(fails.get()) != 1 {
			t.Fatalf("panic(%v): Err() = %v, onFail calls %v", v, s.g.Err(), fails.get())
		}
	}
	// No panic: Recover leaves the error alone.
	s, _ := newStore()
	if err := s.call(func() {}); err != nil || s.g.Err() != nil {
		t.Fatalf("no panic: %v, %v", err, s.g.Err())
	}
}

// TestBackgroundExits: a fatal error in one of Pebble's background
// goroutines (no API frame on its stack) ends the process through Exit,
// with one line naming the store and the cause, and the goroutine does
// not continue into Pebble's code; a second one, once the store failed,
// only ends its goroutine.
func TestBackgroundExits(t *testing.T) {
	exits := replaceExit(t)
	s, fails := newStore()
	background := func(msg string) (continued bool) {
		done := make(chan bool)
		go func() {
			defer func() { done <- continued }()
			s.g.Logger().Fatalf("%s: %v", msg, &os.PathError{Op: "sync", Path: "/data/x/000007.sst", Err: syscall.EIO})
			continued = true
		}()
		return <-done
	}
	if background("pebble: flush failed") {
		t.Fatal("the background goroutine continued after its fatal error")
	}
	msgs := exits()
	if len(msgs) != 1 {
		t.Fatalf("Exit called %d times: %q", len(msgs), msgs)
	}
	if m := msgs[0]; strings.Contains(m, "\n") || !strings.Contains(m, "test store /data/x") || !strings.Contains(m, "000007.sst") || !strings.Contains(m, "input/output error") {
		t.Fatalf("exit message %q: want one line naming the store and the cause", m)
	}
	if f := fails.get(); len(f) != 1 || !errors.Is(f[0], syscall.EIO) {
		t.Fatalf("onFail calls %v", f)
	}
	if background("pebble: compaction failed") {
		t.Fatal("a second background goroutine continued")
	}
	if len(exits()) != 1 || len(fails.get()) != 1 {
		t.Fatalf("a second fatal error: Exit calls %q, onFail calls %v", exits(), fails.get())
	}
	// The owner's calls fail with the first error.
	if err := s.call(func() {}); !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), "flush failed") {
		t.Fatalf("call after a background failure: %v", err)
	}
}

// TestAbandon: an abandoned store's database is closed in the
// background, a panic on the way is contained, a fatal error of its
// goroutines only ends them (no Exit), and its file-system calls that
// could touch a store reopened in the same directory fail.
func TestAbandon(t *testing.T) {
	exits := replaceExit(t)
	s, _ := newStore()
	mem := vfs.NewMem()
	if err := mem.MkdirAll("/data/x", 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := mem.Create("/data/x/000001.log")
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	fs := s.g.FS(mem)
	// Abandoned healthy (its process is taken for dead, as in a test's
	// crash) or after a failure: the same.
	closed := make(chan struct{})
	s.g.Abandon(func() error {
		defer close(closed)
		panic("pebble: closing a DB with a held commit lock")
	})
	<-closed
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.g.Logger().Fatalf("pebble: background error: %v", errors.New("EIO"))
	}()
	<-done
	if len(exits()) != 0 {
		t.Fatalf("Exit called for an abandoned store: %q", exits())
	}
	for name, op := range map[string]func() error{
		"Create":        func() error { _, err := fs.Create("/data/x/000002.log"); return err },
		"Remove":        func() error { return fs.Remove("/data/x/000001.log") },
		"RemoveAll":     func() error { return fs.RemoveAll("/data/x") },
		"Rename":        func() error { return fs.Rename("/data/x/000001.log", "/data/x/000003.log") },
		"Link":          func() error { return fs.Link("/data/x/000001.log", "/data/x/000004.log") },
		"OpenReadWrite": func() error { _, err := fs.OpenReadWrite("/data/x/000001.log"); return err },
		"ReuseForWrite": func() error { _, err := fs.ReuseForWrite("/data/x/000001.log", "/data/x/000005.log"); return err },
		"OpenDir":       func() error { _, err := fs.OpenDir("/data/x"); return err },
	} {
		if err := op(); !errors.Is(err, errAbandoned) {
			t.Errorf("%s on an abandoned store: %v", name, err)
		}
	}
	if names, _ := mem.List("/data/x"); len(names) != 1 || names[0] != "000001.log" {
		t.Fatalf("an abandoned store changed its directory: %v", names)
	}
	// Reads stay possible.
	if f, err := fs.Open("/data/x/000001.log"); err != nil {
		t.Fatalf("Open on an abandoned store: %v", err)
	} else {
		f.Close()
	}
}

// TestFailedDirSync: Pebble panics when a directory sync fails; the
// guarded FS raises it as a fatal error first, which an API method
// returns.
func TestFailedDirSync(t *testing.T) {
	exits := replaceExit(t)
	s, _ := newStore()
	ffs := faultfs.NewMem()
	if err := ffs.MkdirAll("/data/x", 0o755); err != nil {
		t.Fatal(err)
	}
	fs := s.g.FS(ffs)
	d, err := fs.OpenDir("/data/x")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := s.call(func() {
		if err := d.Sync(); err != nil {
			t.Fatalf("a healthy directory sync: %v", err)
		}
	}); err != nil {
		t.Fatal(err)
	}
	ffs.Fail(faultfs.Rule{Ops: faultfs.OpSync})
	err = s.call(func() {
		d.Sync()
		t.Error("Sync returned after a failed directory sync")
	})
	if !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), "sync directory") {
		t.Fatalf("failed directory sync: %v", err)
	}
	if len(exits()) != 0 {
		t.Fatalf("Exit called: %q", exits())
	}
}

// TestDamage: Pebble's reports of damage at rest become a
// *fsys.DamageError naming the file; other errors are not damage.
func TestDamage(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string // the damaged path; "" for not damage
	}{
		{fmt.Errorf("pebble/table: invalid table 000012 (checksum mismatch at 4785/262)"), "/d/000012.sst"},
		{fmt.Errorf("L0: 000005: file 000005 (type 2) unknown to the objstorage provider: file does not exist"), "/d/000005.sst"},
		{fmt.Errorf("could not open manifest file \"MANIFEST-000001\": %w", &os.PathError{Op: "open", Path: "/d/MANIFEST-000001", Err: syscall.ENOENT}), "/d/MANIFEST-000001"},
		{fmt.Errorf("pebble: corrupt log record"), "/d"},
		{&os.PathError{Op: "write", Path: "/d/000002.log", Err: syscall.EIO}, ""},
		{&os.PathError{Op: "write", Path: "/d/000002.log", Err: syscall.ENOSPC}, ""},
	} {
		err := Damage("/d", "store /d", c.err)
		var de *fsys.DamageError
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%v: %v; not damage", c.err, err)
		case c.want != "" && (!errors.As(err, &de) || de.Path != c.want || !strings.Contains(err.Error(), "store /d")):
			t.Errorf("%v: %v; want damage naming %s", c.err, err, c.want)
		}
	}
}

// TestFailedClosesOnTheFirstFailure: Failed is open until the store
// fails, then closed (a second failure does not close it again).
func TestFailedClosesOnTheFirstFailure(t *testing.T) {
	g := New("store", "nothing.", nil)
	select {
	case <-g.Failed():
		t.Fatal("Failed is closed before any failure")
	default:
	}
	g.Fail(errors.New("first"))
	g.Fail(errors.New("second"))
	select {
	case <-g.Failed():
	default:
		t.Fatal("Failed is open after a failure")
	}
	if g.Err().Error() != "first" {
		t.Fatalf("Err %v, want the first failure", g.Err())
	}
}
