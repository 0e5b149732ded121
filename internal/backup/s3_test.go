package backup_test

import (
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/distash/distash"
	"github.com/distash/distash/distashtest"
	"github.com/distash/distash/internal/backup"
	"github.com/distash/distash/internal/wire"
)

// TestS3DestinationRoundTrip backs up to an in-process S3 server
// (gofakes3; Debian packages no S3 server) through minio-go and restores
// from it.
func TestS3DestinationRoundTrip(t *testing.T) {
	ctx := distashtest.Context(t, 30*time.Second)
	be := s3mem.New()
	s3 := httptest.NewServer(gofakes3.New(be).Server())
	t.Cleanup(s3.Close)
	if err := be.CreateBucket("backups"); err != nil {
		t.Fatal(err)
	}
	url := "s3://key:secret@backups/nightly/one?region=us-east-1&endpoint=" + s3.URL

	src := distashtest.Start(t, twoPools)
	if err := src.DB.Transact(ctx, func(tr *distash.Tx) error {
		for i := 0; i < accounts; i++ {
			tr.Set(acct(i), distash.EncodeInt64(initial))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	bc := backupClient(t, src.Server.Addr())
	if resp, err := bc.Start(ctx, &wire.BackupStartRequest{Url: url, Pools: []string{"bank"}}); err != nil || resp.Error != nil {
		t.Fatalf("backup start: %v %v", err, resp.GetError())
	}
	waitStatus(t, ctx, bc, "a restorable version", func(s backup.Status) bool { return s.RestorableFrom > 0 })
	if err := src.DB.Transact(ctx, func(tr *distash.Tx) error {
		tr.Add(acct(0), 5)
		tr.Add(acct(1), -5)
		tr.Set([]byte("w/not-backed-up"), []byte("x"))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	want, last := snapshot(t, ctx, src.DB, 0)
	delete(want, "w/not-backed-up")
	st := waitStatus(t, ctx, bc, "the log to pass the last write", func(s backup.Status) bool { return int64(s.RestorableTo) >= last })
	if strings.Contains(st.URL, "secret") {
		t.Errorf("status shows the URL's password: %s", st.URL)
	}
	dest, err := backup.Open(url)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := backup.Verify(ctx, dest, &out); err != nil {
		t.Fatalf("verify: %v\n%s", err, out.String())
	}
	names, err := dest.List(ctx)
	if err != nil || len(names) < 2 || names[len(names)-1] != "ranges/00000000.range" && !strings.HasPrefix(names[len(names)-1], "ranges/") || !slices.Contains(names, backup.ManifestName) {
		t.Fatalf("list: %v %v", names, err)
	}
	dst := distashtest.Start(t, twoPools)
	if _, err := backup.Restore(ctx, dest, dst.DB, backup.RestoreOptions{Version: st.RestorableTo}); err != nil {
		t.Fatal(err)
	}
	have, _ := snapshot(t, ctx, dst.DB, 0)
	if len(have) != len(want) {
		t.Fatalf("restored %d keys, want %d", len(have), len(want))
	}
	for k, v := range want {
		if have[k] != v {
			t.Errorf("key %q: %q, want %q", k, have[k], v)
		}
	}
}
