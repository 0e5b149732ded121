package stash

import (
	"sync"

	"github.com/distash/distash/internal/engine"
	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/logentry"
	"github.com/distash/distash/internal/shardmap"
)

// Applying a batch reads the old value of every key it writes (exact byte
// accounting, atomic operations): from the window, or else from the
// engine. apply holds mu exclusively, so an engine read there — a device
// read on a slow disk — stalled every read of the stash behind it: on
// emulated SSDs (bench graph) most readers were found waiting for mu
// while a batch of dependency records read its old values one after
// another. prefetchOld reads those engine values first, without mu and
// several at a time; current uses them.
//
// A prefetched value is only taken for a key the window did not hold at
// prefetch time and still does not hold (the window wins), and only if no
// engine write other than a flush happened since (engEpoch). A flush
// writes only keys the window holds, and only apply (this goroutine) adds
// keys to the window, so it cannot change such a key's engine value in
// between. Anything else falls back to the engine read under mu.

// prefetchReaders bounds the concurrent engine reads of one prefetch.
const prefetchReaders = 8

type oldValue struct {
	value   []byte
	present bool
}

// prefetched are engine values read by prefetchOld at engine epoch epoch.
type prefetched struct {
	epoch uint64
	vals  map[string]oldValue
}

// writeEngine is eng.Apply for every engine write but a flush's: it
// advances engEpoch around the write (odd while it runs), so that a
// prefetch that overlapped it is not used.
func (s *Stash) writeEngine(b *engine.Batch) error {
	s.engEpoch.Add(1)
	defer s.engEpoch.Add(1)
	return s.eng.Apply(b)
}

// prefetchOld reads from the engine the old values apply will need for
// msgs: keys of sets, clears and atomic operations the window does not
// hold. nil when there is nothing to read or it cannot help.
func (s *Stash) prefetchOld(msgs []logentry.Message) *prefetched {
	if !s.opts.TrackBytes {
		return nil
	}
	epoch := s.engEpoch.Load()
	if epoch%2 == 1 {
		return nil // an engine write is under way
	}
	seen := map[string]bool{}
	var keys [][]byte
	s.mu.RLock()
	for _, m := range msgs {
		if m.Version <= s.applied {
			continue
		}
		for _, mut := range m.Mutations {
			switch mut.Type {
			case kv.MutSet, kv.MutClear, kv.MutAdd, kv.MutMax, kv.MutMin:
			default:
				continue
			}
			if shardmap.IsAssign(mut.Key) || seen[string(mut.Key)] {
				continue
			}
			seen[string(mut.Key)] = true
			if _, _, found := s.win.at(mut.Key, maxVersion); !found {
				keys = append(keys, mut.Key)
			}
		}
	}
	s.mu.RUnlock()
	if len(keys) == 0 {
		return nil
	}
	p := &prefetched{epoch: epoch, vals: make(map[string]oldValue, len(keys))}
	vals := make([]oldValue, len(keys))
	ok := make([]bool, len(keys))
	read := func(i int) {
		v, present, err := engine.Peek(s.eng, keys[i])
		if err == nil { // an error is met again, and reported, under mu
			vals[i], ok[i] = oldValue{value: v, present: present}, true
		}
	}
	if len(keys) == 1 {
		read(0)
	} else {
		var wg sync.WaitGroup
		next := make(chan int)
		for range min(prefetchReaders, len(keys)) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range next {
					read(i)
				}
			}()
		}
		for i := range keys {
			next <- i
		}
		close(next)
		wg.Wait()
	}
	for i, k := range keys {
		if ok[i] {
			p.vals[string(k)] = vals[i]
		}
	}
	return p
}

// prefetchedOld is key's prefetched engine value, if still valid. Called
// with mu held, after the window missed.
func (s *Stash) prefetchedOld(key []byte) (oldValue, bool) {
	p := s.pre
	if p == nil || s.engEpoch.Load() != p.epoch {
		return oldValue{}, false
	}
	v, ok := p.vals[string(key)]
	return v, ok
}
