package flash

import (
	"github.com/distash/distash/internal/fsys"
)

// The cleaner. A sealed segment whose live entries fill less than
// Config.GCLiveRatio of it is cleaned: its live entries (those the index
// still points at) are appended to the head of the log in relocation
// frames, then the segment leaves the engine and its file is deleted once
// no reader has it pinned. Relocated entries get new sequence numbers, so
// the log stays in order and recovery needs no special case.
//
// A deletion must outlive every older record of its key, or recovery
// would bring the key back: a tombstone is relocated while its key is
// absent and an older segment (by id, including removed segments whose
// files are not deleted yet) may hold the key according to its Bloom
// filter. Relocated tombstones count as live in their new segment.

const relocationFrameBytes = 4 << 20

func (e *Engine) gcLoop() {
	defer close(e.gcDone)
	for {
		select {
		case <-e.gcStop:
			return
		case <-e.gcKick:
			e.collect()
		}
	}
}

// maybeKickGC wakes the cleaner when enough garbage has accumulated in
// sealed segments since it last ran. The caller holds wmu.
func (e *Engine) maybeKickGC() {
	if e.deadKick < e.cfg.SegmentBytes/4 {
		return
	}
	e.deadKick = 0
	select {
	case e.gcKick <- struct{}{}:
	default:
	}
}

// CollectGarbage cleans, now, every sealed segment whose live share is
// below Config.GCLiveRatio, and deletes the files of cleaned segments no
// reader holds.
func (e *Engine) CollectGarbage() error {
	if e.closed.Load() {
		return ErrClosed
	}
	return e.collect()
}

func (e *Engine) collect() error {
	e.gcMu.Lock()
	defer e.gcMu.Unlock()
	tried := make(map[uint32]bool)
	for !e.closed.Load() {
		s := e.victim(tried)
		if s == nil {
			break
		}
		tried[s.id] = true
		err := e.clean(s)
		s.unpin()
		if err != nil {
			return err
		}
	}
	e.reap()
	return nil
}

// victim returns the sealed segment with the lowest live share below the
// threshold, pinned, or nil.
func (e *Engine) victim(skip map[uint32]bool) *segment {
	e.mu.RLock()
	defer e.mu.RUnlock()
	var best *segment
	bestRatio := e.cfg.GCLiveRatio
	for _, s := range e.segs {
		if s == e.active || skip[s.id] || s.size <= segHeaderSize {
			continue
		}
		r := float64(s.live+s.tomb) / float64(s.size-segHeaderSize)
		if r < bestRatio {
			best, bestRatio = s, r
		}
	}
	if best != nil {
		best.pin()
	}
	return best
}

type relocation struct {
	ent entry
	l   loc
	off int // in the relocation frame
}

