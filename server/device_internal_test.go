package server

import (
	"testing"
	"time"

	"github.com/distash/distash/config"
	"github.com/distash/distash/internal/fsys/devfs"
)

func TestDeviceModel(t *testing.T) {
	d := func(v time.Duration) *config.Duration { return &config.Duration{Duration: v} }
	qd := 3
	for _, c := range []struct {
		dev   *config.Device
		label string
		want  devfs.Model
		ok    bool
	}{
		{nil, "", devfs.Model{}, false},
		{&config.Device{Profile: "none"}, "", devfs.Model{}, false},
		{&config.Device{Profile: "hdd"}, "hdd", devfs.HDD, true},
		{&config.Device{Profile: "ssd", ReadLatency: d(time.Millisecond), QueueDepth: &qd}, "ssd",
			devfs.Model{ReadLatency: time.Millisecond, WriteLatency: devfs.SSD.WriteLatency, SyncLatency: devfs.SSD.SyncLatency,
				IOPS: devfs.SSD.IOPS, Bandwidth: devfs.SSD.Bandwidth, QueueDepth: 3}, true},
		{&config.Device{Profile: "none", SyncLatency: d(2 * time.Millisecond)}, "custom",
			devfs.Model{SyncLatency: 2 * time.Millisecond, QueueDepth: 1}, true},
	} {
		m, label, ok := deviceModel(config.Pool{Engine: "pebble", Device: c.dev})
		if m != c.want || label != c.label || ok != c.ok {
			t.Errorf("%+v: %v %q %v, want %v %q %v", c.dev, m, label, ok, c.want, c.label, c.ok)
		}
	}
}

// TestDeviceKeptAcrossReopens: a stash opened again (after a failure) gets
// the device it had, so its figures go on; another stash gets its own.
func TestDeviceKeptAcrossReopens(t *testing.T) {
	var s Server
	pool := config.Pool{Name: "data", Engine: "pebble", Device: &config.Device{Profile: "nvm"}}
	a, b := stashSpec{tag: 7, pool: pool}, stashSpec{tag: 8, pool: pool, index: 1}
	if s.device(a) != s.device(a) || s.device(a) == s.device(b) || s.deviceOf(7) != s.device(a) {
		t.Error("a stash's device is not kept, or shared with another stash")
	}
	if s.device(stashSpec{tag: 9, pool: config.Pool{Name: "cache"}}) != nil || s.deviceOf(9) != nil {
		t.Error("a pool without a device got one")
	}
}
