package config

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// FieldError is one problem of a configuration, naming the field:
//
//	pool[1] ("data").medium: "tape" is not one of dram, ssd, hdd, nvm
//	log.replicas: must be 1 or more, got 0
//
// Validate and Parse return a single *FieldError, or several joined with
// errors.Join (use errors.As to get the first).
type FieldError struct {
	Field string // "cluster.mvcc_window", "log.replicas", `pool[1] ("data").medium`
	Msg   string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

// poolLabel names pool i in error messages: `pool[1] ("data")`, or `pool[1]`
// when it has no name.
func poolLabel(i int, name string) string {
	if name == "" {
		return fmt.Sprintf("pool[%d]", i)
	}
	return fmt.Sprintf("pool[%d] (%q)", i, name)
}

func joinErrors(errs []error) error {
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	return errors.Join(errs...)
}

func oneOf(v string, allowed []string) bool { return contains(allowed, v) }

// enumError is the message for a value outside its set.
func enumError(v string, allowed []string) string {
	if v == "" {
		return "missing (one of " + strings.Join(allowed, ", ") + ")"
	}
	return fmt.Sprintf("%q is not one of %s", v, strings.Join(allowed, ", "))
}

func validName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return s != ""
}

// Validate checks the configuration and returns every problem found, each a
// *FieldError naming its field (joined with errors.Join when there are
// several), or nil.
//
// Rules: at least one pool; pool names unique, non-empty, of a-z 0-9 _ -;
// prefixes non-empty, valid UTF-8, not starting with byte 0xff (system key
// space), and none a prefix of another; medium, mode, engine and eviction
// within their sets; dram needs engine memory and engine memory needs dram;
// durable pools need a non-volatile medium; ephemeral pools need an engine
// that can evict (memory or flash) and an eviction policy, durable pools have
// none; 1 <= stashes <= MaxStashesPerPool; 1 <= replication <= stashes; capacity >= 0;
// mvcc_window in [1s, 1h]; failure_wait >= 0; log replicas in [1, 7];
// [pool.device]: a known profile, no negative figure, queue_depth >= 1,
// not on engine sqlite, not on a DRAM pool without local_log.
func (c *Config) Validate() error {
	if c == nil {
		return errors.New("config: nil configuration")
	}
	var errs []error
	fail := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)})
	}

	if w := c.Cluster.FailureWait.Duration; w < 0 {
		fail("cluster.failure_wait", "must not be negative, got %s", c.Cluster.FailureWait)
	}
	if b := c.Cluster.ShardBytes; b < 1<<10 {
		fail("cluster.shard_bytes", "must be at least 1KiB, got %d bytes", int64(b))
	}
	if d := c.Cluster.DCDelay.Duration; d < 0 || d > 10*time.Second {
		fail("cluster.dc_delay", "must be between 0s and 10s, got %s", c.Cluster.DCDelay)
	}
	if w := c.Cluster.MVCCWindow.Duration; w < time.Second || w > time.Hour {
		fail("cluster.mvcc_window", "must be between 1s and 1h, got %s", c.Cluster.MVCCWindow)
	}
	switch r := c.Log.Replicas; {
	case r < 1:
		fail("log.replicas", "must be 1 or more, got %d", r)
	case r > 7:
		fail("log.replicas", "must be at most 7, got %d", r)
	}

	if len(c.Pools) == 0 {
		fail("pool", "at least one [[pool]] is required")
	}
	names := map[string]int{}
	for i := range c.Pools {
		p := &c.Pools[i]
		at := poolLabel(i, p.Name)
		field := func(f string) string { return at + "." + f }

		// name
		switch {
		case p.Name == "":
			fail(field("name"), "missing")
		case !validName(p.Name):
			fail(field("name"), "%q may only contain a-z, 0-9, _ and -", p.Name)
		}
		if p.Name != "" {
			if j, dup := names[p.Name]; dup {
				fail(field("name"), "duplicate: pool[%d] has the same name", j)
			} else {
				names[p.Name] = i
			}
		}

		// prefix (overlaps are checked below)
		switch {
		case p.Prefix == "":
			fail(field("prefix"), "missing (every pool needs a non-empty key prefix)")
		case p.Prefix[0] == 0xff:
			fail(field("prefix"), "%q starts with byte 0xff, which is reserved for the system key space", p.Prefix)
		case !utf8.ValidString(p.Prefix):
			fail(field("prefix"), "%q is not valid UTF-8 (TOML strings are UTF-8)", p.Prefix)
		}

		// enumerations
		mediumOK := oneOf(p.Medium, media)
		if !mediumOK {
			fail(field("medium"), "%s", enumError(p.Medium, media))
		}
		modeOK := oneOf(p.Mode, modes)
		if !modeOK {
			fail(field("mode"), "%s", enumError(p.Mode, modes))
		}
		engineOK := oneOf(p.Engine, engines)
		if !engineOK {
			fail(field("engine"), "%s", enumError(p.Engine, engines))
		}

		// combinations, only between valid values
		if mediumOK && engineOK {
			if p.Medium == "dram" && p.Engine != "memory" {
				fail(field("engine"), "medium dram requires engine memory, got %s", p.Engine)
			}
			if p.Engine == "memory" && p.Medium != "dram" {
				fail(field("engine"), "engine memory requires medium dram, got %s", p.Medium)
			}
		}
		if mediumOK && modeOK && p.Mode == "durable" && p.Volatile() {
			fail(field("mode"), "durable requires a non-volatile medium (ssd, hdd or nvm), got %s: a dram stash loses its data on restart", p.Medium)
		}
		if engineOK && modeOK && p.Ephemeral() && p.Engine != "memory" && p.Engine != "flash" {
			fail(field("engine"), "an ephemeral pool needs engine memory or flash: %s cannot evict", p.Engine)
		}
		if modeOK {
			switch {
			case !p.Ephemeral() && p.Eviction != "":
				fail(field("eviction"), "only ephemeral pools evict, but mode is %s (remove eviction)", p.Mode)
			case p.Ephemeral() && !oneOf(p.Eviction, evictions):
				fail(field("eviction"), "%s", enumError(p.Eviction, evictions))
			}
		} else if p.Eviction != "" && !oneOf(p.Eviction, evictions) {
			fail(field("eviction"), "%s", enumError(p.Eviction, evictions))
		}

		if p.LocalLog && mediumOK && modeOK && (p.Medium != "dram" || !p.Ephemeral()) {
			fail(field("local_log"), "needs medium dram and mode ephemeral (a DRAM cache), got medium %s and mode %s", p.Medium, p.Mode)
		}

		// counts
		switch {
		case p.Stashes < 1:
			fail(field("stashes"), "must be 1 or more, got %d", p.Stashes)
		case p.Stashes > MaxStashesPerPool:
			fail(field("stashes"), "must be at most %d, got %d", MaxStashesPerPool, p.Stashes)
		}
		switch {
		case p.Replication < 1:
			fail(field("replication"), "must be 1 or more, got %d", p.Replication)
		case p.Stashes >= 1 && p.Replication > p.Stashes:
			fail(field("replication"), "must be at most stashes (%d), got %d", p.Stashes, p.Replication)
		}
		if p.Capacity < 0 {
			fail(field("capacity"), "must not be negative, got %d", int64(p.Capacity))
		}
		if f := p.Flash; f != nil {
			if engineOK && p.Engine != "flash" {
				fail(field("flash"), "settings of engine flash, but engine is %s (remove the [pool.flash] table)", p.Engine)
			}
			if f.Cache != nil && *f.Cache < 0 {
				fail(field("flash.cache"), "must not be negative, got %d", int64(*f.Cache))
			}
			if f.WriteBuffer != nil && *f.WriteBuffer < 0 {
				fail(field("flash.write_buffer"), "must not be negative, got %d", int64(*f.WriteBuffer))
			}
			if f.Segment != 0 && f.Segment < MinFlashSegment {
				fail(field("flash.segment"), "must be at least 1MiB, got %s", f.Segment)
			}
			validateFarMemory(f, field, fail)
		}
		if pb := p.Pebble; pb != nil {
			if engineOK && p.Engine != "pebble" {
				fail(field("pebble"), "settings of engine pebble, but engine is %s (remove the [pool.pebble] table)", p.Engine)
			}
			if pb.Cache != nil && *pb.Cache < MinPebbleCache {
				fail(field("pebble.cache"), "must be at least 64KiB, got %s", *pb.Cache)
			}
		}
		if d := p.Device; d != nil {
			validateDevice(p, d, field, fail)
		}
	}

	// Prefix overlaps: each key must belong to exactly one pool.
	for i := range c.Pools {
		pi := c.Pools[i].Prefix
		if pi == "" {
			continue
		}
		for j := 0; j < i; j++ {
			pj := c.Pools[j].Prefix
			if pj == "" || !(strings.HasPrefix(pi, pj) || strings.HasPrefix(pj, pi)) {
				continue
			}
			fail(poolLabel(i, c.Pools[i].Name)+".prefix",
				"%q overlaps the prefix %q of %s: no pool's prefix may be a prefix of another's, each key belongs to exactly one pool",
				pi, pj, poolLabel(j, c.Pools[j].Name))
		}
	}
	c.validateAuth(fail)
	return joinErrors(errs)
}

