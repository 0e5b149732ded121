// Package logentry holds the transaction log's values as its writers and
// readers see them: the Entry a commit proxy appends (one per commit
// batch, its mutations tagged with the stashes that must apply them), the
// Message a stash peeks for its tag, the Future of an append, and the
// errors callers of the log match on.
//
// The log itself (internal/txlog) replicates entries with raft on Pebble;
// this package has neither, so the roles on either side of the log (the
// commit proxy, the stashes, the log's RPC client) and their tests, with
// fake logs, do not link them.
package logentry

import (
	"context"
	"errors"

	"github.com/distash/distash/internal/kv"
)

// TaggedMutation is a mutation with the tags of every stash that must apply
// it.
type TaggedMutation struct {
	kv.Mutation
	Tags []kv.Tag
}

// Entry is one commit batch: all mutations committed at Version. PrevVersion
// is the Version of the previous entry (0 for the first entry of a log).
// Epoch is the generation of the commit proxy that appends it (see
// txlog.Log.BeginGeneration; 0 in embedded mode): the log rejects an entry
// of an epoch below its own.
type Entry struct {
	Version, PrevVersion kv.Version
	Epoch                uint64
	Mutations            []TaggedMutation
}

// Message is the part of one Entry for one tag.
type Message struct {
	Version   kv.Version
	Mutations []kv.Mutation
}

var (
	// ErrTrimmed is returned by a log's Peek for a version below what the
	// log has already dropped.
	ErrTrimmed = errors.New("txlog: version already popped")
	// ErrStaleEpoch is returned by BeginGeneration for an epoch not above
	// the log's, and (through the Future) by Append for an entry whose Epoch
	// is below the log's: a newer commit proxy took over. Such an entry is
	// definitely not in the log.
	ErrStaleEpoch = errors.New("txlog: stale epoch")
)

// Future is the result of an Append.
type Future struct {
	version kv.Version
	done    chan struct{}
	err     error
}

// NewFuture returns the future of the append of the entry at version v,
// and the function that gives its result: the log that appends the entry
// calls it exactly once.
func NewFuture(v kv.Version) (*Future, func(error)) {
	f := &Future{version: v, done: make(chan struct{})}
	return f, f.finish
}

func (f *Future) finish(err error) {
	f.err = err
	close(f.done)
}

// Version is the appended entry's version.
func (f *Future) Version() kv.Version { return f.version }

// Done is closed once the result is known.
func (f *Future) Done() <-chan struct{} { return f.done }

// Err is the result once Done is closed: nil when the entry is committed by
// a raft quorum (fsynced) and applied.
func (f *Future) Err() error {
	select {
	case <-f.done:
		return f.err
	default:
		return nil
	}
}

// Wait waits for the result. A ctx error says nothing about the entry.
func (f *Future) Wait(ctx context.Context) error {
	select {
	case <-f.done:
		return f.err
	case <-ctx.Done():
		return ctx.Err()
	}
}
