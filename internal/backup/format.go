package backup

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/distash/distash/internal/backup/blog"
	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/version"
)

// FormatVersion is the version of the backup's file formats (manifest,
// range and log files). A reader refuses a newer one, naming both.
const FormatVersion = 1

func init() { version.RegisterFormat("backup", FormatVersion) }

// ManifestName is the manifest's file name at the destination's root.
const ManifestName = "manifest.json"

// Magic numbers open each data file.
var (
	rangeMagic = []byte("DSBKRNG\n")
	logMagic   = []byte("DSBKLOG\n")
)

// Manifest describes a backup: what it holds and every file with its
// SHA-256. The worker rewrites it (replacing it whole) after each file it
// adds.
type Manifest struct {
	Format        int           `json:"format"`
	BackupID      string        `json:"backup_id"`
	ClusterID     string        `json:"cluster_id"`
	Pools         []blog.Pool   `json:"pools"`
	Ranges        []kv.KeyRange `json:"ranges"`
	StartVersion  kv.Version    `json:"start_version"` // the log holds every commit after it
	StartedUnixMs int64         `json:"started_unix_ms"`
	// SnapshotDone: RangeFiles cover every range.
	SnapshotDone bool        `json:"snapshot_done"`
	RangeFiles   []RangeFile `json:"range_files"`
	LogFiles     []LogFile   `json:"log_files"`
	// LogEnd is the last version whose mutations are copied: the log
	// files chain from StartVersion to the last one's To, and no backed-up
	// mutation was committed in (that To, LogEnd].
	LogEnd        kv.Version `json:"log_end"`
	UpdatedUnixMs int64      `json:"updated_unix_ms"`
}

