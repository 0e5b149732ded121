package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// designExample is the example configuration of README.md (section
// Configuration): its cluster and log tables and its first two pools.
const designExample = `
[cluster]
failure_wait = "60s"
mvcc_window = "5s"

[log]
replicas = 1

[[pool]]
name = "cache"
prefix = "c/"
medium = "dram"        # dram | ssd | hdd | nvm
mode = "ephemeral"     # ephemeral | durable
engine = "memory"      # memory | pebble | sqlite | flash
stashes = 3
replication = 2
capacity = "256MiB"    # per stash
eviction = "lru"       # lru | camp (ephemeral pools only)

[[pool]]
name = "data"
prefix = "d/"
medium = "ssd"
mode = "durable"
engine = "pebble"
stashes = 3
replication = 3
capacity = "10GiB"
`

// errorLines splits a (possibly joined) error into its messages.
func errorLines(err error) []string {
	if err == nil {
		return nil
	}
	return strings.Split(err.Error(), "\n")
}

func hasLine(err error, want string) bool {
	for _, l := range errorLines(err) {
		if l == want {
			return true
		}
	}
	return false
}

func TestParseDesignExample(t *testing.T) {
	c, err := Parse([]byte(designExample))
	if err != nil {
		t.Fatal(err)
	}
	want := &Config{
		Cluster: Cluster{FailureWait: Duration{60 * time.Second}, MVCCWindow: Duration{5 * time.Second}, ShardBytes: DefaultShardBytes},
		Log:     Log{Replicas: 1},
		Pools: []Pool{
			{Name: "cache", Prefix: "c/", Medium: "dram", Mode: "ephemeral", Engine: "memory",
				Stashes: 3, Replication: 2, Capacity: 256 << 20, Eviction: "lru"},
			{Name: "data", Prefix: "d/", Medium: "ssd", Mode: "durable", Engine: "pebble",
				Stashes: 3, Replication: 3, Capacity: 10 << 30},
		},
	}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("got\n%+v\nwant\n%+v", c, want)
	}
}

func TestDefault(t *testing.T) {
	c := Default()
	if err := c.Validate(); err != nil {
		t.Fatalf("Default() does not validate: %v", err)
	}
	if w := c.Warnings(); len(w) != 0 {
		t.Errorf("Default() has warnings: %q", w)
	}
	if c.Cluster.FailureWait.Duration != 60*time.Second || c.Cluster.MVCCWindow.Duration != 5*time.Second || c.Log.Replicas != 1 {
		t.Errorf("cluster/log = %+v %+v", c.Cluster, c.Log)
	}
	cache, ok := c.PoolByName("cache")
	if !ok || *cache != (Pool{Name: "cache", Prefix: "c/", Medium: "dram", Mode: "ephemeral", Engine: "memory",
		Stashes: 2, Replication: 2, Capacity: 64 * MiB, Eviction: "lru"}) {
		t.Errorf("cache pool = %+v", cache)
	}
	data, ok := c.PoolByName("data")
	if !ok || *data != (Pool{Name: "data", Prefix: "d/", Medium: "ssd", Mode: "durable", Engine: "pebble",
		Stashes: 2, Replication: 2, Capacity: 1 * GiB}) {
		t.Errorf("data pool = %+v", data)
	}
	// Each call returns a fresh value.
	c.Pools[0].Name = "changed"
	if Default().Pools[0].Name != "cache" {
		t.Error("Default() shares state between calls")
	}
}

func TestParseDefaults(t *testing.T) {
	c, err := Parse([]byte(`
[[pool]]
name = "cache"
prefix = "c/"
medium = "dram"
mode = "ephemeral"
engine = "memory"

[[pool]]
name = "data"
prefix = "d/"
medium = "hdd"
mode = "durable"
engine = "sqlite"
`))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Cluster.FailureWait.Duration; got != 60*time.Second {
		t.Errorf("failure_wait = %v, want 60s", got)
	}
	if got := c.Cluster.MVCCWindow.Duration; got != 5*time.Second {
		t.Errorf("mvcc_window = %v, want 5s", got)
	}
	if c.Log.Replicas != 1 {
		t.Errorf("log.replicas = %d, want 1", c.Log.Replicas)
	}
	for _, p := range c.Pools {
		if p.Stashes != 1 || p.Replication != 1 || p.Capacity != 0 {
			t.Errorf("pool %s: stashes %d replication %d capacity %d, want 1 1 0", p.Name, p.Stashes, p.Replication, p.Capacity)
		}
	}
	if c.Pools[0].Eviction != "lru" {
		t.Errorf("ephemeral pool eviction = %q, want lru", c.Pools[0].Eviction)
	}
	if c.Pools[1].Eviction != "" {
		t.Errorf("durable pool eviction = %q, want none", c.Pools[1].Eviction)
	}
}

