package embedded

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/distash/distash"
	"github.com/distash/distash/server"
)

const onePool = `
[[pool]]
name = "data"
prefix = "d/"
medium = "ssd"
mode = "durable"
engine = "pebble"
stashes = 1
replication = 1
`

// TestStartClose: a temporary directory is made, serves, and is removed by
// Close; a given one is kept, with its data, across Stop and Restart.
func TestStartClose(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := StartTOML(ctx, onePool, Options{TempPattern: "distash-embedded-test-"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(c.Dir, "distash-embedded-test-") {
		t.Errorf("temporary directory %q does not follow the pattern", c.Dir)
	}
	set := func(c *Cluster) {
		t.Helper()
		if err := c.DB.Transact(ctx, func(tr *distash.Tx) error { tr.Set([]byte("d/k"), []byte("v")); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	set(c)
	c.Close()
	c.Close()
	if _, err := os.Stat(c.Dir); !os.IsNotExist(err) {
		t.Fatalf("Close left the temporary directory: %v", err)
	}

	dir := t.TempDir()
	c, err = StartTOML(ctx, onePool, Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	set(c)
	c.Stop()
	if err := c.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	var v []byte
	if err := c.DB.ReadTransact(ctx, func(tr *distash.Tx) (err error) { v, err = tr.Get([]byte("d/k")); return err }); err != nil || string(v) != "v" {
		t.Fatalf("after Restart: %q, %v", v, err)
	}
	c.Close()
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("Close removed a directory it did not make: %v", err)
	}
}

func TestStartErrors(t *testing.T) {
	ctx := context.Background()
	if _, err := StartTOML(ctx, "[[pool]]\nmedium = \"tape\"\n", Options{}); err == nil {
		t.Fatal("a malformed configuration started")
	}
	if _, err := Start(ctx, nil, Options{}); err == nil {
		t.Fatal("a nil configuration started")
	}
	// More stashes than a process runs: the server refuses to start, and
	// the temporary directory made for it is removed.
	pattern := fmt.Sprintf("distash-embedded-refused-%d-", os.Getpid())
	many := strings.Replace(onePool, "stashes = 1", fmt.Sprintf("stashes = %d", server.MaxStashesPerProcess+1), 1)
	if _, err := StartTOML(ctx, many, Options{TempPattern: pattern}); err == nil {
		t.Fatal("too many stashes started")
	}
	if left, _ := filepath.Glob(filepath.Join(os.TempDir(), pattern+"*")); len(left) > 0 {
		t.Fatalf("a refused start left %v", left)
	}
}