// validateDevice checks a pool's [pool.device] table.
func validateDevice(p *Pool, d *Device, field func(string) string, fail func(field, format string, args ...any)) {
	if !oneOf(d.Profile, DeviceProfiles) {
		fail(field("device.profile"), "%s", enumError(d.Profile, DeviceProfiles))
	}
	for _, l := range []struct {
		key string
		v   *Duration
	}{{"read_latency", d.ReadLatency}, {"write_latency", d.WriteLatency}, {"sync_latency", d.SyncLatency}} {
		if l.v != nil && l.v.Duration < 0 {
			fail(field("device."+l.key), "must not be negative, got %s", *l.v)
		}
	}
	if d.IOPS != nil && *d.IOPS < 0 {
		fail(field("device.iops"), "must not be negative (0: no limit), got %d", *d.IOPS)
	}
	if d.Bandwidth != nil && *d.Bandwidth < 0 {
		fail(field("device.bandwidth"), "must not be negative (0: no limit), got %d", int64(*d.Bandwidth))
	}
	if d.QueueDepth != nil && *d.QueueDepth < 1 {
		fail(field("device.queue_depth"), "must be 1 or more (absent: the profile's, 1 for none), got %d", *d.QueueDepth)
	}
	if !p.Emulates() {
		return
	}
	switch {
	case p.Engine == "sqlite":
		fail(field("device"), "engine sqlite cannot emulate a device: its files bypass the file-system seam the device model sits on (remove [pool.device] or use engine pebble)")
	case (p.Medium == "dram" || p.Engine == "memory") && !p.LocalLog:
		fail(field("device"), "a DRAM pool has no files but its local log: set local_log = true, or remove [pool.device]")
	}
}

