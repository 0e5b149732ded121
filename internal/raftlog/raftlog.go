// Package raftlog adapts hashicorp/raft's logger to the process's slog
// logger, at warning level and rate-limited: a raft peer that is down makes
// raft report every failed heartbeat (several per second); an operator
// needs the first report and a count, not a flood.
package raftlog

import (
	"context"
	"log"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/distash/distash/internal/clock"
	"github.com/hashicorp/go-hclog"
)

// Every is how often one kind of message is logged at most.
const Every = 10 * time.Second

// New returns an hclog.Logger named name that passes raft's errors (and
// only errors: elections and leader changes are routine) to logger at
// warning level, at most one per kind of message per Every, with the
// count of the ones held back.
func New(logger *slog.Logger, name string) hclog.Logger {
	w := &limiter{logger: logger, last: map[string]time.Time{}, held: map[string]int{}, clock: clock.Real{}}
	return hclog.FromStandardLogger(log.New(w, "", 0), &hclog.LoggerOptions{Name: name, Level: hclog.Error})
}

type limiter struct {
	logger *slog.Logger
	clock  clock.Clock

	mu   sync.Mutex
	last map[string]time.Time // Protected by mu: when each kind was last logged.
	held map[string]int       // Protected by mu: how many of each kind were held back since.
}

// kind is what makes two messages the same: the text up to the first
// "error=" (peer and message, without the changing details of the error).
func kind(msg string) string {
	if i := strings.Index(msg, "error="); i > 0 {
		msg = msg[:i]
	}
	return msg
}

func (l *limiter) Write(p []byte) (int, error) {
	msg := strings.TrimRight(string(p), "\n")
	k := kind(msg)
	now := l.clock.Now()
	l.mu.Lock()
	if t, ok := l.last[k]; ok && now.Sub(t) < Every {
		l.held[k]++
		l.mu.Unlock()
		return len(p), nil
	}
	held := l.held[k]
	l.last[k], l.held[k] = now, 0
	if len(l.last) > 1000 { // many kinds: forget the old ones
		for kk, t := range l.last {
			if now.Sub(t) >= Every {
				delete(l.last, kk)
				delete(l.held, kk)
			}
		}
	}
	l.mu.Unlock()
	attrs := []any{}
	if held > 0 {
		attrs = append(attrs, "similar_held_back", held)
	}
	l.logger.Log(context.Background(), slog.LevelWarn, msg, attrs...)
	return len(p), nil
}