func TestParseExplicitZeros(t *testing.T) {
	const pool = `
[[pool]]
name = "p"
prefix = "p/"
medium = "ssd"
mode = "durable"
engine = "pebble"
`
	tests := []struct {
		name, toml, wantErr string
	}{
		{"failure_wait 0 is allowed", "[cluster]\nfailure_wait = \"0s\"\n" + pool, ""},
		{"capacity unlimited", pool + "capacity = \"unlimited\"\n", ""},
		{"capacity UNLIMITED", pool + "capacity = \"UNLIMITED\"\n", ""},
		{"capacity 0 is refused", pool + "capacity = \"0\"\n", `pool[0] ("p").capacity: 0 bytes holds nothing; write capacity = "unlimited" for no limit (the default when capacity is absent)`},
		{"capacity integer 0 is refused", pool + "capacity = 0\n", `pool[0] ("p").capacity: 0 bytes holds nothing; write capacity = "unlimited" for no limit (the default when capacity is absent)`},
		{"capacity integer bytes", pool + "capacity = 4096\n", ""},
		{"capacity negative integer", pool + "capacity = -1\n", "TOML line 8, column 12 (key pool.capacity): invalid size -1: must not be negative"},
		{"stashes over the limit", pool + "stashes = 100000\n", `pool[0] ("p").stashes: must be at most 1000, got 100000`},
		{"log replicas 0", "[log]\nreplicas = 0\n" + pool, "log.replicas: must be 1 or more, got 0"},
		{"stashes 0", pool + "stashes = 0\n", `pool[0] ("p").stashes: must be 1 or more, got 0`},
		{"replication 0", pool + "replication = 0\n", `pool[0] ("p").replication: must be 1 or more, got 0`},
		{"mvcc_window 0", "[cluster]\nmvcc_window = \"0s\"\n" + pool, "cluster.mvcc_window: must be between 1s and 1h, got 0s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.toml))
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.wantErr != "" && !hasLine(err, tt.wantErr):
				t.Fatalf("error = %v\nwant a line %q", err, tt.wantErr)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(c *Config)
		want   []string // lines the error must contain; none: valid
	}{
		{"default", func(c *Config) {}, nil},

		// cluster and log
		{"mvcc_window too small", func(c *Config) { c.Cluster.MVCCWindow.Duration = 500 * time.Millisecond },
			[]string{"cluster.mvcc_window: must be between 1s and 1h, got 500ms"}},
		{"mvcc_window too large", func(c *Config) { c.Cluster.MVCCWindow.Duration = 2 * time.Hour },
			[]string{"cluster.mvcc_window: must be between 1s and 1h, got 2h"}},
		{"mvcc_window 1s", func(c *Config) { c.Cluster.MVCCWindow.Duration = time.Second }, nil},
		{"mvcc_window 1h", func(c *Config) { c.Cluster.MVCCWindow.Duration = time.Hour }, nil},
		{"failure_wait negative", func(c *Config) { c.Cluster.FailureWait.Duration = -time.Second },
			[]string{"cluster.failure_wait: must not be negative, got -1s"}},
		{"failure_wait 0", func(c *Config) { c.Cluster.FailureWait.Duration = 0 }, nil},
		{"log replicas 0", func(c *Config) { c.Log.Replicas = 0 },
			[]string{"log.replicas: must be 1 or more, got 0"}},
		{"log replicas 8", func(c *Config) { c.Log.Replicas = 8 },
			[]string{"log.replicas: must be at most 7, got 8"}},
		{"log replicas 2 allowed", func(c *Config) { c.Log.Replicas = 2 }, nil},
		{"log replicas 7", func(c *Config) { c.Log.Replicas = 7 }, nil},

		// pools
		{"no pools", func(c *Config) { c.Pools = nil },
			[]string{"pool: at least one [[pool]] is required"}},
		{"name missing", func(c *Config) { c.Pools[0].Name = "" },
			[]string{"pool[0].name: missing"}},
		{"name bad characters", func(c *Config) { c.Pools[0].Name = "Cache" },
			[]string{`pool[0] ("Cache").name: "Cache" may only contain a-z, 0-9, _ and -`}},
		{"name with space", func(c *Config) { c.Pools[1].Name = "my data" },
			[]string{`pool[1] ("my data").name: "my data" may only contain a-z, 0-9, _ and -`}},
		{"name with allowed characters", func(c *Config) { c.Pools[1].Name = "data_2-x" }, nil},
		{"name duplicate", func(c *Config) { c.Pools[1].Name = "cache" },
			[]string{`pool[1] ("cache").name: duplicate: pool[0] has the same name`}},
		{"prefix missing", func(c *Config) { c.Pools[0].Prefix = "" },
			[]string{`pool[0] ("cache").prefix: missing (every pool needs a non-empty key prefix)`}},
		{"prefix system", func(c *Config) { c.Pools[1].Prefix = "\xff/d" },
			[]string{`pool[1] ("data").prefix: "\xff/d" starts with byte 0xff, which is reserved for the system key space`}},
		{"prefix not utf-8", func(c *Config) { c.Pools[1].Prefix = "d\xfe" },
			[]string{`pool[1] ("data").prefix: "d\xfe" is not valid UTF-8 (TOML strings are UTF-8)`}},
		{"prefix binary but utf-8", func(c *Config) { c.Pools[1].Prefix = "\x00\x01" }, nil},
		{"prefix extends another", func(c *Config) { c.Pools[1].Prefix = "c/x" },
			[]string{`pool[1] ("data").prefix: "c/x" overlaps the prefix "c/" of pool[0] ("cache"): no pool's prefix may be a prefix of another's, each key belongs to exactly one pool`}},
		{"prefix shortens another", func(c *Config) { c.Pools[1].Prefix = "c" },
			[]string{`pool[1] ("data").prefix: "c" overlaps the prefix "c/" of pool[0] ("cache"): no pool's prefix may be a prefix of another's, each key belongs to exactly one pool`}},
		{"prefix equal", func(c *Config) { c.Pools[1].Prefix = "c/" },
			[]string{`pool[1] ("data").prefix: "c/" overlaps the prefix "c/" of pool[0] ("cache"): no pool's prefix may be a prefix of another's, each key belongs to exactly one pool`}},
		{"prefixes sharing a start", func(c *Config) { c.Pools[0].Prefix = "ab"; c.Pools[1].Prefix = "ac" }, nil},
		{"medium unknown", func(c *Config) { c.Pools[1].Medium = "tape" },
			[]string{`pool[1] ("data").medium: "tape" is not one of dram, ssd, hdd, nvm`}},
		{"medium missing", func(c *Config) { c.Pools[1].Medium = "" },
			[]string{`pool[1] ("data").medium: missing (one of dram, ssd, hdd, nvm)`}},
		{"medium is case-sensitive", func(c *Config) { c.Pools[1].Medium = "SSD" },
			[]string{`pool[1] ("data").medium: "SSD" is not one of dram, ssd, hdd, nvm`}},
		{"medium nvm", func(c *Config) { c.Pools[1].Medium = "nvm" }, nil},
		{"medium hdd", func(c *Config) { c.Pools[1].Medium = "hdd" }, nil},
		{"mode unknown", func(c *Config) { c.Pools[1].Mode = "forever" },
			[]string{`pool[1] ("data").mode: "forever" is not one of ephemeral, durable`}},
		{"mode missing", func(c *Config) { c.Pools[1].Mode = "" },
			[]string{`pool[1] ("data").mode: missing (one of ephemeral, durable)`}},
		{"engine unknown", func(c *Config) { c.Pools[1].Engine = "rocksdb" },
			[]string{`pool[1] ("data").engine: "rocksdb" is not one of memory, pebble, sqlite, flash`}},
		{"engine missing", func(c *Config) { c.Pools[1].Engine = "" },
			[]string{`pool[1] ("data").engine: missing (one of memory, pebble, sqlite, flash)`}},
		{"engine sqlite", func(c *Config) { c.Pools[1].Engine = "sqlite" }, nil},
		{"engine flash durable", func(c *Config) { c.Pools[1].Engine = "flash" }, nil},
		{"dram needs memory", func(c *Config) { c.Pools[0].Engine = "flash" },
			[]string{`pool[0] ("cache").engine: medium dram requires engine memory, got flash`}},
		{"dram with pebble", func(c *Config) { c.Pools[0].Engine = "pebble" },
			[]string{
				`pool[0] ("cache").engine: medium dram requires engine memory, got pebble`,
				`pool[0] ("cache").engine: an ephemeral pool needs engine memory or flash: pebble cannot evict`,
			}},
		{"memory needs dram", func(c *Config) { c.Pools[1].Engine = "memory" },
			[]string{`pool[1] ("data").engine: engine memory requires medium dram, got ssd`}},
		{"local log on dram", func(c *Config) { c.Pools[0].LocalLog = true }, nil},
		{"local log on ssd", func(c *Config) { c.Pools[1].LocalLog = true },
			[]string{`pool[1] ("data").local_log: needs medium dram and mode ephemeral (a DRAM cache), got medium ssd and mode durable`}},
		{"local log on flash cache", func(c *Config) {
			c.Pools[1].LocalLog, c.Pools[1].Mode, c.Pools[1].Engine, c.Pools[1].Eviction = true, "ephemeral", "flash", "lru"
		},
			[]string{`pool[1] ("data").local_log: needs medium dram and mode ephemeral (a DRAM cache), got medium ssd and mode ephemeral`}},
		{"durable needs non-volatile", func(c *Config) { c.Pools[0].Mode = "durable"; c.Pools[0].Eviction = "" },
			[]string{`pool[0] ("cache").mode: durable requires a non-volatile medium (ssd, hdd or nvm), got dram: a dram stash loses its data on restart`}},
		{"ephemeral pebble cannot evict", func(c *Config) { c.Pools[1].Mode = "ephemeral"; c.Pools[1].Eviction = "lru" },
			[]string{`pool[1] ("data").engine: an ephemeral pool needs engine memory or flash: pebble cannot evict`}},
		{"ephemeral sqlite cannot evict", func(c *Config) {
			c.Pools[1].Mode = "ephemeral"
			c.Pools[1].Engine = "sqlite"
			c.Pools[1].Eviction = "lru"
		}, []string{`pool[1] ("data").engine: an ephemeral pool needs engine memory or flash: sqlite cannot evict`}},
		{"ephemeral flash on ssd", func(c *Config) {
			c.Pools[1].Mode = "ephemeral"
			c.Pools[1].Engine = "flash"
			c.Pools[1].Eviction = "camp"
		}, nil},
		{"flash settings", func(c *Config) {
			c.Pools[1].Engine = "flash"
			zero, big := Size(0), 64*MiB
			c.Pools[1].Flash = &Flash{Cache: &big, WriteBuffer: &zero, Segment: 16 * MiB, DirectIO: true}
		}, nil},
		{"far memory", func(c *Config) {
			c.Pools[1].Engine = "flash"
			c.Pools[1].Flash = &Flash{FarMemory: &Duration{2 * time.Microsecond}, Prefetch: new(true), LookupThreads: 32, IO: "uring"}
		}, nil},
		{"far memory 0 is DRAM", func(c *Config) {
			c.Pools[1].Engine = "flash"
			c.Pools[1].Flash = &Flash{FarMemory: &Duration{0}}
		}, nil},
		{"far memory keys checked", func(c *Config) {
			c.Pools[1].Engine = "flash"
			c.Pools[1].Flash = &Flash{FarMemory: &Duration{2 * time.Millisecond}, LookupThreads: -1, IO: "aio"}
		}, []string{
			`pool[1] ("data").flash.far_memory: must be between 0 and 1ms, got 2ms`,
			`pool[1] ("data").flash.lookup_threads: must be between 1 and 4096, got -1`,
			`pool[1] ("data").flash.io: "aio" is not one of uring, threads`}},
		{"far memory keys without far memory", func(c *Config) {
			c.Pools[1].Engine = "flash"
			c.Pools[1].Flash = &Flash{Prefetch: new(false), LookupThreads: 8, IO: "threads"}
		}, []string{
			`pool[1] ("data").flash.prefetch: only with far_memory > 0 (the index is in DRAM)`,
			`pool[1] ("data").flash.lookup_threads: only with far_memory > 0 (the index is in DRAM)`,
			`pool[1] ("data").flash.io: only with far_memory > 0 (the index is in DRAM)`}},
		{"flash settings on another engine", func(c *Config) { c.Pools[1].Flash = &Flash{} },
			[]string{`pool[1] ("data").flash: settings of engine flash, but engine is pebble (remove the [pool.flash] table)`}},
		{"pebble settings", func(c *Config) { c.Pools[1].Pebble = &Pebble{Cache: new(MiB)} }, nil},
		{"pebble settings on another engine", func(c *Config) {
			c.Pools[1].Engine = "flash"
			c.Pools[1].Pebble = &Pebble{}
		}, []string{`pool[1] ("data").pebble: settings of engine pebble, but engine is flash (remove the [pool.pebble] table)`}},
		{"pebble cache too small", func(c *Config) { c.Pools[1].Pebble = &Pebble{Cache: new(Size(4 * KiB))} },
			[]string{`pool[1] ("data").pebble.cache: must be at least 64KiB, got 4KiB`}},
		{"flash segment too small", func(c *Config) {
			c.Pools[1].Engine = "flash"
			c.Pools[1].Flash = &Flash{Segment: 64 * KiB}
		}, []string{`pool[1] ("data").flash.segment: must be at least 1MiB, got 64KiB`}},
		{"flash negative cache", func(c *Config) {
			c.Pools[1].Engine = "flash"
			neg := Size(-1)
			c.Pools[1].Flash = &Flash{Cache: &neg, WriteBuffer: &neg}
		}, []string{
			`pool[1] ("data").flash.cache: must not be negative, got -1`,
			`pool[1] ("data").flash.write_buffer: must not be negative, got -1`,
		}},
		{"eviction on durable pool", func(c *Config) { c.Pools[1].Eviction = "lru" },
			[]string{`pool[1] ("data").eviction: only ephemeral pools evict, but mode is durable (remove eviction)`}},
		{"eviction unknown", func(c *Config) { c.Pools[0].Eviction = "fifo" },
			[]string{`pool[0] ("cache").eviction: "fifo" is not one of lru, camp`}},
		{"eviction missing on ephemeral pool", func(c *Config) { c.Pools[0].Eviction = "" },
			[]string{`pool[0] ("cache").eviction: missing (one of lru, camp)`}},
		{"eviction camp", func(c *Config) { c.Pools[0].Eviction = "camp" }, nil},
		{"stashes 0", func(c *Config) { c.Pools[0].Stashes = 0; c.Pools[0].Replication = 1 },
			[]string{`pool[0] ("cache").stashes: must be 1 or more, got 0`}},
		{"stashes negative", func(c *Config) { c.Pools[0].Stashes = -2 },
			[]string{`pool[0] ("cache").stashes: must be 1 or more, got -2`}},
		{"replication 0", func(c *Config) { c.Pools[0].Replication = 0 },
			[]string{`pool[0] ("cache").replication: must be 1 or more, got 0`}},
		{"replication above stashes", func(c *Config) { c.Pools[1].Replication = 3 },
			[]string{`pool[1] ("data").replication: must be at most stashes (2), got 3`}},
		{"replication equal to stashes", func(c *Config) { c.Pools[1].Stashes = 5; c.Pools[1].Replication = 5 }, nil},
		{"capacity negative", func(c *Config) { c.Pools[1].Capacity = -1 },
			[]string{`pool[1] ("data").capacity: must not be negative, got -1`}},
		{"capacity unlimited", func(c *Config) { c.Pools[1].Capacity = 0 }, nil},

		// several problems at once are all reported
		{"several", func(c *Config) {
			c.Log.Replicas = 0
			c.Pools[1].Medium = "tape"
			c.Pools[1].Stashes = 0
		}, []string{
			"log.replicas: must be 1 or more, got 0",
			`pool[1] ("data").medium: "tape" is not one of dram, ssd, hdd, nvm`,
			`pool[1] ("data").stashes: must be 1 or more, got 0`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			tt.mutate(c)
			err := c.Validate()
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error, want %q", tt.want)
			}
			for _, w := range tt.want {
				if !hasLine(err, w) {
					t.Errorf("error:\n%v\nwant a line:\n%s", err, w)
				}
			}
			if got := len(errorLines(err)); got != len(tt.want) {
				t.Errorf("got %d problems, want %d:\n%v", got, len(tt.want), err)
			}
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Errorf("error %T is not a *FieldError", err)
			}
		})
	}
}

