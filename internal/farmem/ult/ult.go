// Package ult runs many user-level threads on one emulated core, switching
// cooperatively at every far-memory prefetch and around every SSD read, as
// the paper's KV stores do with Argobots or Boost fibers.
//
// Go has no native coroutines; a thread here is an iter.Pull coroutine
// (runtime coroswitch, Go 1.23+): resuming one and having it yield back is
// two direct goroutine hand-offs without the run queue, about 0.1 µs on
// the machine this was written on (MeasureSwitch reports it). A Scheduler
// owns one core (a goroutine locked to an OS thread in real time), its
// far memory (farmem.Core) and its reads, and resumes runnable threads in
// round-robin order. A thread waiting for a read is not resumed (and costs
// no switch) until its read has completed; the scheduler reaps completions
// once per round.
//
// Time is accounted per suboperation, the stretch of a thread between two
// switches, by what ended it (Kind): a prefetch (memory suboperation), a
// read submission (pre-IO), the end of an operation (post-IO or final
// compute) or another yield. Each suboperation's duration includes the
// switch into it, so the means are T_mem+T_sw, T_io_pre+T_sw and
// T_io_post+T_sw of the paper's model (package model), with far-memory
// stalls counted separately.
//
// With virtual time (Config.Mem.Virtual) nothing waits: compute, switches
// (Config.SwitchCost), stalls and read latencies advance a counter, and a
// run is a deterministic discrete-event simulation of the same code.
package ult

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"math/rand"
	"os"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/distash/distash/internal/farmem"
)

// Kind says what ended a suboperation.
type Kind uint8

// Kinds of suboperations.
const (
	// KindMem ends with a far-memory prefetch: a memory suboperation.
	KindMem Kind = iota
	// KindPre ends with a read submission: the pre-IO suboperation.
	KindPre
	// KindPost ends an operation: the post-IO suboperation (or, without
	// IO, the tail of the operation).
	KindPost
	// KindWait ends with any other yield (lock waits, idle loops).
	KindWait
	// NumKinds is the number of kinds.
	NumKinds
)

