package server

import (
	"context"
	"fmt"

	"github.com/distash/distash/internal/engine"
	"github.com/distash/distash/internal/fsys"
	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/stash"
)

// stashSource is the log a stash being opened pulls its tag from, and what
// opening the stash asks of it: the embedded cluster's own log
// (localSource), or a stash node's connection to the log leader's node
// (remoteSource). Everything else about opening a stash is the same code
// (openStash).
type stashSource interface {
	log() stash.Log
	// start is the version the stash starts from if its engine has none
	// (a volatile stash: the log's end for its tag).
	start(ctx context.Context, sp stashSpec) (kv.Version, error)
	// holdsAfter reports whether the log still holds every entry of sp's
	// tag after v: a DRAM stash's local log can catch up from v.
	holdsAfter(ctx context.Context, sp stashSpec, v kv.Version) (bool, error)
	// admit decides whether the opened engine can serve (an error closes
	// it), and whether the stash is volatile after all (it may start
	// empty). emptyWhy is why a local log reloaded nothing ("" if it did,
	// or there is none).
	admit(ctx context.Context, sp stashSpec, eng engine.Engine, dir string, volatile bool, emptyWhy string) (bool, error)
	// reportUsage is the stash's stash.Options.ReportUsage.
	reportUsage(tag kv.Tag, used int64, applied kv.Version)
	// adoptOwnership: the directory was written by a version before
	// ownership files (stash.Options.AdoptOwnership).
	adoptOwnership() bool
}

// openStash opens sp's engine in dir and its stash over src.
func (s *Server) openStash(ctx context.Context, sp stashSpec, dir string, src stashSource) (*stash.Stash, error) {
	if !sp.pool.Volatile() || sp.pool.LocalLog {
		if err := fsys.Or(s.opts.FS).MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
	}
	start, err := src.start(ctx, sp)
	if err != nil {
		return nil, err
	}
	stashFS := s.stashFS(sp)
	eng, err := s.openEngine(sp.pool, dir, stashFS)
	if err != nil {
		return nil, fmt.Errorf("server: open stash %s-%d: %w", sp.pool.Name, sp.index, err)
	}
	if wrap := s.opts.Tuning.WrapEngine; wrap != nil {
		eng = wrap(sp.pool.Name, sp.index, eng)
	}
	volatile, why := sp.pool.Volatile(), ""
	if sp.pool.LocalLog {
		// It catches up from what its local log holds if the log still has
		// every entry of its tag after it, else it starts empty.
		eng, volatile, why, err = s.startLocalLog(sp, dir, eng, func(v kv.Version) (bool, error) { return src.holdsAfter(ctx, sp, v) })
		if err != nil {
			return nil, err
		}
	}
	if volatile, err = src.admit(ctx, sp, eng, dir, volatile, why); err != nil {
		eng.Close()
		return nil, err
	}
	return stash.New(stash.Options{
		Tag: sp.tag, Pool: sp.pool.Name, Index: sp.index, Engine: eng, Log: src.log(), Clock: s.opts.Clock,
		Volatile: volatile, StartVersion: start, LocalLog: sp.pool.LocalLog,
		Ephemeral: sp.pool.Ephemeral(), TrackBytes: !sp.pool.Ephemeral(), CapacityBytes: int64(sp.pool.Capacity),
		TrackRecency:   sp.pool.Recency,
		WindowVersions: s.windowVersions(), WindowBytes: s.windowBudget(sp.pool), FlushInterval: s.opts.FlushInterval, Logger: s.roleLogger(logRoleStash),
		ReportUsage: src.reportUsage,
		Dir:         dir, FS: stashFS, AdoptOwnership: src.adoptOwnership(), Fetcher: fetcher{s}, SampleUnit: sampleUnit(s.cfg),
	}), nil
}
