package server

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/distash/distash/config"
	"github.com/distash/distash/internal/coordrpc"
	"github.com/distash/distash/internal/engine"
	"github.com/distash/distash/internal/engine/locallog"
	"github.com/distash/distash/internal/fsys"
	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/logentry"
	"github.com/distash/distash/internal/logrpc"
	"github.com/distash/distash/internal/shardmap"
	"github.com/distash/distash/internal/stash"
	"github.com/distash/distash/internal/wire"
)

// stashNode is the part a stash node plays in a multi-process cluster:
// one stash of its pool, in the slot the controller gave it, pulling its
// tag from the log leader's node (openRemoteStash) and reporting its
// progress there (reportLoop). A stash that cannot catch up, or whose
// files are damaged, retires its tag and rejoins as a new, empty stash.
type stashNode struct {
	s    *Server
	n    *node
	slot int    // the tag slot the controller gave
	tag  kv.Tag // the tag it gave (a rejoin changes both)
	// stashTag is tag, for goroutines other than the one that registers
	// (a damaged stash rejoins with a new tag while the node runs).
	stashTag atomic.Uint32
	logc     *logrpc.Client // the client of the log leader
	used     atomic.Int64   // live bytes, as the stash last reported them
}

// assign takes the slot and tag the controller gave at registration.
func (sn *stashNode) assign(slot int, tag kv.Tag) {
	sn.slot, sn.tag = slot, tag
	sn.stashTag.Store(uint32(tag))
}

// start opens the stash, or rejoins as a new one if it cannot catch up,
// and reports its progress until runCtx ends.
func (sn *stashNode) start(ctx, runCtx context.Context) error {
	s, n := sn.s, sn.n
	sn.logc = logrpc.NewLeaderClient(n, s.roleLogger(logRoleStash))
	err := sn.startStash(runCtx)
	if errors.Is(err, errTagTrimmed) {
		err = sn.rejoinAsNewStash(ctx, runCtx, n.reg, err)
	}
	if err != nil {
		return err
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		sn.reportLoop(runCtx, sn.logc)
	}()
	return nil
}

// stashDamaged reports the damaged stash and has it replaced
// (rejoinDamaged): only a stash node holds stashes other than the system
// stash.
func (n *node) stashDamaged(ctx context.Context, sl *stashSlot, pool, file, reason string, err error) {
	n.s.roleLogger(logRoleStash).Error("stash is damaged: it cannot vouch for its data and serves nothing",
		"tag", sl.tag, "pool", pool, "file", file, "reason", reason)
	n.stash.rejoinDamaged(ctx, sl, err)
}

// startStash opens the node's stash: its tag follows from its pool and
// the slot the controller gave it; it pulls its tag from the log leader's
// node and serves reads. A stash whose files are damaged is set up failed
// (stash.NewFailed): its supervisor reports it and has it rebuilt.
func (sn *stashNode) startStash(ctx context.Context) error {
	s, n := sn.s, sn.n
	slot, tag := sn.slot, sn.tag // a damaged stash's rejoin changes them from its supervisor
	if slot < 0 || tag == 0 {
		return fmt.Errorf("server: the controller gave slot %d, tag %d of pool %q", slot, tag, n.opts.Pool)
	}
	p, _ := s.cfg.PoolByName(n.opts.Pool)
	pool := *p
	sp := stashSpec{tag: tag, pool: pool, index: slot}
	legacy, err := sn.adoptStashTag(pool, tag)
	if err != nil && !errors.Is(err, fsys.ErrDamaged) {
		return err
	}
	// Only the first open adopts a directory of an older version: from
	// then on it has its ownership file.
	adopt := legacy || s.legacyDir.Swap(false)
	atStart := true
	open := func() (*stash.Stash, error) {
		st, err := sn.openRemoteStash(ctx, sp, sn.logc, adopt, atStart)
		adopt, atStart = false, false
		return st, err
	}
	var st *stash.Stash
	if err != nil {
		st = s.failedStash(sp, err)
	} else if st, err = open(); errors.Is(err, fsys.ErrDamaged) {
		st = s.failedStash(sp, err)
	} else if err != nil {
		return err
	} else if legacy {
		// Written before checksums: from now on with one.
		if err := sn.writeStashTag(tag); err != nil {
			st.Close()
			return err
		}
	}
	s.addStash(ctx, tag, st, open)
	// A stash of the cluster's first shard map starts with its part of it
	// (shardmap.Initial); one that has ownership of its own keeps it, and a
	// new stash owns nothing until the data distributor moves shards to it.
	var specs []shardmap.PoolSpec
	for _, p := range s.cfg.Pools {
		specs = append(specs, shardmap.PoolSpec{Name: p.Name, Prefix: []byte(p.Prefix), Tags: s.poolTags[p.Name], Replication: p.Replication})
	}
	sl, _ := s.slot(tag)
	sl.setOwned(shardmap.Initial(specs).RangesOf(tag))
	s.logger.Info("stash node serving", "pool", pool.Name, "slot", slot, "tag", tag)
	return nil
}

