package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/distash/distash"
	"github.com/distash/distash/internal/testutil/subprocess"
	"github.com/distash/distash/internal/testutil/wait"
)

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
)

// buildBinary builds the distash command once per test run (the tests that
// run real server processes share it).
func buildBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "distash-bin-")
		if err != nil {
			buildErr = err
			return
		}
		builtBin = filepath.Join(dir, "distash")
		cmd := exec.Command("go", "build", "-o", builtBin, ".")
		cmd.Stderr = os.Stderr
		buildErr = cmd.Run()
	})
	if buildErr != nil {
		t.Fatalf("go build: %v", buildErr)
	}
	return builtBin
}

// startServer runs `distash server` and returns the process and its address.
func startServer(t *testing.T, bin, dir string, extra ...string) (*subprocess.Process, string) {
	t.Helper()
	args := append([]string{"server", "--dir", dir, "--listen", "127.0.0.1:0"}, extra...)
	p := subprocess.Start(t, exec.Command(bin, args...))
	return p, p.WaitFor("listening on ", 60*time.Second)
}

// TestKill9KeepsAcknowledgedDurableWrites kills a real server process with
// SIGKILL while clients commit; after a restart every acknowledged write of
// the durable pool is there and the DRAM pool is empty.
func TestKill9KeepsAcknowledgedDurableWrites(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills a real server process")
	}
	bin := buildBinary(t)
	dir := t.TempDir()
	proc, addr := startServer(t, bin, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db, err := distash.Open(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	acked := map[string]string{}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k, v := fmt.Sprintf("item:%d:%06d", w, i), fmt.Sprintf("value %d %d", w, i)
				tr, err := db.CreateTransaction(ctx)
				if err != nil {
					return
				}
				tr.Set([]byte("d/"+k), []byte(v))
				tr.Set([]byte("c/"+k), []byte(v))
				if err := tr.Commit(); err != nil {
					return // the server died: this write was not acknowledged
				}
				mu.Lock()
				acked[k] = v
				mu.Unlock()
			}
		}(w)
	}
	// Kill it mid-load, once writes have been acknowledged.
	wait.Within(t, time.Minute, "3,000 acknowledged writes", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(acked) >= 3000
	})
	proc.Kill()
	close(stop)
	wg.Wait()
	db.Close()
	mu.Lock()
	n := len(acked)
	mu.Unlock()
	if n == 0 {
		t.Fatal("no write was acknowledged before the kill")
	}
	t.Logf("%d transactions acknowledged before SIGKILL", n)

	proc2, addr2 := startServer(t, bin, dir)
	defer proc2.Stop(syscall.SIGTERM)
	db2, err := distash.Open(ctx, addr2)
	if err != nil {
		t.Fatal(err)
	}
	defer db2.Close()
	missing, cached := 0, 0
	// Thousands of keys: read them in batches, so that the transaction
	// stays well inside the MVCC window (one round trip per key took
	// longer than the 5 s window on a loaded machine, and every retry
	// got transaction_too_old).
	keys := make([]string, 0, len(acked))
	for k := range acked {
		keys = append(keys, k)
	}
	err = db2.ReadTransact(ctx, func(tr *distash.Tx) error {
		missing, cached = 0, 0
		for start := 0; start < len(keys); start += 500 {
			batch := keys[start:min(start+500, len(keys))]
			req := make([][]byte, 0, 2*len(batch))
			for _, k := range batch {
				req = append(req, []byte("d/"+k), []byte("c/"+k))
			}
			vals, err := tr.GetMulti(req)
			if err != nil {
				return err
			}
			for i, k := range batch {
				if string(vals[2*i]) != acked[k] {
					missing++
				}
				if vals[2*i+1] != nil {
					cached++
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if missing > 0 {
		t.Fatalf("%d of %d acknowledged durable writes lost after kill -9", missing, n)
	}
	if cached > 0 {
		t.Fatalf("the DRAM pool kept %d keys across a restart", cached)
	}
}

// TestServerRejectsMalformedConfig: a clear error naming the field, exit 1.
func TestServerRejectsMalformedConfig(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildBinary(t)
	cfg := filepath.Join(t.TempDir(), "bad.toml")
	os.WriteFile(cfg, []byte("[[pool]]\nname = \"x\"\nprefix = \"x/\"\nmedium = \"tape\"\nmode = \"durable\"\nengine = \"pebble\"\n"), 0o644)
	out, err := exec.Command(bin, "server", "--config", cfg, "--dir", t.TempDir()).CombinedOutput()
	if err == nil {
		t.Fatal("server started with a malformed config")
	}
	if !strings.Contains(string(out), "medium") || !strings.Contains(string(out), "tape") {
		t.Fatalf("error does not name the field: %s", out)
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	if builtBin != "" {
		os.RemoveAll(filepath.Dir(builtBin))
	}
	os.Exit(code)
}