func TestValidateNil(t *testing.T) {
	var c *Config
	if err := c.Validate(); err == nil {
		t.Fatal("nil config validates")
	}
}

func TestParseSize(t *testing.T) {
	tests := []struct {
		in   string
		want Size
	}{
		{"256MiB", 256 << 20},
		{"10GiB", 10 << 30},
		{"512KiB", 512 << 10},
		{"1MiB", 1 << 20},
		{"4096", 4096},
		{"1GB", 1_000_000_000},
		{"500MB", 500_000_000},
		{"1KB", 1000},
		{"0", 0},
		{"1B", 1},
		{"1b", 1},
		{"1kib", 1024},
		{"1KIB", 1024},
		{"2gb", 2_000_000_000},
		{"3TiB", 3 << 40},
		{"2TB", 2e12},
		{"1PiB", 1 << 50},
		{"1PB", 1e15},
		{"7EiB", 7 << 60},
		{"9EB", 9e18},
		{"1 GiB", 1 << 30},
		{" 64MiB ", 64 << 20},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseSize(tt.in)
			if err != nil || got != tt.want {
				t.Fatalf("ParseSize(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
			}
			var s Size
			if err := s.UnmarshalText([]byte(tt.in)); err != nil || s != tt.want {
				t.Fatalf("UnmarshalText(%q) = %d, %v; want %d", tt.in, s, err, tt.want)
			}
		})
	}
}

