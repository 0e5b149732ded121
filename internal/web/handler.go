package web

import (
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/distash/distash/internal/statusjson"
)

// assets are the console's files: index.html at /, the rest under
// /static/.
//
//go:embed assets
var assets embed.FS

const (
	// maxQuery bounds a request's query string: the console reads none,
	// so anything long is a mistake or an attack.
	maxQuery = 1024
	// statusTimeout bounds one gathering of the status: the page asks
	// every second, a slow node must not pile requests up.
	statusTimeout = 5 * time.Second
	// csp keeps the page to its own assets (no CDN, no inline script).
	csp = "default-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)

type handler struct {
	opts   Options
	static fs.FS
	index  []byte
}

func newHandler(opts Options) *handler {
	static, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	index, err := fs.ReadFile(static, "index.html")
	if err != nil {
		panic(err)
	}
	return &handler{opts: opts, static: static, index: index}
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, fmt.Sprintf("method %s not allowed: the console is read-only (GET)", r.Method), http.StatusMethodNotAllowed)
		return
	}
	if len(r.URL.RawQuery) > maxQuery {
		http.Error(w, fmt.Sprintf("query string too long (%d bytes, at most %d)", len(r.URL.RawQuery), maxQuery), http.StatusBadRequest)
		return
	}
	if _, err := url.ParseQuery(r.URL.RawQuery); err != nil {
		http.Error(w, "malformed query string: "+err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("X-Content-Type-Options", "nosniff")
	switch p := r.URL.Path; {
	case p == "/" || p == "/index.html":
		w.Header().Set("Content-Security-Policy", csp)
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-cache")
		w.Write(h.index)
	case p == "/status.json":
		h.serveStatus(w, r)
	case strings.HasPrefix(p, "/static/"):
		name := strings.TrimPrefix(p, "/static/")
		if name == "" || name != path.Clean(name) || !fs.ValidPath(name) || name == "index.html" {
			http.NotFound(w, r)
			return
		}
		b, err := fs.ReadFile(h.static, name)
		if err != nil {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", contentType(name))
		w.Header().Set("Cache-Control", "no-cache")
		w.Write(b)
	default:
		http.NotFound(w, r)
	}
}

// serveStatus answers /status.json: the status document, or 503 with
// {"error": "..."} when the status cannot be had.
func (h *handler) serveStatus(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Type", "application/json")
	b, err := h.status(r.Context())
	if err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		e, _ := json.Marshal(map[string]string{"error": err.Error()})
		w.Write(append(e, '\n'))
		return
	}
	w.Write(append(b, '\n'))
}

// status gathers and encodes the status; a panic in Options.Status
// becomes an error: the console must not take the node's HTTP server
// down.
func (h *handler) status(ctx context.Context) (b []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			b, err = nil, fmt.Errorf("status: panic: %v", p)
		}
	}()
	if h.opts.Status == nil {
		return nil, fmt.Errorf("status: not available on this server")
	}
	ctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	st, err := h.opts.Status(ctx)
	if err != nil {
		return nil, err
	}
	return statusjson.Marshal(st)
}

func contentType(name string) string {
	switch path.Ext(name) {
	case ".js":
		return "text/javascript; charset=utf-8"
	case ".css":
		return "text/css; charset=utf-8"
	case ".svg":
		return "image/svg+xml"
	case ".png":
		return "image/png"
	}
	return "application/octet-stream"
}
