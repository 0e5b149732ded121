// Package devfs emulates a storage device on the file-system seam: a
// Device wraps an fsys.FS and makes every read, write and sync of the files
// opened through it cost what it would on an SSD, a hard disk or an NVM
// device, with the device's queue, IOPS and bandwidth limits shared by all
// of them. A pool's stashes each get their own Device ([pool.device] in
// the configuration), so a stash that compacts slows its own reads as on
// a real device, and its status reports the device's busy fraction, queue
// and latency histograms.
//
// The model: an I/O arrives, waits in FIFO order for one of QueueDepth
// service slots, then costs its latency (ReadLatency, WriteLatency or
// SyncLatency by kind) plus size/Bandwidth. IOPS and Bandwidth are limits
// of the whole device: a channel that each I/O occupies for
// max(1/IOPS, size/Bandwidth), and an I/O completes at the later of its
// own service end and the moment the channel has carried it. Deadlines
// are computed on a virtual timeline under one lock, so the figures the
// device delivers over time are exactly the configured ones however late
// the waiting goroutines wake; each I/O then waits for its deadline with
// syscall.Nanosleep (Go's timers have about 1 ms granularity on some
// machines), waking early by a running estimate of the sleep's overshoot
// and spinning the rest, so that median latencies land on the configured
// figure. A blocked OS thread in nanosleep is what real file I/O costs too.
//
// Reads that reach the file system are device reads; an engine's own
// cache hits never get here. The wrapped FS does the real I/O first and
// the model's wait follows, counted from the moment the I/O arrived, so
// the real I/O's own time (a page-cache copy, a real fsync) is absorbed
// into the modelled latency rather than added to it. Metadata operations
// (Create, Rename, Remove, Stat, OpenDir, Lock, List, ...) cost nothing.
// I/Os that fail without moving a byte are not charged.
//
// Not modelled: the operating system's page cache (every read that reaches
// the seam pays the device), the device's own caches, garbage collection
// and write amplification inside an SSD, seek distance on a disk (every
// I/O costs the average), and SQLite, whose files bypass the seam.
package devfs

import (
	"fmt"
	"time"
)

// Model is a device's figures. The zero Model emulates nothing.
type Model struct {
	ReadLatency, WriteLatency, SyncLatency time.Duration
	// IOPS is how many I/Os per second the device completes at most; 0
	// means no limit.
	IOPS int
	// Bandwidth is the bytes per second the device transfers at most,
	// reads and writes together; 0 means no limit.
	Bandwidth int64
	// QueueDepth is how many I/Os are in service at once; the rest wait
	// in FIFO order. Values below 1 mean 1.
	QueueDepth int
}