func TestParseSizeErrors(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", `invalid size "": empty`},
		{"   ", `invalid size "   ": empty`},
		{"-1", `invalid size "-1": must not be negative`},
		{"-1GiB", `invalid size "-1GiB": must not be negative`},
		{"+1", `invalid size "+1": want a whole number of bytes`},
		{"abc", `invalid size "abc": want a whole number of bytes`},
		{"GiB", `invalid size "GiB": want a whole number of bytes`},
		{"1.5GiB", `invalid size "1.5GiB": must be a whole number`},
		{"10XB", `invalid size "10XB": unknown unit "XB"`},
		{"10 G", `invalid size "10 G": unknown unit "G"`},
		{"1e9", `invalid size "1e9": unknown unit "e9"`},
		{"1GiB2", `invalid size "1GiB2": unknown unit "GiB2"`},
		{"8EiB", `invalid size "8EiB": too large`},
		{"99999999999999999999", `invalid size "99999999999999999999": too large`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			_, err := ParseSize(tt.in)
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Fatalf("ParseSize(%q) error = %v, want prefix %q", tt.in, err, tt.want)
			}
		})
	}
}

func TestSizeMarshalText(t *testing.T) {
	tests := []struct {
		in   Size
		want string
	}{
		{0, "0"},
		{1, "1"},
		{1000, "1000"},
		{1024, "1KiB"},
		{1536, "1536"},
		{1536 * KiB, "1536KiB"},
		{64 * MiB, "64MiB"},
		{GiB, "1GiB"},
		{1024 * GiB, "1TiB"},
		{GB, "1000000000"},
		{2 * PiB, "2PiB"},
		{EiB, "1EiB"},
	}
	for _, tt := range tests {
		b, err := tt.in.MarshalText()
		if err != nil || string(b) != tt.want {
			t.Errorf("Size(%d).MarshalText() = %q, %v; want %q", int64(tt.in), b, err, tt.want)
		}
		if tt.in.String() != tt.want {
			t.Errorf("Size(%d).String() = %q, want %q", int64(tt.in), tt.in.String(), tt.want)
		}
		back, err := ParseSize(tt.want)
		if err != nil || back != tt.in {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", tt.want, back, err, int64(tt.in))
		}
	}
	if _, err := Size(-1).MarshalText(); err == nil {
		t.Error("negative size marshals")
	}
}

