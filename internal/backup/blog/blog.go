// Package blog holds what the commit proxy and the backup worker share: the
// system keys of a backup, its configuration record, and the mutation log
// ("\xff/blog/") the commit proxy writes while a backup runs, as
// FoundationDB's backup does: every committed mutation in a backed-up
// range is copied, in the same log entry as the batch, under a key of its
// commit version, so the copy is as durable and as ordered as the commit.
package blog

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/distash/distash/internal/kv"
)

// System keys of a backup. Clients cannot write \xff: the transaction node
// writes them with system commits (backup start and stop, the worker's
// progress and its clears of the mutation log).
var (
	// ConfigKey holds the active backup's Config (JSON); absent when no
	// backup runs. The commit proxy watches it.
	ConfigKey = []byte("\xff/backup/config")
	// ProgressKey holds the worker's Progress (JSON).
	ProgressKey = []byte("\xff/backup/progress")
	// StatusKey holds the last backup's Status once it stopped, so that
	// `backup status` still answers after `backup stop`.
	StatusKey = []byte("\xff/backup/last")
	// ClusterIDKey holds the cluster's id (hex), made by the first backup.
	ClusterIDKey = []byte("\xff/backup/cluster-id")
	// LogPrefix starts the mutation log the commit proxy writes while a
	// backup runs: LogPrefix + id + "/" + version (8 bytes big-endian) +
	// part (4 bytes big-endian).
	LogPrefix = []byte("\xff/blog/")
)

// logPartBytes bounds one value of the mutation log, below the value size
// limit of user keys (the system stash has none, but a part is also one
// entry in the log and in the stash's window).
const logPartBytes = 64 << 10

// Config is what `backup start` records under ConfigKey.
type Config struct {
	ID        string        `json:"id"`         // unique per backup (hex)
	URL       string        `json:"url"`        // the destination
	ClusterID string        `json:"cluster_id"` // ClusterIDKey's value
	Pools     []Pool        `json:"pools"`      // the backed-up pools, in configuration order
	Ranges    []kv.KeyRange `json:"ranges"`     // their key ranges, sorted, disjoint
	// Version is the commit version of the transaction that started the
	// backup: the mutation log holds every commit after it.
	Version          kv.Version `json:"version"`
	StartedUnixMs    int64      `json:"started_unix_ms"`
	IncludeEphemeral bool       `json:"include_ephemeral,omitempty"`
}

// Pool is a backed-up pool.
type Pool struct {
	Name   string `json:"name"`
	Prefix []byte `json:"prefix"`
	Mode   string `json:"mode"` // durable or ephemeral
}

// DecodeConfig parses a ConfigKey value.
func DecodeConfig(b []byte) (*Config, error) {
	var c Config
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("blog: configuration record: %w", err)
	}
	if c.ID == "" || len(c.Ranges) == 0 {
		return nil, errors.New("blog: configuration record without id or ranges")
	}
	return &c, nil
}

// Encode returns the ConfigKey value.
func (c *Config) Encode() []byte {
	b, _ := json.Marshal(c)
	return b
}

// keyPrefix is the mutation log's prefix of backup id.
func keyPrefix(id string) []byte {
	return append(append(append([]byte(nil), LogPrefix...), id...), '/')
}

// LogRange returns the mutation log's key range of backup id.
func LogRange(id string) kv.KeyRange {
	p := keyPrefix(id)
	return kv.KeyRange{Begin: p, End: kv.PrefixEnd(p)}
}

// LogKey is the key of part part of version v's mutations.
func LogKey(id string, v kv.Version, part uint32) []byte {
	k := keyPrefix(id)
	k = binary.BigEndian.AppendUint64(k, uint64(v))
	return binary.BigEndian.AppendUint32(k, part)
}

// LogVersionKey is the first key of version v in the mutation log.
func LogVersionKey(id string, v kv.Version) []byte {
	return binary.BigEndian.AppendUint64(keyPrefix(id), uint64(v))
}

// ParseLogKey returns the version and part of a mutation log key.
func ParseLogKey(id string, k []byte) (kv.Version, uint32, error) {
	p := keyPrefix(id)
	if !bytes.HasPrefix(k, p) || len(k) != len(p)+12 {
		return 0, 0, fmt.Errorf("blog: not a mutation log key of backup %s: %q", id, k)
	}
	k = k[len(p):]
	return kv.Version(binary.BigEndian.Uint64(k)), binary.BigEndian.Uint32(k[8:]), nil
}

