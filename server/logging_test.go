package server

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
)

// TestLoggerGeneration: a server's log lines carry its node, the role
// where one logs, and the generation current when each line is written,
// also through loggers derived before the generation changed.
func TestLoggerGeneration(t *testing.T) {
	var buf bytes.Buffer
	var gen atomic.Uint64
	gen.Store(1)
	base := serverLogger(slog.New(slog.NewJSONHandler(&buf, nil)), "n-1", gen.Load)
	s := &Server{logger: base}
	proxyLog := s.roleLogger(logRoleProxy).With("k", "v")
	proxyLog.Info("first")
	gen.Store(7)
	proxyLog.Info("second")
	base.WithGroup("g").Info("grouped", "x", 1)
	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		lines = append(lines, m)
	}
	if len(lines) != 3 {
		t.Fatalf("%d lines: %s", len(lines), buf.String())
	}
	for i, want := range []float64{1, 7} {
		l := lines[i]
		if l["node"] != "n-1" || l["role"] != "proxy" || l["k"] != "v" || l["generation"] != want {
			t.Errorf("line %d: %v; want node n-1, role proxy, generation %v", i, l, want)
		}
	}
	if lines[2]["node"] != "n-1" {
		t.Errorf("grouped line: %v", lines[2])
	}
}