func TestSizeFromTOMLInteger(t *testing.T) {
	c, err := Parse([]byte(`
[[pool]]
name = "p"
prefix = "p/"
medium = "ssd"
mode = "durable"
engine = "pebble"
capacity = 4096
`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Pools[0].Capacity != 4096 {
		t.Fatalf("capacity = %d, want 4096", c.Pools[0].Capacity)
	}
}

func TestDuration(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
		out  string
	}{
		{"60s", time.Minute, "1m"},
		{"5s", 5 * time.Second, "5s"},
		{"1m30s", 90 * time.Second, "1m30s"},
		{"1h", time.Hour, "1h"},
		{"90m", 90 * time.Minute, "1h30m"},
		{"1h0m1s", time.Hour + time.Second, "1h0m1s"},
		{"1.5s", 1500 * time.Millisecond, "1.5s"},
		{"500ms", 500 * time.Millisecond, "500ms"},
		{"0s", 0, "0s"},
		{"0", 0, "0s"},
	}
	for _, tt := range tests {
		var d Duration
		if err := d.UnmarshalText([]byte(tt.in)); err != nil || d.Duration != tt.want {
			t.Errorf("UnmarshalText(%q) = %v, %v; want %v", tt.in, d.Duration, err, tt.want)
			continue
		}
		b, err := d.MarshalText()
		if err != nil || string(b) != tt.out {
			t.Errorf("MarshalText(%v) = %q, %v; want %q", tt.want, b, err, tt.out)
		}
		var back Duration
		if err := back.UnmarshalText(b); err != nil || back != d {
			t.Errorf("round trip of %q: %v, %v", b, back, err)
		}
	}
	for _, bad := range []string{"", "5", "abc", "5 s", "1d"} {
		var d Duration
		err := d.UnmarshalText([]byte(bad))
		if err == nil || !strings.Contains(err.Error(), "invalid duration") {
			t.Errorf("UnmarshalText(%q) error = %v, want invalid duration", bad, err)
		}
	}
}

func TestRoundTrip(t *testing.T) {
	rich := &Config{
		Cluster: Cluster{FailureWait: Duration{0}, MVCCWindow: Duration{1500 * time.Millisecond}, ShardBytes: 64 * KiB, DCDelay: Duration{3 * time.Millisecond}},
		Log:     Log{Replicas: 3},
		Pools: []Pool{
			{Name: "front", Prefix: "f\x00\x01\t\"\\/é", Medium: "dram", Mode: "ephemeral", Engine: "memory",
				Stashes: 8, Replication: 1, Capacity: 1000, Eviction: "camp", LocalLog: true},
			{Name: "flash_cache", Prefix: "fc", Medium: "nvm", Mode: "ephemeral", Engine: "flash",
				Stashes: 3, Replication: 2, Capacity: 3 * GB, Eviction: "lru"},
			{Name: "cold-data", Prefix: "z", Medium: "hdd", Mode: "durable", Engine: "sqlite",
				Stashes: 1, Replication: 1},
			{Name: "x", Prefix: "\u2603", Medium: "ssd", Mode: "durable", Engine: "flash",
				Stashes: 4, Replication: 3, Capacity: 7 * TiB,
				Flash: &Flash{Cache: new(Size(0)), WriteBuffer: new(16 * MiB), Segment: 128 * MiB, DirectIO: true,
					FarMemory: &Duration{5 * time.Microsecond}, Prefetch: new(false), LookupThreads: 96, IO: "threads"}},
			{Name: "y", Prefix: "y", Medium: "ssd", Mode: "durable", Engine: "flash",
				Stashes: 1, Replication: 1, Flash: &Flash{Segment: 2 * MiB},
				Device: &Device{Profile: "hdd", SyncLatency: &Duration{1500 * time.Microsecond}, IOPS: new(100), Bandwidth: new(Size(100 * MB)), QueueDepth: new(2)}},
			{Name: "z", Prefix: "q", Medium: "ssd", Mode: "durable", Engine: "pebble",
				Stashes: 1, Replication: 1, Device: &Device{Profile: "none", ReadLatency: &Duration{time.Millisecond}}},
		},
	}
	if err := rich.Validate(); err != nil {
		t.Fatalf("rich config invalid: %v", err)
	}
	design, err := Parse([]byte(designExample))
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]*Config{"default": Default(), "rich": rich, "design": design} {
		t.Run(name, func(t *testing.T) {
			b, err := c.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			if c.String() != string(b) {
				t.Error("String() differs from Marshal()")
			}
			back, err := Parse(b)
			if err != nil {
				t.Fatalf("Parse(Marshal()) = %v\n%s", err, b)
			}
			if !reflect.DeepEqual(back, c) {
				t.Fatalf("round trip differs:\n got %+v\nwant %+v\n%s", back, c, b)
			}
			b2, err := back.Marshal()
			if err != nil || string(b2) != string(b) {
				t.Fatalf("second Marshal differs: %v\n%s\n---\n%s", err, b, b2)
			}
		})
	}
}