// Capture is what the commit proxy needs of the active backup: which
// mutations to copy and under which keys.
type Capture struct {
	id     string
	ranges []kv.KeyRange
}

// NewCapture returns the capture of cfg (nil for nil: no backup).
func NewCapture(cfg *Config) *Capture {
	if cfg == nil {
		return nil
	}
	return &Capture{id: cfg.ID, ranges: cfg.Ranges}
}

// WatchConfig returns the capture in force after a system transaction of
// mutations muts, given the one before (cur): a set of ConfigKey starts
// one, a clear ends it. A record that does not parse keeps cur, with the
// error.
func WatchConfig(cur *Capture, muts []kv.Mutation) (*Capture, error) {
	for _, m := range muts {
		switch {
		case m.Type == kv.MutSet && bytes.Equal(m.Key, ConfigKey):
			cfg, err := DecodeConfig(m.Param)
			if err != nil {
				return cur, err
			}
			cur = NewCapture(cfg)
		case m.Type == kv.MutClear && bytes.Equal(m.Key, ConfigKey),
			m.Type == kv.MutClearRange && bytes.Compare(m.Key, ConfigKey) <= 0 && bytes.Compare(ConfigKey, m.Param) < 0:
			cur = nil
		}
	}
	return cur, nil
}

// LogMutations returns the system mutations that record, under version v,
// the mutations of muts (the committed mutations of one batch, in order)
// that touch the backed-up ranges, clear ranges clipped to them; nil if
// none does.
func (c *Capture) LogMutations(v kv.Version, muts []kv.Mutation) []kv.Mutation {
	if c == nil {
		return nil
	}
	var buf []byte
	for _, m := range muts {
		if m.Type == kv.MutClearRange {
			for _, r := range c.ranges {
				b, e := clip(m.Key, m.Param, r)
				if b != nil {
					buf = AppendMutation(buf, kv.Mutation{Type: kv.MutClearRange, Key: b, Param: e})
				}
			}
			continue
		}
		if c.covers(m.Key) {
			buf = AppendMutation(buf, m)
		}
	}
	if buf == nil {
		return nil
	}
	var out []kv.Mutation
	for part := uint32(0); len(buf) > 0; part++ {
		n := min(len(buf), logPartBytes)
		out = append(out, kv.Mutation{Type: kv.MutSet, Key: LogKey(c.id, v, part), Param: buf[:n:n]})
		buf = buf[n:]
	}
	return out
}

func (c *Capture) covers(k []byte) bool {
	for _, r := range c.ranges {
		if bytes.Compare(k, r.Begin) >= 0 && (r.End == nil || bytes.Compare(k, r.End) < 0) {
			return true
		}
	}
	return false
}

// clip returns [b, e) ∩ r, or nil if empty.
func clip(b, e []byte, r kv.KeyRange) ([]byte, []byte) {
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

// AppendMutation appends m's encoding: type, key and param, each with its
// length as a uvarint. Costs are not kept (eviction hints, not data).
func AppendMutation(buf []byte, m kv.Mutation) []byte {
	buf = append(buf, byte(m.Type))
	buf = binary.AppendUvarint(buf, uint64(len(m.Key)))
	buf = append(buf, m.Key...)
	buf = binary.AppendUvarint(buf, uint64(len(m.Param)))
	return append(buf, m.Param...)
}

// DecodeMutations parses a sequence of AppendMutation encodings.
func DecodeMutations(b []byte) ([]kv.Mutation, error) {
	var out []kv.Mutation
	for len(b) > 0 {
		t := kv.MutationType(b[0])
		if t < kv.MutSet || t > kv.MutMin {
			return nil, fmt.Errorf("unknown mutation type %d", b[0])
		}
		b = b[1:]
		var fields [2][]byte
		for i := range fields {
			n, w := binary.Uvarint(b)
			if w <= 0 || uint64(len(b)-w) < n {
				return nil, errors.New("mutation cut short")
			}
			fields[i] = b[w : w+int(n) : w+int(n)]
			b = b[w+int(n):]
		}
		out = append(out, kv.Mutation{Type: t, Key: fields[0], Param: fields[1]})
	}
	return out, nil
}
