package embedded

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/distash/distash"
	"github.com/distash/distash/internal/fsys"
	"github.com/distash/distash/internal/testutil/wait"
)

// releaseTOML is the cluster of testdata/release: a durable Pebble pool and
// a DRAM pool with a local log, so the directory holds every file kind an
// embedded cluster writes (data-dir, the log's replicas and raft stores,
// the system stash, Pebble and local-log stashes, ownership files).
const releaseTOML = `
[[pool]]
name = "data"
prefix = "d/"
medium = "ssd"
mode = "durable"
engine = "pebble"
stashes = 1
replication = 1

[[pool]]
name = "cache"
prefix = "c/"
medium = "dram"
mode = "ephemeral"
engine = "memory"
stashes = 1
replication = 1
capacity = "16MiB"
local_log = true
`

// releaseKeys are the keys testdata/release holds, with their values.
func releaseKeys() map[string]string {
	m := map[string]string{}
	for i := 0; i < 20; i++ {
		m[fmt.Sprintf("d/key-%02d", i)] = fmt.Sprintf("durable value %d", i)
		m[fmt.Sprintf("c/key-%02d", i)] = fmt.Sprintf("cached value %d", i)
	}
	return m
}

var writeRelease = flag.Bool("write-release-data", false, "rewrite testdata/release with this code's formats (only when a format version was bumped on purpose: docs/operations.md)")

// TestReleaseDataOpens opens testdata/release, a cluster directory written
// by the release that introduced format versions and checked in, with this
// code, and reads every key back: a change to a file format that does not
// read the old one (and bump its version, docs/operations.md) fails here.
func TestReleaseDataOpens(t *testing.T) {
	src := filepath.Join("testdata", "release")
	if *writeRelease {
		writeReleaseData(t, src)
	}
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := StartTOML(ctx, releaseTOML, Options{Dir: dir})
	if err != nil {
		t.Fatalf("the release's directory does not open: %v", err)
	}
	defer c.Close()
	want := releaseKeys()
	err = c.DB.ReadTransact(ctx, func(tr *distash.Tx) error {
		for k, v := range want {
			got, err := tr.Get([]byte(k))
			if err != nil {
				return err
			}
			if string(got) != v {
				return fmt.Errorf("%s = %q, want %q", k, got, v)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// writeReleaseData writes dir afresh: a cluster with releaseKeys, stopped
// cleanly.
func writeReleaseData(t *testing.T, dir string) {
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := StartTOML(ctx, releaseTOML, Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	err = c.DB.Transact(ctx, func(tr *distash.Tx) error {
		for k, v := range releaseKeys() {
			tr.Set([]byte(k), []byte(v))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The DRAM pool's keys reach its local log once out of the MVCC
	// window: wait until every stash made the last version durable.
	last := int64(c.Server.LogStats().LastVersion)
	wait.Within(t, 30*time.Second, fmt.Sprintf("every stash durable to version %d", last), func() bool {
		for _, st := range c.Server.Stashes() {
			if st.DurableVersion < last {
				return false
			}
		}
		return true
	})
	c.Close()
	// The lock file is the running process's, not data.
	os.Remove(filepath.Join(dir, fsys.LockFile))
}
