package config

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
)

// rawConfig mirrors Config with pointers where Parse must tell an absent key
// (which gets a default) from an explicit zero (which is validated).
type rawConfig struct {
	Cluster struct {
		FailureWait *Duration `toml:"failure_wait"`
		MVCCWindow  *Duration `toml:"mvcc_window"`
		ShardBytes  *Size     `toml:"shard_bytes"`
		DCDelay     *Duration `toml:"dc_delay"`
	} `toml:"cluster"`
	Log struct {
		Replicas *int `toml:"replicas"`
	} `toml:"log"`
	Pools []rawPool `toml:"pool"`
	Auth  *Auth     `toml:"auth"`
}

type rawPool struct {
	Name        string       `toml:"name"`
	Prefix      string       `toml:"prefix"`
	Medium      string       `toml:"medium"`
	Mode        string       `toml:"mode"`
	Engine      string       `toml:"engine"`
	Stashes     *int         `toml:"stashes"`
	Replication *int         `toml:"replication"`
	Capacity    *rawCapacity `toml:"capacity"`
	Eviction    string       `toml:"eviction"`
	Recency     bool         `toml:"recency"`
	AcrossDCs   bool         `toml:"across_dcs"`
	LocalLog    bool         `toml:"local_log"`
	Flash       *Flash       `toml:"flash"`
	Pebble      *Pebble      `toml:"pebble"`
	Device      *Device      `toml:"device"`
}

// rawCapacity is a capacity as written: a size, or "unlimited".
type rawCapacity struct {
	size      Size
	unlimited bool
}

// UnmarshalTOML takes a size string, a plain integer of bytes, or
// "unlimited".
func (c *rawCapacity) UnmarshalTOML(v any) error {
	switch x := v.(type) {
	case int64:
		if x < 0 {
			return fmt.Errorf("invalid size %d: must not be negative", x)
		}
		c.size = Size(x)
		return nil
	case string:
		if strings.EqualFold(strings.TrimSpace(x), Unlimited) {
			c.unlimited = true
			return nil
		}
		return c.size.UnmarshalText([]byte(x))
	}
	return fmt.Errorf("invalid size %v: %s, or %q", v, sizeHelp, Unlimited)
}

// schema lists the keys each table may hold.
var schema = map[string][]string{
	"":            {"cluster", "log", "pool", "auth"},
	"auth":        {"identity", "token_keys", "role"},
	"auth.role":   {"name", "members", "read", "write", "status", "admin"},
	"cluster":     {"failure_wait", "mvcc_window", "shard_bytes", "dc_delay"},
	"log":         {"replicas"},
	"pool":        {"name", "prefix", "medium", "mode", "engine", "stashes", "replication", "capacity", "eviction", "recency", "across_dcs", "flash", "pebble", "local_log", "device"},
	"pool.flash":  {"cache", "write_buffer", "segment", "direct_io", "far_memory", "prefetch", "lookup_threads", "io"},
	"pool.pebble": {"cache"},
	"pool.device": {"profile", "read_latency", "write_latency", "sync_latency", "iops", "bandwidth", "queue_depth"},
}

