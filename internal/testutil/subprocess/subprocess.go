// Package subprocess runs a child process for a test, reads its standard
// output line by line and kills it: the tests that SIGKILL a server or a
// writer and check what survived share it.
//
// A test re-runs its own binary as the child, selected by an environment
// variable:
//
//	func TestChild(t *testing.T) {
//		if subprocess.Role() != "TestChild" {
//			t.Skip("run by TestParent")
//		}
//		fmt.Println("ready")
//		... // work, printing what was done, until killed
//	}
//
//	func TestParent(t *testing.T) {
//		p := subprocess.Start(t, subprocess.Command("TestChild", "DIR="+dir))
//		p.WaitFor("ready", time.Minute)
//		rest := p.Kill() // SIGKILL; the lines written before it died
//	}
package subprocess

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// RoleEnv is the environment variable that Command sets to the child's
// test name.
const RoleEnv = "DISTASH_SUBPROCESS_ROLE"

// Role returns the name of the test this process was started to run as a
// child by Command, "" if it was not.
func Role() string { return os.Getenv(RoleEnv) }

// Command returns a command that runs this test binary's test named test,
// alone and once, with Role() returning test and env ("KEY=value") added to
// the environment. Add flags to its Args (e.g. -test.timeout) as needed.
func Command(test string, env ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1")
	cmd.Env = append(append(os.Environ(), RoleEnv+"="+test), env...)
	return cmd
}

// ErrTimeout is what Next returns when no line came in time.
var ErrTimeout = errors.New("subprocess: no line in time")

// Process is a started child. Its methods are for the test's goroutine.
type Process struct {
	Cmd *exec.Cmd
	t   testing.TB

	mu    sync.Mutex // guards lines, seen and eof
	lines []string   // written and not read yet
	seen  []string   // the last lines read, for failure messages
	eof   bool
	more  chan struct{} // a token when lines or eof change
	done  chan struct{} // closed at the end of the output

	exited  bool
	exitErr error
}

// Start starts cmd with its standard output read line by line (its
// standard error goes to os.Stderr unless cmd.Stderr is set). A child still
// running when the test ends is killed.
func Start(t testing.TB, cmd *exec.Cmd) *Process {
	t.Helper()
	if cmd.Stderr == nil {
		cmd.Stderr = os.Stderr
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &Process{Cmd: cmd, t: t, more: make(chan struct{}, 1), done: make(chan struct{})}
	// The output is read as it comes, whether the test reads it or not:
	// a child blocked on a full pipe would stop working before the kill.
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			p.mu.Unlock()
			p.notify()
		}
		p.mu.Lock()
		p.eof = true
		p.mu.Unlock()
		p.notify()
		close(p.done)
	}()
	t.Cleanup(func() {
		if !p.exited {
			_ = cmd.Process.Kill()
			p.wait()
		}
	})
	return p
}

func (p *Process) notify() {
	select {
	case p.more <- struct{}{}:
	default:
	}
}

// Next returns the next line the child wrote, waiting for it at most
// timeout: io.EOF at the end of its output (it exited), ErrTimeout if
// none came in time.
func (p *Process) Next(timeout time.Duration) (string, error) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		p.mu.Lock()
		if len(p.lines) > 0 {
			l := p.lines[0]
			p.lines = p.lines[1:]
			p.seen = append(p.seen, l)
			if len(p.seen) > 20 {
				p.seen = p.seen[1:]
			}
			p.mu.Unlock()
			return l, nil
		}
		eof := p.eof
		p.mu.Unlock()
		if eof {
			return "", io.EOF
		}
		select {
		case <-p.more:
		case <-timer.C:
			return "", ErrTimeout
		}
	}
}

// WaitFor reads lines until one starts with prefix (the readiness line)
// and returns the rest of it. The test fails, and the child is killed, if
// none comes within timeout or the child exits first.
func (p *Process) WaitFor(prefix string, timeout time.Duration) string {
	p.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		l, err := p.Next(time.Until(deadline))
		switch {
		case err == nil:
			if rest, ok := strings.CutPrefix(l, prefix); ok {
				return rest
			}
			continue
		case errors.Is(err, ErrTimeout):
			_ = p.Cmd.Process.Kill()
			p.wait()
			p.t.Fatalf("%s wrote no line %q in %v; its last lines:\n%s", p.name(), prefix, timeout, p.last())
		default:
			p.wait()
			p.t.Fatalf("%s exited (%v) before writing a line %q; its last lines:\n%s", p.name(), p.exitErr, prefix, p.last())
		}
		return ""
	}
}

// Kill sends SIGKILL, waits for the child to die and returns the lines it
// wrote that were not read yet. The test fails if the signal cannot be
// sent (the child was reaped already).
func (p *Process) Kill() []string {
	p.t.Helper()
	if err := p.Cmd.Process.Kill(); err != nil {
		rest, werr := p.Wait()
		p.t.Fatalf("kill %s: %v (it exited: %v); its last lines:\n%s", p.name(), err, werr, strings.Join(rest, "\n"))
	}
	rest, _ := p.Wait()
	return rest
}

// Stop sends sig (SIGTERM, say) and waits for the child to exit, as Wait.
func (p *Process) Stop(sig os.Signal) ([]string, error) {
	if err := p.Cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return nil, err
	}
	return p.Wait()
}

// Wait waits for the child to exit and returns the lines it wrote that
// were not read yet and its exit error (exec.Cmd.Wait's).
func (p *Process) Wait() ([]string, error) {
	p.wait()
	p.mu.Lock()
	rest := p.lines
	p.lines = nil
	p.mu.Unlock()
	return rest, p.exitErr
}

// wait reaps the child once its output has ended (exec.Cmd.Wait must not
// run before the reads of its pipe are done).
func (p *Process) wait() {
	if p.exited {
		return
	}
	<-p.done
	p.exitErr = p.Cmd.Wait()
	p.exited = true
}

func (p *Process) name() string { return fmt.Sprintf("child %q", strings.Join(p.Cmd.Args, " ")) }

// last returns the last lines read and those not read yet, for a failure
// message.
func (p *Process) last() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(append(append([]string(nil), p.seen...), p.lines...), "\n")
}
