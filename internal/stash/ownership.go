package stash

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"

	"github.com/distash/distash/internal/fsys"
	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/version"
)

// A stash's ownership says, per key range, what it does with the range:
// serves it (reads at versions from From on) or fetches it (a move's
// destination: its writes are buffered until the copy from a source
// replica is done). Ownership changes only at the versions of the private
// assignment mutations the commit proxy adds to shard map changes, so a
// stash and the shard map agree at every version.
//
// Invariants (mu held for every access):
//  1. cur holds non-overlapping ranges sorted by Begin.
//  2. A key's mutations reach the window only if a serving range of cur
//     holds it; a fetching range buffers them; other keys' are dropped.
//  3. A dropped serving range moves to past with Until = the version it
//     was dropped at, and stays readable below Until until the MVCC window
//     passes it.

type ownState uint8

const (
	serving ownState = iota + 1
	fetching
)

func (s ownState) String() string {
	switch s {
	case serving:
		return "serving"
	case fetching:
		return "fetching"
	}
	return "none"
}

// ownRange is one range of a stash's ownership.
type ownRange struct {
	Begin []byte   `json:"b"`
	End   []byte   `json:"e"`
	State ownState `json:"s"`
	// From: serving, the first readable version; fetching, the version the
	// move began.
	From kv.Version `json:"f"`
	// Until: past serving ranges, the version they were dropped at.
	Until kv.Version `json:"u,omitempty"`
	// Sources: fetching, the team to copy from.
	Sources []kv.Tag `json:"src,omitempty"`
	// id names a fetching range for its fetch job; a range that is cut
	// gets new ids, so its job restarts.
	id uint64
}

func (r ownRange) covers(key []byte) bool {
	return bytes.Compare(key, r.Begin) >= 0 && bytes.Compare(key, r.End) < 0
}

// ownership is a stash's ownership table.
type ownership struct {
	cur  []ownRange
	past []ownRange
	// set is true once the table was loaded, set or changed: before, a
	// stash without ownership information applies every mutation it gets
	// (stashes made by tests and tools that never set any).
	set    bool
	nextID uint64
}

// lookup returns the index in cur of the range holding key, or -1.
func (o *ownership) lookup(key []byte) int {
	i := sort.Search(len(o.cur), func(i int) bool { return bytes.Compare(o.cur[i].End, key) > 0 })
	if i < len(o.cur) && o.cur[i].covers(key) {
		return i
	}
	return -1
}

// readable reports whether reads of [begin, end) at version v may be
// served: every part of it is in a range served at v.
func (o *ownership) readable(begin, end []byte, v kv.Version) bool {
	var ivs []ownRange
	for _, r := range o.cur {
		if r.State == serving && r.From <= v && bytes.Compare(r.End, begin) > 0 && bytes.Compare(r.Begin, end) < 0 {
			ivs = append(ivs, r)
		}
	}
	for _, r := range o.past {
		if r.From <= v && v < r.Until && bytes.Compare(r.End, begin) > 0 && bytes.Compare(r.Begin, end) < 0 {
			ivs = append(ivs, r)
		}
	}
	sort.Slice(ivs, func(i, j int) bool { return bytes.Compare(ivs[i].Begin, ivs[j].Begin) < 0 })
	at := begin
	for _, r := range ivs {
		if bytes.Compare(r.Begin, at) > 0 {
			return false
		}
		if bytes.Compare(r.End, at) > 0 {
			at = r.End
		}
		if bytes.Compare(at, end) >= 0 {
			return true
		}
	}
	return bytes.Compare(at, end) >= 0
}

// readableKey is readable(key, kv.KeyAfter(key), v) for the one key of a
// point read, without its allocations (the successor key, the list of
// ranges and their sort): [key, key\x00) holds key alone, so it is covered
// exactly when one range that readable would count holds key.
func (o *ownership) readableKey(key []byte, v kv.Version) bool {
	for _, r := range o.cur {
		if r.State == serving && r.From <= v && r.covers(key) {
			return true
		}
	}
	for _, r := range o.past {
		if r.From <= v && v < r.Until && r.covers(key) {
			return true
		}
	}
	return false
}

// servingRanges returns the ranges served now.
func (o *ownership) servingRanges() []kv.KeyRange {
	var out []kv.KeyRange
	for _, r := range o.cur {
		if r.State == serving {
			out = append(out, kv.KeyRange{Begin: r.Begin, End: r.End})
		}
	}
	return out
}

// role is what an assignment asks of a stash for a range.
type role uint8