// Parse reads a TOML configuration, applies the defaults of absent keys and
// validates the result (see Config.Validate). TOML errors carry the line;
// unknown keys are errors.
func Parse(data []byte) (*Config, error) {
	// A plain decode first: syntax errors, and the shape of the document for
	// clearer messages than the typed decode gives.
	var plain map[string]any
	if _, err := toml.NewDecoder(bytes.NewReader(data)).Decode(&plain); err != nil {
		return nil, tomlError(err)
	}
	if _, ok := plain["pool"].(map[string]any); ok {
		return nil, &FieldError{Field: "pool", Msg: "write each pool as a [[pool]] table (double brackets), not [pool]"}
	}
	var raw rawConfig
	md, err := toml.NewDecoder(bytes.NewReader(data)).Decode(&raw)
	if err != nil {
		return nil, tomlError(err)
	}
	if err := unknownKeys(plain, md); err != nil {
		return nil, err
	}
	c := &Config{
		Cluster: Cluster{
			FailureWait: Duration{DefaultFailureWait},
			MVCCWindow:  Duration{DefaultMVCCWindow},
			ShardBytes:  DefaultShardBytes,
		},
		Log: Log{Replicas: DefaultLogReplicas},
	}
	if raw.Cluster.FailureWait != nil {
		c.Cluster.FailureWait = *raw.Cluster.FailureWait
	}
	if raw.Cluster.MVCCWindow != nil {
		c.Cluster.MVCCWindow = *raw.Cluster.MVCCWindow
	}
	if raw.Cluster.ShardBytes != nil {
		c.Cluster.ShardBytes = *raw.Cluster.ShardBytes
	}
	if raw.Cluster.DCDelay != nil {
		c.Cluster.DCDelay = *raw.Cluster.DCDelay
	}
	if raw.Log.Replicas != nil {
		c.Log.Replicas = *raw.Log.Replicas
	}
	if raw.Auth != nil {
		c.Auth = raw.Auth
		if c.Auth.Identity == "" {
			c.Auth.Identity = IdentityCN
		}
	}
	var zeroCapacity []error
	for _, rp := range raw.Pools {
		p := Pool{
			Name:        rp.Name,
			Prefix:      rp.Prefix,
			Medium:      rp.Medium,
			Mode:        rp.Mode,
			Engine:      rp.Engine,
			Stashes:     DefaultStashes,
			Replication: DefaultReplication,
			Eviction:    rp.Eviction,
			Recency:     rp.Recency,
			AcrossDCs:   rp.AcrossDCs,
			LocalLog:    rp.LocalLog,
			Flash:       rp.Flash,
			Pebble:      rp.Pebble,
			Device:      rp.Device,
		}
		if p.Device != nil && p.Device.Profile == "" {
			p.Device.Profile = "none"
		}
		if rp.Stashes != nil {
			p.Stashes = *rp.Stashes
		}
		if rc := rp.Capacity; rc != nil && !rc.unlimited {
			if rc.size == 0 {
				// 0 used to mean unlimited, silently; a durable pool
				// that meant "empty" or "unlimited" must say which.
				zeroCapacity = append(zeroCapacity, &FieldError{Field: poolLabel(len(c.Pools), p.Name) + ".capacity",
					Msg: fmt.Sprintf("0 bytes holds nothing; write capacity = %q for no limit (the default when capacity is absent)", Unlimited)})
			}
			p.Capacity = rc.size
		}
		if rp.Replication != nil {
			p.Replication = *rp.Replication
		}
		if p.Eviction == "" && p.Ephemeral() {
			p.Eviction = DefaultEviction
		}
		c.Pools = append(c.Pools, p)
	}
	if err := c.Validate(); err != nil || len(zeroCapacity) > 0 {
		if err != nil {
			zeroCapacity = append(zeroCapacity, err)
		}
		return nil, joinErrors(zeroCapacity)
	}
	return c, nil
}

// Load reads and parses the configuration file at path. Its errors name the
// file.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	c, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	return c, nil
}

// TOMLError is a TOML syntax or type error, with its line.
type TOMLError struct {
	Line int    // 1-based line, 0 when unknown
	Msg  string // message, starting with the position when known
	Err  error  // the error of the TOML decoder (a toml.ParseError when it has a position)
}

func (e *TOMLError) Error() string { return "TOML " + e.Msg }
func (e *TOMLError) Unwrap() error { return e.Err }

func tomlError(err error) error {
	var pe toml.ParseError
	if errors.As(err, &pe) {
		msg := fmt.Sprintf("line %d, column %d", pe.Position.Line, pe.Position.Col)
		if pe.LastKey != "" {
			msg += fmt.Sprintf(" (key %s)", pe.LastKey)
		}
		return &TOMLError{Line: pe.Position.Line, Msg: msg + ": " + pe.Message, Err: err}
	}
	// Type errors: `toml: line 2 (last key "pool.name"): incompatible types...`.
	msg := strings.TrimPrefix(err.Error(), "toml: ")
	line := 0
	if m := lastKeyRE.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = "line " + m[1] + " (key " + m[2] + ")" + msg[len(m[0]):]
	}
	return &TOMLError{Line: line, Msg: msg, Err: err}
}

var lastKeyRE = regexp.MustCompile(`^line (\d+) \(last key "([^"]*)"\)`)