func TestMarshalOmitsUnsetOptionals(t *testing.T) {
	c := Default()
	c.Pools[1].Capacity = 0
	s := c.String()
	if strings.Count(s, "capacity") != 1 || strings.Count(s, "eviction") != 1 {
		t.Fatalf("unexpected output:\n%s", s)
	}
}

func TestPoolForKey(t *testing.T) {
	c := Default()
	c.Pools = append(c.Pools, Pool{Name: "bin", Prefix: "\x00\x01", Medium: "ssd", Mode: "durable",
		Engine: "pebble", Stashes: 1, Replication: 1})
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		key  string
		want string // "" means no pool
	}{
		{"c/", "cache"},
		{"c/user/42", "cache"},
		{"d/user/42", "data"},
		{"d/", "data"},
		{"\x00\x01\xff", "bin"},
		{"\x00", ""},
		{"c", ""},
		{"d", ""},
		{"", ""},
		{"x/y", ""},
		{"C/x", ""},
		{"\xff/shard", ""},
	}
	for _, tt := range tests {
		p, ok := c.PoolForKey([]byte(tt.key))
		switch {
		case tt.want == "" && ok:
			t.Errorf("PoolForKey(%q) = %s, want none", tt.key, p.Name)
		case tt.want != "" && (!ok || p.Name != tt.want):
			t.Errorf("PoolForKey(%q) = %v, %v; want %s", tt.key, p, ok, tt.want)
		}
	}
	// The pointer refers into the configuration.
	p, _ := c.PoolForKey([]byte("c/x"))
	if p != &c.Pools[0] {
		t.Error("PoolForKey does not point into Config.Pools")
	}
}

func TestPoolByName(t *testing.T) {
	c := Default()
	if p, ok := c.PoolByName("data"); !ok || p != &c.Pools[1] {
		t.Errorf("PoolByName(data) = %v, %v", p, ok)
	}
	for _, name := range []string{"", "Data", "nope"} {
		if p, ok := c.PoolByName(name); ok {
			t.Errorf("PoolByName(%q) = %v", name, p)
		}
	}
}

func TestUnknownKeys(t *testing.T) {
	const pool = `
[[pool]]
name = "cache"
prefix = "c/"
medium = "dram"
mode = "ephemeral"
engine = "memory"
`
	const pool2 = `
[[pool]]
name = "data"
prefix = "d/"
medium = "ssd"
mode = "durable"
engine = "pebble"
`
	tests := []struct {
		name, toml string
		want       []string
	}{
		{"top level", "verbose = true\n" + pool,
			[]string{`verbose: unknown key (valid keys: auth, cluster, log, pool)`}},
		{"unknown table", "[metrics]\nport = 9\n" + pool,
			[]string{`metrics: unknown key (valid keys: auth, cluster, log, pool)`}},
		{"cluster typo", "[cluster]\nfailure_wiat = \"1s\"\n" + pool,
			[]string{`cluster.failure_wiat: unknown key (did you mean failure_wait?)`}},
		{"log", "[log]\nreplica = 3\n" + pool,
			[]string{`log.replica: unknown key (did you mean replicas?)`}},
		{"pool typo", pool + pool2 + "capacty = \"1GiB\"\n",
			[]string{`pool[1] ("data").capacty: unknown key (did you mean capacity?)`}},
		{"pool unrelated", pool + "color = \"red\"\n",
			[]string{`pool[0] ("cache").color: unknown key (valid keys: across_dcs, capacity, device, engine, eviction, flash, local_log, medium, mode, name, pebble, prefix, recency, replication, stashes)`}},
		{"pool subtable", pool + "[pool.extra]\nx = 1\n",
			[]string{`pool[0] ("cache").extra: unknown key (valid keys: across_dcs, capacity, device, engine, eviction, flash, local_log, medium, mode, name, pebble, prefix, recency, replication, stashes)`}},
		{"case", "[Cluster]\nmvcc_window = \"2s\"\n" + pool + "Stashes = 2\n",
			[]string{
				`Cluster: unknown key (keys are case-sensitive: did you mean cluster?)`,
				`pool[0] ("cache").Stashes: unknown key (keys are case-sensitive: did you mean stashes?)`,
			}},
		{"inline pool array", `pool = [{name = "a", prefix = "a", medium = "ssd", mode = "durable", engine = "pebble", zz = 1}]`,
			[]string{`pool[0] ("a").zz: unknown key (valid keys: across_dcs, capacity, device, engine, eviction, flash, local_log, medium, mode, name, pebble, prefix, recency, replication, stashes)`}},
		{"same key in two pools", pool + "zone = 1\n" + pool2 + "zone = 2\n",
			[]string{
				`pool[0] ("cache").zone: unknown key (valid keys: across_dcs, capacity, device, engine, eviction, flash, local_log, medium, mode, name, pebble, prefix, recency, replication, stashes)`,
				`pool[1] ("data").zone: unknown key (valid keys: across_dcs, capacity, device, engine, eviction, flash, local_log, medium, mode, name, pebble, prefix, recency, replication, stashes)`,
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.toml))
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !hasLine(err, w) {
					t.Errorf("error:\n%v\nwant a line:\n%s", err, w)
				}
			}
			if got := len(errorLines(err)); got != len(tt.want) {
				t.Errorf("got %d lines, want %d:\n%v", got, len(tt.want), err)
			}
		})
	}
}

