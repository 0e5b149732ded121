package backup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
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
	o.progressf("restore: version %d (%s) from %s: %d range files, %d log files", v, versionTime(v), dest, len(m.RangeFiles), len(m.LogFiles))
	logs, err := readLogs(ctx, dest, m, v)
	if err != nil {
		return 0, err
	}
	var files []RangeFile
	for _, f := range m.RangeFiles {
		if inRanges(ranges, f.Begin) {
			files = append(files, f)
		}
	}
	var keys, bytesDone int64
	for i, f := range files {
		data, err := dest.Get(ctx, f.Name)
		if err != nil {
			return 0, fmt.Errorf("restore: %w", err)
		}
		if err := f.check(data); err != nil {
			return 0, fmt.Errorf("restore: %w", err)
		}
		begin, end, fv, pairs, err := decodeRange(data)
		if err != nil {
			return 0, fmt.Errorf("restore: %s: %w", f.Name, err)
		}
		if fv > v {
			return 0, fmt.Errorf("restore: %s is of version %d, after %d", f.Name, fv, v)
		}
		state := replay(begin, end, fv, v, pairs, logs)
		n, b, err := write(ctx, db, &o, state)
		if err != nil {
			return 0, fmt.Errorf("restore: write the data of %s: %w", f.Name, err)
		}
		keys, bytesDone = keys+n, bytesDone+b
		o.progressf("restore: %d/%d range files, %d keys, %d bytes written", i+1, len(files), keys, bytesDone)
	}
	o.progressf("restore: done: version %d, %d keys, %d bytes", v, keys, bytesDone)
	return v, nil
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

// readLogs reads and checks the log files up to version v, in order.
func readLogs(ctx context.Context, dest Destination, m *Manifest, v kv.Version) ([]decodedLogEntry, error) {
	var out []decodedLogEntry
	for _, f := range m.LogFiles {
		if f.From >= v {
			break
		}
		data, err := dest.Get(ctx, f.Name)
		if err != nil {
			return nil, fmt.Errorf("restore: %w", err)
		}
		if err := f.check(data); err != nil {
			return nil, fmt.Errorf("restore: %w", err)
		}
		from, to, entries, err := decodeLog(data)
		if err != nil {
			return nil, fmt.Errorf("restore: %s: %w", f.Name, err)
		}
		if from != f.From || to != f.To {
			return nil, fmt.Errorf("restore: %s covers (%d, %d], the manifest says (%d, %d]", f.Name, from, to, f.From, f.To)
		}
		out = append(out, entries...)
	}
	return out, nil
}

// replay returns the pairs of [begin, end) at version v: the range file's
// pairs (at version fv) with the logged mutations of (fv, v] applied in
// version order, clear ranges clipped to [begin, end).
func replay(begin, end []byte, fv, v kv.Version, pairs []pair, logs []decodedLogEntry) []pair {
	state := make(map[string][]byte, len(pairs))
	for _, p := range pairs {
		state[string(p.key)] = p.value
	}
	r := kv.KeyRange{Begin: begin, End: end}
	for _, e := range logs {
		if e.version <= fv {
			continue
		}
		if e.version > v {
			break
		}
		for _, m := range e.muts {
			switch m.Type {
			case kv.MutClearRange:
				b, en := clipRange(m.Key, m.Param, r)
				if b == nil {
					continue
				}
				for k := range state {
					if k >= string(b) && k < string(en) {
						delete(state, k)
					}
				}
				continue
			}
			if !inRanges([]kv.KeyRange{r}, m.Key) {
				continue
			}
			switch m.Type {
			case kv.MutSet:
				state[string(m.Key)] = m.Param
			case kv.MutClear:
				delete(state, string(m.Key))
			default:
				old, ok := state[string(m.Key)]
				state[string(m.Key)] = kv.ApplyAtomic(m.Type, old, ok, m.Param)
			}
		}
	}
	out := make([]pair, 0, len(state))
	for k, val := range state {
		out = append(out, pair{[]byte(k), val})
	}
	sort.Slice(out, func(i, j int) bool { return bytes.Compare(out[i].key, out[j].key) < 0 })
	return out
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

// write sets the pairs, keys rewritten, in transactions of at most
// o.TxnBytes.
func write(ctx context.Context, db *distash.DB, o *RestoreOptions, pairs []pair) (keys, n int64, err error) {
	for len(pairs) > 0 {
		size, i := 0, 0
		for i < len(pairs) && (i == 0 || size+len(pairs[i].key)+len(pairs[i].value) <= o.TxnBytes) {
			size += len(pairs[i].key) + len(pairs[i].value)
			i++
		}
		batch := pairs[:i]
		if err := db.Transact(ctx, func(tr *distash.Tx) error {
			for _, p := range batch {
				tr.Set(o.mapKey(p.key), p.value)
			}
			return nil
		}); err != nil {
			return keys, n, err
		}
		keys, n = keys+int64(i), n+int64(size)
		pairs = pairs[i:]
	}
	return keys, n, nil
}
