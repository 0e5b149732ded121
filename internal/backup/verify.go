package backup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
)

// Verify checks a backup: every file the manifest lists is present,
// matches its SHA-256 and decodes to what the manifest says; the range
// files of each backed-up range chain from its begin (to its end once the
// snapshot is done); the log files chain from the start version. It
// prints one line per problem, naming the file, and a summary to out, and
// returns an error if there was a problem.
func Verify(ctx context.Context, dest Destination, out io.Writer) error {
	m, err := ReadManifest(ctx, dest)
	if err != nil {
		return err
	}
	var problems int
	bad := func(format string, args ...any) {
		problems++
		fmt.Fprintf(out, "BAD: "+format+"\n", args...)
	}
	// Range files: in order, each range's files contiguous.
	ri, cursor := 0, []byte(nil)
	for _, f := range m.RangeFiles {
		data, err := dest.Get(ctx, f.Name)
		if err != nil {
			bad("%s: %v", f.Name, err)
			continue
		}
		if err := f.check(data); err != nil {
			bad("%v", err)
			continue
		}
		b, e, v, _, err := decodeRange(data)
		if err != nil {
			bad("%s: %v", f.Name, err)
			continue
		}
		if !bytes.Equal(b, f.Begin) || !bytes.Equal(e, f.End) || v != f.Version {
			bad("%s holds [%q, %q) at %d; the manifest says [%q, %q) at %d", f.Name, b, e, v, f.Begin, f.End, f.Version)
		}
		if v < m.StartVersion {
			bad("%s is of version %d, before the backup started (%d)", f.Name, v, m.StartVersion)
		}
		if ri >= len(m.Ranges) {
			bad("%s is past the last backed-up range", f.Name)
			continue
		}
		want := cursor
		if want == nil {
			want = m.Ranges[ri].Begin
		}
		if !bytes.Equal(f.Begin, want) {
			bad("%s begins at %q; the previous file ended at %q", f.Name, f.Begin, want)
		}
		cursor = f.End
		if bytes.Equal(f.End, m.Ranges[ri].End) {
			ri, cursor = ri+1, nil
		}
	}
	if m.SnapshotDone && ri != len(m.Ranges) {
		bad("the snapshot is marked done but its range files cover %d of %d ranges", ri, len(m.Ranges))
	}
	// Log files: (StartVersion, ...] without gaps.
	at := m.StartVersion
	for _, f := range m.LogFiles {
		if f.From != at {
			bad("%s begins after version %d; the previous file ended at %d", f.Name, f.From, at)
		}
		at = f.To
		data, err := dest.Get(ctx, f.Name)
		if err != nil {
			bad("%s: %v", f.Name, err)
			continue
		}
		if err := f.check(data); err != nil {
			bad("%v", err)
			continue
		}
		from, to, _, err := decodeLog(data)
		if err != nil {
			bad("%s: %v", f.Name, err)
			continue
		}
		if from != f.From || to != f.To {
			bad("%s covers (%d, %d]; the manifest says (%d, %d]", f.Name, from, to, f.From, f.To)
		}
	}
	if m.LogEnd < at {
		bad("the manifest's log end %d is before its last log file's end %d", m.LogEnd, at)
	}
	from, to, ok := m.Restorable()
	if ok {
		fmt.Fprintf(out, "restorable versions %d (%s) to %d (%s)\n", from, versionTime(from), to, versionTime(to))
	} else {
		fmt.Fprintln(out, "not restorable yet: the first snapshot is not complete")
	}
	fmt.Fprintf(out, "%d range files, %d log files, %d bytes; %d problems\n", len(m.RangeFiles), len(m.LogFiles), m.Bytes(), problems)
	if problems > 0 {
		return errors.New("backup verify: the backup is damaged (see the lines above)")
	}
	return nil
}
