package proxy

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/logentry"
)

// fakeLog is the log as the commit proxy sees it (Appender), in memory,
// with the rules of txlog.Log the proxy relies on: appends must chain
// (Version above the last appended, PrevVersion equal to it), an entry
// commits only if its PrevVersion is the last committed entry's version (an
// entry chained onto a lost one is refused, definitely not committed), an
// entry of an epoch below the log's is refused with ErrStaleEpoch, and
// Resync returns the last committed version and rechains appends on it.
//
// Faults: failNext makes the next appends fail with a result unknown to the
// proxy, each landing in the log or not; hold keeps appends waiting (a slow
// disk) until the returned release is called.
type fakeLog struct {
	mu           sync.Mutex
	committed    []logentry.Entry
	last         kv.Version // version of the last committed entry
	lastAppended kv.Version
	epoch        uint64
	held         []pendingAppend // appends waiting for release, in order
	holding      bool
	faults       []bool // per next append to fail: whether its entry lands all the same
	outOfOrder   int    // appends that broke the chain: a bug of the proxy
	changed      chan struct{}
}

type pendingAppend struct {
	e            logentry.Entry
	finish       func(error)
	fail, landed bool // a fault: the proxy hears errUnknown, the entry is in the log if landed
}

var errUnknown = errors.New("fakelog: commit result unknown")

func newFakeLog() *fakeLog { return &fakeLog{changed: make(chan struct{})} }

// notifyLocked wakes waitFor.
func (l *fakeLog) notifyLocked() {
	close(l.changed)
	l.changed = make(chan struct{})
}

func (l *fakeLog) Append(e *logentry.Entry) *logentry.Future {
	f, finish := logentry.NewFuture(e.Version)
	l.mu.Lock()
	defer l.mu.Unlock()
	defer l.notifyLocked()
	// Before the chain check, as txlog's: a deposed proxy's entry must not
	// disturb the chain.
	if e.Epoch < l.epoch {
		finish(fmt.Errorf("%w: entry %d of epoch %d, the log is at epoch %d", logentry.ErrStaleEpoch, e.Version, e.Epoch, l.epoch))
		return f
	}
	if e.Version <= l.lastAppended || e.PrevVersion != l.lastAppended {
		l.outOfOrder++
		finish(fmt.Errorf("fakelog: entry %d with prev %d after %d", e.Version, e.PrevVersion, l.lastAppended))
		return f
	}
	l.lastAppended = e.Version
	p := pendingAppend{e: *e, finish: finish}
	if len(l.faults) > 0 {
		p.fail, p.landed, l.faults = true, l.faults[0], l.faults[1:]
	}
	if l.holding {
		l.held = append(l.held, p)
	} else {
		l.commitLocked(p)
	}
	return f
}

// commitLocked decides an append as the replicated log would.
func (l *fakeLog) commitLocked(p pendingAppend) {
	var err error
	switch {
	case p.e.Epoch < l.epoch: // a generation began while it waited
		err = fmt.Errorf("%w: entry %d of epoch %d, the log is at epoch %d", logentry.ErrStaleEpoch, p.e.Version, p.e.Epoch, l.epoch)
	case p.e.PrevVersion != l.last:
		err = fmt.Errorf("fakelog: entry %d chains on %d, the log's last is %d", p.e.Version, p.e.PrevVersion, l.last)
	case p.fail && !p.landed:
		err = errUnknown // lost
	default:
		l.committed = append(l.committed, p.e)
		l.last = p.e.Version
		if p.fail {
			err = errUnknown // committed, but the proxy is not told so
		}
	}
	p.finish(err)
}

func (l *fakeLog) Resync(ctx context.Context) (kv.Version, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.held) > 0 {
		return 0, errors.New("fakelog: Resync with appends in flight")
	}
	l.lastAppended = l.last
	return l.last, nil
}

// failNext makes the next len(land) appends fail with errUnknown; the i-th
// is in the log all the same if land[i].
func (l *fakeLog) failNext(land ...bool) {
	l.mu.Lock()
	l.faults = append(l.faults, land...)
	l.mu.Unlock()
}

// setEpoch starts a newer generation: entries of older epochs are refused.
func (l *fakeLog) setEpoch(epoch uint64) {
	l.mu.Lock()
	l.epoch = epoch
	l.mu.Unlock()
}

// hold keeps appends waiting until release, which decides them in order.
func (l *fakeLog) hold() (release func()) {
	l.mu.Lock()
	l.holding = true
	l.mu.Unlock()
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.holding = false
		for _, p := range l.held {
			l.commitLocked(p)
		}
		l.held = nil
	}
}

// waitFor waits until cond, called with the log locked, holds.
func (l *fakeLog) waitFor(ctx context.Context, cond func() bool) error {
	for {
		l.mu.Lock()
		ok, ch := cond(), l.changed
		l.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// messages returns what tag would peek: per committed entry with
// mutations for tag, those mutations.
func (l *fakeLog) messages(tag kv.Tag) []logentry.Message {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []logentry.Message
	for _, e := range l.committed {
		var muts []kv.Mutation
		for _, m := range e.Mutations {
			for _, t := range m.Tags {
				if t == tag {
					muts = append(muts, m.Mutation)
					break
				}
			}
		}
		if len(muts) > 0 {
			out = append(out, logentry.Message{Version: e.Version, Mutations: muts})
		}
	}
	return out
}

// hasCommitted reports whether the entry at version v is in the log.
func (l *fakeLog) hasCommitted(v kv.Version) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.committed {
		if e.Version == v {
			return true
		}
	}
	return false
}

// keys returns the keys tag would peek.
func (l *fakeLog) keys(tag kv.Tag) map[string]bool {
	out := map[string]bool{}
	for _, m := range l.messages(tag) {
		for _, mut := range m.Mutations {
			out[string(mut.Key)] = true
		}
	}
	return out
}
