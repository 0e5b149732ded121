package server

import (
	"fmt"

	"github.com/distash/distash/config"
	"github.com/distash/distash/internal/engine"
	"github.com/distash/distash/internal/engine/engines"
	"github.com/distash/distash/internal/engine/flash"
	"github.com/distash/distash/internal/engine/locallog"
	"github.com/distash/distash/internal/farmem/ult"
	"github.com/distash/distash/internal/fsys"
	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/wire"
)

// openEngine opens the engine of a stash of pool p in dir: a memory
// engine with a local log for a pool with local_log, else the pool's
// engine.
func (s *Server) openEngine(p config.Pool, dir string, fs fsys.FS) (engine.Engine, error) {
	opts := engine.Options{
		Dir: dir, FS: fs, CapacityBytes: int64(p.Capacity), Ephemeral: p.Ephemeral(), Eviction: p.Eviction,
		Tuning: engineTuning(p),
	}
	if p.LocalLog {
		return locallog.Open(opts, locallog.Config{Logger: s.roleLogger(logRoleStash)})
	}
	eng, err := engines.Open(p.Engine, opts)
	if err != nil {
		return nil, err
	}
	if fe, ok := eng.(*flash.Engine); ok {
		if st, ok := fe.ServeStats(); ok {
			// The IO path is chosen at open (io_uring where the kernel
			// allows it): say which one the stash got.
			s.roleLogger(logRoleStash).Info("flash stash serves reads from far memory",
				"pool", p.Name, "dir", dir, "far_memory", p.Flash.FarMemoryLatency().String(),
				"prefetch", p.Flash.Prefetch == nil || *p.Flash.Prefetch,
				"lookup_threads", st.Tasks, "cores", st.Cores, "io", st.IOMode.String(), "io_configured", p.Flash.IO)
		}
	}
	return eng, nil
}

// startLocalLog decides how a stash of a local_log pool whose engine eng
// was just opened in dir starts. It catches up from the version its local
// log recovered if holds says the cluster's log still holds every entry
// of its tag after it; otherwise, or when the local log held nothing, it
// starts empty at the log's end like a dram stash without one (empty
// true). A stash that starts empty has its directory cleared first (the
// ownership kept next to the old data does not describe an empty stash)
// and gets a new engine; why is the reason it could not use the data it
// had, "" if it had none.
func (s *Server) startLocalLog(sp stashSpec, dir string, eng engine.Engine, holds func(kv.Version) (bool, error)) (_ engine.Engine, empty bool, why string, err error) {
	ll, _ := eng.(*locallog.Engine)
	v := eng.Version()
	if v > 0 {
		ok, err := holds(v)
		if err != nil {
			eng.Close()
			return nil, false, "", err
		}
		if ok {
			var r locallog.Recovery
			if ll != nil {
				r = ll.Recovered()
			}
			s.roleLogger(logRoleStash).Info("stash reloaded its local log; it catches up from the log before it serves newer versions",
				"tag", sp.tag, "pool", sp.pool.Name, "version", v, "keys", r.Keys, "recovery_ms", r.Duration.Milliseconds(), "cut", r.Cut)
			return eng, false, "", nil
		}
		why = fmt.Sprintf("its local log holds version %d, but the cluster's log no longer holds its tag's entries after it (it was away too long, or lost the tail of its local log)", v)
	} else if ll != nil && ll.Recovered().Discarded != "" {
		why = ll.Recovered().Discarded
	}
	if why != "" {
		s.roleLogger(logRoleStash).Warn("stash starts empty: its local log cannot be used", "tag", sp.tag, "pool", sp.pool.Name, "why", why)
	}
	eng.Close()
	f := fsys.Or(s.opts.FS)
	if err := f.RemoveAll(dir); err != nil {
		return nil, false, "", fmt.Errorf("server: clear stash %s-%d's directory: %w", sp.pool.Name, sp.index, err)
	}
	if err := f.MkdirAll(dir, 0o755); err != nil {
		return nil, false, "", err
	}
	eng, err = s.openEngine(sp.pool, dir, s.stashFS(sp))
	if err != nil {
		return nil, false, "", fmt.Errorf("server: open stash %s-%d: %w", sp.pool.Name, sp.index, err)
	}
	if ll, ok := eng.(*locallog.Engine); ok && why != "" {
		ll.NoteStartedEmpty(why)
	}
	return eng, true, why, nil
}

// localLogStatus is the status of a stash's local log, nil if it has none.
func localLogStatus(e engine.Engine) *wire.LocalLogStatus {
	ll, ok := e.(*locallog.Engine)
	if !ok {
		return nil
	}
	st := ll.Status()
	return &wire.LocalLogStatus{
		RecoveredVersion: int64(st.Version), RecoveredKeys: st.Keys, RecoveryMs: st.Duration.Milliseconds(),
		RecoveredReadBytes: st.ReadBytes, StartedEmpty: st.Discarded, Cut: st.Cut,
		LogBytes: st.LogBytes, LastSnapshotVersion: int64(st.LastSnapshotVersion), Snapshots: st.Snapshots,
		LastError: st.Failed,
	}
}

// serveStats are the counters of a flash engine serving reads from far
// memory, nil for any other engine.
func serveStats(e engine.Engine) *ult.ServeStats {
	if fe, ok := e.(*flash.Engine); ok {
		if st, ok := fe.ServeStats(); ok {
			return &st
		}
	}
	return nil
}

// farMemoryStatus is the status of a flash engine serving reads from far
// memory, nil for any other engine.
func farMemoryStatus(e engine.Engine) *wire.FarMemoryStatus {
	fe, ok := e.(*flash.Engine)
	if !ok {
		return nil
	}
	st, ok := fe.ServeStats()
	if !ok {
		return nil
	}
	fs := &wire.FarMemoryStatus{
		LatencyNs: int64(st.Latency), Prefetch: st.Prefetch, Cores: int32(st.Cores), LookupThreads: int32(st.Tasks),
		Io: st.IOMode.String(), Lookups: st.Lookups, Accesses: st.Accesses, Prefetches: st.Prefetches,
		StallNs: st.StallNs, DeviceReads: st.DeviceReads, Runnable: st.Runnable, Waiting: st.Waiting, Queued: st.Queued,
	}
	if n := float64(st.Lookups); n > 0 {
		fs.AccessesPerRead = float64(st.Accesses) / n
		fs.StallUsPerRead = float64(st.StallNs) / 1e3 / n
		fs.DeviceReadsPerRead = float64(st.DeviceReads) / n
	}
	return fs
}
