package ult

import (
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/distash/distash/internal/farmem"
)

// A Server runs lookups submitted by other goroutines (a server's request
// handlers) on user-level threads of per-core schedulers, in real time:
// Do and DoAll hand each lookup to a core, where it becomes a thread that
// prefetches and yields at every far-memory access, and waits for device
// reads without holding the core; the caller blocks until its lookups are
// done. Unlike Run, nothing skips time: a stall spins (a stalled load
// holds its core), a core whose threads all wait for reads polls for a
// short while and then sleeps in short slices, and a core with no lookups
// at all blocks on its queue without using the CPU.

// ServeConfig configures a Server.
type ServeConfig struct {
	// Cores is the number of schedulers; 0 means runtime.GOMAXPROCS(0).
	Cores int
	// Tasks is the most threads (concurrent lookups) per core; 0 means
	// DefaultTasks.
	Tasks int
	// Mem is each core's far memory (Latency; Virtual and SkipStalls are
	// refused: a server never skips time).
	Mem farmem.Config
	// IO selects the read backend (IOAuto: io_uring where the kernel
	// allows it, else IOThreads).
	IO IOConfig
	// NoPrefetch makes far-memory accesses demand misses: a thread neither
	// prefetches nor yields before an access, which stalls for the whole
	// latency.
	NoPrefetch bool
}

// ServeStats are a Server's counters since it started, summed over its
// cores, and its current lookups.
type ServeStats struct {
	Cores    int
	Tasks    int // threads per core at most
	IOMode   IOMode
	Latency  time.Duration // of the far memory
	Prefetch bool
	// Lookups counts the lookups done.
	Lookups int64
	// Accesses counts far-memory lines accessed; Prefetches the
	// prefetches sent to far memory; StallNs the time the cores stalled on
	// far memory (accesses to lines not arrived, and full line-fill
	// buffers).
	Accesses, Prefetches, StallNs int64
	// DeviceReads counts the reads the threads waited for.
	DeviceReads int64
	// IdleNs is the time cores with lookups in progress had none runnable.
	IdleNs int64
	// BusyNs is the time the cores ran lookups, stalls excluded: the
	// engine's own CPU time (the model's C, summed over lookups).
	BusyNs int64
	// Runnable and Waiting are the lookups in progress now that can run
	// and that wait for a device read (or a writer); Queued those not yet
	// on a thread.
	Runnable, Waiting, Queued int64
}

// ErrServerClosed is returned by Do and DoAll after Close.
var ErrServerClosed = errors.New("ult: server closed")

// Server is a set of per-core schedulers serving lookups.
type Server struct {
	cfg   ServeConfig
	cores []*serveCore
	next  atomic.Uint64

	mu     sync.RWMutex // held shared while submitting, exclusively by Close
	closed bool
	wg     sync.WaitGroup
}

type job struct {
	fn func(c farmem.Ctx)
	b  *submission
}

// A submission is the lookups of one DoAll: the caller waits until left
// is 0, spinning for a while first (a goroutine parked on a channel costs
// a wake-up of tens of µs on a VM, more than a lookup) and then on done,
// which the core finishing the last lookup closes.
type submission struct {
	left atomic.Int64
	done chan struct{}
}

func (b *submission) finish() {
	if b.left.Add(-1) == 0 {
		close(b.done)
	}
}

// wait returns when every lookup of b has returned.
func (b *submission) wait() {
	if callerSpin > 0 && b.left.Load() > 0 {
		deadline := time.Now().Add(callerSpin)
		for b.left.Load() > 0 {
			if time.Now().After(deadline) {
				<-b.done
				return
			}
			runtime.Gosched()
		}
		return
	}
	<-b.done
}

// callerSpin is how long a caller polls for its lookups before parking,
// and coreSpin how long a core without lookups polls its queue before
// parking its thread. Measured with BenchmarkServe* in the flash engine
// (docs/flash.md).
var (
	callerSpin = 50 * time.Microsecond
	coreSpin   = 20 * time.Microsecond
)

type serveCore struct {
	srv  *Server
	s    *Scheduler
	jobs chan *job
	quit chan struct{}

	// Published by the core's goroutine after every round.
	lookups, accesses, prefetches, stallNs, ios, idle, busy atomic.Int64
	runnable, waiting                                       atomic.Int64
}

