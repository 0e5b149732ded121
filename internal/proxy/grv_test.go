package proxy

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distash/distash/internal/clock"
	"github.com/distash/distash/internal/sequencer"
)

// TestGRVConfirmStartsAfterTheRequest checks that a read version waits for
// a confirmation that began after the request arrived, and that concurrent
// requests share confirmations.
func TestGRVConfirmStartsAfterTheRequest(t *testing.T) {
	seq := sequencer.New(clock.Real{}, 100)
	var calls atomic.Int64
	var mu sync.Mutex
	var starts []time.Time
	g := NewGRVProxy(seq, nil).WithConfirm(func(ctx context.Context) error {
		calls.Add(1)
		mu.Lock()
		starts = append(starts, time.Now())
		mu.Unlock()
		time.Sleep(5 * time.Millisecond)
		return nil
	})
	var wg sync.WaitGroup
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			arrived := time.Now()
			if _, err := g.GetReadVersion(context.Background()); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			ok := false
			for _, s := range starts {
				if !s.Before(arrived) {
					ok = true
				}
			}
			if !ok {
				t.Errorf("request that arrived at %v answered with no confirmation started after it", arrived)
			}
		}()
	}
	wg.Wait()
	if n := calls.Load(); n >= 50 {
		t.Errorf("%d confirmations for 50 concurrent requests: not shared", n)
	}
}

func TestGRVConfirmFailureRefusesTheReadVersion(t *testing.T) {
	seq := sequencer.New(clock.Real{}, 100)
	deposed := errors.New("not the leader")
	g := NewGRVProxy(seq, nil).WithConfirm(func(ctx context.Context) error { return deposed })
	if _, err := g.GetReadVersion(context.Background()); !errors.Is(err, deposed) {
		t.Fatalf("GetReadVersion: %v, want %v", err, deposed)
	}
}
