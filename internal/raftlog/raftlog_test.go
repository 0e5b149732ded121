package raftlog

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/distash/distash/internal/clock"
)

func TestRateLimitsRepeatedMessages(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, nil))
	clk := clock.NewManual(time.Unix(1000, 0))
	h := New(logger, "raft")
	w := &limiter{logger: logger, last: map[string]time.Time{}, held: map[string]int{}, clock: clk}
	for i := 0; i < 5; i++ {
		w.Write([]byte("[ERROR] failed to heartbeat to: peer=127.0.0.1:1 error=\"dial " + strings.Repeat("x", i) + "\"\n"))
	}
	w.Write([]byte("[ERROR] failed to appendEntries to: peer=127.0.0.1:1 error=EOF\n"))
	if n := strings.Count(buf.String(), "failed to heartbeat"); n != 1 {
		t.Fatalf("%d heartbeat failures logged within 10 s, want 1:\n%s", n, buf.String())
	}
	if !strings.Contains(buf.String(), "appendEntries") {
		t.Fatalf("another kind of message was held back:\n%s", buf.String())
	}
	clk.Advance(Every)
	w.Write([]byte("[ERROR] failed to heartbeat to: peer=127.0.0.1:1 error=\"dial\"\n"))
	if !strings.Contains(buf.String(), "similar_held_back=4") {
		t.Fatalf("the next report does not count the 4 held back:\n%s", buf.String())
	}
	// Through hclog: errors pass, lower levels do not.
	buf.Reset()
	h.Info("entering leader state")
	h.Error("failed to contact", "peer", "x")
	if strings.Contains(buf.String(), "leader state") || !strings.Contains(buf.String(), "failed to contact") {
		t.Fatalf("hclog levels: %s", buf.String())
	}
}
