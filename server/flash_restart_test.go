package server_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/distash/distash"
	"github.com/distash/distash/config"
	"github.com/distash/distash/internal/testutil/wait"
	"github.com/distash/distash/server"
)

// TestDurableFlashPoolReadsEverythingAfterRestart is the reported bug:
// 20 values of 99 KB reach a durable flash pool's engine, 20 more follow,
// the cluster stops and restarts; every value must read back (reads
// failed with "write buffer entry ... past the end of its data"), and an
// overwrite after the restart must not stop the stash. Then once more
// after a second restart.
func TestDurableFlashPoolReadsEverythingAfterRestart(t *testing.T) {
	t.Parallel() // waits on the cluster's timers most of the time: overlaps another such test
	// No read cache: reads go to the write buffer or the files, where the
	// bug was.
	cfg, err := config.Parse([]byte(flashPool + "\n[pool.flash]\ncache = \"0\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	srv, db := start(t, dir, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	value := func(i, gen int) []byte { return bytes.Repeat([]byte{byte(i), byte(gen)}, 99_000/2) }
	want := map[int]int{} // key -> generation
	write := func(from, to, gen int) {
		t.Helper()
		for i := from; i < to; i++ {
			if err := db.Transact(ctx, func(tr *distash.Tx) error {
				tr.Set([]byte(fmt.Sprintf("d/%02d", i)), value(i, gen))
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			want[i] = gen
		}
	}
	check := func(when string) {
		t.Helper()
		// A transaction a key: reading all 8 MB in one could outlast the
		// 1 s MVCC window on a busy machine (transaction_too_old).
		for i, gen := range want {
			err := db.ReadTransact(ctx, func(tr *distash.Tx) error {
				v, err := tr.Get([]byte(fmt.Sprintf("d/%02d", i)))
				if err != nil {
					return fmt.Errorf("d/%02d: %w", i, err)
				}
				if !bytes.Equal(v, value(i, gen)) {
					return fmt.Errorf("d/%02d: %d bytes, not generation %d", i, len(v), gen)
				}
				return nil
			})
			if err != nil {
				t.Fatalf("%s: %v", when, err)
			}
		}
	}
	// After a restart the stash replays what its engine did not have from
	// the log, and flushes it once it leaves the MVCC window: the reads
	// that matter come after that, from the engine.
	restart := func() {
		db.Close()
		srv.Stop()
		srv, db = start(t, dir, cfg)
		waitDurable(t, srv)
	}

	write(0, 20, 1)
	waitDurable(t, srv) // the first 20 are in the engine
	write(20, 40, 1)
	restart()
	check("after a restart")
	write(5, 6, 2)   // an overwrite after the restart
	write(40, 80, 1) // enough to fill the write buffer's slots past the old data
	waitDurable(t, srv)
	check("after overwriting")
	restart()
	check("after a second restart")
	defer srv.Stop()
	defer db.Close()
	for _, st := range srv.Stashes() {
		if st.Health != "healthy" || st.Restarts != 0 {
			t.Fatalf("stash %s-%d: %s, %d restarts, last error %q", st.Pool, st.Index, st.Health, st.Restarts, st.LastError)
		}
	}
}

// waitDurable waits until every stash has made durable in its engine all
// it had applied when called (the MVCC window, 1 s here, has passed).
func waitDurable(t *testing.T, srv *server.Server) {
	t.Helper()
	var target int64
	for _, st := range srv.Stashes() {
		target = max(target, st.AppliedVersion)
	}
	wait.Within(t, 20*time.Second, fmt.Sprintf("every stash durable at version %d", target), func() bool {
		for _, st := range srv.Stashes() {
			if st.DurableVersion < target {
				return false
			}
		}
		return true
	})
}