func TestTOMLErrors(t *testing.T) {
	tests := []struct {
		name, toml string
		line       int
		want       string
	}{
		{"bare value", "[cluster]\nmvcc_window = \"5s\"\nfailure_wait = 5s\n", 3, "TOML line 3"},
		{"unterminated string", "[log]\nreplicas = 1\n\n[[pool]]\nname = \"x\n", 5, "TOML line 5"},
		{"bad value", "[log]\n\nreplicas = = 1\n", 3, "TOML line 3"},
		{"wrong type", "[[pool]]\nname = 3\n", 2, `TOML line 2 (key pool.name): incompatible types`},
		{"bad size", "[[pool]]\nname = \"x\"\ncapacity = \"-1\"\n", 3, `TOML line 3, column 13 (key pool.capacity): invalid size "-1": must not be negative`},
		{"bad size unit", "[[pool]]\ncapacity = \"1 parsec\"\n", 2, `TOML line 2, column 13 (key pool.capacity): invalid size "1 parsec": unknown unit "parsec"`},
		{"bad duration", "[cluster]\nfailure_wait = \"60\"\n", 2, `TOML line 2, column 17 (key cluster.failure_wait): invalid duration "60"`},
		{"duplicate key", "[log]\nreplicas = 1\nreplicas = 3\n", 3, "TOML line 3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.toml))
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Fatalf("error = %v, want prefix %q", err, tt.want)
			}
			var te *TOMLError
			if !errors.As(err, &te) || te.Line != tt.line {
				t.Fatalf("error %#v: want a *TOMLError at line %d", err, tt.line)
			}
		})
	}
}

func TestPoolSingleBrackets(t *testing.T) {
	_, err := Parse([]byte("[pool]\nname = \"x\"\n"))
	if err == nil || err.Error() != "pool: write each pool as a [[pool]] table (double brackets), not [pool]" {
		t.Fatalf("error = %v", err)
	}
}