const (
	roleNone role = iota // neither in the team nor a destination: drop it
	roleServe
	roleFetch
)

// change is what assign did to one piece of the assigned range, for the
// stash to act on (clear a dropped range, start a fetch).
type change struct {
	r       ownRange
	dropped bool // a serving range left (r.Until set)
	aborted bool // a fetching range left
	started bool // a fetching range began
}

// assign applies an assignment of [begin, end) at version v.
func (o *ownership) assign(begin, end []byte, rl role, sources []kv.Tag, v kv.Version) []change {
	o.set = true
	var kept, inside []ownRange
	for _, r := range o.cur {
		if bytes.Compare(r.End, begin) <= 0 || bytes.Compare(r.Begin, end) >= 0 {
			kept = append(kept, r)
			continue
		}
		cut := false
		if bytes.Compare(r.Begin, begin) < 0 {
			left := r
			left.End = begin
			kept = append(kept, left)
			r.Begin = begin
			cut = true
		}
		if bytes.Compare(r.End, end) > 0 {
			right := r
			right.Begin = end
			kept = append(kept, right)
			r.End = end
			cut = true
		}
		if cut && r.State == fetching {
			// Its job copied the whole old range: restart every piece.
			for i := range kept {
				if kept[i].State == fetching && kept[i].id == r.id {
					kept[i].id = o.newID()
				}
			}
			r.id = o.newID()
		}
		inside = append(inside, r)
	}
	var changes []change
	// Gaps of the assigned range that no current range holds.
	var gaps []ownRange
	at := begin
	for _, r := range inside {
		if bytes.Compare(r.Begin, at) > 0 {
			gaps = append(gaps, ownRange{Begin: slices.Clone(at), End: slices.Clone(r.Begin)})
		}
		at = r.End
	}
	if bytes.Compare(at, end) < 0 {
		gaps = append(gaps, ownRange{Begin: slices.Clone(at), End: slices.Clone(end)})
	}
	switch rl {
	case roleServe:
		kept = append(kept, inside...)
		for _, g := range gaps {
			// Served without a copy: only for a shard none of whose
			// replicas is left (an ephemeral pool starts it empty).
			g.State, g.From = serving, v
			kept = append(kept, g)
		}
	case roleFetch:
		kept = append(kept, inside...)
		for _, g := range gaps {
			g.State, g.From, g.Sources, g.id = fetching, v, slices.Clone(sources), o.newID()
			kept = append(kept, g)
			changes = append(changes, change{r: g, started: true})
		}
	case roleNone:
		for _, r := range inside {
			if r.State == serving {
				r.Until = v
				o.past = append(o.past, r)
				changes = append(changes, change{r: r, dropped: true})
			} else {
				changes = append(changes, change{r: r, aborted: true})
			}
		}
	}
	sort.Slice(kept, func(i, j int) bool { return bytes.Compare(kept[i].Begin, kept[j].Begin) < 0 })
	o.cur = coalesce(kept)
	return changes
}

// coalesce merges neighbouring serving ranges readable from the same version.
func coalesce(rs []ownRange) []ownRange {
	var out []ownRange
	for _, r := range rs {
		if n := len(out); n > 0 {
			last := &out[n-1]
			if last.State == serving && r.State == serving && last.From == r.From && bytes.Equal(last.End, r.Begin) {
				last.End = r.End
				continue
			}
		}
		out = append(out, r)
	}
	return out
}

func (o *ownership) newID() uint64 {
	o.nextID++
	return o.nextID
}

// forget drops past ranges no read can ask for any more (below minReadable).
func (o *ownership) forget(minReadable kv.Version) {
	kept := o.past[:0]
	for _, r := range o.past {
		if r.Until > minReadable {
			kept = append(kept, r)
		}
	}
	o.past = kept
}

// fetchingByID returns the current fetching range with id.
func (o *ownership) fetchingByID(id uint64) (ownRange, bool) {
	for _, r := range o.cur {
		if r.State == fetching && r.id == id {
			return r, true
		}
	}
	return ownRange{}, false
}

// nextFetch returns a fetching range, the first in key order.
func (o *ownership) nextFetch() (ownRange, bool) {
	for _, r := range o.cur {
		if r.State == fetching {
			return r, true
		}
	}
	return ownRange{}, false
}

