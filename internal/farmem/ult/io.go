package ult

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// IOMode selects how a scheduler performs reads.
type IOMode int

const (
	// IOAuto uses io_uring where the kernel allows it, else IOThreads.
	IOAuto IOMode = iota
	// IOUring submits reads to an io_uring and reaps completions from its
	// completion queue without a system call (Linux only).
	IOUring
	// IOThreads hands reads to helper goroutines doing blocking preads.
	IOThreads
	// IOInline reads in the task itself: the core waits for the read.
	IOInline
)

func (m IOMode) String() string {
	switch m {
	case IOAuto:
		return "auto"
	case IOUring:
		return "io_uring"
	case IOThreads:
		return "threads"
	case IOInline:
		return "inline"
	}
	return fmt.Sprintf("IOMode(%d)", int(m))
}

// IOConfig configures a scheduler's reads.
type IOConfig struct {
	Mode IOMode
	// Latency, when positive, emulates a device with this read latency: a
	// read completes no earlier than Latency after its submission, however
	// fast the real read was (it is still performed). In virtual time it is
	// the whole latency of a read.
	Latency time.Duration
	// Jitter spreads the emulated latency uniformly over
	// Latency*(1±Jitter); it desynchronises threads as real devices do.
	Jitter float64
	// Depth bounds the reads in flight; 0 means 4 per task, at least 64.
	Depth int
	// NoRead skips the real read (virtual time only; the buffer is left as is).
	NoRead bool
}

// ioReq is one read of a task.
type ioReq struct {
	f   *os.File
	buf []byte
	off int64

	n   int
	err error

	done     bool        // completion seen by the scheduler
	flag     atomic.Bool // completion posted by a helper goroutine (IOThreads)
	submitAt int64
	readyAt  int64 // earliest completion under an emulated latency
}

// backend performs reads asynchronously. submit and poll are called from
// the scheduler's goroutine only; poll sets done on completed requests.
type backend interface {
	submit(r *ioReq) error
	poll()
	close() error
	mode() IOMode
}

var errQueueFull = errors.New("ult: IO queue full")

func newBackend(cfg IOConfig, depth int) (backend, error) {
	switch cfg.Mode {
	case IOInline:
		return inlineBackend{}, nil
	case IOThreads:
		return newThreadBackend(depth), nil
	case IOUring:
		u, err := newUring(depth)
		if err != nil {
			return nil, err
		}
		return u, nil
	}
	if u, err := newUring(depth); err == nil {
		return u, nil
	}
	return newThreadBackend(depth), nil
}

// inlineBackend reads synchronously at submission.
type inlineBackend struct{}

func (inlineBackend) submit(r *ioReq) error {
	r.n, r.err = r.f.ReadAt(r.buf, r.off)
	r.done = true
	return nil
}
func (inlineBackend) poll()        {}
func (inlineBackend) close() error { return nil }
func (inlineBackend) mode() IOMode { return IOInline }

// threadBackend runs blocking reads on helper goroutines.
type threadBackend struct {
	reqs     chan *ioReq
	inflight []*ioReq
	wg       sync.WaitGroup
}

func newThreadBackend(depth int) *threadBackend {
	b := &threadBackend{reqs: make(chan *ioReq, depth)}
	workers := depth
	if workers > 64 {
		workers = 64
	}
	for i := 0; i < workers; i++ {
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			for r := range b.reqs {
				r.n, r.err = r.f.ReadAt(r.buf, r.off)
				r.flag.Store(true)
			}
		}()
	}
	return b
}

func (b *threadBackend) submit(r *ioReq) error {
	r.flag.Store(false)
	select {
	case b.reqs <- r:
	default:
		return errQueueFull
	}
	b.inflight = append(b.inflight, r)
	return nil
}

func (b *threadBackend) poll() {
	j := 0
	for _, r := range b.inflight {
		if r.flag.Load() {
			r.done = true
			continue
		}
		b.inflight[j] = r
		j++
	}
	clear(b.inflight[j:])
	b.inflight = b.inflight[:j]
}

func (b *threadBackend) close() error {
	close(b.reqs)
	b.wg.Wait()
	return nil
}

func (b *threadBackend) mode() IOMode { return IOThreads }

// virtualBackend reads at submission (unless NoRead); completion times are
// set by the scheduler from the emulated latency.
type virtualBackend struct{ noRead bool }

func (v virtualBackend) submit(r *ioReq) error {
	if v.noRead {
		r.n = len(r.buf)
	} else {
		r.n, r.err = r.f.ReadAt(r.buf, r.off)
	}
	r.done = true
	return nil
}
func (virtualBackend) poll()        {}
func (virtualBackend) close() error { return nil }
func (virtualBackend) mode() IOMode { return IOInline }