// FileInfo names a file and its checksum.
type FileInfo struct {
	Name   string `json:"name"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// RangeFile is the data of [Begin, End) as of Version.
type RangeFile struct {
	FileInfo
	Begin   []byte     `json:"begin"`
	End     []byte     `json:"end"`
	Version kv.Version `json:"version"`
}

// LogFile holds the backed-up mutations committed in (From, To].
type LogFile struct {
	FileInfo
	From kv.Version `json:"from"`
	To   kv.Version `json:"to"`
}

// Restorable returns the versions a restore can reach: from the end of the
// first full snapshot to the last version whose log is copied.
func (m *Manifest) Restorable() (from, to kv.Version, ok bool) {
	if !m.SnapshotDone {
		return 0, 0, false
	}
	for _, f := range m.RangeFiles {
		from = max(from, f.Version)
	}
	if m.LogEnd < from {
		return 0, 0, false
	}
	return from, m.LogEnd, true
}

// Bytes is the size of every file the manifest lists.
func (m *Manifest) Bytes() int64 {
	var n int64
	for _, f := range m.RangeFiles {
		n += f.Bytes
	}
	for _, f := range m.LogFiles {
		n += f.Bytes
	}
	return n
}

func encodeManifest(m *Manifest) []byte {
	b, _ := json.MarshalIndent(m, "", " ")
	return append(b, '\n')
}

// decodeManifest parses a manifest, refusing a newer format.
func decodeManifest(b []byte) (*Manifest, error) {
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s does not parse: %w", ManifestName, err)
	}
	if m.Format > FormatVersion {
		return nil, fmt.Errorf("%s has format version %d; this binary reads up to %d", ManifestName, m.Format, FormatVersion)
	}
	if m.Format < 1 || m.BackupID == "" {
		return nil, fmt.Errorf("%s is not a DiStash backup manifest", ManifestName)
	}
	return &m, nil
}

func fileInfo(name string, data []byte) FileInfo {
	sum := sha256.Sum256(data)
	return FileInfo{Name: name, Bytes: int64(len(data)), SHA256: hex.EncodeToString(sum[:])}
}

// check returns an error naming the file if data is not what f lists.
func (f FileInfo) check(data []byte) error {
	sum := sha256.Sum256(data)
	if int64(len(data)) != f.Bytes || hex.EncodeToString(sum[:]) != f.SHA256 {
		return fmt.Errorf("%s: checksum mismatch (%d bytes, SHA-256 %x; the manifest lists %d bytes, %s)", f.Name, len(data), sum, f.Bytes, f.SHA256)
	}
	return nil
}

// pair is one key and value of a range file.
type pair struct{ key, value []byte }

func appendHeader(b, magic []byte) []byte {
	b = append(b, magic...)
	return binary.BigEndian.AppendUint16(b, FormatVersion)
}

func appendBytes(b, p []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(p)))
	return append(b, p...)
}

// encodeRange writes a range file: header, begin, end, version, pairs.
func encodeRange(begin, end []byte, v kv.Version, pairs []pair) []byte {
	b := appendHeader(nil, rangeMagic)
	b = appendBytes(b, begin)
	b = appendBytes(b, end)
	b = binary.BigEndian.AppendUint64(b, uint64(v))
	b = binary.AppendUvarint(b, uint64(len(pairs)))
	for _, p := range pairs {
		b = appendBytes(appendBytes(b, p.key), p.value)
	}
	return b
}

// reader decodes the files' fields; the first error sticks.
type reader struct {
	b   []byte
	err error
}

func (r *reader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("cut short or damaged at %s", what)
	}
}

func (r *reader) header(magic []byte) {
	if len(r.b) < len(magic)+2 || !bytes.Equal(r.b[:len(magic)], magic) {
		r.err = errors.New("not a backup file of this kind (bad magic)")
		return
	}
	if f := binary.BigEndian.Uint16(r.b[len(magic):]); f > FormatVersion || f == 0 {
		r.err = fmt.Errorf("format version %d; this binary reads up to %d", f, FormatVersion)
		return
	}
	r.b = r.b[len(magic)+2:]
}

func (r *reader) uvarint(what string) uint64 {
	if r.err != nil {
		return 0
	}
	n, w := binary.Uvarint(r.b)
	if w <= 0 {
		r.fail(what)
		return 0
	}
	r.b = r.b[w:]
	return n
}

func (r *reader) u64(what string) uint64 {
	if r.err != nil || len(r.b) < 8 {
		r.fail(what)
		return 0
	}
	n := binary.BigEndian.Uint64(r.b)
	r.b = r.b[8:]
	return n
}

func (r *reader) bytes(what string) []byte {
	n := r.uvarint(what)
	if r.err != nil || uint64(len(r.b)) < n {
		r.fail(what)
		return nil
	}
	p := r.b[:n:n]
	r.b = r.b[n:]
	return p
}

// decodeRange parses a range file.
func decodeRange(data []byte) (begin, end []byte, v kv.Version, pairs []pair, err error) {
	r := &reader{b: data}
	r.header(rangeMagic)
	begin, end = r.bytes("begin"), r.bytes("end")
	v = kv.Version(r.u64("version"))
	n := r.uvarint("count")
	for i := uint64(0); i < n && r.err == nil; i++ {
		k := r.bytes("key")
		val := r.bytes("value")
		pairs = append(pairs, pair{k, val})
	}
	if r.err == nil && len(r.b) != 0 {
		r.err = errors.New("trailing bytes")
	}
	return begin, end, v, pairs, r.err
}

// logEntry is the backed-up mutations of one commit version.
type logEntry struct {
	version kv.Version
	muts    []byte // blog.AppendMutation encodings
}

// encodeLog writes a log file: header, from, to, entries.
func encodeLog(from, to kv.Version, entries []logEntry) []byte {
	b := appendHeader(nil, logMagic)
	b = binary.BigEndian.AppendUint64(b, uint64(from))
	b = binary.BigEndian.AppendUint64(b, uint64(to))
	b = binary.AppendUvarint(b, uint64(len(entries)))
	for _, e := range entries {
		b = binary.BigEndian.AppendUint64(b, uint64(e.version))
		b = appendBytes(b, e.muts)
	}
	return b
}

// decodedLogEntry is a log entry with its mutations parsed.
type decodedLogEntry struct {
	version kv.Version
	muts    []kv.Mutation
}

// decodeLog parses a log file; entries must lie in (from, to], in order.
func decodeLog(data []byte) (from, to kv.Version, entries []decodedLogEntry, err error) {
	r := &reader{b: data}
	r.header(logMagic)
	from, to = kv.Version(r.u64("from")), kv.Version(r.u64("to"))
	n := r.uvarint("count")
	last := from
	for i := uint64(0); i < n && r.err == nil; i++ {
		v := kv.Version(r.u64("version"))
		b := r.bytes("mutations")
		if r.err != nil {
			break
		}
		if v <= last || v > to {
			return 0, 0, nil, fmt.Errorf("entry of version %d out of order or outside (%d, %d]", v, from, to)
		}
		last = v
		muts, err := blog.DecodeMutations(b)
		if err != nil {
			return 0, 0, nil, fmt.Errorf("entry of version %d: %w", v, err)
		}
		entries = append(entries, decodedLogEntry{v, muts})
	}
	if r.err == nil && len(r.b) != 0 {
		r.err = errors.New("trailing bytes")
	}
	return from, to, entries, r.err
}
