package backup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/distash/distash"
	"github.com/distash/distash/internal/kv"
)

// RestoreOptions choose what a restore writes.
type RestoreOptions struct {
	// Version to restore (0: the last restorable one, or Timestamp's).
	Version kv.Version
	// Timestamp, if not zero, restores the last version committed at or
	// before it (versions are microseconds since the Unix epoch).
	Timestamp time.Time
	// Pools restores only these pools (nil: every backed-up pool).
	Pools []string
	// PrefixMap rewrites keys: a key beginning with a pair's Old gets New
	// in its place (the first pair that matches).
	PrefixMap []PrefixRewrite
	// Progress receives progress lines (nil: none).
	Progress io.Writer
	// TxnBytes bounds one restore transaction (default 1 MB).
	TxnBytes int
}

// PrefixRewrite is one --prefix-map pair.
type PrefixRewrite struct{ Old, New []byte }

// ParsePrefixMap parses "old=new" (with \xNN escapes already resolved by
// the caller) pairs.
func ParsePrefixMap(pairs []string) ([]PrefixRewrite, error) {
	var out []PrefixRewrite
	for _, p := range pairs {
		old, nw, ok := strings.Cut(p, "=")
		if !ok {
			return nil, fmt.Errorf("restore: --prefix-map %q: want old=new", p)
		}
		out = append(out, PrefixRewrite{Old: []byte(old), New: []byte(nw)})
	}
	return out, nil
}

func (o *RestoreOptions) mapKey(k []byte) []byte {
	for _, r := range o.PrefixMap {
		if bytes.HasPrefix(k, r.Old) {
			return append(append([]byte(nil), r.New...), k[len(r.Old):]...)
		}
	}
	return k
}

// mapRange maps a backed-up range [b, e) onto the target: a range inside a
// rewritten prefix moves with it.
func (o *RestoreOptions) mapRange(r kv.KeyRange) kv.KeyRange {
	for _, p := range o.PrefixMap {
		if bytes.HasPrefix(r.Begin, p.Old) {
			end := kv.PrefixEnd(p.New)
			if bytes.HasPrefix(r.End, p.Old) && len(r.End) > len(p.Old) {
				end = o.mapKey(r.End)
			}
			return kv.KeyRange{Begin: o.mapKey(r.Begin), End: end}
		}
	}
	return r
}

func (o *RestoreOptions) progressf(format string, args ...any) {
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, format+"\n", args...)
	}
}

// ReadManifest returns the backup's manifest.
func ReadManifest(ctx context.Context, dest Destination) (*Manifest, error) {
	b, err := dest.Get(ctx, ManifestName)
	if err != nil {
		return nil, fmt.Errorf("backup: %s holds no backup: %w", dest, err)
	}
	return decodeManifest(b)
}

// ChooseVersion returns the version a restore with o reaches in m.
func ChooseVersion(m *Manifest, o RestoreOptions) (kv.Version, error) {
	from, to, ok := m.Restorable()
	if !ok {
		return 0, errors.New("restore: the backup has no restorable version yet (its first snapshot is not complete)")
	}
	v := to
	switch {
	case o.Version != 0:
		v = o.Version
	case !o.Timestamp.IsZero():
		v = kv.Version(o.Timestamp.UnixMicro())
		if v > to {
			return 0, fmt.Errorf("restore: %s is after the last restorable time %s (version %d)", o.Timestamp.Format(time.RFC3339Nano), versionTime(to), to)
		}
	}
	if v < from || v > to {
		return 0, fmt.Errorf("restore: version %d is outside the restorable range [%d, %d] (%s to %s)", v, from, to, versionTime(from), versionTime(to))
	}
	return v, nil
}

// versionTime is the wall-clock time of a version.
func versionTime(v kv.Version) string {
	return time.UnixMicro(int64(v)).UTC().Format(time.RFC3339Nano)
}

