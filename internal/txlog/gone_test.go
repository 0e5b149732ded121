package txlog

import (
	"bytes"
	"errors"
	"testing"

	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/logentry"
)

// TestPeekAfterTrimOfOtherTags: a stash that was away while the log
// trimmed only other tags' messages catches up; one that missed a message
// of its own tag gets ErrTrimmed. Snapshots keep what each tag lost.
func TestPeekAfterTrimOfOtherTags(t *testing.T) {
	f := newFSM(0, discardLogger(), func() {})
	set := func(k string, tags ...kv.Tag) logentry.TaggedMutation {
		return logentry.TaggedMutation{Mutation: kv.Mutation{Type: kv.MutSet, Key: []byte(k), Param: []byte("v")}, Tags: tags}
	}
	for _, e := range []*logentry.Entry{
		{Version: 5, Mutations: []logentry.TaggedMutation{set("a", 1)}},
		{Version: 10, PrevVersion: 5, Mutations: []logentry.TaggedMutation{set("b", 2)}},
		{Version: 15, PrevVersion: 10, Mutations: []logentry.TaggedMutation{set("sys", 0)}},
		{Version: 20, PrevVersion: 15, Mutations: []logentry.TaggedMutation{set("c", 1)}},
	} {
		if err := f.applyLocked(encodeEntry(e)); err != nil {
			t.Fatal(err)
		}
	}
	// Tags 1 and 2 popped up to 12; tag 0 (a system stash that is away)
	// did not pop, but the tag set here is {1, 2}: the log trims to 12.
	if err := f.applyLocked(encodePop([]TagVersion{{Tag: 1, Version: 12}, {Tag: 2, Version: 12}})); err != nil {
		t.Fatal(err)
	}
	check := func(f *fsm, what string) {
		t.Helper()
		if msgs, _, err := f.peek(0, 0, 0); err != nil || len(msgs) != 1 || msgs[0].Version != 15 {
			t.Errorf("%s: tag 0 after 0: %v, %v; want its message at 15 (nothing of tag 0 was dropped)", what, msgs, err)
		}
		if _, _, err := f.peek(1, 4, 0); !errors.Is(err, logentry.ErrTrimmed) {
			t.Errorf("%s: tag 1 after 4: %v, want ErrTrimmed (its message at 5 is gone)", what, err)
		}
		if msgs, _, err := f.peek(1, 5, 0); err != nil || len(msgs) != 1 || msgs[0].Version != 20 {
			t.Errorf("%s: tag 1 after 5: %v, %v; want its message at 20", what, msgs, err)
		}
		if _, _, err := f.peek(2, 9, 0); !errors.Is(err, logentry.ErrTrimmed) {
			t.Errorf("%s: tag 2 after 9: %v, want ErrTrimmed", what, err)
		}
		if _, _, err := f.peek(3, 0, 0); err != nil {
			t.Errorf("%s: tag 3 (no messages ever) after 0: %v", what, err)
		}
	}
	check(f, "live")
	snap := snapshotBytes(t, f)
	nf, err := decodeSnapshot(snap, 0, discardLogger(), func() {})
	if err != nil {
		t.Fatal(err)
	}
	check(nf, "restored from a snapshot")
	if again := snapshotBytes(t, nf); !bytes.Equal(again, snap) {
		t.Error("snapshot of the restored state differs")
	}

	// An old (version 1) snapshot does not say what each tag lost: every
	// tag counts as having lost everything up to the trim.
	old := body(t, &fsmSnapshot{last: 20, trimmed: 12, goneFloor: 12})
	of, err := decodeSnapshot(withCRC(old), 0, discardLogger(), func() {})
	if err != nil {
		t.Fatal(err)
	}
	if old[4] != snapVersion {
		t.Fatalf("snapshot with its gone floor at trimmed written as version %d, want 1", old[4])
	}
	if _, _, err := of.peek(0, 0, 0); !errors.Is(err, logentry.ErrTrimmed) {
		t.Errorf("version 1 snapshot: tag 0 after 0: %v, want ErrTrimmed", err)
	}
}
