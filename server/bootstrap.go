package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/distash/distash/config"
	"github.com/distash/distash/internal/fsys"
	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/proxy"
	"github.com/distash/distash/internal/shardmap"
	"github.com/distash/distash/internal/stash"
	"github.com/distash/distash/internal/version"
)

// Bootstrap: the shard map a generation of the stateless roles starts
// with (read from the system stash, or a new cluster's initial map), and
// the checks that the configuration this process was started with is the
// one the cluster was created with: cluster.toml before anything opens,
// the record in the system key space once the log is recovered.

// loadShardMap reads the shard map from the system stash once it has caught
// up with the recovered log; a new cluster gets the initial map.
func (s *Server) loadShardMap(ctx context.Context, sys *stash.Stash, recovered kv.Version) (*shardmap.Map, bool, error) {
	if recovered > 0 {
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		for sys.AppliedVersion() < recovered {
			if err := sys.Failed(); err != nil {
				return nil, false, fmt.Errorf("server: the system stash failed: %w", err)
			}
			select {
			case <-rctx.Done():
				return nil, false, fmt.Errorf("server: system stash did not catch up with the log: %w", rctx.Err())
			case <-time.After(5 * time.Millisecond):
			}
		}
		v := sys.AppliedVersion()
		kvs, _, err := sys.GetRange(rctx, v, shardmap.KeyServersPrefix, kv.PrefixEnd(shardmap.KeyServersPrefix), 0, 0, false)
		if err != nil {
			return nil, false, fmt.Errorf("server: read the shard map: %w", err)
		}
		if len(kvs) > 0 {
			m := shardmap.New(nil)
			for _, p := range kvs {
				if _, err := m.Apply(kv.Mutation{Type: kv.MutSet, Key: p.Key, Param: p.Value}); err != nil {
					return nil, false, err
				}
			}
			return m, false, nil
		}
	}
	var specs []shardmap.PoolSpec
	for _, p := range s.cfg.Pools {
		specs = append(specs, shardmap.PoolSpec{Name: p.Name, Prefix: []byte(p.Prefix), Tags: s.poolTags[p.Name], Replication: p.Replication})
	}
	return shardmap.Initial(specs), true, nil
}

const configFile = "cluster.toml"

// DirFormatKind and DirFormat are the format of a server's directory: its
// layout (which subdirectory holds what), node-id and cluster.toml, stated
// by a marker (fsys.FormatFile) in it. Each subdirectory's files state
// their own (engines, raft stores, the log, the coordinators, ownership).
// Bump DirFormat with any change to the layout or those two files.
const (
	DirFormatKind = "data-dir"
	DirFormat     = 1
)

func init() { version.RegisterFormat(DirFormatKind, DirFormat) }

// checkDirFormat refuses a directory of a newer layout before anything in
// it is read, and marks one of this layout, or one written before format
// versions (the same layout).
func checkDirFormat(f fsys.FS, dir string) error {
	_, mark, err := fsys.OpenFormat(f, dir, DirFormatKind, DirFormat, nil)
	if err != nil {
		return fmt.Errorf("server: %w", err)
	}
	return mark()
}

// configKey is the system key holding the configuration the cluster was
// created with (TOML), written in the transaction that records the first
// shard map.
var configKey = []byte("\xff/conf/cluster")

// checkConfigMatches refuses to start a cluster on a directory whose
// cluster.toml records different pools, before anything is opened:
// changing pools is a reconfiguration, not supported yet. The record in
// the system key space is checked again once the log is recovered. A
// damaged file (checksum, length) is refused with an error naming it.
// legacy reports a file written before checksums: the directory was
// written by an older version.
func checkConfigMatches(f fsys.FS, dir string, cfg *config.Config) (legacy bool, err error) {
	if err := checkDirFormat(f, dir); err != nil {
		return false, err
	}
	path := filepath.Join(dir, configFile)
	data, legacy, err := fsys.ReadChecked(f, path)
	if errors.Is(err, fs.ErrNotExist) || os.IsNotExist(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("server: %w (it is the copy of the configuration the cluster was created with: restore it, or remove it and start with the same configuration)", err)
	}
	old, err := config.Parse(data)
	if err != nil {
		return false, fmt.Errorf("server: %s: %w", path, err)
	}
	if err := cfg.CheckSameCluster(old); err != nil {
		return false, fmt.Errorf("server: the cluster in %s: %w", dir, err)
	}
	return legacy, nil
}

// readConfigRecord returns the configuration recorded in the system key
// space, nil if there is none (a cluster created before it was recorded).
func readConfigRecord(ctx context.Context, sys *stash.Stash) (*config.Config, error) {
	vals, present, err := sys.Get(ctx, sys.AppliedVersion(), [][]byte{configKey})
	if err != nil {
		return nil, fmt.Errorf("server: read the recorded configuration: %w", err)
	}
	if !present[0] {
		return nil, nil
	}
	created, err := config.Parse(vals[0])
	if err != nil {
		return nil, fmt.Errorf("server: the recorded configuration (%q) does not parse: %w", configKey, err)
	}
	return created, nil
}

