package config

import (
	"bytes"
	"fmt"

	"github.com/BurntSushi/toml"
)

// outConfig mirrors Config for writing: a capacity of 0 (unlimited) and an
// empty eviction are left out, which Parse reads back to the same values.
type outConfig struct {
	Cluster Cluster   `toml:"cluster"`
	Log     Log       `toml:"log"`
	Pools   []outPool `toml:"pool"`
	Auth    *Auth     `toml:"auth,omitempty"`
}

type outPool struct {
	Name        string  `toml:"name"`
	Prefix      string  `toml:"prefix"`
	Medium      string  `toml:"medium"`
	Mode        string  `toml:"mode"`
	Engine      string  `toml:"engine"`
	Stashes     int     `toml:"stashes"`
	Replication int     `toml:"replication"`
	Capacity    Size    `toml:"capacity,omitzero"`
	Eviction    string  `toml:"eviction,omitempty"`
	Recency     bool    `toml:"recency,omitempty"`
	AcrossDCs   bool    `toml:"across_dcs,omitempty"`
	LocalLog    bool    `toml:"local_log,omitempty"`
	Flash       *Flash  `toml:"flash,omitempty"`
	Pebble      *Pebble `toml:"pebble,omitempty"`
	Device      *Device `toml:"device,omitempty"`
}

// Marshal writes the configuration as TOML that Parse reads back to an equal
// Config (for a valid configuration). Every key is written, except a capacity
// of 0 (unlimited) and an empty eviction.
func (c *Config) Marshal() ([]byte, error) {
	out := outConfig{Cluster: c.Cluster, Log: c.Log, Auth: c.Auth}
	for _, p := range c.Pools {
		out.Pools = append(out.Pools, outPool(p))
	}
	var buf bytes.Buffer
	enc := toml.NewEncoder(&buf)
	enc.Indent = ""
	if err := enc.Encode(out); err != nil {
		return nil, fmt.Errorf("config: marshal: %w", err)
	}
	return buf.Bytes(), nil
}

// String returns the configuration as TOML (see Marshal).
func (c *Config) String() string {
	b, err := c.Marshal()
	if err != nil {
		return "# " + err.Error() + "\n"
	}
	return string(b)
}
