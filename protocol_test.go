package distash_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/distash/distash"
	"github.com/distash/distash/config"
	"github.com/distash/distash/internal/protover"
	"github.com/distash/distash/server"
)

// startSpeaking starts an embedded cluster whose every connection speaks
// sp, as a binary of another release would.
func startSpeaking(t *testing.T, sp protover.Speaker) *server.Server {
	t.Helper()
	cfg, err := config.Parse([]byte(twoPools))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := server.Start(ctx, server.Options{Dir: t.TempDir(), Config: cfg, Protocol: sp,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop() })
	return srv
}

// TestIncompatibleProtocolRefused: a client and a cluster that speak no
// protocol version in common do not talk; the client's error is
// ErrIncompatibleProtocol (not retryable), naming both ranges.
func TestIncompatibleProtocolRefused(t *testing.T) {
	srv := startSpeaking(t, protover.Speaker{Min: 3, Max: 4})
	ctx := ctxT(t, 10*time.Second)
	db, err := distash.Open(ctx, srv.ClusterString())
	if err == nil {
		// Open may succeed lazily; the first transaction must not.
		defer db.Close()
		err = db.ReadTransact(ctx, func(tr *distash.Tx) error { _, err := tr.Get([]byte("d/x")); return err })
	}
	if !errors.Is(err, distash.ErrIncompatibleProtocol) {
		t.Fatalf("got %v, want ErrIncompatibleProtocol", err)
	}
	var de *distash.Error
	if !errors.As(err, &de) || de.Retryable() {
		t.Fatalf("%v: want a distash.Error that is not retryable", err)
	}
	for _, want := range []string{"incompatible_protocol", "versions 1 to 2", "speaks 3 to 4"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
}

// TestPreviousProtocolServes: a cluster acting as the previous release
// (protocol 1 only) serves this client, over gRPC and the frames data
// path alike.
func TestPreviousProtocolServes(t *testing.T) {
	srv := startSpeaking(t, protover.Speaker{Min: 1, Max: 1})
	ctx := ctxT(t, 20*time.Second)
	db, err := distash.Open(ctx, srv.ClusterString())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	framesBefore, _ := distash.DataPathStreams()
	if err := db.Transact(ctx, func(tr *distash.Tx) error { tr.Set([]byte("d/k"), []byte("v")); return nil }); err != nil {
		t.Fatal(err)
	}
	var v []byte
	err = db.ReadTransact(ctx, func(tr *distash.Tx) error { v, err = tr.Get([]byte("d/k")); return err })
	if err != nil || string(v) != "v" {
		t.Fatalf("Get = %q, %v", v, err)
	}
	if f, _ := distash.DataPathStreams(); f == framesBefore {
		t.Fatal("no frames stream opened: the data path fell back to gRPC")
	}
}
