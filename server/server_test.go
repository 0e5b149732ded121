package server_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/distash/distash"
	"github.com/distash/distash/config"
	"github.com/distash/distash/distashtest"
	"github.com/distash/distash/internal/testutil/wait"
	"github.com/distash/distash/internal/wire"
	"github.com/distash/distash/server"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

const cfg3 = `
[cluster]
mvcc_window = "1s"

[log]
replicas = 3

[[pool]]
name = "cache"
prefix = "c/"
medium = "dram"
mode = "ephemeral"
engine = "memory"
stashes = 2
replication = 2
capacity = "16MiB"

[[pool]]
name = "data"
prefix = "d/"
medium = "ssd"
mode = "durable"
engine = "sqlite"
stashes = 3
replication = 2
`

func start(t *testing.T, dir string, cfg *config.Config) (*server.Server, *distash.DB) {
	t.Helper()
	return startTuned(t, dir, cfg, server.Tuning{})
}

// startTuned is start with the server's test settings.
func startTuned(t *testing.T, dir string, cfg *config.Config, tuning server.Tuning) (*server.Server, *distash.DB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := server.Start(ctx, server.Options{Dir: dir, Config: cfg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), FlushInterval: 20 * time.Millisecond,
		Tuning: tuning})
	if err != nil {
		t.Fatal(err)
	}
	db, err := distash.Open(ctx, srv.ClusterString())
	if err != nil {
		srv.Stop()
		t.Fatal(err)
	}
	return srv, db
}

// waitForPops waits until the stashes have made everything but the last
// MVCC window (1 s in these tests) durable and the log has dropped it.
func waitForPops(t *testing.T, srv *server.Server) {
	t.Helper()
	// At most the empty commits of the last window (1 s / 250 ms).
	if !wait.Until(10*time.Second, func() bool { return srv.LogStats().Entries <= 8 }) {
		t.Fatalf("log still holds %d entries after the window passed", srv.LogStats().Entries)
	}
}

