package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/url"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/distash/distash/internal/authz"
	"github.com/distash/distash/internal/clusterstatus"
	"github.com/distash/distash/internal/web"
	"github.com/distash/distash/internal/wire"
)

// Every server can serve HTTP (Options.HTTPAddr, NodeOptions.HTTPAddr,
// distash server --http): its Prometheus metrics at /metrics
// (docs/metrics.md) and, at every other path, the web console of
// package web, which shows the whole cluster. Operators reach it with a
// browser or curl; it is read-only, but it shows the cluster's layout:
// like the gRPC port, keep it on loopback or a private network. With
// Options.Pprof it also serves Go's profiles at /debug/pprof/.

// DefaultHTTPAddr is the HTTP address of `distash server` running an
// embedded cluster; cluster nodes serve no HTTP unless --http is given.
const DefaultHTTPAddr = "127.0.0.1:4580"

// Bounds of what the HTTP server accepts: a request is a GET of a page or
// of the metrics, so a few KB of query and headers is plenty; larger ones
// are refused with a 4xx before any handler runs.
const (
	httpMaxQueryBytes  = 4 << 10
	httpMaxHeaderBytes = 16 << 10
)

// httpServer is a server's HTTP endpoint.
type httpServer struct {
	srv  *http.Server
	addr string // the address it listens on
	done chan struct{}
}

// httpOff reports whether addr turns HTTP off.
func httpOff(addr string) bool { return addr == "" || strings.EqualFold(addr, "off") }

// startHTTP listens on Options.HTTPAddr and serves the metrics and the
// console. If it cannot listen, that is an error, or a warning when
// HTTPOptional.
func (s *Server) startHTTP() error {
	addr := s.opts.HTTPAddr
	if httpOff(addr) {
		return nil
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		if s.opts.HTTPOptional {
			s.logger.Warn("no HTTP server (metrics and console): cannot listen", "addr", addr, "err", err)
			return nil
		}
		return fmt.Errorf("server: HTTP listen on %s: %w", addr, err)
	}
	if s.auth != nil && s.serverTLS != nil {
		// [auth]: HTTP over TLS too, so that a client certificate or a
		// bearer token can name the caller (authHTTP).
		lis = tls.NewListener(lis, httpTLS(s.serverTLS))
	}
	h := &httpServer{addr: lis.Addr().String(), done: make(chan struct{})}
	h.srv = &http.Server{
		Handler:           s.httpHandler(),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    httpMaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(s.logger.Handler(), slog.LevelDebug),
	}
	s.http = h
	go func() {
		defer close(h.done)
		if err := h.srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.logger.Error("http serve", "err", err)
		}
	}()
	s.logger.Info("http serving metrics and console", "addr", h.addr)
	return nil
}

// stopHTTP closes the HTTP server and its connections.
func (s *Server) stopHTTP() {
	if s.http == nil {
		return
	}
	s.http.srv.Close()
	<-s.http.done
}

// HTTPAddr returns the address the HTTP server listens on, "" if it
// serves none.
func (s *Server) HTTPAddr() string {
	if s.http == nil {
		return ""
	}
	return s.http.addr
}

// httpHandler routes /metrics to Prometheus and the rest to the console,
// behind checks of the request.
func (s *Server) httpHandler() http.Handler {
	mux := http.NewServeMux()
	metrics := promhttp.InstrumentMetricHandler(s.metrics.reg, promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{
		ErrorLog:            slog.NewLogLogger(s.logger.Handler(), slog.LevelWarn),
		ErrorHandling:       promhttp.ContinueOnError, // a bad metric is logged; the others are served
		MaxRequestsInFlight: 4,
		Timeout:             10 * time.Second,
	}))
	// Only GET (and HEAD) of /metrics: the mux answers other methods with
	// 405 and an Allow header.
	mux.Handle("GET /metrics", metrics)
	if s.opts.Pprof {
		// A profile longer than the server's WriteTimeout (30 s) is
		// refused by the handler itself.
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	mux.Handle("/", web.Handler(web.Options{Status: s.clusterStatus}))
	return checkRequest(s.logger, s.authHTTP(mux))
}

// httpTLS is the gRPC port's server TLS for HTTP: client certificates are
// verified when given but not required, since a bearer token may name the
// caller instead.
func httpTLS(base *tls.Config) *tls.Config {
	c := base.Clone()
	c.ClientAuth = tls.VerifyClientCertIfGiven
	if get := base.GetConfigForClient; get != nil {
		c.GetConfigForClient = func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			cc, err := get(h)
			if err != nil || cc == nil {
				return cc, err
			}
			cc = cc.Clone()
			cc.ClientAuth = tls.VerifyClientCertIfGiven
			return cc, nil
		}
	}
	return c
}