// clean relocates s's live entries (and needed tombstones) and removes s.
func (e *Engine) clean(s *segment) error {
	e.mu.RLock()
	size := s.size
	e.mu.RUnlock()
	data := make([]byte, size)
	if n, err := s.wf.ReadAt(data, 0); int64(n) < size {
		return readErr(s, int64(n), err)
	}
	var ents []relocation
	_, err := decodeSegment(s.path, s.id, data, false, 0, func(_ int, _ frameHeader, des []decodedEntry) {
		for _, d := range des {
			ents = append(ents, relocation{ent: d.entry, l: loc{seg: s.id, off: uint32(d.off), n: uint32(d.size)}})
		}
	})
	if err != nil {
		return err
	}

	for start := 0; start < len(ents); {
		e.wmu.Lock()
		if e.closed.Load() || e.failed != nil {
			err := e.failed
			e.wmu.Unlock()
			if err == nil {
				err = ErrClosed
			}
			return err
		}
		payload := make([]byte, frameHeaderSize, 64<<10)
		var moved []relocation
		var count uint32
		var tomb int64
		for ; start < len(ents) && len(payload) < relocationFrameBytes; start++ {
			r := ents[start]
			if r.ent.kind == kindSet {
				if it, ok := e.tree.Get(&item{key: r.ent.key}); !ok || it.loc != r.l {
					continue
				}
				r.off = len(payload)
				moved = append(moved, r)
				payload = appendEntry(payload, kindSet, r.ent.key, r.ent.value, r.ent.cost)
				count++
			} else if e.durable && e.tombstoneNeeded(s, r.ent.key) {
				payload = appendEntry(payload, kindDelete, r.ent.key, nil, 0)
				tomb += int64(pad8(r.ent.size))
				count++
			}
		}
		if count > 0 {
			dst, foff, err := e.writeFrame(payload, count, e.version.Load(), frameGC)
			if err != nil {
				e.wmu.Unlock()
				return err
			}
			e.mu.Lock()
			for _, r := range moved {
				it, ok := e.tree.Get(&item{key: r.ent.key})
				if !ok || it.loc != r.l {
					continue
				}
				e.relocateLocked(it, loc{seg: dst.id, off: uint32(foff) + uint32(r.off), n: r.l.n})
				if dst.keys != nil {
					dst.keys.Add(it.key)
				}
			}
			dst.tomb += tomb
			e.mu.Unlock()
			e.m.relocated.Add(int64(len(payload) - frameHeaderSize))
		}
		e.wmu.Unlock()
	}

	e.wmu.Lock()
	e.mu.Lock()
	removed := s.live == 0
	if removed {
		delete(e.segs, s.id)
		s.gone = true
		s.wb = nil
		e.zombies = append(e.zombies, s)
	}
	e.mu.Unlock()
	if removed && e.durable && e.failed == nil {
		// The relocated entries are synced: the manifest may drop s, and
		// must before its file goes, or the next Open would find a listed
		// segment missing.
		if err := e.writeManifest(); err != nil {
			e.failed = err
			e.keepFiles.Store(true) // the manifest on disk may still list s
			e.wmu.Unlock()
			return err
		}
	}
	e.wmu.Unlock()
	if removed {
		s.unpin() // the engine's reference
		e.m.gcRuns.Add(1)
	}
	return nil
}

// relocateLocked moves the tree item it to l. The caller holds wmu and mu.
func (e *Engine) relocateLocked(it *item, l loc) {
	moved := *it
	moved.loc = l
	e.tbl.Load().update(it.h, it.loc, l)
	n := int64(pad8(int(l.n)))
	if s := e.segs[it.loc.seg]; s != nil {
		s.live -= n
	}
	if s := e.segs[l.seg]; s != nil {
		s.live += n
	}
	e.tree.ReplaceOrInsert(&moved)
}

// tombstoneNeeded reports whether a deletion of key found in s must be
// kept. The caller holds wmu.
func (e *Engine) tombstoneNeeded(s *segment, key []byte) bool {
	if _, ok := e.tree.Get(&item{key: key}); ok {
		return false // set again since: the newer entry shadows older ones
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	for _, t := range e.segs {
		if t.id < s.id && t.keys != nil && t.keys.Test(key) {
			return true
		}
	}
	for _, t := range e.zombies {
		if t.id < s.id && t.keys != nil && t.keys.Test(key) {
			return true
		}
	}
	return false
}

// reap deletes the files of removed segments nobody has pinned. The caller
// holds gcMu.
func (e *Engine) reap() {
	e.mu.Lock()
	var keep, gone []*segment
	for _, z := range e.zombies {
		if z.refs.Load() <= 0 {
			gone = append(gone, z)
		} else {
			keep = append(keep, z)
		}
	}
	e.mu.Unlock()
	for _, z := range gone {
		z.closeFiles()
		if !e.keepFiles.Load() {
			e.fs.Remove(z.path)
		}
	}
	if len(gone) > 0 && e.durable {
		// Best effort: the manifest no longer lists these segments, so a
		// file that comes back after a crash is removed at the next Open.
		fsys.SyncDir(e.fs, e.dir)
	}
	e.mu.Lock()
	e.zombies = keep
	e.mu.Unlock()
}