// Restore writes the backed-up data as of a version (RestoreOptions) into
// the cluster of db, whose target ranges must be empty. Every file read is
// checked against its checksum; a damaged one fails the restore, named.
// It returns the version restored.
func Restore(ctx context.Context, dest Destination, db *distash.DB, o RestoreOptions) (kv.Version, error) {
	if o.TxnBytes <= 0 {
		o.TxnBytes = 1 << 20
	}
	m, err := ReadManifest(ctx, dest)
	if err != nil {
		return 0, err
	}
	v, err := ChooseVersion(m, o)
	if err != nil {
		return 0, err
	}
	ranges, err := selectRanges(m, o.Pools)
	if err != nil {
		return 0, err
	}
	// The target ranges must be empty: a restore never mixes with data.
	for _, r := range ranges {
		t := o.mapRange(r)
		var kvs []distash.KeyValue
		err := db.ReadTransact(ctx, func(tr *distash.Tx) error {
			var err error
			kvs, err = tr.Snapshot().GetRange(t.Begin, t.End, distash.RangeOptions{Limit: 1})
			return err
		})
		if err != nil {
			return 0, fmt.Errorf("restore: check that [%q, %q) is empty: %w", t.Begin, t.End, err)
		}
		if len(kvs) > 0 {
			return 0, fmt.Errorf("restore: refused: the target range [%q, %q) is not empty (it holds %q); restore only into empty ranges (clear them, or use --prefix-map)", t.Begin, t.End, kvs[0].Key)
		}
	}
	var files []RangeFile
	for _, f := range m.RangeFiles {
		if inRanges(ranges, f.Begin) {
			if f.Version > v {
				return 0, fmt.Errorf("restore: %s is of version %d, after %d", f.Name, f.Version, v)
			}
			files = append(files, f)
		}
	}
	slices.SortFunc(files, func(a, b RangeFile) int { return bytes.Compare(a.Begin, b.Begin) })
	var logs []LogFile
	for _, f := range m.LogFiles {
		if f.From >= v {
			break
		}
		logs = append(logs, f)
	}
	o.progressf("restore: version %d (%s) from %s: %d range files, %d log files", v, versionTime(v), dest, len(files), len(logs))
	// Every file is checked before anything is written: a damaged backup
	// leaves the target as it was. Files are read one at a time, here and
	// below, so memory holds one file (and one transaction), whatever
	// the backup's size.
	for _, f := range files {
		if err := checkFile(ctx, dest, f.FileInfo); err != nil {
			return 0, err
		}
	}
	for _, f := range logs {
		if err := checkFile(ctx, dest, f.FileInfo); err != nil {
			return 0, err
		}
	}
	// The snapshot: each range file's pairs, as of its version.
	w := &writer{db: db, o: &o}
	for i, f := range files {
		data, err := getChecked(ctx, dest, f.FileInfo)
		if err != nil {
			return 0, err
		}
		begin, end, fv, pairs, err := decodeRange(data)
		if err != nil {
			return 0, fmt.Errorf("restore: %s: %w", f.Name, err)
		}
		if !bytes.Equal(begin, f.Begin) || !bytes.Equal(end, f.End) || fv != f.Version {
			return 0, fmt.Errorf("restore: %s holds [%q, %q) at %d, the manifest says [%q, %q) at %d", f.Name, begin, end, fv, f.Begin, f.End, f.Version)
		}
		for _, p := range pairs {
			if err := w.set(ctx, p.key, p.value); err != nil {
				return 0, fmt.Errorf("restore: write the data of %s: %w", f.Name, err)
			}
		}
		if err := w.flush(ctx); err != nil {
			return 0, fmt.Errorf("restore: write the data of %s: %w", f.Name, err)
		}
		o.progressf("restore: %d/%d range files, %d keys, %d bytes written", i+1, len(files), w.keys, w.bytes)
	}
	// Then the mutation log, in version order, one file at a time: each
	// mutation applies where the range file holding its key was read
	// before it, in the order the cluster applied them (transactions of
	// the restore follow one another, so a key's mutations keep their
	// order).
	idx := fileIndex(files)
	var applied int64
	for i, f := range logs {
		data, err := getChecked(ctx, dest, f.FileInfo)
		if err != nil {
			return 0, err
		}
		from, to, entries, err := decodeLog(data)
		if err != nil {
			return 0, fmt.Errorf("restore: %s: %w", f.Name, err)
		}
		if from != f.From || to != f.To {
			return 0, fmt.Errorf("restore: %s covers (%d, %d], the manifest says (%d, %d]", f.Name, from, to, f.From, f.To)
		}
		for _, e := range entries {
			if e.version > v {
				break
			}
			for _, mu := range e.muts {
				n, err := idx.apply(ctx, w, e.version, mu)
				if err != nil {
					return 0, fmt.Errorf("restore: apply the mutations of %s: %w", f.Name, err)
				}
				applied += n
			}
		}
		if err := w.flush(ctx); err != nil {
			return 0, fmt.Errorf("restore: apply the mutations of %s: %w", f.Name, err)
		}
		o.progressf("restore: %d/%d log files, %d logged mutations applied", i+1, len(logs), applied)
	}
	o.progressf("restore: done: version %d, %d keys of range files and %d logged mutations, %d bytes", v, w.keys, applied, w.bytes)
	return v, nil
}