// finish makes the fetching range id served from version v.
func (o *ownership) finish(id uint64, v kv.Version) bool {
	for i, r := range o.cur {
		if r.State == fetching && r.id == id {
			o.cur[i] = ownRange{Begin: r.Begin, End: r.End, State: serving, From: v}
			o.cur = coalesce(o.cur)
			return true
		}
	}
	return false
}

// ownershipFile keeps a durable stash's ownership across restarts as
// snapshots of cur by version: on restart the stash takes the newest
// snapshot at or below its engine's version (the log replays the
// assignments after it), so ownership and data always match.
const ownershipFile = "ownership.json"

type ownSnapshot struct {
	Version kv.Version `json:"v"`
	Ranges  []ownRange `json:"r"`
	// Format is the file's format version, in every snapshot so the file
	// stays the array it was (a binary of before format versions reads
	// it); absent (0) in a file written before versions: fsys.Unversioned.
	Format int `json:"format,omitempty"`
}

// OwnershipFormatKind and OwnershipFormat are the ownership file's format;
// bump OwnershipFormat with any change to its encoding.
const (
	OwnershipFormatKind = "stash-ownership"
	OwnershipFormat     = 1
)

func init() { version.RegisterFormat(OwnershipFormatKind, OwnershipFormat) }

// save records the snapshot of cur at version v in snaps, keeping older
// snapshots above durable (and the newest at or below it), and writes them
// to dir. The snapshots in memory are updated even when the write fails:
// the caller may write them again (writeOwnership). Called with mu held.
func (o *ownership) save(f fsys.FS, dir string, v, durable kv.Version, snaps *[]ownSnapshot) error {
	kept := (*snaps)[:0:0]
	base := -1
	for i, s := range *snaps {
		if s.Version <= durable {
			base = i
		}
	}
	for i, s := range *snaps {
		if i >= base && s.Version < v {
			kept = append(kept, s)
		}
	}
	kept = append(kept, ownSnapshot{Version: v, Ranges: slices.Clone(o.cur)})
	*snaps = kept
	return writeOwnership(f, dir, kept)
}

// writeOwnership writes snaps to dir's ownership file, checksummed
// (fsys.WriteChecked: atomic and durable).
func writeOwnership(f fsys.FS, dir string, snaps []ownSnapshot) error {
	if snaps == nil {
		snaps = []ownSnapshot{} // "[]": a stash that owns nothing of its own yet
	}
	for i := range snaps {
		snaps[i].Format = OwnershipFormat
	}
	b, err := json.Marshal(snaps)
	if err != nil {
		return err
	}
	if err := fsys.WriteChecked(f, filepath.Join(dir, ownershipFile), b); err != nil {
		return fmt.Errorf("stash: save ownership: %w", err)
	}
	return nil
}

// loadOwnership reads the snapshots of dir and returns the one in force at
// durable. exists is false when dir has no ownership file; found is false
// when it has none or an empty one (a stash that had no ownership of its
// own when it was written: SetOwned gives it one). A file that is damaged
// (checksum, length) or does not parse returns a *fsys.DamageError naming
// it. A file written before checksums is read as it is.
func loadOwnership(f fsys.FS, dir string, durable kv.Version) (snaps []ownSnapshot, at ownSnapshot, exists, found bool, err error) {
	path := filepath.Join(dir, ownershipFile)
	b, _, err := fsys.ReadChecked(f, path)
	if errors.Is(err, fs.ErrNotExist) || os.IsNotExist(err) {
		return nil, ownSnapshot{}, false, false, nil
	}
	if err != nil {
		return nil, ownSnapshot{}, true, false, fmt.Errorf("stash: load ownership: %w", err)
	}
	// A newer format is refused before its content is trusted; an array
	// parses in every format that keeps it one.
	var formats []struct {
		Format int `json:"format"`
	}
	if json.Unmarshal(b, &formats) == nil {
		for _, f := range formats {
			if err := version.CheckFormat(OwnershipFormatKind, max(f.Format, fsys.Unversioned), OwnershipFormat); err != nil {
				err.(*version.FormatError).Path = path
				return nil, ownSnapshot{}, true, false, err
			}
		}
	}
	if err := json.Unmarshal(b, &snaps); err != nil {
		return nil, ownSnapshot{}, true, false, fsys.Damaged(path, "does not parse: %v", err)
	}
	if len(snaps) == 0 {
		return nil, ownSnapshot{}, true, false, nil
	}
	// With no snapshot at or below durable, the stash owned nothing then:
	// the log replays its first assignments.
	for _, s := range snaps {
		if s.Version <= durable {
			at = s
		}
	}
	return snaps, at, true, true, nil
}
