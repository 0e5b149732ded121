package web

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/distash/distash/internal/wire"
)

// TestHandlerBadInput: the console answers what it does not serve with a
// clear 4xx, a status it cannot have with 503 and a JSON error, and
// never panics (httptest's recorder would let a panic through).
func TestHandlerBadInput(t *testing.T) {
	st := &wire.StatusResponse{Commits: 1 << 40, Pools: []*wire.PoolInfo{{Name: "cache", Prefix: []byte("c\x00/")}}}
	ok := Handler(Options{Status: func(context.Context) (*wire.StatusResponse, error) { return st, nil }})
	cases := []struct {
		name, method, target string
		want                 int
		body                 string // a part of the answer
	}{
		{"page", "GET", "/", 200, "<title>DiStash console</title>"},
		{"page by name", "GET", "/index.html", 200, "DiStash"},
		{"head", "HEAD", "/", 200, ""},
		{"script", "GET", "/static/app.js", 200, "/status.json"},
		{"style", "GET", "/static/style.css", 200, ".chart"},
		{"status", "GET", "/status.json", 200, `"commits": 1099511627776`},
		{"status prefix", "GET", "/status.json", 200, `"prefix": "c\\x00/"`},
		{"query ignored", "GET", "/?refresh=1", 200, "DiStash"},
		{"unknown path", "GET", "/nope", 404, "not found"},
		{"metrics is not ours", "GET", "/metrics", 404, "not found"},
		{"static dir", "GET", "/static/", 404, "not found"},
		{"static missing", "GET", "/static/nope.js", 404, "not found"},
		{"static traversal", "GET", "/static/../web.go", 404, "not found"},
		{"static dot", "GET", "/static/./app.js", 404, "not found"},
		{"static nested traversal", "GET", "/static/a/../../handler.go", 404, "not found"},
		{"post", "POST", "/", 405, "read-only"},
		{"delete status", "DELETE", "/status.json", 405, "read-only"},
		{"put unknown", "PUT", "/nope", 405, "read-only"},
		{"huge query", "GET", "/?" + strings.Repeat("a", 100000), 400, "too long"},
		{"huge query on status", "GET", "/status.json?x=" + strings.Repeat("%41", 5000), 400, "too long"},
		{"malformed query", "GET", "/?a=%zz", 400, "malformed"},
		{"malformed query semicolon", "GET", "/status.json?a=1;b=2", 400, "malformed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req := httptest.NewRequest(c.method, "http://node"+c.target, nil)
			rec := httptest.NewRecorder()
			ok.ServeHTTP(rec, req)
			if rec.Code != c.want || !strings.Contains(rec.Body.String(), c.body) {
				t.Fatalf("%s %.80s: %d %.200q; want %d with %q", c.method, c.target, rec.Code, rec.Body.String(), c.want, c.body)
			}
		})
	}

	// A status that cannot be had, a Status that panics, none at all:
	// 503 with {"error": ...}.
	for name, opts := range map[string]Options{
		"error": {Status: func(context.Context) (*wire.StatusResponse, error) {
			return nil, errors.New("no coordinator answers")
		}},
		"panic": {Status: func(context.Context) (*wire.StatusResponse, error) { panic("boom") }},
		"none":  {},
	} {
		rec := httptest.NewRecorder()
		Handler(opts).ServeHTTP(rec, httptest.NewRequest("GET", "/status.json", nil))
		var body struct{ Error string }
		if err := json.Unmarshal(rec.Body.Bytes(), &body); rec.Code != http.StatusServiceUnavailable || err != nil || body.Error == "" {
			t.Errorf("%s: %d %q (%v); want 503 with a JSON error", name, rec.Code, rec.Body.String(), err)
		}
		if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s: Content-Type %q", name, ct)
		}
	}
}

// TestHandlerOverHTTP: through a real HTTP server, a request line or
// header too large for the server is refused by net/http itself (431 or
// 414) and the handler keeps serving.
func TestHandlerOverHTTP(t *testing.T) {
	srv := httptest.NewServer(Handler(Options{Status: func(context.Context) (*wire.StatusResponse, error) { return &wire.StatusResponse{}, nil }}))
	defer srv.Close()
	get := func(target string) (int, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + target)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/?" + strings.Repeat("x", 2<<20)); code < 400 || code >= 500 {
		t.Errorf("a 2 MiB query: %d, want a 4xx", code)
	}
	// Go's client will not send a malformed URL: write the request.
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "GET /%%zz HTTP/1.1\r\nHost: node\r\nConnection: close\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil || resp.StatusCode != 400 {
		t.Errorf("a malformed path: %v %v, want 400", resp, err)
	}
	conn.Close()
	if code, body := get("/status.json"); code != 200 || !strings.Contains(body, `"schema": 1`) {
		t.Errorf("status after bad requests: %d %q", code, body)
	}
}
