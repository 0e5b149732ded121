package clustertest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ReadyPrefix starts the line `distash server` prints once it serves.
const ReadyPrefix = "listening on "

// Proc is one `distash server` process of a Procs cluster. It may be
// started again after it exited or was killed. Its methods are for one
// goroutine at a time, but Running and CPU may be called from any.
type Proc struct {
	Spec
	Addr string   // --listen
	Dir  string   // --dir
	Args []string // the command line after the binary; add to it before Start
	// HTTPAddr is a free port for the node's --http (ProcsOptions.HTTP).
	HTTPAddr string
	// LogPath, if set, receives the process's standard output and error
	// (appended); else they go to Output (nil: discarded).
	LogPath string
	Output  io.Writer
	// Env is added to this process's environment (e.g. GOMAXPROCS=1).
	Env []string

	mu    sync.Mutex
	cmd   *exec.Cmd
	ready chan struct{} // closed at the ReadyPrefix line
	done  chan struct{} // closed once the process was reaped
	last  []string      // its last lines, for error messages
}

// keepLines is how many of its last lines a Proc keeps for errors.
const keepLines = 30

// Start starts the process from bin. It does not wait for it to serve
// (WaitReady). The process is killed if this process dies (Linux).
func (p *Proc) Start(bin string) error {
	var out io.Writer = io.Discard
	var logf *os.File
	if p.LogPath != "" {
		f, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		out, logf = f, f
	} else if p.Output != nil {
		out = p.Output
	}
	closeLog := func() {
		if logf != nil {
			logf.Close()
		}
	}
	lw := &lineWriter{p: p, w: out}
	cmd := exec.Command(bin, p.Args...)
	cmd.Stderr = lw
	if len(p.Env) > 0 {
		cmd.Env = append(os.Environ(), p.Env...)
	}
	cmd.SysProcAttr = procAttr()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		closeLog()
		return err
	}
	// Cleared before the start: the copying of its standard error begins
	// in cmd.Start, and a process that fails at once has written its
	// reason before Start returns (clearing after it lost that, once).
	p.mu.Lock()
	p.last = nil
	p.mu.Unlock()
	if err := cmd.Start(); err != nil {
		closeLog()
		return err
	}
	ready, done := make(chan struct{}), make(chan struct{})
	p.mu.Lock()
	p.cmd, p.ready, p.done = cmd, ready, done
	p.mu.Unlock()
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		seen := false
		for sc.Scan() {
			lw.line(sc.Text())
			if !seen && strings.HasPrefix(sc.Text(), ReadyPrefix) {
				seen = true
				close(ready)
			}
		}
		_ = cmd.Wait() // after the reads of the pipe, as exec.Cmd wants
		lw.flush()
		closeLog()
		close(done)
	}()
	return nil
}

// WaitReady waits for the process's ReadyPrefix line.
func (p *Proc) WaitReady(ctx context.Context, timeout time.Duration) error {
	p.mu.Lock()
	cmd, ready, done := p.cmd, p.ready, p.done
	p.mu.Unlock()
	if cmd == nil {
		return fmt.Errorf("node %s: not started", p.Name)
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-ready:
		return nil
	case <-done:
		return fmt.Errorf("node %s exited before serving (%v)%s", p.Name, cmd.ProcessState, p.where())
	case <-t.C:
		return fmt.Errorf("node %s did not serve within %v%s", p.Name, timeout, p.where())
	case <-ctx.Done():
		return ctx.Err()
	}
}

// where says where to read more of what the process wrote.
func (p *Proc) where() string {
	if p.LogPath != "" {
		return "; see " + p.LogPath
	}
	return "; its last lines:\n" + p.LastLines()
}

// LastLines is what the process wrote last (up to 30 lines).
func (p *Proc) LastLines() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.last, "\n")
}