// TestThreeLogReplicasRestartAndPops: a cluster with a 3-replica raft log
// commits, pops the log once stashes made versions durable, and restarts
// with its durable pool intact and its DRAM pool empty.
func TestThreeLogReplicasRestartAndPops(t *testing.T) {
	t.Parallel() // waits on the cluster's timers most of the time: overlaps another such test
	cfg, err := config.Parse([]byte(cfg3))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	srv, db := start(t, dir, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := 0; i < 200; i++ {
		err := db.Transact(ctx, func(tr *distash.Tx) error {
			tr.Set([]byte(fmt.Sprintf("d/%04d", i)), []byte(fmt.Sprint(i)))
			tr.Set([]byte(fmt.Sprintf("c/%04d", i)), []byte(fmt.Sprint(i)))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// After the MVCC window (1 s) the stashes flush and pop: the log keeps
	// nothing of the writes above in memory.
	waitForPops(t, srv)
	db.Close()
	srv.Stop()

	srv, db = start(t, dir, cfg)
	defer srv.Stop()
	defer db.Close()
	err = db.ReadTransact(ctx, func(tr *distash.Tx) error {
		for i := 0; i < 200; i++ {
			vals, err := tr.GetMulti([][]byte{[]byte(fmt.Sprintf("d/%04d", i)), []byte(fmt.Sprintf("c/%04d", i))})
			if err != nil {
				return err
			}
			if string(vals[0]) != fmt.Sprint(i) {
				t.Fatalf("d/%04d = %q after restart", i, vals[0])
			}
			if vals[1] != nil {
				t.Fatalf("c/%04d survived a restart of a dram pool", i)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// And it keeps committing.
	if err := db.Transact(ctx, func(tr *distash.Tx) error { tr.Set([]byte("d/after"), []byte("x")); return nil }); err != nil {
		t.Fatal(err)
	}
}

func TestRefusesChangedPools(t *testing.T) {
	cfg, _ := config.Parse([]byte(cfg3))
	dir := t.TempDir()
	srv, db := start(t, dir, cfg)
	db.Close()
	srv.Stop()
	cfg.Pools[1].Stashes = 4
	_, err := server.Start(context.Background(), server.Options{Dir: dir, Config: cfg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err == nil || !strings.Contains(err.Error(), `pool[1] ("data").stashes: 4 here, but the cluster was created with 3`) {
		t.Fatalf("start with a different pool layout: %v", err)
	}
}

// TestConfigIsRecordedWithTheShardMap: the configuration a cluster was
// created with lives in its system key space, so a changed prefix is
// refused even when cluster.toml is gone (before, any configuration was
// then accepted and writes under the new prefix were acknowledged and
// dropped), naming the first field that differs.
func TestConfigIsRecordedWithTheShardMap(t *testing.T) {
	cfg, _ := config.Parse([]byte(cfg3))
	dir := t.TempDir()
	srv, db := start(t, dir, cfg)
	ctx := context.Background()
	if err := db.Transact(ctx, func(tr *distash.Tx) error { tr.Set([]byte("d/k1"), []byte("hello")); return nil }); err != nil {
		t.Fatal(err)
	}
	db.Close()
	srv.Stop()
	if err := os.Remove(filepath.Join(dir, "cluster.toml")); err != nil {
		t.Fatal(err)
	}
	changed, _ := config.Parse([]byte(strings.Replace(cfg3, `prefix = "d/"`, `prefix = "e/"`, 1)))
	_, err := server.Start(ctx, server.Options{Dir: dir, Config: changed, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err == nil || !strings.Contains(err.Error(), `pool[1] ("data").prefix: "e/" here, but the cluster was created with "d/"`) {
		t.Fatalf("start with a changed prefix and no cluster.toml: %v", err)
	}
	// The original configuration still starts, with the data, and writes
	// cluster.toml again.
	srv, db = start(t, dir, cfg)
	defer srv.Stop()
	defer db.Close()
	if err := db.ReadTransact(ctx, func(tr *distash.Tx) error {
		v, err := tr.Get([]byte("d/k1"))
		if err == nil && string(v) != "hello" {
			t.Fatalf("d/k1 = %q", v)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// flashPool is a cluster of one durable flash pool, d/.
const flashPool = `
[cluster]
mvcc_window = "1s"

[[pool]]
name = "data"
prefix = "d/"
medium = "ssd"
mode = "durable"
engine = "flash"
`

// TestFlashPoolSettings: a [pool.flash] table reaches the pool's engines
// (1 MiB segments: a few MiB of values fill several segment files), and the
// pool serves every value with its read cache and write buffer turned off.
func TestFlashPoolSettings(t *testing.T) {
	cfg, err := config.Parse([]byte(flashPool + `
[pool.flash]
segment = "1MiB"
cache = "0"
write_buffer = "0"
`))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	srv, db := start(t, dir, cfg)
	defer srv.Stop()
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	value := func(i int) []byte { return bytes.Repeat([]byte{byte(i)}, 16<<10) }
	const n = 256 // 4 MiB of values
	for start := 0; start < n; start += 16 {
		if err := db.Transact(ctx, func(tx *distash.Tx) error {
			for i := start; i < start+16; i++ {
				tx.Set([]byte(fmt.Sprintf("d/%04d", i)), value(i))
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	segDir := filepath.Join(dir, "stash", "data-0")
	wait.Within(t, 20*time.Second, fmt.Sprintf("several segment files of 1 MiB in %s after writing 4 MiB", segDir), func() bool {
		segs, _ := filepath.Glob(filepath.Join(segDir, "*.seg"))
		return len(segs) >= 3
	})
	// Past the MVCC window the reads come from the engine.
	distashtest.WaitFlushed(t, srv)
	if err := db.ReadTransact(ctx, func(tx *distash.Tx) error {
		for i := 0; i < n; i++ {
			v, err := tx.Get([]byte(fmt.Sprintf("d/%04d", i)))
			if err != nil {
				return err
			}
			if !bytes.Equal(v, value(i)) {
				return fmt.Errorf("d/%04d: %d bytes, want %d bytes of %d", i, len(v), 16<<10, i)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// The status shows the engine's counters: with neither cache nor
	// buffer, the reads above went to the segment files.
	conn, err := grpc.NewClient(srv.ClusterString(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	st, err := wire.NewDiStashClient(conn).Status(ctx, &wire.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	counters := map[string]int64{}
	for _, s := range st.Stashes {
		if s.Pool == "data" {
			for _, c := range s.EngineCounters {
				counters[c.Name] = c.Value
			}
		}
	}
	if counters["segments"] < 3 || counters["file_reads"] < n || counters["cache_hits"] != 0 || counters["buffer_hits"] != 0 {
		t.Fatalf("engine counters in the status: %v", counters)
	}
}

// TestDurableStashThatLostDataRefusesToServe: an engine that comes back
// older than what the log has dropped for it (here its segment files are
// gone; a segment cut at a frame boundary looks the same to the engine)
// is lost data, and the server says so instead of serving a stale pool.
func TestDurableStashThatLostDataRefusesToServe(t *testing.T) {
	cfg, err := config.Parse([]byte(flashPool))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	srv, db := start(t, dir, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := 0; i < 50; i++ {
		if err := db.Transact(ctx, func(tr *distash.Tx) error {
			tr.Set([]byte(fmt.Sprintf("d/%04d", i)), []byte("v"))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	waitForPops(t, srv)
	db.Close()
	srv.Stop()

	segs, _ := filepath.Glob(filepath.Join(dir, "stash", "data-0", "*.seg"))
	if len(segs) == 0 {
		t.Fatal("no segment files to lose")
	}
	for _, s := range segs {
		if err := os.Remove(s); err != nil {
			t.Fatal(err)
		}
	}
	// The flash engine finds its segments missing against its manifest:
	// the stash is damaged, and as the only replica of its shards it
	// refuses their reads, naming the file, rather than serve less.
	var logs syncBuffer
	srv, err = server.Start(ctx, server.Options{Dir: dir, Config: cfg, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		if strings.Contains(err.Error(), `durable pool "data"`) && strings.Contains(err.Error(), "its data is lost") {
			t.Log(err) // refusing to start says so too
			return
		}
		t.Fatalf("restart: %v", err)
	}
	defer srv.Stop()
	db, err = distash.Open(ctx, srv.ClusterString())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
	defer rcancel()
	err = db.ReadTransact(rctx, func(tr *distash.Tx) error {
		_, err := tr.Get([]byte("d/0001"))
		return err
	})
	if !errors.Is(err, distash.ErrStashDamaged) || !strings.Contains(err.Error(), ".seg") {
		t.Fatalf("read from the damaged sole replica: %v, want ErrStashDamaged naming the lost segment", err)
	}
	if !strings.Contains(logs.String(), "damaged") {
		t.Errorf("nothing logged about the damage:\n%s", logs.String())
	}
	t.Log(err)
}

// TestBoundsAndWarnings: a configuration with more stashes than one
// process runs is refused before anything is created, and the warnings
// the configuration computes are logged.
func TestBoundsAndWarnings(t *testing.T) {
	many, err := config.Parse([]byte(`
[[pool]]
name = "a"
prefix = "a/"
medium = "dram"
mode = "ephemeral"
engine = "memory"
capacity = "1MiB"
stashes = 200

[[pool]]
name = "b"
prefix = "b/"
medium = "dram"
mode = "ephemeral"
engine = "memory"
capacity = "1MiB"
stashes = 200
`))
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "cluster")
	_, err = server.Start(context.Background(), server.Options{Dir: dir, Config: many, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err == nil || !strings.Contains(err.Error(), "400 stashes in all, more than the 256") {
		t.Fatalf("400 stashes in one process: %v", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("a refused configuration created %s", dir)
	}

	warned, _ := config.Parse([]byte(`
[log]
replicas = 2

[[pool]]
name = "a"
prefix = "a/"
medium = "dram"
mode = "ephemeral"
engine = "memory"
`))
	var logs bytes.Buffer
	srv, err := server.Start(context.Background(), server.Options{Dir: t.TempDir(), Config: warned, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	for _, w := range warned.Warnings() {
		if !strings.Contains(logs.String(), strings.ReplaceAll(w, `"`, `\"`)) { // the text handler escapes quotes
			t.Errorf("warning %q not logged:\n%s", w, logs.String())
		}
	}
	if len(warned.Warnings()) != 2 {
		t.Errorf("warnings %q, want two (even log replicas, unlimited cache)", warned.Warnings())
	}
}