// checkShardsMatchPools checks that the shard map covers each pool's whole
// prefix with shards of that pool: a mutation the configuration accepts
// must have a stash to go to.
func checkShardsMatchPools(m *shardmap.Map, cfg *config.Config) error {
	for i, p := range cfg.Pools {
		begin, end := []byte(p.Prefix), kv.PrefixEnd([]byte(p.Prefix))
		at := begin
		for _, sh := range m.Intersect(begin, end) {
			if sh.Pool != p.Name || !bytes.Equal(sh.Begin, at) || len(sh.Team) == 0 {
				break
			}
			at = sh.End
		}
		if !bytes.Equal(at, end) {
			return fmt.Errorf("pool[%d] (%q) with prefix %q is not covered by the shard map from %.40q on: the configuration does not match the one the cluster was created with", i, p.Name, p.Prefix, at)
		}
	}
	return nil
}

// writeConfig writes cluster.toml durably and checksummed
// (fsys.WriteChecked).
func writeConfig(f fsys.FS, dir string, cfg *config.Config) error {
	data, err := cfg.Marshal()
	if err != nil {
		return err
	}
	return fsys.WriteChecked(f, filepath.Join(dir, configFile), data)
}

// loadAndCheckShardMap loads the shard map (loadShardMap: fresh is a new
// cluster's initial map) and checks it, and the configuration recorded in
// the system key space if there is one (hasConfigRecord), against the
// configuration this process was started with.
func (s *Server) loadAndCheckShardMap(ctx context.Context, sys *stash.Stash, recovered kv.Version) (shards *shardmap.Map, fresh, hasConfigRecord bool, err error) {
	shards, fresh, err = s.loadShardMap(ctx, sys, recovered)
	if err != nil {
		return nil, false, false, err
	}
	if !fresh {
		created, err := readConfigRecord(ctx, sys)
		if err != nil {
			return nil, false, false, err
		}
		if created != nil {
			hasConfigRecord = true
			if err := s.cfg.CheckSameCluster(created); err != nil {
				return nil, false, false, fmt.Errorf("server: the cluster in %s: %w", s.opts.Dir, err)
			}
		}
	}
	if err := checkShardsMatchPools(shards, s.cfg); err != nil {
		return nil, false, false, fmt.Errorf("server: the cluster in %s: %w", s.opts.Dir, err)
	}
	return shards, fresh, hasConfigRecord, nil
}

// recordBootstrap writes cluster.toml and, on a new cluster (fresh) or one
// that has no configuration record yet, commits the initial shard map and
// the configuration record through the commit proxy of roles r.
func (s *Server) recordBootstrap(ctx context.Context, r *txRoles, shards *shardmap.Map, fresh, hasConfigRecord bool) error {
	// cluster.toml is a copy of the configuration for people and the first
	// check of the next start. On a new cluster it is written before the
	// shard map: if the process dies between the two, the next start finds
	// the file and an empty shard map and bootstraps again with the same
	// configuration.
	if err := writeConfig(s.opts.FS, s.opts.Dir, s.cfg); err != nil {
		return err
	}
	if fresh || !hasConfigRecord {
		// The shard map and the configuration are recorded in one
		// transaction, so a cluster with a shard map always knows the
		// configuration it was made with. (A cluster made before
		// configurations were recorded gets its record now.)
		cfgBytes, err := s.cfg.Marshal()
		if err != nil {
			return err
		}
		txn := proxy.Txn{ReadVersion: r.seq.CommittedVersion()}
		if fresh {
			for _, sh := range shards.Shards() {
				k, v := shardmap.Encode(sh)
				txn.Mutations = append(txn.Mutations, kv.Mutation{Type: kv.MutSet, Key: k, Param: v})
				txn.WriteConflicts = append(txn.WriteConflicts, kv.PointRange(k))
			}
		}
		txn.Mutations = append(txn.Mutations, kv.Mutation{Type: kv.MutSet, Key: configKey, Param: cfgBytes})
		txn.WriteConflicts = append(txn.WriteConflicts, kv.PointRange(configKey))
		if _, err := r.commit.CommitSystem(ctx, txn); err != nil {
			return fmt.Errorf("server: record the initial shard map and configuration: %w", err)
		}
	}
	return nil
}

// lockDataDir locks a data directory, then checks that cfg matches the
// configuration recorded there (legacy: the directory predates ownership
// files). The lock comes before anything else touches the directory: a
// second process started on it by mistake must exit without changing it or
// the cluster's records of the node.
func lockDataDir(fs fsys.FS, dir string, cfg *config.Config) (lock io.Closer, legacy bool, err error) {
	lock, err = fsys.LockDir(fs, dir)
	if err != nil {
		return nil, false, fmt.Errorf("server: %w", err)
	}
	legacy, err = checkConfigMatches(fs, dir, cfg)
	if err != nil {
		lock.Close()
		return nil, false, err
	}
	return lock, legacy, nil
}
