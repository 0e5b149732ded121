package timeline

import (
	"fmt"

	"github.com/distash/distash/config"
	"github.com/distash/distash/internal/fsys/devfs"
)

// ApplyDevice gives every pool of cfg but the DRAM ones an emulated device
// ([pool.device]) of profile, scaled by scale (> 1: slower; 0 or 1: as
// published), and returns lines for the output saying what each pool got.
// SQLite pools get none: their files bypass the file-system seam the
// device model sits on.
func ApplyDevice(cfg *config.Config, profile string, scale float64) ([]string, error) {
	if profile == "" || profile == "none" {
		return nil, nil
	}
	m, err := devfs.Profile(profile)
	if err != nil {
		return nil, fmt.Errorf("--device-profile: %w", err)
	}
	if scale < 0 {
		return nil, fmt.Errorf("--device-scale %g: want a positive factor", scale)
	}
	if scale == 0 {
		scale = 1
	}
	m = m.Scale(scale)
	var notes []string
	for i := range cfg.Pools {
		p := &cfg.Pools[i]
		switch {
		case p.Medium == "dram" || p.Engine == "memory":
			notes = append(notes, fmt.Sprintf("pool %s (%s, %s): DRAM, no device", p.Name, p.Engine, p.Medium))
			continue
		case p.Engine == "sqlite":
			notes = append(notes, fmt.Sprintf("pool %s (%s, %s): no emulated device: SQLite's files bypass the file-system seam (this machine's disk and page cache)", p.Name, p.Engine, p.Medium))
			continue
		}
		iops, bw, qd := m.IOPS, config.Size(m.Bandwidth), max(1, m.QueueDepth)
		p.Device = &config.Device{
			Profile:      profile,
			ReadLatency:  &config.Duration{Duration: m.ReadLatency},
			WriteLatency: &config.Duration{Duration: m.WriteLatency},
			SyncLatency:  &config.Duration{Duration: m.SyncLatency},
			IOPS:         &iops, Bandwidth: &bw, QueueDepth: &qd,
		}
		scaled := ""
		if scale != 1 {
			scaled = fmt.Sprintf(", scaled %g× slower", scale)
		}
		notes = append(notes, fmt.Sprintf("pool %s (%s, %s): emulated %s device per stash%s: read %v, write %v, sync %v, %d IOPS, %g MB/s, queue depth %d",
			p.Name, p.Engine, p.Medium, profile, scaled, m.ReadLatency, m.WriteLatency, m.SyncLatency, m.IOPS, float64(m.Bandwidth)/1e6, qd))
	}
	return notes, cfg.Validate()
}