func (k Kind) String() string {
	switch k {
	case KindMem:
		return "mem"
	case KindPre:
		return "io-pre"
	case KindPost:
		return "io-post"
	case KindWait:
		return "wait"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// DefaultTasks is the default number of threads per core.
const DefaultTasks = 64

// Config configures a scheduler.
type Config struct {
	// Tasks is the number of user-level threads; 0 means DefaultTasks.
	Tasks int
	// Mem is the core's far memory; Mem.Virtual selects virtual time.
	Mem farmem.Config
	// IO configures reads.
	IO IOConfig
	// SwitchCost is charged per switch in virtual time (ignored in real
	// time, where switches cost what they cost).
	SwitchCost time.Duration
	// Seed seeds the threads' and the emulated device's randomness.
	Seed int64
}

// KindStats accounts the suboperations of one kind.
type KindStats struct {
	Count   int64
	Ns      int64 // time in them, the switch into each included
	StallNs int64 // of which stalled on far memory
}

// MeanNs returns the mean duration without stalls, 0 when there were none.
func (k KindStats) MeanNs() float64 {
	if k.Count == 0 {
		return 0
	}
	return float64(k.Ns-k.StallNs) / float64(k.Count)
}

// Result is what a run measured, after the warm-up.
type Result struct {
	Virtual   bool
	Tasks     int
	IOMode    IOMode
	Ops       int64
	ElapsedNs int64
	IdleNs    int64 // time no thread could run (all waiting for reads)
	Kinds     [NumKinds]KindStats
	Mem       farmem.Stats
	IOs       int64
	IOWaitNs  int64 // from submission to the thread's resumption, summed
	// CPUNs is the CPU time of the core's OS thread (real time; -1 if
	// unknown): below ElapsedNs when the thread was preempted.
	CPUNs int64
	// SkippedNs is the part of ElapsedNs a skipping clock jumped over
	// (stalls that cost no real time; see farmem.NewSkipClock).
	SkippedNs int64
	// CleanSlices and DirtySlices count the slices kept and dropped (see
	// RunOptions.Slice).
	CleanSlices, DirtySlices int
	// Samples holds, per kind, a uniform sample (up to SampleSize) of the
	// measured suboperations' durations in ns, switch included, stalls
	// excluded: the distribution whose mean KindStats.MeanNs gives.
	Samples [NumKinds][]float64
}

// SampleSize is the most durations Result.Samples keeps per kind.
const SampleSize = 4096

// CPUShare returns the share of the real time the core's thread was on a
// CPU: CPUNs/(ElapsedNs-SkippedNs) (1 in virtual time or when unknown).
func (r Result) CPUShare() float64 {
	real := r.ElapsedNs - r.SkippedNs
	if r.Virtual || r.CPUNs <= 0 || real <= 0 {
		return 1
	}
	return float64(r.CPUNs) / float64(real)
}

// Throughput returns operations per second.
func (r Result) Throughput() float64 {
	if r.ElapsedNs <= 0 {
		return 0
	}
	return float64(r.Ops) / (float64(r.ElapsedNs) / 1e9)
}

// OpNs returns the mean time per operation in nanoseconds.
func (r Result) OpNs() float64 {
	if r.Ops == 0 {
		return 0
	}
	return float64(r.ElapsedNs) / float64(r.Ops)
}

// Scheduler is one core running user-level threads.
type Scheduler struct {
	cfg    Config
	clock  *farmem.Clock
	core   *farmem.Core
	io     backend
	ioLat  int64
	ioJit  float64
	rng    *rand.Rand
	swCost int64

	tasks    []*Task
	stopping bool
	ops      int64
	kinds    [NumKinds]KindStats
	samples  [NumKinds][]float64 // reservoir of durations while measuring
	seen     [NumKinds]int64     // suboperations offered to samples
	srng     *rand.Rand          // the reservoir's own, so sampling leaves other draws as they were
	idle     int64
	ios      int64
	ioWait   int64
	running  bool
}

// New returns a scheduler; Close releases its IO resources.
func New(cfg Config) (*Scheduler, error) {
	if cfg.Tasks <= 0 {
		cfg.Tasks = DefaultTasks
	}
	cfg.Mem = cfg.Mem.WithDefaults()
	clock := farmem.NewClock(cfg.Mem.Virtual)
	if cfg.Mem.SkipStalls && !cfg.Mem.Virtual {
		clock = farmem.NewSkipClock()
	}
	s := &Scheduler{
		cfg:    cfg,
		clock:  clock,
		core:   farmem.NewCore(cfg.Mem, clock),
		ioLat:  int64(cfg.IO.Latency),
		ioJit:  cfg.IO.Jitter,
		rng:    rand.New(rand.NewSource(cfg.Seed)),
		swCost: int64(cfg.SwitchCost),
	}
	depth := cfg.IO.Depth
	if depth <= 0 {
		depth = 4 * cfg.Tasks
		if depth < 64 {
			depth = 64
		}
	}
	if cfg.Mem.Virtual {
		s.io = virtualBackend{noRead: cfg.IO.NoRead}
	} else {
		b, err := newBackend(cfg.IO, depth)
		if err != nil {
			return nil, err
		}
		s.io = b
	}
	return s, nil
}

// Close releases the scheduler's IO resources.
func (s *Scheduler) Close() error { return s.io.close() }

// Clock returns the core's clock.
func (s *Scheduler) Clock() *farmem.Clock { return s.clock }

// Core returns the core's far memory.
func (s *Scheduler) Core() *farmem.Core { return s.core }

// IOMode returns the read backend in use.
func (s *Scheduler) IOMode() IOMode { return s.io.mode() }

// RunOptions bound a run.
type RunOptions struct {
	// Duration is the measured time (virtual or real); 0 means until MaxOps.
	Duration time.Duration
	// Warmup runs before measuring.
	Warmup time.Duration
	// MaxOps stops after this many measured operations (0: no limit).
	MaxOps int64
	// Slice, in real time, measures in slices of this length and keeps
	// only the slices in which the core's OS thread was on a CPU for at
	// least MinCPUShare of the time: on a shared machine, a slice in which
	// the thread was preempted does not measure the emulated core. The run
	// goes on until Duration of clean slices or MaxWall. 0 measures the
	// whole Duration as one slice and keeps it.
	Slice time.Duration
	// MinCPUShare is the least share of a slice the thread must have run;
	// 0 means 0.95.
	MinCPUShare float64
	// MaxWall bounds a sliced run's measuring time; 0 means 20*Duration.
	MaxWall time.Duration
}

type snapshot struct {
	at      int64
	skipped int64
	cpu     int64
	ops     int64
	kinds   [NumKinds]KindStats
	idle    int64
	mem     farmem.Stats
	ios     int64
	ioWait  int64
}

func (s *Scheduler) snap() snapshot {
	cpu := int64(-1)
	if !s.clock.Virtual() {
		cpu = threadCPU()
	}
	return snapshot{at: s.clock.Now(), skipped: s.clock.Skipped(), cpu: cpu, ops: s.ops, kinds: s.kinds, idle: s.idle, mem: s.core.Stats(), ios: s.ios, ioWait: s.ioWait}
}

// add accumulates the difference b - a into r.
func (r *Result) add(a, b snapshot) {
	r.Ops += b.ops - a.ops
	r.ElapsedNs += b.at - a.at
	r.SkippedNs += b.skipped - a.skipped
	if a.cpu >= 0 && b.cpu >= 0 && r.CPUNs >= 0 {
		r.CPUNs += b.cpu - a.cpu
	} else {
		r.CPUNs = -1
	}
	r.IdleNs += b.idle - a.idle
	r.Mem = r.Mem.Add(b.mem.Sub(a.mem))
	r.IOs += b.ios - a.ios
	r.IOWaitNs += b.ioWait - a.ioWait
	for i := range r.Kinds {
		r.Kinds[i].Count += b.kinds[i].Count - a.kinds[i].Count
		r.Kinds[i].Ns += b.kinds[i].Ns - a.kinds[i].Ns
		r.Kinds[i].StallNs += b.kinds[i].StallNs - a.kinds[i].StallNs
	}
}

// ErrBusy is returned by Run while another Run is in progress.
var ErrBusy = errors.New("ult: scheduler already running")

// Run starts Config.Tasks threads running body and resumes them until the
// run is over; body should loop while t.Running(), ending each operation
// with t.EndOp(). Run returns after every thread's body has returned. In
// real time the calling goroutine is locked to its OS thread meanwhile (the
// threads, being coroutines, run on that OS thread too).
func (s *Scheduler) Run(ctx context.Context, ro RunOptions, body func(t *Task)) (Result, error) {
	if s.running {
		return Result{}, ErrBusy
	}
	s.running = true
	defer func() { s.running = false }()
	if ro.Duration <= 0 && ro.MaxOps <= 0 {
		return Result{}, errors.New("ult: a run needs a Duration or MaxOps")
	}
	clk := s.clock
	if clk.Virtual() || ro.Slice <= 0 {
		ro.Slice = 0
	}
	if ro.MinCPUShare <= 0 {
		ro.MinCPUShare = 0.95
	}
	if ro.MaxWall <= 0 {
		ro.MaxWall = 20 * ro.Duration
	}
	if !clk.Virtual() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
	}
	s.stopping = false
	s.srng = rand.New(rand.NewSource(s.cfg.Seed + 1))
	for k := range s.samples {
		s.samples[k], s.seen[k] = nil, 0
	}
	s.tasks = s.tasks[:0]
	for i := 0; i < s.cfg.Tasks; i++ {
		s.tasks = append(s.tasks, s.spawn(i, body))
	}
	defer func() {
		for _, t := range s.tasks {
			t.stop()
		}
	}()

	res := Result{Virtual: clk.Virtual(), Tasks: len(s.tasks), IOMode: s.io.mode()}
	if clk.Virtual() {
		res.CPUNs = -1
	}
	start := clk.Now()
	measureFrom := start + int64(ro.Warmup)
	wallLimit := measureFrom + int64(ro.MaxWall)
	var dirty Result // the slices dropped, reported if none was kept
	var sliceStart snapshot
	sliceEnd := int64(-1)
	measuring := false
	begin := func() {
		sliceStart, measuring = s.snap(), true
		if ro.Slice > 0 {
			sliceEnd = sliceStart.at + int64(ro.Slice)
		} else if ro.Duration > 0 {
			sliceEnd = sliceStart.at + int64(ro.Duration)
		}
	}
	if ro.Warmup <= 0 {
		begin()
	}
	live := len(s.tasks)
	prev := clk.Now()
	rounds := 0
	for live > 0 {
		ran := false
		for _, t := range s.tasks {
			if t.finished {
				continue
			}
			if t.waiting {
				if !t.req.done || t.req.readyAt > prev {
					continue
				}
				t.waiting = false
				s.ioWait += prev - t.req.submitAt
			}
			if t.await != nil {
				if !t.await.Load() {
					continue
				}
				t.await = nil
			}
			if s.swCost > 0 {
				clk.Spend(time.Duration(s.swCost))
			}
			stalls := s.core.Stalls()
			_, ok := t.next()
			now := clk.Now()
			k := &s.kinds[t.kind]
			k.Count++
			k.Ns += now - prev
			stalled := s.core.Stalls() - stalls
			k.StallNs += stalled
			if measuring {
				s.sample(t.kind, float64(now-prev-stalled))
			}
			prev = now
			if !ok {
				t.finished = true
				live--
			}
			ran = true
		}
		s.io.poll()
		if !ran && live > 0 {
			prev = s.idleWait(ctx, prev)
		}
		now := clk.Last()
		rounds++
		if s.stopping {
			continue
		}
		if !measuring {
			if now >= measureFrom {
				begin()
			}
			continue
		}
		stop := rounds&63 == 0 && ctx.Err() != nil
		opsSoFar := res.Ops + s.ops - sliceStart.ops
		if ro.MaxOps > 0 && opsSoFar >= ro.MaxOps {
			stop = true
		}
		if stop || (sliceEnd >= 0 && now >= sliceEnd) {
			end := s.snap()
			var d Result
			d.add(sliceStart, end)
			clean := ro.Slice <= 0 || d.CPUNs < 0 || float64(d.CPUNs) >= ro.MinCPUShare*float64(d.ElapsedNs-d.SkippedNs)
			if clean {
				res.add(sliceStart, end)
				res.CleanSlices++
			} else {
				res.DirtySlices++
				dirty.add(sliceStart, end)
			}
			if ro.Duration > 0 && res.ElapsedNs >= int64(ro.Duration) {
				stop = true
			}
			if ro.MaxOps > 0 && res.Ops >= ro.MaxOps {
				stop = true
			}
			if end.at >= wallLimit {
				stop = true
				if res.CleanSlices == 0 {
					// No slice ran undisturbed: report them all.
					dirty.Virtual, dirty.Tasks, dirty.IOMode, dirty.DirtySlices = res.Virtual, res.Tasks, res.IOMode, res.DirtySlices
					res = dirty
				}
			}
			if stop {
				s.stopping = true
				continue
			}
			sliceStart = end
			sliceEnd = end.at + int64(ro.Slice)
			prev = clk.Now()
		}
	}
	if !s.stopping && measuring { // every body returned on its own
		res.add(sliceStart, s.snap())
		res.CleanSlices++
	}
	for k := range s.samples {
		res.Samples[k] = s.samples[k]
	}
	return res, ctx.Err()
}

// sample offers one duration of kind k to its reservoir (Vitter's
// algorithm R, so the sample stays uniform over the run).
func (s *Scheduler) sample(k Kind, d float64) {
	s.seen[k]++
	if len(s.samples[k]) < SampleSize {
		s.samples[k] = append(s.samples[k], d)
		return
	}
	if j := s.srng.Int63n(s.seen[k]); j < SampleSize {
		s.samples[k][j] = d
	}
}

// idleWait waits until some thread can run: a virtual clock jumps to the
// earliest read completion, a real one polls. It returns the time after.
func (s *Scheduler) idleWait(ctx context.Context, from int64) int64 {
	clk := s.clock
	if clk.Virtual() {
		next := int64(-1)
		for _, t := range s.tasks {
			if t.finished || !t.waiting {
				continue
			}
			if next < 0 || t.req.readyAt < next {
				next = t.req.readyAt
			}
		}
		if next < 0 { // only threads awaiting other goroutines
			runtime.Gosched()
			return clk.Now()
		}
		now := clk.WaitUntil(next)
		s.idle += now - from
		return now
	}
	for spins := 0; ; spins++ {
		s.io.poll()
		now := clk.Now()
		next := int64(-1) // the earliest completion of a read already done
		for _, t := range s.tasks {
			if t.finished {
				continue
			}
			if (!t.waiting || (t.req.done && t.req.readyAt <= now)) && (t.await == nil || t.await.Load()) {
				s.idle += now - from
				return now
			}
			if t.waiting && t.req.done && (next < 0 || t.req.readyAt < next) {
				next = t.req.readyAt
			}
		}
		if clk.Skips() && next >= 0 {
			// The read is done but the emulated device is not: a
			// skipping clock jumps to its completion.
			now = clk.WaitUntil(next)
			s.idle += now - from
			return now
		}
		if spins&1023 == 1023 && ctx.Err() != nil {
			s.idle += now - from
			return now
		}
	}
}

func (s *Scheduler) spawn(id int, body func(t *Task)) *Task {
	t := &Task{s: s, id: id, rng: rand.New(rand.NewSource(s.cfg.Seed*7919 + int64(id) + 1))}
	t.next, t.stop = iter.Pull(func(yield func(struct{}) bool) {
		t.yield = yield
		body(t)
		t.kind = KindWait
	})
	return t
}

// Task is a user-level thread. It implements farmem.Ctx: code written
// against a Ctx runs on a thread unchanged. A Task must only be used by the
// body it was started with.
type Task struct {
	s        *Scheduler
	id       int
	rng      *rand.Rand
	yield    func(struct{}) bool
	next     func() (struct{}, bool)
	stop     func()
	kind     Kind
	req      ioReq
	waiting  bool
	await    *atomic.Bool
	finished bool
	job      *job // the lookup a serving thread runs (Server)
}

var _ farmem.Ctx = (*Task)(nil)

// errStopped is the panic of a thread resumed after its scheduler stopped it.
var errStopped = errors.New("ult: thread stopped")

func (t *Task) switchOut(k Kind) {
	t.kind = k
	if !t.yield(struct{}{}) {
		panic(errStopped)
	}
}

// ID returns the thread's index on its core.
func (t *Task) ID() int { return t.id }

// Running reports whether the run goes on; a body loops while it does.
func (t *Task) Running() bool { return !t.s.stopping }

// Rand returns the thread's own deterministic source of randomness.
func (t *Task) Rand() *rand.Rand { return t.rng }

// Clock returns the core's clock.
func (t *Task) Clock() *farmem.Clock { return t.s.clock }

// Core returns the core's far memory.
func (t *Task) Core() *farmem.Core { return t.s.core }

// Compute accounts d of computation (spinning in real time).
func (t *Task) Compute(d time.Duration) { t.s.clock.Spend(d) }

// Prefetch starts fetching [p, p+n) from far memory and yields: a memory
// suboperation ends here.
func (t *Task) Prefetch(p unsafe.Pointer, n uintptr) {
	t.s.core.Prefetch(p, n)
	t.switchOut(KindMem)
}

// Access reads [p, p+n) from far memory, stalling the core for lines that
// have not arrived.
func (t *Task) Access(p unsafe.Pointer, n uintptr) { t.s.core.Access(p, n) }

// ReadAt submits a read and yields until it has completed: the pre-IO
// suboperation ends here, and the thread is not resumed before then.
func (t *Task) ReadAt(f *os.File, buf []byte, off int64) (int, error) {
	s := t.s
	r := &t.req
	*r = ioReq{f: f, buf: buf, off: off}
	r.submitAt = s.clock.Last()
	if s.ioLat > 0 {
		lat := float64(s.ioLat)
		if s.ioJit > 0 {
			lat *= 1 + s.ioJit*(2*s.rng.Float64()-1)
		}
		r.submitAt = s.clock.Now()
		r.readyAt = r.submitAt + int64(lat)
	}
	if err := s.io.submit(r); err != nil {
		return 0, err
	}
	s.ios++
	t.waiting = true
	t.switchOut(KindPre)
	n, err := r.n, r.err
	r.buf, r.f = nil, nil
	return n, err
}

// Await yields until done is set (by another goroutine, for example one
// that commits writes): the thread is not resumed before, so waiting costs
// no switches. It ends a pre-IO suboperation, as a read submission does.
func (t *Task) Await(done *atomic.Bool) {
	if done.Load() {
		return
	}
	t.await = done
	t.switchOut(KindPre)
}

// Cooperative reports that a Task can yield (farmem.Ctx users may spin on
// Yield instead of blocking).
func (t *Task) Cooperative() bool { return true }

// Yield lets the other threads run (a wait suboperation ends here).
func (t *Task) Yield() { t.switchOut(KindWait) }

// EndOp counts an operation done and yields: the post-IO suboperation ends here.
func (t *Task) EndOp() {
	t.s.ops++
	t.switchOut(KindPost)
}