// checkFile reads f and checks it against its checksum.
func checkFile(ctx context.Context, dest Destination, f FileInfo) error {
	_, err := getChecked(ctx, dest, f)
	return err
}

// getChecked reads f, checked against its checksum.
func getChecked(ctx context.Context, dest Destination, f FileInfo) ([]byte, error) {
	data, err := dest.Get(ctx, f.Name)
	if err != nil {
		return nil, fmt.Errorf("restore: %w", err)
	}
	if err := f.check(data); err != nil {
		return nil, fmt.Errorf("restore: %w", err)
	}
	return data, nil
}

// fileIndex is the restored range files by their begin key: they tile the
// restored ranges without overlapping.
type fileIndex []RangeFile

// at returns the file holding key, if any.
func (x fileIndex) at(key []byte) (RangeFile, bool) {
	i := sort.Search(len(x), func(i int) bool { return bytes.Compare(x[i].Begin, key) > 0 }) - 1
	if i < 0 || bytes.Compare(key, x[i].End) >= 0 {
		return RangeFile{}, false
	}
	return x[i], true
}

// apply writes mutation m of version mv where the file holding its keys
// was read before mv (a clear range, clipped to each such file) and
// returns how many writes it made.
func (x fileIndex) apply(ctx context.Context, w *writer, mv kv.Version, m kv.Mutation) (int64, error) {
	if m.Type != kv.MutClearRange {
		f, ok := x.at(m.Key)
		if !ok || mv <= f.Version {
			return 0, nil
		}
		return 1, w.mutate(ctx, m)
	}
	var n int64
	i := max(0, sort.Search(len(x), func(i int) bool { return bytes.Compare(x[i].Begin, m.Key) > 0 })-1)
	for ; i < len(x) && bytes.Compare(x[i].Begin, m.Param) < 0; i++ {
		b, e := clipRange(m.Key, m.Param, kv.KeyRange{Begin: x[i].Begin, End: x[i].End})
		if b == nil || mv <= x[i].Version {
			continue
		}
		if err := w.mutate(ctx, kv.Mutation{Type: kv.MutClearRange, Key: b, Param: e}); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// selectRanges returns the backed-up ranges of the named pools.
func selectRanges(m *Manifest, pools []string) ([]kv.KeyRange, error) {
	if len(pools) == 0 {
		return m.Ranges, nil
	}
	var out []kv.KeyRange
	for _, name := range pools {
		found := false
		for _, p := range m.Pools {
			if p.Name == name {
				found = true
				out = append(out, kv.KeyRange{Begin: p.Prefix, End: kv.PrefixEnd(p.Prefix)})
			}
		}
		if !found {
			return nil, fmt.Errorf("restore: pool %q is not in the backup (it holds %s)", name, poolNames(m))
		}
	}
	sort.Slice(out, func(i, j int) bool { return bytes.Compare(out[i].Begin, out[j].Begin) < 0 })
	return out, nil
}

func poolNames(m *Manifest) string {
	var names []string
	for _, p := range m.Pools {
		names = append(names, p.Name)
	}
	return strings.Join(names, ", ")
}

func inRanges(rs []kv.KeyRange, k []byte) bool {
	for _, r := range rs {
		if bytes.Compare(k, r.Begin) >= 0 && (r.End == nil || bytes.Compare(k, r.End) < 0) {
			return true
		}
	}
	return false
}

func clipRange(b, e []byte, r kv.KeyRange) ([]byte, []byte) {
	if bytes.Compare(b, r.Begin) < 0 {
		b = r.Begin
	}
	if r.End != nil && bytes.Compare(e, r.End) > 0 {
		e = r.End
	}
	if bytes.Compare(b, e) >= 0 {
		return nil, nil
	}
	return b, e
}

// writer writes to the target in transactions of at most o.TxnBytes,
// keys rewritten by o.PrefixMap, with the effect of the writes it is
// given, in their order. Each transaction is idempotent, so that running
// it again after commit_unknown_result (as Transact does) cannot apply
// anything twice: it holds only clear ranges, sets and clears of final
// values. An atomic operation on a key whose value the batch does not
// know is resolved against the target's value, read before the commit.
type writer struct {
	db     *distash.DB
	o      *RestoreOptions
	cells  map[string]*cell // by key (before rewriting)
	clears []kv.KeyRange
	size   int

	keys, bytes int64 // range file pairs written

	// commitTwice commits every batch twice, as a retry after
	// commit_unknown_result would (tests).
	commitTwice bool
}

// cell is a key's state after the batch's writes so far.
type cell struct {
	known   bool // else: its value before the batch, then pending
	present bool
	value   []byte
	pending []kv.Mutation // atomic operations on an unknown value, in order
}

func (w *writer) set(ctx context.Context, k, v []byte) error {
	w.keys, w.bytes = w.keys+1, w.bytes+int64(len(k)+len(v))
	return w.mutate(ctx, kv.Mutation{Type: kv.MutSet, Key: k, Param: v})
}

// mutate adds m to the batch, first committing the batch if m would make
// it too large.
func (w *writer) mutate(ctx context.Context, m kv.Mutation) error {
	n := len(m.Key) + len(m.Param)
	if w.size > 0 && w.size+n > w.o.TxnBytes {
		if err := w.flush(ctx); err != nil {
			return err
		}
	}
	if w.cells == nil {
		w.cells = map[string]*cell{}
	}
	w.size += n
	if m.Type == kv.MutClearRange {
		for k, c := range w.cells {
			if k >= string(m.Key) && k < string(m.Param) {
				*c = cell{known: true}
			}
		}
		w.clears = append(w.clears, kv.KeyRange{Begin: m.Key, End: m.Param})
		return nil
	}
	c := w.cells[string(m.Key)]
	if c == nil {
		c = &cell{known: w.cleared(m.Key)} // else its value is the target's
		w.cells[string(m.Key)] = c
	}
	switch m.Type {
	case kv.MutSet:
		*c = cell{known: true, present: true, value: m.Param}
	case kv.MutClear:
		*c = cell{known: true}
	case kv.MutAdd, kv.MutMax, kv.MutMin:
		if !c.known {
			c.pending = append(c.pending, m)
			return nil
		}
		c.value, c.present = kv.ApplyAtomic(m.Type, c.value, c.present, m.Param), true
	default:
		return fmt.Errorf("a logged mutation of type %v", m.Type)
	}
	return nil
}

// cleared reports whether a clear range of the batch covers k.
func (w *writer) cleared(k []byte) bool {
	for _, r := range w.clears {
		if bytes.Compare(k, r.Begin) >= 0 && bytes.Compare(k, r.End) < 0 {
			return true
		}
	}
	return false
}

// flush commits the batch in one transaction.
func (w *writer) flush(ctx context.Context) error {
	if len(w.cells) == 0 && len(w.clears) == 0 {
		return nil
	}
	o := w.o
	var unknown []string
	for k, c := range w.cells {
		if !c.known {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		keys := make([][]byte, len(unknown))
		for i, k := range unknown {
			keys[i] = o.mapKey([]byte(k))
		}
		var vals [][]byte
		if err := w.db.ReadTransact(ctx, func(tr *distash.Tx) error {
			var err error
			vals, err = tr.Snapshot().GetMulti(keys)
			return err
		}); err != nil {
			return err
		}
		for i, k := range unknown {
			c := w.cells[k]
			c.known, c.present, c.value = true, vals[i] != nil, vals[i]
			for _, m := range c.pending {
				c.value, c.present = kv.ApplyAtomic(m.Type, c.value, c.present, m.Param), true
			}
			c.pending = nil
		}
	}
	apply := func(tr *distash.Tx) error {
		for _, r := range w.clears {
			r = o.mapRange(r)
			tr.ClearRange(r.Begin, r.End)
		}
		for k, c := range w.cells {
			if c.present {
				tr.Set(o.mapKey([]byte(k)), c.value)
			} else {
				tr.Clear(o.mapKey([]byte(k)))
			}
		}
		return nil
	}
	if err := w.db.Transact(ctx, apply); err != nil {
		return err
	}
	if w.commitTwice {
		if err := w.db.Transact(ctx, apply); err != nil {
			return err
		}
	}
	clear(w.cells)
	w.clears, w.size = w.clears[:0], 0
	return nil
}
