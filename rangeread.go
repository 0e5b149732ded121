package distash

import (
	"bytes"
	"context"
	"time"

	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/shardmap"
	"github.com/distash/distash/internal/wire"
)

// GetRange returns the pairs in [begin, end) in key order (reverse order
// with opts.Reverse), at most opts.Limit of them (0: all), merged with the
// transaction's own writes. The read conflict covers what was read: the
// whole range, or up to the last key returned when the limit stopped it.
func (tr *Tx) GetRange(begin, end []byte, opts RangeOptions) ([]KeyValue, error) {
	return tr.getRange(begin, end, opts, false)
}

func (tr *Tx) getRange(begin, end []byte, opts RangeOptions, snapshot bool) ([]KeyValue, error) {
	tr.mu.Lock()
	if err := tr.usable(); err != nil {
		tr.mu.Unlock()
		return nil, err
	}
	tr.mu.Unlock()
	if len(begin) > kv.MaxKeyBytes || len(end) > kv.MaxKeyBytes+1 {
		return nil, errorf(kv.CodeKeyTooLarge, "range bound longer than %d bytes", kv.MaxKeyBytes)
	}
	if bytes.Compare(begin, end) >= 0 {
		return nil, nil
	}
	tr.mu.Lock()
	system := tr.readSystemKeys
	tr.snapshotRead = tr.snapshotRead || snapshot
	tr.mu.Unlock()
	if !system && bytes.Compare(end, kv.SystemPrefix) > 0 {
		if bytes.Compare(begin, kv.SystemPrefix) >= 0 {
			return nil, errorf(kv.CodeKeyOutsidePools, "range [%.60q, %.60q) is in the system key space; call tr.Options().SetReadSystemKeys() to read it", begin, end)
		}
		end = kv.SystemPrefix // user keys only, as if the system space were not there
	}
	shards := tr.db.shards.Load().Intersect(begin, end)
	if len(shards) == 0 {
		return nil, errorf(kv.CodeKeyOutsidePools, "range [%.60q, %.60q) is in no pool", begin, end)
	}
	tr.mu.Lock()
	var local []*localWrite
	tr.writes.ascendRange(begin, end, func(w *localWrite) bool {
		cp := *w
		cp.ops = append([]kv.Mutation(nil), w.ops...)
		local = append(local, &cp)
		return true
	})
	cleared := append([]kv.KeyRange(nil), tr.cleared...)
	tr.mu.Unlock()
	if opts.Reverse {
		for i, j := 0, len(local)-1; i < j; i, j = i+1, j-1 {
			local[i], local[j] = local[j], local[i]
		}
		for i, j := 0, len(shards)-1; i < j; i, j = i+1, j-1 {
			shards[i], shards[j] = shards[j], shards[i]
		}
	}
	inCleared := func(k []byte) bool {
		for _, r := range cleared {
			if r.Contains(k) {
				return true
			}
		}
		return false
	}
	page := 0
	if opts.Limit > 0 {
		page = opts.Limit + len(local) + 16
	}
	it := &rangeIter{tr: tr, shards: shards, reverse: opts.Reverse, page: page}
	if err := it.readVersion(); err != nil {
		return nil, err
	}
	first := func(a, b []byte) int { // <0 when a comes first in scan order
		c := bytes.Compare(a, b)
		if opts.Reverse {
			return -c
		}
		return c
	}

	var out []KeyValue
	var lastKey []byte
	stopped := false
	li := 0
	for {
		if opts.Limit > 0 && len(out) >= opts.Limit {
			stopped = true
			break
		}
		dk, dv, dok, err := it.peek()
		if err != nil {
			return nil, err
		}
		if li >= len(local) && !dok {
			break
		}
		if li < len(local) && (!dok || first(local[li].key, dk) <= 0) {
			w := local[li]
			li++
			var base []byte
			basePresent := false
			if dok && bytes.Equal(w.key, dk) {
				base, basePresent = dv, true
				it.next()
			}
			if inCleared(w.key) && !w.baseKnown {
				basePresent = false
			}
			if v, ok := w.resolve(base, basePresent); ok {
				out = append(out, KeyValue{Key: w.key, Value: v})
			}
			lastKey = w.key
			continue
		}
		it.next()
		lastKey = dk
		if inCleared(dk) {
			continue
		}
		out = append(out, KeyValue{Key: dk, Value: dv})
	}
	if !snapshot {
		r := kv.KeyRange{Begin: clone(begin), End: clone(end)}
		if stopped && lastKey != nil {
			if opts.Reverse {
				r.Begin = clone(lastKey)
			} else {
				r.End = kv.KeyAfter(lastKey)
			}
		}
		tr.mu.Lock()
		tr.addReadConflict(r)
		tr.mu.Unlock()
	}
	return out, nil
}

