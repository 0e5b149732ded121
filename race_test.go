package distash_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/distash/distash"
	"github.com/distash/distash/internal/wire"
)

// readOne reads key with a Get, or with a GetRange of [key, key\x00).
func readOne(tr *distash.Tx, key string, byRange bool) ([]byte, error) {
	if !byRange {
		return tr.Get([]byte(key))
	}
	kvs, err := tr.GetRange([]byte(key), []byte(key+"\x00"), distash.RangeOptions{})
	if err != nil || len(kvs) == 0 {
		return nil, err
	}
	return kvs[0].Value, nil
}

// TestFirstReadRacesItsReadVersion: an idle client's first read (a Get or
// a GetRange) goes out
// with its read version request, and the transaction reads at the
// version the stash answers, which is never older than the last commit
// acknowledged before the transaction began. (Right after a commit the
// stash may not have applied it yet: then the race is lost and the read
// goes again; without the check, such a read returned the value before
// the commit. Each key is read until a race is won.)
func TestFirstReadRacesItsReadVersion(t *testing.T) {
	c := startCluster(t, twoPools)
	ctx := ctxT(t, 30*time.Second)
	for i, key := range []string{"d/k", "c/k", "d/k", "c/k"} {
		want := []byte{byte('a' + i)}
		w, err := c.DB.CreateTransaction(ctx)
		if err != nil {
			t.Fatal(err)
		}
		w.Set([]byte(key), want)
		if err := w.Commit(); err != nil {
			t.Fatal(err)
		}
		committed := w.CommittedVersion()
		for attempt := 0; ; attempt++ {
			if attempt == 40 {
				t.Fatalf("%s: none of 40 first reads of an idle client won its race with the read version", key)
			}
			tr, err := c.DB.CreateTransaction(ctx)
			if err != nil {
				t.Fatal(err)
			}
			wonBefore, _ := c.DB.FirstReadRaces()
			got, err := readOne(tr, key, attempt%2 == 1)
			if err != nil {
				t.Fatal(err)
			}
			rv, err := tr.ReadVersion()
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != string(want) || rv < committed {
				t.Fatalf("%s: read %q at version %d after %q was committed at %d", key, got, rv, want, committed)
			}
			if won, _ := c.DB.FirstReadRaces(); won > wonBefore {
				break
			}
		}
	}
}

// TestFirstReadOfALaggingStashIsReadAgain: a stash that answers an
// at_latest read (a Get's or a GetRange's) from a version older than the read version (here, an
// interceptor makes every stash answer from the first commit's version,
// as a stash far behind the log would) has its values thrown away, and
// the transaction reads again at its read version: it sees the latest
// commit, never the stale one.
func TestFirstReadOfALaggingStashIsReadAgain(t *testing.T) {
	var mu sync.Mutex
	var lagAt int64 // the version lagging answers are read at (0: none yet)
	var laggedReads int
	c := startClusterWith(t, twoPools, nil, func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		return h(srv, &laggingStream{ServerStream: ss, mu: &mu, lagAt: &lagAt, count: &laggedReads, lagged: map[uint64]bool{}})
	})
	ctx := ctxT(t, 30*time.Second)
	set := func(v string) int64 {
		tr, err := c.DB.CreateTransaction(ctx)
		if err != nil {
			t.Fatal(err)
		}
		tr.Set([]byte("d/k"), []byte(v))
		tr.Set([]byte("c/k"), []byte(v))
		if err := tr.Commit(); err != nil {
			t.Fatal(err)
		}
		return tr.CommittedVersion()
	}
	first := set("old")
	mu.Lock()
	lagAt = first
	mu.Unlock()
	last := set("new")
	for i, key := range []string{"d/k", "c/k", "d/k", "c/k"} {
		_, lostBefore := c.DB.FirstReadRaces()
		var got []byte
		var rv int64
		if err := c.DB.ReadTransact(ctx, func(tr *distash.Tx) (err error) {
			if got, err = readOne(tr, key, i >= 2); err != nil {
				return err
			}
			rv, err = tr.ReadVersion()
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if string(got) != "new" || rv < last {
			t.Fatalf("%s: read %q at version %d; %q was committed at %d (the lagging stash answers from %d)", key, got, rv, "new", last, first)
		}
		if _, lost := c.DB.FirstReadRaces(); lost == lostBefore {
			t.Fatalf("%s: no first read was answered by the lagging stash and read again", key)
		}
	}
	mu.Lock()
	lagged := laggedReads
	mu.Unlock()
	if lagged == 0 {
		t.Fatal("no at_latest read reached the interceptor")
	}

	// A client that keeps losing races mostly stops racing (its stashes
	// lag its read versions for good: another DC's, say), and races
	// again once the stash keeps up.
	read := func() {
		t.Helper()
		if err := c.DB.ReadTransact(ctx, func(tr *distash.Tx) error {
			got, err := tr.Get([]byte("d/k"))
			if err == nil && string(got) != "new" {
				err = fmt.Errorf("read %q", got)
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	_, lostBefore := c.DB.FirstReadRaces()
	const reads = 64
	for range reads {
		read()
	}
	_, lost := c.DB.FirstReadRaces()
	if lost-lostBefore > distash.RaceLossLimit+reads/distash.RaceProbeEvery+1 {
		t.Fatalf("%d of %d first reads raced a lagging stash and were read again", lost-lostBefore, reads)
	}
	mu.Lock()
	lagAt = 0 // the stash keeps up again
	mu.Unlock()
	for i := 0; ; i++ {
		if i == 2*distash.RaceProbeEvery {
			t.Fatalf("no race won in %d reads once the stash kept up", i)
		}
		wonBefore, _ := c.DB.FirstReadRaces()
		read()
		if won, _ := c.DB.FirstReadRaces(); won > wonBefore {
			break
		}
	}
	// The next read races at once (won, or lost to an idle commit the
	// stash has not applied yet: either way it raced).
	wonBefore, lostBefore := c.DB.FirstReadRaces()
	read()
	if won, lost := c.DB.FirstReadRaces(); won+lost == wonBefore+lostBefore {
		t.Fatal("after a race won, the next first read did not race")
	}
}

// laggingStream turns each at_latest read (point or range) into a read at
// *lagAt and answers that version, once *lagAt is set, counting them in
// *count.
type laggingStream struct {
	grpc.ServerStream
	mu     *sync.Mutex
	lagAt  *int64
	count  *int
	lagged map[uint64]bool // this stream's request ids answered from *lagAt
}

func (s *laggingStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	req, ok := m.(*wire.ReadStreamRequest)
	if !ok {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if *s.lagAt == 0 {
		return nil
	}
	switch r, rr := req.GetRequest(), req.GetRangeRequest(); {
	case r != nil && r.AtLatest:
		r.AtLatest, r.Version = false, *s.lagAt
	case rr != nil && rr.AtLatest:
		rr.AtLatest, rr.Version = false, *s.lagAt
	default:
		return nil
	}
	s.lagged[req.Id] = true
	*s.count++
	return nil
}

func (s *laggingStream) SendMsg(m any) error {
	if resp, ok := m.(*wire.ReadStreamResponse); ok {
		s.mu.Lock()
		if s.lagged[resp.Id] {
			if resp.Response != nil {
				resp.Response.Version = *s.lagAt
			}
			if resp.RangeResponse != nil {
				resp.RangeResponse.Version = *s.lagAt
			}
		}
		s.mu.Unlock()
	}
	return s.ServerStream.SendMsg(m)
}
