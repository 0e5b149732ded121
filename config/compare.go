package config

import "fmt"

// CheckSameCluster reports whether c may run a cluster that was created
// with created: the pools (count, order, name, prefix, medium, mode,
// engine, stashes, replication) and log.replicas must be the same, since
// the shard map, the stashes' data and the log were laid out by them.
// Capacities, eviction, recency, local_log, [pool.flash] and the [cluster] durations
// may change between runs. The error is a *FieldError naming the first
// field that differs, with both values.
func (c *Config) CheckSameCluster(created *Config) error {
	differs := func(field string, got, was any) error {
		return &FieldError{Field: field, Msg: fmt.Sprintf("%v here, but the cluster was created with %v; changing it is not supported yet", got, was)}
	}
	if c.Log.Replicas != created.Log.Replicas {
		return differs("log.replicas", c.Log.Replicas, created.Log.Replicas)
	}
	if len(c.Pools) != len(created.Pools) {
		return differs("pool", fmt.Sprintf("%d pools", len(c.Pools)), fmt.Sprintf("%d", len(created.Pools)))
	}
	for i := range c.Pools {
		p, o := c.Pools[i], created.Pools[i]
		at := poolLabel(i, p.Name) + "."
		switch {
		case p.Name != o.Name:
			return differs(at+"name", fmt.Sprintf("%q", p.Name), fmt.Sprintf("%q", o.Name))
		case p.Prefix != o.Prefix:
			return differs(at+"prefix", fmt.Sprintf("%q", p.Prefix), fmt.Sprintf("%q", o.Prefix))
		case p.Medium != o.Medium:
			return differs(at+"medium", p.Medium, o.Medium)
		case p.Mode != o.Mode:
			return differs(at+"mode", p.Mode, o.Mode)
		case p.Engine != o.Engine:
			return differs(at+"engine", p.Engine, o.Engine)
		case p.Stashes != o.Stashes:
			return differs(at+"stashes", p.Stashes, o.Stashes)
		case p.Replication != o.Replication:
			return differs(at+"replication", p.Replication, o.Replication)
		}
	}
	return nil
}
