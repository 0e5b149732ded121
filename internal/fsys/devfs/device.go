package devfs

import (
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Kind is the kind of an I/O.
type kind int

const (
	kindRead kind = iota
	kindWrite
	kindSync
)

// epoch anchors the virtual timeline: times are nanoseconds since it, on
// the monotonic clock.
var epoch = time.Now()

func nanotime() int64 { return int64(time.Since(epoch)) }

// Device is one emulated device: its queue, its limits and its counters,
// shared by every file opened through the FSs it wraps. Its methods are
// safe for concurrent use.
type Device struct {
	profile string
	m       Model

	mu sync.Mutex
	// slots holds the virtual time each service slot is next free.
	slots []int64
	// chanFree is the virtual time the shared IOPS/bandwidth channel is
	// next free.
	chanFree int64
	// lastArrival keeps arrivals monotonic, which keeps service starts
	// monotonic (see schedule).
	lastArrival int64
	// busyAcc is the length of the union of the service intervals
	// scheduled so far; busyEnd the end of the last of them.
	busyAcc, busyEnd int64
	// pending are the scheduled I/Os whose goroutines have not woken yet.
	pending map[uint64]span
	nextID  uint64

	reads, writes, syncs    uint64
	readBytes, writtenBytes uint64
	hist                    [3]Histogram

	// samples of the busy time, about one a second, for BusyFraction.
	samples [32]busySample
	nsample int
}

type span struct{ start, end int64 }

type busySample struct{ t, busy int64 }

// New returns a device emulating m; profile is the label reported in
// Stats ("ssd", "custom", ...). A zero m gives a device that only counts.
func New(profile string, m Model) *Device {
	m.QueueDepth = max(m.QueueDepth, 1)
	return &Device{profile: profile, m: m, slots: make([]int64, m.QueueDepth), pending: map[uint64]span{}}
}

// Model returns the device's model.
func (d *Device) Model() Model { return d.m }

// Stats is what a device has done so far, and its queue now.
type Stats struct {
	Profile                 string
	Reads, Writes, Syncs    uint64
	ReadBytes, WrittenBytes uint64
	// Busy is the total time with at least one I/O in service (the
	// numerator of iostat's %util).
	Busy time.Duration
	// QueueLength is the I/Os waiting or in service now; InService those
	// in service.
	QueueLength int
	InService   int
	// Latency histograms of completed I/Os, queueing included.
	ReadLatency, WriteLatency, SyncLatency Histogram
}

// Stats returns the device's counters and queue now.
func (d *Device) Stats() Stats {
	now := nanotime()
	d.mu.Lock()
	defer d.mu.Unlock()
	s := Stats{
		Profile: d.profile,
		Reads:   d.reads, Writes: d.writes, Syncs: d.syncs,
		ReadBytes: d.readBytes, WrittenBytes: d.writtenBytes,
		Busy:        time.Duration(d.busyAt(now)),
		ReadLatency: d.hist[kindRead], WriteLatency: d.hist[kindWrite], SyncLatency: d.hist[kindSync],
	}
	for _, p := range d.pending {
		if p.end > now {
			s.QueueLength++
			if p.start <= now {
				s.InService++
			}
		}
	}
	d.sample(now)
	return s
}

// BusyFraction returns the fraction of the last window (about; from the
// device's busy samples, taken about once a second while it is used or
// asked) during which at least one I/O was in service: iostat's %util.
func (d *Device) BusyFraction(window time.Duration) float64 {
	now := nanotime()
	d.mu.Lock()
	defer d.mu.Unlock()
	d.sample(now)
	busy := d.busyAt(now)
	// The newest sample at least window old, else the oldest one.
	var ref *busySample
	n := min(d.nsample, len(d.samples))
	for i := 0; i < n; i++ {
		s := &d.samples[(d.nsample-1-i)%len(d.samples)]
		ref = s
		if now-s.t >= int64(window) {
			break
		}
	}
	if ref == nil || now <= ref.t {
		return 0
	}
	return min(1, max(0, float64(busy-ref.busy)/float64(now-ref.t)))
}

// sample records the busy time now if the last sample is a second old.
// d.mu is held.
func (d *Device) sample(now int64) {
	if d.nsample > 0 && now-d.samples[(d.nsample-1)%len(d.samples)].t < int64(time.Second) {
		return
	}
	d.samples[d.nsample%len(d.samples)] = busySample{t: now, busy: d.busyAt(now)}
	d.nsample++
}

// busyAt returns the busy time up to now. Every slot's scheduled work
// beyond now is contiguous from now (an I/O starts at its arrival, which
// is past, or at its slot's previous end), so the union of the service
// intervals beyond now is exactly [now, busyEnd). d.mu is held.
func (d *Device) busyAt(now int64) int64 {
	return d.busyAcc - max(0, d.busyEnd-now)
}

// schedule places an I/O of kind k and size bytes, arrived at arrival, on
// the virtual timeline and returns its id and deadline. d.mu is held.
func (d *Device) schedule(k kind, size int, arrival int64) (uint64, int64) {
	arrival = max(arrival, d.lastArrival)
	d.lastArrival = arrival
	// FIFO over QueueDepth slots: the I/O takes the slot free first, when
	// it is free. Arrivals are monotonic and a slot's next free time only
	// grows, so starts are monotonic too: FIFO.
	si := 0
	for i, t := range d.slots {
		if t < d.slots[si] {
			si = i
		}
	}
	start := max(arrival, d.slots[si])
	var lat time.Duration
	switch k {
	case kindRead:
		lat = d.m.ReadLatency
	case kindWrite:
		lat = d.m.WriteLatency
	case kindSync:
		lat = d.m.SyncLatency
	}
	var xfer int64
	if d.m.Bandwidth > 0 {
		xfer = int64(size) * int64(time.Second) / d.m.Bandwidth
	}
	end := start + int64(lat) + xfer
	if d.m.IOPS > 0 || d.m.Bandwidth > 0 {
		occupy := xfer
		if d.m.IOPS > 0 {
			occupy = max(occupy, int64(time.Second)/int64(d.m.IOPS))
		}
		d.chanFree = max(d.chanFree, start) + occupy
		end = max(end, d.chanFree)
	}
	d.slots[si] = end
	if start >= d.busyEnd {
		d.busyAcc += end - start
	} else if end > d.busyEnd {
		d.busyAcc += end - d.busyEnd
	}
	d.busyEnd = max(d.busyEnd, end)
	d.nextID++
	d.pending[d.nextID] = span{start, end}
	return d.nextID, end
}

// io charges one I/O of kind k that moved size bytes and arrived at
// arrival (before the real I/O), and returns when the device would have
// completed it.
func (d *Device) io(k kind, size int, arrival int64) {
	d.mu.Lock()
	switch k {
	case kindRead:
		d.reads++
		d.readBytes += uint64(size)
	case kindWrite:
		d.writes++
		d.writtenBytes += uint64(size)
	case kindSync:
		d.syncs++
	}
	emulate := !d.m.IsZero()
	var id uint64
	var deadline int64
	if emulate {
		id, deadline = d.schedule(k, size, arrival)
	}
	d.sample(arrival)
	d.mu.Unlock()
	if emulate {
		waitUntil(deadline)
	}
	done := nanotime()
	d.mu.Lock()
	delete(d.pending, id)
	d.hist[k].observe(time.Duration(done - arrival))
	d.mu.Unlock()
}

// overshoot is the running estimate of how late a nanosleep wakes, in
// nanoseconds, shared by all devices (it is the machine's). waitUntil
// sleeps that much less and spins the rest.
var overshoot atomic.Int64

func init() { overshoot.Store(int64(50 * time.Microsecond)) }

// maxOvershoot bounds the estimate, and so the time an I/O spins: a
// sample taken while the machine was overloaded must not turn every wait
// into a spin.
const maxOvershoot = int64(300 * time.Microsecond)

// waitUntil blocks the calling goroutine (and its OS thread) until the
// monotonic clock reaches deadline; a deadline already past returns at
// once.
func waitUntil(deadline int64) {
	for {
		now := nanotime()
		rem := deadline - now
		if rem <= 0 {
			return
		}
		est := overshoot.Load()
		if rem <= est {
			// Shorter than a sleep's wake-up: spin, yielding the P.
			runtime.Gosched()
			continue
		}
		d := rem - est
		ts := syscall.NsecToTimespec(d)
		syscall.Nanosleep(&ts, nil) // EINTR: the loop sleeps again
		late := nanotime() - now - d
		// An exponentially weighted mean (1/8), bounded.
		next := est + (min(max(late, 0), maxOvershoot)-est)/8
		overshoot.Store(next)
	}
}