// rejoinAsNewStash handles errTagTrimmed (cause): this durable stash node
// holds nothing but cannot catch up from the log, which dropped entries
// of its tag (it force-pops a tag whose stash stays away, even one that
// never started, if another copy exists), or which trimmed what the stash
// had made durable before its files were lost (a replaced disk: what only
// it held is gone, and retiring the tag is how the cluster moves on).
// Nothing more is lost on it, so rather than fail it retires
// the tag and registers again: the controller gives its slot a fresh
// tag, the data distributor re-replicates the old tag's shards at once,
// and the stash joins as a new one, owning nothing until shards move to
// it. (A durable stash that has data and finds its tag trimmed lost
// writes: it keeps failing, for an operator.) A damaged stash rejoins the
// same way (rejoinDamaged), its data dropped.
func (sn *stashNode) rejoinAsNewStash(ctx, runCtx context.Context, reg coordrpc.NodeRegistration, cause error) error {
	s, n := sn.s, sn.n
	old := sn.tag
	if p, ok := s.cfg.PoolByName(n.opts.Pool); ok && p.LocalLog && !errors.Is(cause, fsys.ErrDamaged) {
		s.logger.Warn("this dram stash cannot use its local log: it retires its tag and joins as a new, empty stash, as a dram stash without one does; the data distributor re-replicates the tag's shards",
			"tag", old, "slot", sn.slot, "pool", n.opts.Pool, "err", cause)
	} else if errors.Is(cause, fsys.ErrDamaged) {
		s.logger.Warn("this stash cannot vouch for its data: it retires its tag, drops the data and joins as a new stash; the data distributor re-replicates the tag's shards from their healthy replicas",
			"tag", old, "slot", sn.slot, "pool", n.opts.Pool, "err", cause)
	} else {
		s.logger.Warn("this durable stash is empty and the log no longer holds all of its tag's entries (it dropped them, or the stash's own files are gone), so it cannot catch up: it retires the tag and joins as a new stash; the data distributor re-replicates the tag's shards",
			"tag", old, "slot", sn.slot, "pool", n.opts.Pool, "err", cause)
	}
	for {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := n.cc.Retire(rctx, uint32(old))
		cancel()
		if err == nil {
			break
		}
		var ke *kv.Error
		if (errors.As(err, &ke) && !ke.Code.Retryable()) || ctx.Err() != nil {
			return fmt.Errorf("server: retire tag %d of a stash that cannot catch up: %w", old, err)
		}
		s.logger.Info("waiting for the cluster controller to retire the tag", "tag", old, "last_error", err)
		time.Sleep(200 * time.Millisecond)
	}
	// The stash directory holds no data of the old tag (or none to
	// trust): without its tag file it is set up as a new stash's
	// (adoptStashTag removes what is left).
	fsy := fsys.Or(s.opts.FS)
	if err := fsy.Remove(filepath.Join(s.opts.Dir, stashTagFile)); err != nil && !errors.Is(err, fs.ErrNotExist) && !os.IsNotExist(err) {
		return err
	}
	if err := fsys.SyncDir(fsy, s.opts.Dir); err != nil {
		return err
	}
	reg.Empty = true
	slot, tag, err := n.register(ctx, reg)
	if err != nil {
		return err
	}
	sn.assign(slot, tag)
	s.logger.Info("joining as a new stash", "old_tag", old, "tag", sn.tag, "slot", sn.slot)
	return sn.startStash(runCtx)
}