// rangeIter streams the database's pairs of a range, shard by shard, page
// by page, in scan order.
type rangeIter struct {
	tr      *Tx
	rv      kv.Version
	shards  []shardmap.Shard // clipped to the range, in key order (reversed for a reverse read)
	reverse bool
	page    int

	buf   []*wire.KeyValue
	pos   int
	more  bool // the current shard has more after buf
	cur   int  // index of the current shard
	began bool

	// atLatest asks the next fetch at the stash's newest version, which
	// it sets in at (the first page racing the read version).
	atLatest bool
	at       kv.Version
}

// readVersion sets rv: the first page, of a range one shard holds, races
// the transaction's read version (Tx.raceReadVersion) and is kept if the
// stash's version wins; otherwise the read version.
func (it *rangeIter) readVersion() error {
	raced, err := it.tr.raceReadVersion(func() bool { return len(it.shards) == 1 }, func() (kv.Version, error) {
		it.atLatest = true
		err := it.fetch()
		it.atLatest = false
		return it.at, err
	})
	if err != nil {
		return err
	}
	if raced {
		it.rv = it.at
		return nil
	}
	it.buf, it.pos, it.more, it.cur, it.began = nil, 0, false, 0, false
	it.rv, err = it.tr.getReadVersion()
	return err
}

func (it *rangeIter) peek() ([]byte, []byte, bool, error) {
	for it.pos >= len(it.buf) {
		if err := it.fetch(); err != nil {
			return nil, nil, false, err
		}
		if it.pos >= len(it.buf) && it.cur >= len(it.shards) {
			return nil, nil, false, nil
		}
	}
	kvp := it.buf[it.pos]
	return kvp.Key, kvp.Value, true, nil
}

func (it *rangeIter) next() { it.pos++ }

// fetch reads the next page: the rest of the current shard, or the next shard.
func (it *rangeIter) fetch() error {
	if it.cur >= len(it.shards) {
		return nil
	}
	s := it.shards[it.cur]
	begin, end := s.Begin, s.End
	if it.began && it.more {
		last := it.buf[len(it.buf)-1].Key
		if it.reverse {
			end = last
		} else {
			begin = kv.KeyAfter(last)
		}
	} else if it.began {
		it.cur++
		it.began = false
		it.buf, it.pos = nil, 0
		return nil
	}
	var resp *wire.ReadRangeResponse
	for attempt := 0; ; attempt++ {
		db, ctx := it.tr.db, it.tr.ctx
		id, err := db.pickFor(s)
		if err != nil {
			return err
		}
		n, err := db.stashNode(id)
		if err == nil {
			req := &wire.ReadRangeRequest{
				Stash: id, Version: int64(it.rv), Begin: begin, End: end, Limit: int32(it.page), Reverse: it.reverse,
				ReadSystemKeys: bytes.Compare(end, kv.SystemPrefix) > 0, AtLatest: it.atLatest,
			}
			err = db.readStash(ctx, id, func(ctx context.Context, timeout time.Duration) (err error) {
				resp, err = n.readRange(ctx, timeout, req)
				return err
			})
			if err == nil {
				err = fromWire(resp.Error)
			}
		}
		if err != nil {
			// A failed stash is marked down: another replica serves.
			err = db.readFailed(ctx, id, err)
			if readRetryable(ctx, err) && attempt < 3 {
				continue
			}
			return err
		}
		break
	}
	it.began = true
	it.at = kv.Version(resp.Version)
	it.buf, it.pos, it.more = resp.Kvs, 0, resp.More
	if len(resp.Kvs) == 0 {
		it.more = false
	}
	if !it.more && len(resp.Kvs) == 0 {
		it.cur++
		it.began = false
	}
	return nil
}