// unknownKeys reports the keys of data that are not part of the schema:
// those the decoder left undecoded and those it matched only case-insensitively.
func unknownKeys(plain map[string]any, md toml.MetaData) error {
	bad := map[string]bool{}
	for _, k := range md.Undecoded() {
		bad[k.String()] = true
	}
	for _, k := range md.Keys() {
		if !known(k) {
			bad[k.String()] = true
		}
	}
	if len(bad) == 0 {
		return nil
	}
	// The indices of pools are not in the metadata: find them in the plain decode.
	var pools []map[string]any
	switch v := plain["pool"].(type) {
	case []map[string]any: // [[pool]] tables
		pools = v
	case []any: // pool = [{...}, {...}]
		for _, e := range v {
			m, _ := e.(map[string]any)
			pools = append(pools, m)
		}
	}

	var errs []error
	seen := map[string]bool{}
	var reported []toml.Key
	add := func(e *FieldError) {
		if !seen[e.Error()] {
			seen[e.Error()] = true
			errs = append(errs, e)
		}
	}
outer:
	for _, k := range md.Keys() {
		if !bad[k.String()] {
			continue
		}
		for _, r := range reported {
			if len(r) < len(k) && r.String() == k[:len(r)].String() {
				continue outer // inside a table already reported
			}
		}
		reported = append(reported, k)
		table, leaf := "", k[0]
		if len(k) > 1 {
			table, leaf = k[0], k[1]
		}
		if len(k) > 2 && schema[k[0]+"."+k[1]] != nil {
			table, leaf = k[0]+"."+k[1], k[2]
		}
		msg := "unknown key" + suggest(leaf, schema[table])
		switch {
		case len(k) == 1:
			add(&FieldError{Field: k.String(), Msg: msg})
		case table == "pool" || strings.HasPrefix(table, "pool."):
			sub := k[1:2] // the key's path inside its pool
			if table != "pool" {
				sub = k[1:3]
			}
			found := false
			for i, p := range pools {
				if holds(p, sub) {
					name, _ := p["name"].(string)
					add(&FieldError{Field: poolLabel(i, name) + "." + toml.Key(sub).String(), Msg: msg})
					found = true
				}
			}
			if !found {
				add(&FieldError{Field: toml.Key(k[:1+len(sub)]).String(), Msg: msg})
			}
		case table == "auth.role":
			add(&FieldError{Field: toml.Key(k[:3]).String(), Msg: msg})
		default:
			add(&FieldError{Field: toml.Key(k[:2]).String(), Msg: msg})
		}
	}
	return joinErrors(errs)
}

// holds reports whether the plain table m has the key at path (nested tables).
func holds(m map[string]any, path []string) bool {
	for _, k := range path[:len(path)-1] {
		sub, ok := m[k].(map[string]any)
		if !ok {
			return false
		}
		m = sub
	}
	_, ok := m[path[len(path)-1]]
	return ok
}

// known reports whether k is in the schema, with exact case.
func known(k toml.Key) bool {
	switch len(k) {
	case 1:
		return contains(schema[""], k[0])
	case 2:
		keys, ok := schema[k[0]]
		return ok && contains(keys, k[1])
	case 3:
		keys, ok := schema[k[0]+"."+k[1]]
		return ok && contains(keys, k[2])
	}
	return false
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// suggest returns a hint naming the closest valid key, or listing them.
func suggest(key string, valid []string) string {
	for _, v := range valid {
		if strings.EqualFold(v, key) {
			return fmt.Sprintf(" (keys are case-sensitive: did you mean %s?)", v)
		}
	}
	// A typo: at most 2 edits, and at most one per 3 characters, so that a
	// short unrelated key ("zone") is not taken for another ("mode").
	best, bestD := "", 3
	for _, v := range valid {
		if d := editDistance(strings.ToLower(key), v); d < bestD && 3*d <= len(key) {
			best, bestD = v, d
		}
	}
	if best != "" {
		return fmt.Sprintf(" (did you mean %s?)", best)
	}
	if len(valid) == 0 {
		return ""
	}
	sorted := append([]string(nil), valid...)
	sort.Strings(sorted)
	return " (valid keys: " + strings.Join(sorted, ", ") + ")"
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