// Running reports whether the process was started and has not exited.
func (p *Proc) Running() bool {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// Pid is the running process's id (0 if not started).
func (p *Proc) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// ExitState is how the last process exited (nil while it runs).
func (p *Proc) ExitState() *os.ProcessState {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return nil
	}
	return p.cmd.ProcessState
}

// signal sends sig to the running process.
func (p *Proc) signal(sig os.Signal) error {
	if !p.Running() {
		return fmt.Errorf("node %s is not running", p.Name)
	}
	p.mu.Lock()
	cmd := p.cmd
	p.mu.Unlock()
	return cmd.Process.Signal(sig)
}

// Kill sends SIGKILL (kill -9) and waits until the process is reaped.
func (p *Proc) Kill() {
	if p.Running() {
		_ = p.signal(syscall.SIGKILL)
		<-p.done
	}
}

// Pause stops the process with SIGSTOP: it looks hung from outside.
func (p *Proc) Pause() error { return p.signal(syscall.SIGSTOP) }

// Resume continues a paused process (SIGCONT).
func (p *Proc) Resume() error { return p.signal(syscall.SIGCONT) }

// Stop sends sig (SIGTERM, os.Interrupt) and waits up to timeout for the
// process to exit, then kills it. The error says if it did not exit by
// itself, or exited with an error, with its last lines.
func (p *Proc) Stop(sig os.Signal, timeout time.Duration) error {
	if !p.Running() {
		return nil
	}
	if err := p.signal(sig); err != nil {
		return err
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		p.Kill()
		return fmt.Errorf("node %s did not exit within %v of %v%s", p.Name, timeout, sig, p.where())
	}
	if st := p.ExitState(); st != nil && !st.Success() {
		return fmt.Errorf("node %s exited with %v%s", p.Name, st, p.where())
	}
	return nil
}

// Wait waits until the process exits and returns its exit error.
func (p *Proc) Wait() error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return errors.New("not started")
	}
	<-done
	if !cmd.ProcessState.Success() {
		return &exec.ExitError{ProcessState: cmd.ProcessState}
	}
	return nil
}

// CPU is the user + system CPU time the running process has used
// (Linux: /proc/PID/stat).
func (p *Proc) CPU() (time.Duration, error) {
	if !p.Running() {
		return 0, fmt.Errorf("node %s is not running (%v)", p.Name, p.ExitState())
	}
	s, err := ProcessCPUSeconds(p.Pid())
	return time.Duration(s * float64(time.Second)), err
}

// lineWriter copies a process's output to w line by line and keeps the
// last lines in its Proc.
type lineWriter struct {
	p       *Proc
	mu      sync.Mutex
	w       io.Writer
	partial string
}

func (l *lineWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	s := l.partial + string(b)
	lines := strings.Split(s, "\n")
	l.partial = lines[len(lines)-1]
	l.mu.Unlock()
	for _, line := range lines[:len(lines)-1] {
		l.line(line)
	}
	return len(b), nil
}

func (l *lineWriter) flush() {
	l.mu.Lock()
	rest := l.partial
	l.partial = ""
	l.mu.Unlock()
	if rest != "" {
		l.line(rest)
	}
}

func (l *lineWriter) line(s string) {
	l.mu.Lock()
	fmt.Fprintln(l.w, s)
	l.mu.Unlock()
	l.p.mu.Lock()
	l.p.last = append(l.p.last, s)
	if len(l.p.last) > keepLines {
		l.p.last = l.p.last[len(l.p.last)-keepLines:]
	}
	l.p.mu.Unlock()
}

// PrefixWriter writes each line to w with prefix before it (a node's
// name, for the lines of several processes on one terminal).
func PrefixWriter(prefix string, w io.Writer) io.Writer { return &prefixWriter{prefix: prefix, w: w} }

type prefixWriter struct {
	prefix string
	w      io.Writer
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	for _, line := range strings.SplitAfter(string(b), "\n") {
		if line != "" {
			fmt.Fprint(p.w, p.prefix+line)
		}
	}
	return len(b), nil
}