// The presets, from published device figures (docs/devices.md lists the
// sources, with their addresses, and the arithmetic).
var (
	// HDD is a 7,200 rpm SATA disk. A random access costs an average seek
	// (~8-9 ms for desktop 3.5" drives; the Hitachi 5K320 spec sheet gives
	// 12 ms for its 5,400 rpm 2.5" sibling) plus half a rotation (4.17 ms
	// at 7,200 rpm); command queueing (NCQ) at depth 4 hides part of the
	// rotation by reordering, so reads and writes cost ~8 ms and the disk
	// completes ~150 random I/Os per second (1/(seek+rotation) ≈ 80 at
	// depth 1). A sync (FLUSH CACHE) costs a seek plus half a rotation,
	// 12 ms, and nothing overlaps it. ~150 MB/s is the sustained transfer
	// rate of such drives.
	HDD = Model{
		ReadLatency: 8 * time.Millisecond, WriteLatency: 8 * time.Millisecond,
		SyncLatency: 12 * time.Millisecond,
		IOPS:        150, Bandwidth: 150e6, QueueDepth: 4,
	}
	// SSD is a SATA TLC flash SSD (Samsung 860 EVO class: 550/520 MB/s
	// sequential, up to 98k/90k 4 KiB IOPS at QD32 in burst, ~10k at QD1;
	// AnandTech measured a QD1 4 KiB random read median of 76 µs on an
	// Intel P3700 flash SSD). Reads cost 80 µs. A write is acknowledged
	// once in the drive's write cache with its FTL mapping updated, 100 µs;
	// a sync makes the drive program the cached pages into NAND (typical
	// page program time 300 µs, up to 700 µs, for Micron MLC; TLC is
	// slower), ~1 ms, as measured for fsync on consumer drives without
	// power-loss protection (M. Callaghan, "SSDs, power loss protection
	// and fsync latency": ~0.9 ms for a 16 KiB write+fsync on a Samsung
	// 990 Pro). 50k IOPS is a sustained mixed figure, below the
	// burst peak; 500 MB/s the SATA-bound transfer rate; 32 NCQ's depth.
	SSD = Model{
		ReadLatency: 80 * time.Microsecond, WriteLatency: 100 * time.Microsecond,
		SyncLatency: time.Millisecond,
		IOPS:        50_000, Bandwidth: 500e6, QueueDepth: 32,
	}
	// NVM is an Optane-class (3D XPoint) NVMe SSD: Intel specifies < 10 µs
	// typical read and write latency for the DC P4800X and 550k/500k
	// random read/write IOPS; AnandTech measured a QD1 median of 9 µs and
	// 2.2 GB/s of 4 KiB random reads at QD16. It has power-loss
	// protection and no volatile write cache to flush, so a sync costs a
	// command round trip, 20 µs (PLP drives measured 12-58 µs in the
	// fsync article above).
	NVM = Model{
		ReadLatency: 10 * time.Microsecond, WriteLatency: 10 * time.Microsecond,
		SyncLatency: 20 * time.Microsecond,
		IOPS:        550_000, Bandwidth: 2e9, QueueDepth: 16,
	}
)

// Profiles are the names Profile knows, "none" first.
var Profiles = []string{"none", "ssd", "hdd", "nvm"}

// Profile returns the preset named name: "ssd", "hdd", "nvm", or "none"
// (the zero Model: the real device, nothing added).
func Profile(name string) (Model, error) {
	switch name {
	case "none":
		return Model{}, nil
	case "ssd":
		return SSD, nil
	case "hdd":
		return HDD, nil
	case "nvm":
		return NVM, nil
	}
	return Model{}, fmt.Errorf("unknown device profile %q (want none, ssd, hdd or nvm)", name)
}

// Scale returns the model of a device f times slower (f > 1) or faster
// (f < 1): latencies ×f, IOPS and bandwidth ÷f. Limits stay limits: a
// scaled limit never rounds down to 0 (no limit).
func (m Model) Scale(f float64) Model {
	if f <= 0 {
		return m
	}
	s := m
	s.ReadLatency = time.Duration(float64(m.ReadLatency) * f)
	s.WriteLatency = time.Duration(float64(m.WriteLatency) * f)
	s.SyncLatency = time.Duration(float64(m.SyncLatency) * f)
	if m.IOPS > 0 {
		s.IOPS = max(1, int(float64(m.IOPS)/f+0.5))
	}
	if m.Bandwidth > 0 {
		s.Bandwidth = max(1, int64(float64(m.Bandwidth)/f+0.5))
	}
	return s
}

// IsZero reports whether the model emulates nothing: no latency and no
// limit.
func (m Model) IsZero() bool {
	return m.ReadLatency <= 0 && m.WriteLatency <= 0 && m.SyncLatency <= 0 && m.IOPS <= 0 && m.Bandwidth <= 0
}

func (m Model) String() string {
	return fmt.Sprintf("read %v write %v sync %v, %d IOPS, %d B/s, queue depth %d",
		m.ReadLatency, m.WriteLatency, m.SyncLatency, m.IOPS, m.Bandwidth, m.QueueDepth)
}