// authHTTP, on a cluster with [auth], serves only callers with status (or
// a node's certificate): named by a verified client certificate or by an
// "Authorization: Bearer <token>" header. /debug/pprof/ needs admin. Others
// get 401 (no identity) or 403, and the audit log a line.
func (s *Server) authHTTP(next http.Handler) http.Handler {
	a := s.auth
	if a == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var id authz.Identity
		if r.TLS != nil {
			id = authz.FromTLS(r.TLS, a.field)
		}
		var err error
		if h := r.Header.Get("Authorization"); h != "" {
			tok, ok := strings.CutPrefix(h, "Bearer ")
			switch {
			case !ok:
				err = permissionDenied("identity %s: the Authorization header is not \"Bearer <token>\"", id)
			case a.tokens == nil:
				err = permissionDenied("identity %s presented a bearer token, but the cluster accepts none ([auth] token_keys)", id)
			default:
				var sub string
				if sub, err = a.tokens.Verify(strings.TrimSpace(tok)); err == nil {
					id = authz.Identity{Name: sub, Source: "token"}
				} else {
					err = permissionDenied("identity %s: %v", id, err)
				}
			}
		}
		need := authz.PermStatus
		if strings.HasPrefix(r.URL.Path, "/debug/pprof/") {
			need = authz.PermAdmin
		}
		method := "HTTP " + r.Method + " " + r.URL.Path
		if err == nil {
			err = authz.Decide(a.policy.Load(), id, method, []authz.Need{{Perm: need}})
		}
		if err != nil {
			a.audit.refused(id, method, err)
			code := http.StatusForbidden
			if id.Name == "" {
				code = http.StatusUnauthorized
				w.Header().Set("WWW-Authenticate", `Bearer realm="distash"`)
			}
			http.Error(w, err.Error(), code)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// checkRequest refuses requests with a long or malformed query string
// (400, 414), and answers a handler's panic with a 500 instead of a
// dropped connection.
func checkRequest(logger *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				logger.Error("panic in HTTP handler", "path", r.URL.Path, "panic", fmt.Sprint(p))
				http.Error(w, "internal error", http.StatusInternalServerError)
			}
		}()
		if len(r.URL.RawQuery) > httpMaxQueryBytes {
			http.Error(w, fmt.Sprintf("query string longer than %d bytes", httpMaxQueryBytes), http.StatusRequestURITooLong)
			return
		}
		if _, err := url.ParseQuery(r.URL.RawQuery); err != nil {
			http.Error(w, "malformed query string: "+err.Error(), http.StatusBadRequest)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// clusterStatus is the status the console shows: the whole cluster's, as
// `distash cli status` gathers it. An embedded cluster answers for itself;
// a node puts it together (package clusterstatus) from its cached view of
// the controller and every node's status, asked over the connections it
// keeps to them — the console polls every second, and a fresh connection
// (and TLS handshake) to every node per poll would be wasted.
func (s *Server) clusterStatus(ctx context.Context) (*wire.StatusResponse, error) {
	own := func(ctx context.Context) (*wire.StatusResponse, error) {
		return (&service{s: s}).Status(ctx, &wire.StatusRequest{})
	}
	return s.link.clusterStatus(ctx, own)
}

// clusterStatus puts a node's cluster status together (Server.clusterStatus);
// own answers for this node.
func (n *node) clusterStatus(ctx context.Context, own func(context.Context) (*wire.StatusResponse, error)) (*wire.StatusResponse, error) {
	view := n.view(time.Second)
	if view == nil {
		return nil, errors.New("no view of the cluster from the coordinators yet")
	}
	n.views.mu.Lock()
	age := time.Since(n.views.at)
	n.views.mu.Unlock()
	st, err := clusterstatus.FromView(ctx, view, func(ctx context.Context, addr string) (*wire.StatusResponse, error) {
		if addr == n.addr() {
			return own(ctx)
		}
		c, err := n.connTo(addr)
		if err != nil {
			return nil, err
		}
		return wire.NewDiStashClient(c).Status(ctx, &wire.StatusRequest{})
	})
	if err == nil && age > 3*time.Second {
		// The controller did not answer since: the view is the last one.
		st.ViewStale, st.ViewAgeMs, st.ViewFrom = true, age.Milliseconds(), view.AnsweredBy
		st.Warnings = append([]string{fmt.Sprintf("no controller answers this node: the view below is the last it had, %s old (stale)", age.Round(100*time.Millisecond))}, st.Warnings...)
	}
	return st, err
}
