package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/distash/distash"
	"github.com/distash/distash/internal/backup"
	"github.com/distash/distash/internal/backup/blog"
	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/proxy"
	"github.com/distash/distash/internal/stash"
	"github.com/distash/distash/internal/wire"
)

// backupRole is the backup worker of one generation of the transaction
// roles, with the client it reads the cluster through (docs/backup.md).
type backupRole struct {
	worker *backup.Worker

	mu sync.Mutex
	db *distash.DB // opened on first use. Protected by mu.
}

// recoveredBackup reads the running backup's configuration from the
// system stash, for the commit proxy to go on copying mutations after a
// recovery (nil: none).
func recoveredBackup(ctx context.Context, sys *stash.Stash) (*blog.Config, error) {
	vals, present, err := sys.Get(ctx, sys.AppliedVersion(), [][]byte{blog.ConfigKey})
	if err != nil {
		return nil, fmt.Errorf("server: read the backup configuration: %w", err)
	}
	if !present[0] {
		return nil, nil
	}
	return blog.DecodeConfig(vals[0])
}

// startBackup starts the backup worker of roles r; it stops with ctx.
func (s *Server) startBackup(ctx context.Context, r *txRoles) *backupRole {
	b := &backupRole{}
	b.worker = backup.NewWorker(backup.WorkerOptions{
		DB:        b.client(s),
		Commit:    systemCommit(r),
		Committed: r.seq.CommittedVersion,
		Active:    r.commit.BackingUp,
		Logger:    s.logger.With("role", "backup"),
	})
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		// An embedded server starts its roles before it serves: wait.
		for {
			if c, _ := s.link.asClient(); c != "" {
				break
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
		b.worker.Run(ctx)
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.db != nil {
			b.db.Close()
		}
	}()
	return b
}

// client returns the function that opens (once) the worker's client of
// this cluster: the embedded server's own address, or the coordinators.
func (b *backupRole) client(s *Server) func(ctx context.Context) (*distash.DB, error) {
	return func(ctx context.Context) (*distash.DB, error) {
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.db != nil {
			return b.db, nil
		}
		cluster, opts := s.link.asClient()
		if cluster == "" {
			return nil, errNotServing
		}
		octx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		db, err := distash.Open(octx, cluster, opts...)
		if err != nil {
			return nil, fmt.Errorf("backup: open a client of the cluster at %s: %w", cluster, err)
		}
		b.db = db
		return db, nil
	}
}

// errNotServing: the embedded server does not serve yet.
var errNotServing = kv.Errorf(kv.CodeWrongNode, "backup: the server is still starting")

// systemCommit commits the worker's system transactions through r's
// commit proxy.
func systemCommit(r *txRoles) backup.SystemCommit {
	return func(ctx context.Context, rv kv.Version, reads []kv.KeyRange, muts []kv.Mutation) (kv.Version, error) {
		txn := proxy.Txn{ReadVersion: rv, ReadConflicts: reads, Mutations: muts}
		for _, m := range muts {
			if m.Type == kv.MutClearRange {
				txn.WriteConflicts = append(txn.WriteConflicts, kv.KeyRange{Begin: m.Key, End: m.Param})
			} else {
				txn.WriteConflicts = append(txn.WriteConflicts, kv.PointRange(m.Key))
			}
		}
		return r.commit.CommitSystem(ctx, txn)
	}
}

// backupService serves the Backup RPCs on the node holding the roles.
type backupService struct {
	wire.UnimplementedBackupServer
	s *Server
}

// registerBackup serves the Backup service on g.
func registerBackup(g *grpc.Server, s *Server) { wire.RegisterBackupServer(g, &backupService{s: s}) }

// backupRoles returns the roles and their backup worker, or wrong_node.
func (b *backupService) backupRoles() (*txRoles, error) {
	r, err := b.s.roles()
	if err != nil {
		return nil, err
	}
	if r.backup == nil {
		return nil, kv.Errorf(kv.CodeWrongNode, "node %s is still starting its roles", b.s.Addr())
	}
	return r, nil
}

// readBackupKeys reads the backup's system keys at one version.
func readBackupKeys(ctx context.Context, db *distash.DB, keys ...[]byte) (vals [][]byte, rv kv.Version, err error) {
	err = db.ReadTransact(ctx, func(tr *distash.Tx) error {
		tr.Options().SetReadSystemKeys()
		v, err := tr.ReadVersion()
		if err != nil {
			return err
		}
		rv = kv.Version(v)
		vals, err = tr.Snapshot().GetMulti(keys)
		return err
	})
	return vals, rv, err
}

func (b *backupService) Start(ctx context.Context, req *wire.BackupStartRequest) (*wire.BackupStartResponse, error) {
	id, v, err := b.start(ctx, req)
	return &wire.BackupStartResponse{Error: wire.ErrorOf(err), Id: id, Version: int64(v)}, nil
}

func (b *backupService) start(ctx context.Context, req *wire.BackupStartRequest) (string, kv.Version, error) {
	r, err := b.backupRoles()
	if err != nil {
		return "", 0, err
	}
	dest, err := backup.Open(req.GetUrl())
	if err != nil {
		return "", 0, kv.Errorf(kv.CodeUnsupported, "%v", err)
	}
	if _, err := dest.Get(ctx, backup.ManifestName); err == nil {
		return "", 0, kv.Errorf(kv.CodeUnsupported, "backup: %s already holds a backup (%s): choose an empty destination", dest, backup.ManifestName)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", 0, kv.Errorf(kv.CodeUnsupported, "backup: destination %s: %v", dest, err)
	}
	pools, ranges, err := b.backupPools(req)
	if err != nil {
		return "", 0, err
	}
	db, err := r.backup.client(b.s)(ctx)
	if err != nil {
		return "", 0, err
	}
	vals, rv, err := readBackupKeys(ctx, db, blog.ConfigKey, blog.ClusterIDKey)
	if err != nil {
		return "", 0, err
	}
	if vals[0] != nil {
		cur, _ := blog.DecodeConfig(vals[0])
		if cur != nil {
			return "", 0, kv.Errorf(kv.CodeUnsupported, "backup: backup %s to %s is running: stop it first", cur.ID, cur.URL)
		}
	}
	clusterID := string(vals[1])
	if clusterID == "" {
		clusterID = randomID()
	}
	cfg := &blog.Config{ID: randomID(), URL: req.GetUrl(), ClusterID: clusterID, Pools: pools, Ranges: ranges,
		StartedUnixMs: time.Now().UnixMilli(), IncludeEphemeral: req.GetIncludeEphemeral()}
	commit := systemCommit(r)
	reads := []kv.KeyRange{kv.PointRange(blog.ConfigKey)}
	// The commit that sets the configuration starts the copying of
	// mutations (from the next batch on); the log holds every commit
	// after its version, which the progress record then gets.
	cv, err := commit(ctx, rv, reads, []kv.Mutation{
		{Type: kv.MutSet, Key: blog.ConfigKey, Param: cfg.Encode()},
		{Type: kv.MutSet, Key: blog.ClusterIDKey, Param: []byte(clusterID)},
		{Type: kv.MutClear, Key: blog.ProgressKey},
		{Type: kv.MutClear, Key: blog.StatusKey},
	})
	if err != nil {
		return "", 0, err
	}
	cfg.Version = cv
	prog, _ := json.Marshal(backup.Progress{ID: cfg.ID, LogTo: cv})
	if _, err := commit(ctx, cv, reads, []kv.Mutation{
		{Type: kv.MutSet, Key: blog.ConfigKey, Param: cfg.Encode()},
		{Type: kv.MutSet, Key: blog.ProgressKey, Param: prog},
	}); err != nil {
		return "", 0, fmt.Errorf("backup: record the start version (the backup is configured but has not started; stop it and start again): %w", err)
	}
	b.s.logger.Info("backup started", "id", cfg.ID, "url", dest.String(), "version", cv)
	return cfg.ID, cv, nil
}

// backupPools returns the pools a backup request names and their ranges.
func (b *backupService) backupPools(req *wire.BackupStartRequest) ([]blog.Pool, []kv.KeyRange, error) {
	var pools []blog.Pool
	var ranges []kv.KeyRange
	for _, name := range req.GetPools() {
		if !hasPool(b.s, name) {
			return nil, nil, kv.Errorf(kv.CodeUnknownPool, "backup: no pool %q", name)
		}
	}
	for _, p := range b.s.cfg.Pools {
		mode := "durable"
		if p.Ephemeral() {
			mode = "ephemeral"
		}
		named := slices.Contains(req.GetPools(), p.Name)
		switch {
		case len(req.GetPools()) > 0 && !named:
			continue
		case p.Ephemeral() && !req.GetIncludeEphemeral():
			if named {
				return nil, nil, kv.Errorf(kv.CodeUnsupported, "backup: pool %q is ephemeral: add --include-ephemeral", p.Name)
			}
			continue
		}
		pools = append(pools, blog.Pool{Name: p.Name, Prefix: []byte(p.Prefix), Mode: mode})
		ranges = append(ranges, kv.KeyRange{Begin: []byte(p.Prefix), End: kv.PrefixEnd([]byte(p.Prefix))})
	}
	if len(pools) == 0 {
		return nil, nil, kv.Errorf(kv.CodeUnsupported, "backup: no pool to back up (ephemeral pools need --include-ephemeral)")
	}
	slices.SortFunc(ranges, func(a, b kv.KeyRange) int { return strings.Compare(string(a.Begin), string(b.Begin)) })
	return pools, ranges, nil
}

func randomID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (b *backupService) Status(ctx context.Context, _ *wire.BackupStatusRequest) (*wire.BackupStatusResponse, error) {
	st, err := b.status(ctx)
	if err != nil {
		return &wire.BackupStatusResponse{Error: wire.ErrorOf(err)}, nil
	}
	js, _ := json.Marshal(st)
	return &wire.BackupStatusResponse{StatusJson: string(js)}, nil
}

// status is the worker's status of the running backup, "starting" if the
// worker has not caught up with it yet, or the last backup's final status.
func (b *backupService) status(ctx context.Context) (backup.Status, error) {
	r, err := b.backupRoles()
	if err != nil {
		return backup.Status{}, err
	}
	db, err := r.backup.client(b.s)(ctx)
	if err != nil {
		return backup.Status{}, err
	}
	vals, _, err := readBackupKeys(ctx, db, blog.ConfigKey, blog.StatusKey)
	if err != nil {
		return backup.Status{}, err
	}
	if vals[0] != nil {
		cfg, err := blog.DecodeConfig(vals[0])
		if err != nil {
			return backup.Status{}, err
		}
		st := r.backup.worker.Status()
		if st.ID != cfg.ID {
			st = backup.Status{State: "starting", ID: cfg.ID, StartedMs: cfg.StartedUnixMs, LastError: st.LastError, ErrorAt: st.ErrorAt}
		}
		return st, nil
	}
	var st backup.Status
	if vals[1] == nil || json.Unmarshal(vals[1], &st) != nil {
		return backup.Status{State: "none"}, nil
	}
	return st, nil
}

func (b *backupService) Stop(ctx context.Context, _ *wire.BackupStopRequest) (*wire.BackupStopResponse, error) {
	st, err := b.stop(ctx)
	if err != nil {
		return &wire.BackupStopResponse{Error: wire.ErrorOf(err)}, nil
	}
	js, _ := json.Marshal(st)
	return &wire.BackupStopResponse{StatusJson: string(js)}, nil
}

// stop ends the running backup: the commit proxy stops copying, the
// mutation log is cleared and the final status is kept (StatusKey). The
// destination keeps every file the worker wrote.
func (b *backupService) stop(ctx context.Context) (backup.Status, error) {
	r, err := b.backupRoles()
	if err != nil {
		return backup.Status{}, err
	}
	st, err := b.status(ctx)
	if err != nil {
		return backup.Status{}, err
	}
	if st.State == "none" || st.State == "stopped" {
		return backup.Status{}, kv.Errorf(kv.CodeUnsupported, "backup: no backup is running")
	}
	db, err := r.backup.client(b.s)(ctx)
	if err != nil {
		return backup.Status{}, err
	}
	_, rv, err := readBackupKeys(ctx, db, blog.ConfigKey)
	if err != nil {
		return backup.Status{}, err
	}
	st.State, st.LagVersions = "stopped", 0
	js, _ := json.Marshal(st)
	lr := blog.LogRange(st.ID)
	if _, err := systemCommit(r)(ctx, rv, []kv.KeyRange{kv.PointRange(blog.ConfigKey)}, []kv.Mutation{
		{Type: kv.MutClear, Key: blog.ConfigKey},
		{Type: kv.MutClear, Key: blog.ProgressKey},
		{Type: kv.MutClearRange, Key: lr.Begin, Param: lr.End},
		{Type: kv.MutSet, Key: blog.StatusKey, Param: js},
	}); err != nil {
		return backup.Status{}, err
	}
	b.s.logger.Info("backup stopped", "id", st.ID)
	return st, nil
}

func hasPool(s *Server, name string) bool {
	_, ok := s.cfg.PoolByName(name)
	return ok
}