// Warnings returns advice about a configuration that is valid but probably
// not what was meant, one line each, naming the field like Validate's errors.
func (c *Config) Warnings() []string {
	var w []string
	if r := c.Log.Replicas; r > 1 && r%2 == 0 {
		w = append(w, fmt.Sprintf("log.replicas: %d replicas tolerate no more failures than %d; an odd number is recommended", r, r-1))
	}
	for i, p := range c.Pools {
		if p.Ephemeral() && p.Capacity == 0 {
			w = append(w, fmt.Sprintf("%s.capacity: unlimited, so this ephemeral pool never evicts and its stashes grow without bound", poolLabel(i, p.Name)))
		}
	}
	return w
}

// validateFarMemory checks the far-memory keys of [pool.flash].
func validateFarMemory(f *Flash, field func(string) string, fail func(string, string, ...any)) {
	lat := f.FarMemoryLatency()
	if lat < 0 || lat > MaxFarMemory {
		fail(field("flash.far_memory"), "must be between 0 and %s, got %s", MaxFarMemory, lat)
	}
	far := lat > 0
	if f.Prefetch != nil && !far {
		fail(field("flash.prefetch"), "only with far_memory > 0 (the index is in DRAM)")
	}
	if f.LookupThreads != 0 {
		if !far {
			fail(field("flash.lookup_threads"), "only with far_memory > 0 (the index is in DRAM)")
		} else if f.LookupThreads < 1 || f.LookupThreads > MaxLookupThreads {
			fail(field("flash.lookup_threads"), "must be between 1 and %d, got %d", MaxLookupThreads, f.LookupThreads)
		}
	}
	if f.IO != "" {
		if f.IO != "uring" && f.IO != "threads" {
			fail(field("flash.io"), "%q is not one of uring, threads", f.IO)
		} else if !far {
			fail(field("flash.io"), "only with far_memory > 0 (the index is in DRAM)")
		}
	}
}
