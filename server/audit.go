package server

import (
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/distash/distash/internal/authz"
	"github.com/distash/distash/internal/wire"
)

// audit writes the audit log of a cluster with [auth]: one structured line
// (msg "audit", with identity, action, target, outcome) per operator call
// served, grant change and refused request, and counts them in /metrics.
// Refusals are rate-limited per identity: at most auditRefusalsPerSecond
// lines a second, then one line saying how many were suppressed.
type audit struct {
	log      *slog.Logger
	refusals *prometheus.CounterVec // by permission missing
	actions  *prometheus.CounterVec // operator calls by action and outcome

	mu  sync.Mutex
	per map[string]*auditWindow // Protected by mu: by identity.
}

// auditWindow counts one identity's refusals in the current second.
type auditWindow struct {
	start      time.Time
	logged     int
	suppressed int
}

// auditRefusalsPerSecond bounds the refusal lines per identity per second.
const auditRefusalsPerSecond = 10

func newAudit(s *Server) *audit {
	return &audit{log: s.logger.With("audit", true), per: map[string]*auditWindow{},
		refusals: s.metrics.authRefused, actions: s.metrics.auditActions}
}

// auditPermissions are the values of distash_auth_refused_total's
// permission label (missingPermission), exported from the start at 0.
var auditPermissions = []string{"read", "write", "status", "admin", "system", "node", "any", "unknown_method", "other"}

// newAuditMetrics are the audit's counters, on every server (0 in
// trusted-network mode), each label value present from the start.
func newAuditMetrics() (refused, actions *prometheus.CounterVec) {
	refused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "distash_auth_refused_total",
		Help: "Requests refused with permission_denied ([auth]), by the permission missing: read, write, status, admin, system (the system key space), node (a node-to-node call), any (an identity without a grant), unknown_method, other (a bad token).",
	}, []string{"permission"})
	for _, p := range auditPermissions {
		refused.WithLabelValues(p)
	}
	actions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "distash_audit_actions_total",
		Help: "Operator calls served ([auth]: kill, exclude, include, configure, auth changes, backup start and stop), by outcome (ok or error).",
	}, []string{"outcome"})
	actions.WithLabelValues("ok")
	actions.WithLabelValues("error")
	return refused, actions
}

// refused logs (rate-limited) and counts a refused request.
func (a *audit) refused(id authz.Identity, method string, err error) {
	a.refusals.WithLabelValues(missingPermission(err)).Inc()
	now := time.Now()
	a.mu.Lock()
	w := a.per[id.Name]
	if w == nil || now.Sub(w.start) >= time.Second {
		if len(a.per) > 10000 { // many identities: forget the old windows
			a.per = map[string]*auditWindow{}
		}
		prev := w
		w = &auditWindow{start: now}
		a.per[id.Name] = w
		if prev != nil && prev.suppressed > 0 {
			a.log.Warn("audit", "identity", id.String(), "action", "refused requests", "target", "", "outcome", fmt.Sprintf("suppressed %d refusal lines in the second from %s", prev.suppressed, prev.start.Format(time.RFC3339Nano)))
		}
	}
	log := w.logged < auditRefusalsPerSecond
	if log {
		w.logged++
	} else {
		w.suppressed++
	}
	a.mu.Unlock()
	if log {
		a.log.Warn("audit", "identity", id.String(), "action", method, "target", "", "outcome", "refused: "+err.Error())
	}
}

// missingPermission is the permission a permission_denied message names.
func missingPermission(err error) string {
	msg := err.Error()
	for _, p := range []string{"lacks read", "lacks write", "lacks status or admin", "lacks status", "lacks admin", "lacks a node certificate", "has no grant", "no authorization rule"} {
		if strings.Contains(msg, p) {
			switch p {
			case "lacks status or admin":
				return "system"
			case "lacks a node certificate":
				return "node"
			case "has no grant":
				return "any"
			case "no authorization rule":
				return "unknown_method"
			}
			return strings.TrimPrefix(p, "lacks ")
		}
	}
	return "other" // a refused token, a malformed authorization
}

// admin logs and counts an operator call that was served: its action,
// target (the request, in short) and outcome (the response's error).
func (a *audit) admin(id authz.Identity, method string, req, resp any) {
	action := method[strings.LastIndexByte(method, '/')+1:]
	if strings.Contains(method, ".Backup/") {
		action = "Backup" + action
	}
	if r, ok := req.(*wire.AuthRequest); ok {
		if r.GetOp() == "list" || r.GetOp() == "" {
			return // reading the roles changes nothing
		}
		action = "Auth " + r.GetOp()
	}
	outcome := "ok"
	if m, ok := resp.(proto.Message); ok {
		if e := responseError(m); e != nil && e.Code != 0 {
			outcome = "error: " + e.Err().Error()
		}
	}
	label := "ok"
	if outcome != "ok" {
		label = "error"
	}
	a.actions.WithLabelValues(label).Inc()
	a.log.Info("audit", "identity", id.String(), "action", action, "target", target(req), "outcome", outcome)
}

// responseError is a response's "error" field, if it has one.
func responseError(m proto.Message) *wire.Error {
	r := m.ProtoReflect()
	fd := r.Descriptor().Fields().ByName("error")
	if fd == nil || fd.Kind() != protoreflect.MessageKind || !r.Has(fd) {
		return nil
	}
	e, _ := r.Get(fd).Message().Interface().(*wire.Error)
	return e
}

// target is a request in one short line for the audit log.
func target(req any) string {
	switch r := req.(type) {
	case *wire.AuthRequest:
		s := fmt.Sprintf("role=%s identity=%s", r.GetRole(), r.GetIdentity())
		if d := r.GetDefine(); d != nil {
			s = fmt.Sprintf("role=%s read=%v write=%v status=%v admin=%v", d.GetName(), d.GetRead(), d.GetWrite(), d.GetStatus(), d.GetAdmin())
		}
		return s
	case *wire.ExcludeRequest:
		return strings.Join(r.GetAddresses(), ",")
	case *wire.IncludeRequest:
		return strings.Join(r.GetAddresses(), ",")
	case *wire.KillRequest:
		return "this node (" + r.GetReason() + ")"
	case proto.Message:
		s := fmt.Sprint(r)
		if len(s) > 200 {
			s = s[:200] + "…"
		}
		return s
	}
	return ""
}
