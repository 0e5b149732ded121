package server

import (
	"sync"
	"time"

	"github.com/distash/distash/config"
	"github.com/distash/distash/internal/fsys"
	"github.com/distash/distash/internal/fsys/devfs"
	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/wire"
)

// devices holds the emulated device of each stash of this process whose
// pool has one ([pool.device]), by tag: a stash reopened after a failure
// gets the same device, so its figures go on.
type devices struct {
	mu sync.Mutex
	m  map[kv.Tag]*devfs.Device
}

// deviceModel returns the device pool p's stashes emulate, and its label
// (the profile, or "custom" for profile none with overrides); ok is false
// when the pool emulates none.
func deviceModel(p config.Pool) (m devfs.Model, label string, ok bool) {
	d := p.Device
	if d == nil || !p.Emulates() {
		return devfs.Model{}, "", false
	}
	label = d.Profile
	m, err := devfs.Profile(d.Profile)
	if err != nil || label == "none" || label == "" {
		// Validated: only none starts from zero.
		m, label = devfs.Model{QueueDepth: 1}, "custom"
	}
	if d.ReadLatency != nil {
		m.ReadLatency = d.ReadLatency.Duration
	}
	if d.WriteLatency != nil {
		m.WriteLatency = d.WriteLatency.Duration
	}
	if d.SyncLatency != nil {
		m.SyncLatency = d.SyncLatency.Duration
	}
	if d.IOPS != nil {
		m.IOPS = *d.IOPS
	}
	if d.Bandwidth != nil {
		m.Bandwidth = int64(*d.Bandwidth)
	}
	if d.QueueDepth != nil {
		m.QueueDepth = *d.QueueDepth
	}
	return m, label, true
}

// stashFS returns the file system of the stash sp: the node's, through the
// stash's emulated device when its pool has one. Only the stash's engine
// and its own files use it; the log, raft, coordinator and metadata files
// stay on the node's file system.
func (s *Server) stashFS(sp stashSpec) fsys.FS {
	if d := s.device(sp); d != nil {
		return d.Wrap(s.opts.FS)
	}
	return s.opts.FS
}

// device returns the emulated device of stash sp, made on first use; nil
// when its pool has none.
func (s *Server) device(sp stashSpec) *devfs.Device {
	m, label, ok := deviceModel(sp.pool)
	if !ok {
		return nil
	}
	s.devices.mu.Lock()
	defer s.devices.mu.Unlock()
	if s.devices.m == nil {
		s.devices.m = map[kv.Tag]*devfs.Device{}
	}
	d, ok := s.devices.m[sp.tag]
	if !ok {
		d = devfs.New(label, m)
		s.devices.m[sp.tag] = d
	}
	return d
}

// deviceOf returns the emulated device of the stash of tag, nil if none.
func (s *Server) deviceOf(tag kv.Tag) *devfs.Device {
	s.devices.mu.Lock()
	defer s.devices.mu.Unlock()
	return s.devices.m[tag]
}

// deviceBusyWindow is the span of DeviceStatus.busy_fraction.
const deviceBusyWindow = 10 * time.Second

// deviceStatus is the status of device d.
func deviceStatus(d *devfs.Device) *wire.DeviceStatus {
	st := d.Stats()
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	return &wire.DeviceStatus{
		Profile: st.Profile, BusyFraction: d.BusyFraction(deviceBusyWindow), BusySeconds: st.Busy.Seconds(),
		QueueLength: int32(st.QueueLength), InService: int32(st.InService),
		Reads: int64(st.Reads), Writes: int64(st.Writes), Syncs: int64(st.Syncs),
		ReadBytes: int64(st.ReadBytes), WrittenBytes: int64(st.WrittenBytes),
		ReadP50Us: us(st.ReadLatency.Quantile(0.5)), ReadP99Us: us(st.ReadLatency.Quantile(0.99)),
		WriteP99Us: us(st.WriteLatency.Quantile(0.99)), SyncP99Us: us(st.SyncLatency.Quantile(0.99)),
	}
}