// NewServer starts a server's cores; Close stops them.
func NewServer(cfg ServeConfig) (*Server, error) {
	if cfg.Mem.Virtual || cfg.Mem.SkipStalls {
		return nil, errors.New("ult: a server runs in real time without skipping stalls")
	}
	if cfg.Cores <= 0 {
		cfg.Cores = runtime.GOMAXPROCS(0)
	}
	if cfg.Tasks <= 0 {
		cfg.Tasks = DefaultTasks
	}
	srv := &Server{cfg: cfg}
	for i := 0; i < cfg.Cores; i++ {
		s, err := New(Config{Tasks: cfg.Tasks, Mem: cfg.Mem, IO: cfg.IO, Seed: int64(i)})
		if err != nil {
			for _, c := range srv.cores {
				close(c.quit)
			}
			srv.wg.Wait()
			return nil, err
		}
		c := &serveCore{srv: srv, s: s, jobs: make(chan *job, 4*cfg.Tasks), quit: make(chan struct{})}
		srv.cores = append(srv.cores, c)
		srv.wg.Add(1)
		go c.loop()
	}
	return srv, nil
}

// IOMode returns the read backend the cores use.
func (srv *Server) IOMode() IOMode { return srv.cores[0].s.IOMode() }

// Do runs fn as one lookup on a thread of one of the cores and returns
// when it has returned. fn gets the thread as its farmem.Ctx; it must not
// block its goroutine (it may yield through the Ctx), since the core's
// other lookups wait meanwhile.
func (srv *Server) Do(fn func(c farmem.Ctx)) error {
	return srv.DoAll([]func(c farmem.Ctx){fn})
}

// DoAll runs each fn as a lookup of its own, spread over the cores, so
// that they overlap, and returns when all have returned.
func (srv *Server) DoAll(fns []func(c farmem.Ctx)) error {
	b := &submission{done: make(chan struct{})}
	b.left.Store(int64(len(fns)))
	srv.mu.RLock()
	if srv.closed {
		srv.mu.RUnlock()
		return ErrServerClosed
	}
	for _, fn := range fns {
		c := srv.cores[srv.next.Add(1)%uint64(len(srv.cores))]
		c.jobs <- &job{fn: fn, b: b}
	}
	srv.mu.RUnlock()
	b.wait()
	return nil
}

// Close finishes the lookups submitted and stops the cores.
func (srv *Server) Close() error {
	srv.mu.Lock()
	if srv.closed {
		srv.mu.Unlock()
		return nil
	}
	srv.closed = true
	for _, c := range srv.cores {
		close(c.quit)
	}
	srv.mu.Unlock()
	srv.wg.Wait()
	var err error
	for _, c := range srv.cores {
		err = errors.Join(err, c.s.Close())
	}
	return err
}

// Stats returns the server's counters.
func (srv *Server) Stats() ServeStats {
	st := ServeStats{Cores: len(srv.cores), Tasks: srv.cfg.Tasks, IOMode: srv.IOMode(),
		Latency: srv.cfg.Mem.Latency, Prefetch: !srv.cfg.NoPrefetch}
	for _, c := range srv.cores {
		st.Lookups += c.lookups.Load()
		st.Accesses += c.accesses.Load()
		st.Prefetches += c.prefetches.Load()
		st.StallNs += c.stallNs.Load()
		st.DeviceReads += c.ios.Load()
		st.IdleNs += c.idle.Load()
		st.BusyNs += c.busy.Load()
		st.Runnable += c.runnable.Load()
		st.Waiting += c.waiting.Load()
		st.Queued += int64(len(c.jobs))
	}
	return st
}

// noPrefetchTask is a thread whose prefetches do nothing (and do not
// yield), so that its accesses stall for the whole latency.
type noPrefetchTask struct{ *Task }

func (noPrefetchTask) Prefetch(unsafe.Pointer, uintptr) {}

// body is the code of a serving thread: it runs the jobs the core hands
// it, one at a time, and returns when resumed without one.
func (c *serveCore) body(t *Task) {
	var ctx farmem.Ctx = t
	if c.srv.cfg.NoPrefetch {
		ctx = noPrefetchTask{t}
	}
	for t.job != nil {
		j := t.job
		j.fn(ctx)
		t.job = nil
		t.s.ops++
		j.b.finish()
		t.switchOut(KindPost)
	}
}

// runnable reports whether t can be resumed at time now, clearing its
// wait if it is over.
func (s *Scheduler) runnable(t *Task, now int64) bool {
	if t.waiting {
		if !t.req.done || t.req.readyAt > now {
			return false
		}
		t.waiting = false
		s.ioWait += now - t.req.submitAt
	}
	if t.await != nil {
		if !t.await.Load() {
			return false
		}
		t.await = nil
	}
	return true
}