// rejoinDamaged replaces a stash node's damaged stash (sl) with a new,
// empty one, but only once it holds no last copy: the controller's view
// must show that its pool keeps more than one replica, and the shard map
// that every shard of its tag has another replica alive. Until then it
// waits (its reads answer stash_unavailable, so clients use the other
// replicas); with replication 1 it refuses its shards' reads instead
// (refuseDamaged). The old stash stays in status, damaged, for
// replacedKeep after the new one started.
func (sn *stashNode) rejoinDamaged(ctx context.Context, sl *stashSlot, cause error) {
	s, n := sn.s, sn.n
	pool := n.opts.Pool
	lastWhy := ""
	for {
		why := ""
		if v := s.viewWithin(time.Second); v == nil {
			why = "the controller's view is not known"
		} else if r := s.poolReplication(pool); r <= 1 {
			s.refuseDamaged(sl, pool, r, cause)
			return
		} else if m, err := sn.remoteShardMap(ctx); err != nil {
			why = fmt.Sprintf("the shard map cannot be read (%v)", err)
		} else {
			live := map[kv.Tag]bool{}
			for _, loc := range v.Stashes {
				live[kv.Tag(loc.Tag)] = loc.Alive && !loc.Retired
			}
			for _, sh := range m.Shards() {
				if !slices.Contains(sh.Team, sl.tag) {
					continue
				}
				if !slices.ContainsFunc(sh.Team, func(t kv.Tag) bool { return t != sl.tag && live[t] }) {
					why = fmt.Sprintf("shard [%q, %q) has no other live replica (team %v)", sh.Begin, sh.End, sh.Team)
					break
				}
			}
		}
		if why == "" {
			break
		}
		if why != lastWhy {
			lastWhy = why
			s.logger.Warn("a damaged stash keeps its data until every shard it holds has another live replica", "tag", sl.tag, "pool", pool, "waiting_for", why)
			sl.mu.Lock()
			sl.lastErr = fmt.Sprintf("%v (kept until it holds no last copy: %s)", cause, why)
			sl.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
	if err := sn.rejoinAsNewStash(ctx, ctx, n.reg, cause); err != nil {
		if ctx.Err() == nil {
			s.fail(fmt.Errorf("server: replace the damaged stash %d: %w", sl.tag, err))
		}
		return
	}
	sl.mu.Lock()
	sl.lastErr = fmt.Sprintf("%v (replaced by stash %d, rebuilt from the healthy replicas)", cause, sn.stashTag.Load())
	sl.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		select {
		case <-ctx.Done():
		case <-time.After(replacedKeep):
			s.removeSlot(sl.tag)
		}
	}()
}

// remoteShardMap reads the shard map from the system stash of the node
// holding the stateless roles, at a read version it gives.
func (sn *stashNode) remoteShardMap(ctx context.Context) (*shardmap.Map, error) {
	s := sn.s
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	v := s.viewWithin(time.Second)
	if v == nil || v.StatelessAddress == "" {
		return nil, errors.New("no node holds the stateless roles")
	}
	conn, err := sn.n.connTo(v.StatelessAddress)
	if err != nil {
		return nil, err
	}
	api := wire.NewDiStashClient(conn)
	grv, err := api.GetReadVersion(ctx, &wire.GetReadVersionRequest{})
	if err == nil {
		err = grv.Error.Err()
	}
	if err != nil {
		return nil, err
	}
	m := shardmap.New(nil)
	begin, end := shardmap.KeyServersPrefix, kv.PrefixEnd(shardmap.KeyServersPrefix)
	for {
		rr, err := api.ReadRange(ctx, &wire.ReadRangeRequest{Stash: uint32(shardmap.SystemTag), Version: grv.Version,
			Begin: begin, End: end, ReadSystemKeys: true})
		if err == nil {
			err = rr.Error.Err()
		}
		if err != nil {
			return nil, err
		}
		for _, p := range rr.Kvs {
			if _, err := m.Apply(kv.Mutation{Type: kv.MutSet, Key: p.Key, Param: p.Value}); err != nil {
				return nil, err
			}
		}
		if !rr.More || len(rr.Kvs) == 0 {
			return m, nil
		}
		begin = kv.KeyAfter(rr.Kvs[len(rr.Kvs)-1].Key)
	}
}

// replacedKeep is how long a replaced damaged stash stays in status.
var replacedKeep = time.Minute

// errTagTrimmed is openRemoteStash's error for a durable stash that holds
// nothing while the log dropped entries of its tag: it cannot catch up.
var errTagTrimmed = errors.New("server: an empty durable stash cannot catch up: the log dropped entries of its tag")

// openRemoteStash opens a stash node's engine and stash over the remote
// log (remoteSource).
func (sn *stashNode) openRemoteStash(ctx context.Context, sp stashSpec, logc *logrpc.Client, adoptOwnership, atStart bool) (*stash.Stash, error) {
	return sn.s.openStash(ctx, sp, filepath.Join(sn.s.opts.Dir, "stash"), remoteSource{sn: sn, logc: logc, adopt: adoptOwnership, atStart: atStart})
}

// remoteSource is a stash node's connection to the log leader's node
// (stashSource). A dram stash starts empty at the log's current end; a
// durable one at its engine's version, and if that is empty, only if the
// log still holds its tag's entries from the start (else errTagTrimmed). A
// dram stash with a local log starts at the version it reloads if the log
// still holds its tag's entries after it; if not, it starts empty: when the
// node starts (atStart) by rejoining as a new stash (errTagTrimmed), as a
// dram stash without a local log does, and on a restart by its supervisor
// on the same tag.
type remoteSource struct {
	sn             *stashNode
	logc           *logrpc.Client
	adopt, atStart bool
}

func (r remoteSource) log() stash.Log { return r.logc }

func (r remoteSource) start(ctx context.Context, sp stashSpec) (kv.Version, error) {
	if !sp.pool.Volatile() {
		return 0, nil
	}
	var start kv.Version
	err := r.sn.untilLogAnswers(ctx, "where a dram stash starts", func(ctx context.Context) (err error) {
		start, err = r.logc.Report(ctx, logrpc.StashReport{Tag: sp.tag})
		return err
	})
	return start, err
}

func (r remoteSource) holdsAfter(ctx context.Context, sp stashSpec, v kv.Version) (bool, error) {
	err := r.sn.untilLogAnswers(ctx, "whether a dram stash's local log can catch up", func(ctx context.Context) error {
		last, err := r.logc.Report(ctx, logrpc.StashReport{Tag: sp.tag})
		if err == nil && last > v {
			_, _, err = r.logc.Peek(ctx, sp.tag, v, 1)
		}
		return err
	})
	if errors.Is(err, logentry.ErrTrimmed) {
		return false, nil
	}
	return err == nil, err
}

func (r remoteSource) admit(ctx context.Context, sp stashSpec, eng engine.Engine, _ string, volatile bool, emptyWhy string) (bool, error) {
	if emptyWhy != "" && r.atStart {
		return false, fmt.Errorf("%w: %s", errTagTrimmed, emptyWhy)
	}
	if !sp.pool.Volatile() && eng.Version() == 0 && eng.Stats().Keys == 0 {
		// Asked now, while the stash has nothing to lose, rather than
		// found by its pull loop, which fails the stash for good.
		if err := r.sn.peekFromStart(ctx, sp.tag, r.logc); err != nil {
			if errors.Is(err, logentry.ErrTrimmed) {
				return false, fmt.Errorf("%w: %w", errTagTrimmed, err)
			}
			return false, err
		}
	}
	return volatile, nil
}

func (r remoteSource) reportUsage(_ kv.Tag, used int64, _ kv.Version) { r.sn.used.Store(used) }

func (r remoteSource) adoptOwnership() bool { return r.adopt }

// peekFromStart asks the log for tag's entries from its start: nil if it
// has them all, an error wrapping logentry.ErrTrimmed if it dropped some.
func (sn *stashNode) peekFromStart(ctx context.Context, tag kv.Tag, logc *logrpc.Client) error {
	return sn.untilLogAnswers(ctx, "whether a new durable stash can catch up", func(ctx context.Context) error {
		last, err := logc.Report(ctx, logrpc.StashReport{Tag: tag})
		if err == nil && last > 0 {
			// A log with versions answers at once (a Peek after its
			// end would wait for the next one).
			_, _, err = logc.Peek(ctx, tag, 0, 1)
		}
		return err
	})
}

// untilLogAnswers calls ask (2 s each) until the log answers it: nil, or
// logentry.ErrTrimmed, which it returns; other errors (the log's node not
// there yet, or elsewhere) are waited out until ctx ends. what names the
// wait in the log line.
func (sn *stashNode) untilLogAnswers(ctx context.Context, what string, ask func(ctx context.Context) error) error {
	s := sn.s
	for {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := ask(rctx)
		cancel()
		if err == nil || errors.Is(err, logentry.ErrTrimmed) {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		s.logger.Info("waiting for the log to learn "+what, "err", err)
		time.Sleep(200 * time.Millisecond)
	}
}

// reportLoop pushes the stash's usage and progress to the log leader's
// node, where the commit proxy and the ratekeeper use them.
func (sn *stashNode) reportLoop(ctx context.Context, logc *logrpc.Client) {
	s := sn.s
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		tag := kv.Tag(sn.stashTag.Load())
		sl, ok := s.slot(tag)
		if !ok || !sl.healthNow().running() {
			// A stash that does not apply the log (failed, damaged,
			// restarting) does not report, like a stash whose node is
			// down: it must not hold the ratekeeper back.
			continue
		}
		applied, wb, wl := sl.get().Pressure()
		used := sn.used.Load()
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		if last, err := logc.Report(rctx, logrpc.StashReport{Tag: tag, UsedBytes: used, Applied: applied, WindowBytes: wb, WindowLimitBytes: wl}); err == nil {
			sn.n.logLast.Store(int64(last)) // the stash's lag behind the log (metrics)
		}
		cancel()
	}
}

// stashTagFile records, in a stash node's --dir, the tag its stash's data
// belongs to.
const stashTagFile = "stash-tag"

// startsEmpty reports whether this stash node's stash has no data: a
// dram stash (with a local log: one that has no local log files), or a
// durable one whose directory has no stash-tag file (a new directory, or
// one whose data was dropped). A damaged tag file counts as data: the
// stash finds the damage as it opens (adoptStashTag).
func (sn *stashNode) startsEmpty() bool {
	s := sn.s
	p, ok := s.cfg.PoolByName(sn.n.opts.Pool)
	if !ok || p.Volatile() && !p.LocalLog {
		return true
	}
	if p.LocalLog && !locallog.Exists(s.opts.FS, filepath.Join(s.opts.Dir, "stash")) {
		return true
	}
	exists, err := fsys.Exists(s.opts.FS, filepath.Join(s.opts.Dir, stashTagFile))
	return err == nil && !exists
}

// adoptStashTag makes the stash directory belong to tag, the one the
// controller gave: data of another tag (one that was replaced while this
// node was away, so its shards live elsewhere now) is removed first. A
// damaged tag file returns a *fsys.DamageError and changes nothing: whose
// data the directory holds is unknown. legacy reports a tag file written
// before checksums (the caller rewrites it once the stash opened).
func (sn *stashNode) adoptStashTag(pool config.Pool, tag kv.Tag) (legacy bool, err error) {
	s := sn.s
	if pool.Volatile() && !pool.LocalLog {
		return false, nil
	}
	f := fsys.Or(s.opts.FS)
	path := filepath.Join(s.opts.Dir, stashTagFile)
	want := strconv.FormatUint(uint64(tag), 10)
	b, legacy, err := fsys.ReadChecked(f, path)
	switch {
	case err == nil:
		got := strings.TrimSpace(string(b))
		if _, perr := strconv.ParseUint(got, 10, 32); perr != nil {
			return false, fsys.Damaged(path, "holds %q, not a stash tag", b)
		}
		if got == want {
			return legacy, nil
		}
		s.logger.Warn("this stash was replaced while it was away: its data is dropped and it joins as a new stash",
			"old_tag", got, "tag", tag)
	case errors.Is(err, fs.ErrNotExist) || os.IsNotExist(err):
	default:
		return false, err
	}
	if err := f.RemoveAll(filepath.Join(s.opts.Dir, "stash")); err != nil {
		return false, fmt.Errorf("server: drop a replaced stash's data: %w", err)
	}
	return false, sn.writeStashTag(tag)
}

// writeStashTag records, checksummed, that the stash directory's data
// belongs to tag.
func (sn *stashNode) writeStashTag(tag kv.Tag) error {
	s := sn.s
	return fsys.WriteChecked(s.opts.FS, filepath.Join(s.opts.Dir, stashTagFile), []byte(strconv.FormatUint(uint64(tag), 10)+"\n"))
}