func TestParseEmpty(t *testing.T) {
	_, err := Parse(nil)
	if err == nil || err.Error() != "pool: at least one [[pool]] is required" {
		t.Fatalf("error = %v", err)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.toml")
	if err := os.WriteFile(good, []byte(designExample), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := Load(good)
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := c.PoolForKey([]byte("d/1")); !ok || p.Name != "data" {
		t.Errorf("loaded config routes d/1 to %v", p)
	}

	bad := filepath.Join(dir, "bad.toml")
	if err := os.WriteFile(bad, []byte("[log]\nreplicas = 0\n[[pool]]\nname=\"x\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Load(bad)
	if err == nil || !strings.HasPrefix(err.Error(), "config file "+bad+": ") || !strings.Contains(err.Error(), "log.replicas: must be 1 or more, got 0") {
		t.Errorf("Load(bad) error = %v", err)
	}
	var fe *FieldError
	if !errors.As(err, &fe) {
		t.Errorf("Load(bad) error does not wrap a *FieldError")
	}

	syntax := filepath.Join(dir, "syntax.toml")
	if err := os.WriteFile(syntax, []byte("[log]\nreplicas = \n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Load(syntax)
	if err == nil || !strings.HasPrefix(err.Error(), "config file "+syntax+": TOML line 2") {
		t.Errorf("Load(syntax) error = %v", err)
	}

	missing := filepath.Join(dir, "missing.toml")
	_, err = Load(missing)
	if err == nil || !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Errorf("Load(missing) error = %v", err)
	}
}

func TestWarnings(t *testing.T) {
	c := Default()
	c.Log.Replicas = 2
	c.Pools[0].Capacity = 0
	w := c.Warnings()
	want := []string{
		"log.replicas: 2 replicas tolerate no more failures than 1; an odd number is recommended",
		`pool[0] ("cache").capacity: unlimited, so this ephemeral pool never evicts and its stashes grow without bound`,
	}
	if !reflect.DeepEqual(w, want) {
		t.Fatalf("Warnings() = %q\nwant %q", w, want)
	}
}

func TestParseFlashTable(t *testing.T) {
	c, err := Parse([]byte(`
[[pool]]
name = "data"
prefix = "d/"
medium = "ssd"
mode = "durable"
engine = "flash"
[pool.flash]
cache = "256MiB"
write_buffer = 0
segment = "32MiB"
direct_io = true
`))
	if err != nil {
		t.Fatal(err)
	}
	f := c.Pools[0].Flash
	if f == nil || f.Cache == nil || *f.Cache != 256*MiB || f.WriteBuffer == nil || *f.WriteBuffer != 0 ||
		f.Segment != 32*MiB || !f.DirectIO {
		t.Fatalf("flash settings = %+v", f)
	}
	_, err = Parse([]byte(`
[[pool]]
name = "data"
prefix = "d/"
medium = "ssd"
mode = "durable"
engine = "flash"
[pool.flash]
cach = "1MiB"
`))
	if err == nil || err.Error() != `pool[0] ("data").flash.cach: unknown key (did you mean cache?)` {
		t.Fatalf("a misspelt flash key: err = %v", err)
	}
}

func TestParsePebbleTable(t *testing.T) {
	pool := `
[[pool]]
name = "data"
prefix = "d/"
medium = "ssd"
mode = "durable"
engine = "pebble"
[pool.pebble]
`
	c, err := Parse([]byte(pool + `cache = "1MiB"`))
	if err != nil {
		t.Fatal(err)
	}
	if p := c.Pools[0].Pebble; p == nil || p.Cache == nil || *p.Cache != MiB {
		t.Fatalf("pebble settings = %+v", p)
	}
	back, err := Parse([]byte(c.String()))
	if err != nil || !reflect.DeepEqual(back, c) {
		t.Fatalf("marshalled and parsed back: %v\n%s", err, c)
	}
	_, err = Parse([]byte(pool + `cach = "1MiB"`))
	if err == nil || err.Error() != `pool[0] ("data").pebble.cach: unknown key (did you mean cache?)` {
		t.Fatalf("a misspelt pebble key: err = %v", err)
	}
}

func TestParseDeviceTable(t *testing.T) {
	pool := func(engine, device string) string {
		medium, mode := "ssd", "durable"
		if engine == "memory" {
			medium, mode = "dram", "ephemeral"
		}
		return fmt.Sprintf("[[pool]]\nname = \"p\"\nprefix = \"p/\"\nmedium = %q\nmode = %q\nengine = %q\n%s", medium, mode, engine, device)
	}
	c, err := Parse([]byte(pool("pebble", "[pool.device]\nprofile = \"ssd\"\nread_latency = \"20µs\"\nbandwidth = \"200MB\"\n")))
	if err != nil {
		t.Fatal(err)
	}
	d := c.Pools[0].Device
	if d == nil || d.Profile != "ssd" || d.ReadLatency == nil || d.ReadLatency.Duration != 20*time.Microsecond ||
		d.Bandwidth == nil || *d.Bandwidth != 200*MB || d.WriteLatency != nil || d.IOPS != nil || d.QueueDepth != nil || !c.Pools[0].Emulates() {
		t.Fatalf("device = %+v", d)
	}
	// Profile none by default; an override alone emulates just that.
	c, err = Parse([]byte(pool("pebble", "[pool.device]\nread_latency = \"1ms\"\n")))
	if err != nil || c.Pools[0].Device.Profile != "none" || !c.Pools[0].Emulates() {
		t.Fatalf("override on none: %v %+v", err, c)
	}
	c, err = Parse([]byte(pool("pebble", "[pool.device]\nprofile = \"none\"\nqueue_depth = 4\n")))
	if err != nil || c.Pools[0].Emulates() {
		t.Fatalf("profile none with only a queue depth emulates nothing: %v", err)
	}
	if c, err := Parse([]byte(pool("pebble", ""))); err != nil || c.Pools[0].Emulates() || c.Pools[0].Device != nil {
		t.Fatalf("no device: %v", err)
	}
	// A DRAM pool with a local log may emulate its disk.
	if _, err := Parse([]byte(pool("memory", "local_log = true\n[pool.device]\nprofile = \"ssd\"\n"))); err != nil {
		t.Fatalf("dram pool with a local log: %v", err)
	}
	for _, tc := range []struct{ engine, device, want string }{
		{"pebble", "[pool.device]\nprofile = \"tape\"\n", `pool[0] ("p").device.profile: "tape" is not one of none, ssd, hdd, nvm`},
		{"pebble", "[pool.device]\nprofile = \"ssd\"\nread_latency = \"-1ms\"\n", `pool[0] ("p").device.read_latency: must not be negative, got -1ms`},
		{"pebble", "[pool.device]\nprofile = \"ssd\"\nsync_latency = \"-1ms\"\n", `pool[0] ("p").device.sync_latency: must not be negative, got -1ms`},
		{"pebble", "[pool.device]\nprofile = \"ssd\"\niops = -5\n", `pool[0] ("p").device.iops: must not be negative (0: no limit), got -5`},
		{"pebble", "[pool.device]\nprofile = \"hdd\"\nqueue_depth = 0\n", `pool[0] ("p").device.queue_depth: must be 1 or more (absent: the profile's, 1 for none), got 0`},
		{"sqlite", "[pool.device]\nprofile = \"hdd\"\n", `pool[0] ("p").device: engine sqlite cannot emulate a device: its files bypass the file-system seam the device model sits on (remove [pool.device] or use engine pebble)`},
		{"memory", "[pool.device]\nprofile = \"ssd\"\n", `pool[0] ("p").device: a DRAM pool has no files but its local log: set local_log = true, or remove [pool.device]`},
		{"pebble", "[pool.device]\nprofile = \"ssd\"\nlatency = \"1ms\"\n", `pool[0] ("p").device.latency: unknown key (valid keys: bandwidth, iops, profile, queue_depth, read_latency, sync_latency, write_latency)`},
		{"pebble", "[pool.device]\nprofil = \"ssd\"\n", `pool[0] ("p").device.profil: unknown key (did you mean profile?)`},
	} {
		_, err := Parse([]byte(pool(tc.engine, tc.device)))
		if err == nil || err.Error() != tc.want {
			t.Errorf("%s %q:\n got %v\nwant %s", tc.engine, tc.device, err, tc.want)
		}
	}
	// Bandwidth is a size: a negative one is refused when parsed.
	if _, err := Parse([]byte(pool("pebble", "[pool.device]\nbandwidth = \"-1MB\"\n"))); err == nil {
		t.Error("negative bandwidth accepted")
	}
}

// TestREADMEExample: the configuration shown in the README parses.
func TestREADMEExample(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(readme)
	i := strings.Index(s, "## Configuration")
	if i < 0 {
		t.Fatal("README has no Configuration section")
	}
	s = s[i:]
	start := strings.Index(s, "```toml\n")
	end := strings.Index(s[start+8:], "```")
	if start < 0 || end < 0 {
		t.Fatal("no toml block in the README's Configuration section")
	}
	c, err := Parse([]byte(s[start+8 : start+8+end]))
	if err != nil {
		t.Fatalf("the README's configuration: %v", err)
	}
	if len(c.Pools) != 3 || c.Pools[2].Flash == nil || *c.Pools[2].Flash.Cache != 64*MiB {
		t.Fatalf("the README's configuration parsed to %+v", c.Pools)
	}
}

func TestCheckSameClusterNamesTheFirstDifference(t *testing.T) {
	created := Default()
	tests := []struct {
		name   string
		mutate func(c *Config)
		want   string
	}{
		{"same", func(c *Config) {}, ""},
		{"capacity may change", func(c *Config) { c.Pools[1].Capacity = 2 * GiB }, ""},
		{"mvcc window may change", func(c *Config) { c.Cluster.MVCCWindow.Duration = time.Second }, ""},
		{"prefix", func(c *Config) { c.Pools[1].Prefix = "e/" },
			`pool[1] ("data").prefix: "e/" here, but the cluster was created with "d/"; changing it is not supported yet`},
		{"first of several", func(c *Config) { c.Pools[0].Stashes = 3; c.Pools[1].Engine = "sqlite" },
			`pool[0] ("cache").stashes: 3 here, but the cluster was created with 2; changing it is not supported yet`},
		{"log replicas", func(c *Config) { c.Log.Replicas = 3 },
			"log.replicas: 3 here, but the cluster was created with 1; changing it is not supported yet"},
		{"pool count", func(c *Config) { c.Pools = c.Pools[:1] },
			"pool: 1 pools here, but the cluster was created with 2; changing it is not supported yet"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			tt.mutate(c)
			err := c.CheckSameCluster(created)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.want != "" && (err == nil || err.Error() != tt.want):
				t.Fatalf("error = %v\nwant %s", err, tt.want)
			}
		})
	}
}