func (c *serveCore) loop() {
	defer c.srv.wg.Done()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	s := c.s
	clk := s.clock
	var active, idle []*Task
	spawned := 0
	quitting := false
	prev := clk.Now()
	admit := func(j *job) {
		var t *Task
		if n := len(idle); n > 0 {
			t, idle = idle[n-1], idle[:n-1]
		} else {
			t = s.spawn(spawned, c.body)
			spawned++
		}
		t.job = j
		active = append(active, t)
	}
	for {
		// Take new lookups while threads are free; block when there is
		// nothing at all to do.
		for len(active) < s.cfg.Tasks {
			if len(active) == 0 {
				c.publish(0, 0)
				if quitting {
					select {
					case j := <-c.jobs:
						admit(j)
						continue
					default:
					}
					for _, t := range idle { // resumed without a job, the body returns
						t.next()
					}
					return
				}
				if j := c.poll(); j != nil {
					admit(j)
				} else {
					select {
					case j := <-c.jobs:
						admit(j)
					case <-c.quit:
						quitting = true
						continue
					}
				}
				prev = clk.Now()
				continue
			}
			select {
			case j := <-c.jobs:
				admit(j)
				continue
			default:
			}
			break
		}
		ran := false
		waiting := 0
		for i := 0; i < len(active); {
			t := active[i]
			if !s.runnable(t, prev) {
				waiting++
				i++
				continue
			}
			stalls := s.core.Stalls()
			t.next()
			now := clk.Now()
			k := &s.kinds[t.kind]
			k.Count++
			k.Ns += now - prev
			k.StallNs += s.core.Stalls() - stalls
			prev = now
			ran = true
			if t.job == nil {
				active[i] = active[len(active)-1]
				active = active[:len(active)-1]
				idle = append(idle, t)
				continue
			}
			i++
		}
		s.io.poll()
		c.publish(len(active)-waiting, waiting)
		if !ran && len(active) > 0 {
			prev = c.idleWait(active, prev)
		}
	}
}

// poll takes a lookup from the queue if one arrives within coreSpin:
// under a steady stream of requests the core's thread then never parks
// (waking a parked locked thread costs tens of µs here).
func (c *serveCore) poll() *job {
	if coreSpin <= 0 {
		return nil
	}
	deadline := time.Now().Add(coreSpin)
	for {
		select {
		case j := <-c.jobs:
			return j
		default:
		}
		if time.Now().After(deadline) {
			return nil
		}
	}
}

// publish makes the core's counters visible to Stats.
func (c *serveCore) publish(runnable, waiting int) {
	s := c.s
	st := s.core.Stats()
	c.lookups.Store(s.ops)
	c.accesses.Store(st.Accesses)
	c.prefetches.Store(st.Prefetches)
	c.stallNs.Store(st.Stalls())
	c.ios.Store(s.ios)
	c.idle.Store(s.idle)
	var busy int64
	for _, k := range s.kinds {
		busy += k.Ns - k.StallNs
	}
	c.busy.Store(busy)
	c.runnable.Store(int64(runnable))
	c.waiting.Store(int64(waiting))
}

// spinWait is how long a core with no runnable thread polls before it
// sleeps in slices: reads from the page cache or a fast device complete
// within it, and a sleep costs far more than it (~60-90 µs of wake-up).
const spinWait = 50 * time.Microsecond

// idleWait returns when a thread of active can run or a new lookup can be
// taken, in real time.
func (c *serveCore) idleWait(active []*Task, from int64) int64 {
	s := c.s
	clk := s.clock
	canAdmit := len(active) < s.cfg.Tasks
	for {
		s.io.poll()
		now := clk.Now()
		for _, t := range active {
			if (!t.waiting || (t.req.done && t.req.readyAt <= now)) && (t.await == nil || t.await.Load()) {
				s.idle += now - from
				return now
			}
		}
		if canAdmit && len(c.jobs) > 0 {
			s.idle += now - from
			return now
		}
		if now-from > int64(spinWait) {
			shortSleep(spinWait)
		}
	}
}

// Block runs fn on another goroutine (a blocking call such as a read
// through a file system that is not the OS's) and waits for it without
// holding the core; it counts as a device read.
func (t *Task) Block(fn func()) {
	var done atomic.Bool
	go func() {
		fn()
		done.Store(true)
	}()
	t.s.ios++
	t.Await(&done)
}
