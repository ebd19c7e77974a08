package server

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/bext-dev/bext-scheduler/internal/ops"
)

// Option configures a Server beyond its defaults.
type Option func(*Server, *http.ServeMux)

// APIConfig is the operators' API: the ops service it answers from and the
// tokens that guard it.
type APIConfig struct {
	Ops *ops.Service
	// Token guards writes (trigger, pause, resume, backfill); "" refuses
	// them all with 403.
	Token string
	// ReadToken, when set, guards reads too (Token is accepted for them).
	ReadToken string
}

// WithAPI serves the operators' API under /api/v1/ (DESIGN.md "Operating
// it"): JSON answers from the same ops code the CLI uses; and the status
// page at / (page.go), rendered from that same code.
func WithAPI(c APIConfig) Option {
	return func(s *Server, mux *http.ServeMux) {
		a := &api{ops: c.Ops, write: digest(c.Token), read: digest(c.ReadToken),
			hasWrite: c.Token != "", hasRead: c.ReadToken != "", logger: s.logger}
		mux.HandleFunc("GET /api/v1/status", a.reader(a.status))
		mux.HandleFunc("GET /api/v1/schedules", a.reader(a.schedules))
		mux.HandleFunc("GET /api/v1/nodes", a.reader(a.nodes))
		mux.HandleFunc("GET /api/v1/schedules/{id}/runs", a.reader(a.runs))
		mux.HandleFunc("GET /api/v1/schedules/{id}/audit", a.reader(a.audit))
		mux.HandleFunc("GET /api/v1/audit", a.reader(a.auditSummary))
		mux.HandleFunc("POST /api/v1/schedules/{id}/trigger", a.writer(a.trigger))
		mux.HandleFunc("POST /api/v1/schedules/{id}/pause", a.writer(a.pause))
		mux.HandleFunc("POST /api/v1/schedules/{id}/resume", a.writer(a.resume))
		mux.HandleFunc("POST /api/v1/schedules/{id}/backfill", a.writer(a.backfill))
		mux.HandleFunc("POST /api/v1/schedules/{id}/stop", a.writer(a.stop))
		mux.HandleFunc("DELETE /api/v1/schedules/{id}/queue", a.writer(a.cancel))
		mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
			writeError(w, http.StatusNotFound, "not_found", "no such endpoint: see GET /api/v1/status, /api/v1/schedules, /api/v1/nodes, /api/v1/schedules/{id}/runs, /api/v1/schedules/{id}/audit, /api/v1/audit, POST /api/v1/schedules/{id}/{trigger|pause|resume|backfill|stop}, DELETE /api/v1/schedules/{id}/queue")
		})
		a.servePage(mux) // the status page (page.go), guarded by the same tokens
	}
}

// API limits. A trigger waits for a node to accept it within the server's
// write timeout; a body is a small JSON object.
const (
	defaultTriggerWait = 10 * time.Second
	maxTriggerWait     = 25 * time.Second
	defaultRunsLimit   = 20
	maxBody            = 64 << 10
)

// NoTokenMessage is the answer to a write while no token is configured.
const NoTokenMessage = `writes are disabled on this node: set [http] token (for example token = "${BEXT_API_TOKEN}" with the variable set in the node's environment) and restart it`

type api struct {
	ops               *ops.Service
	write, read       [sha256.Size]byte
	hasWrite, hasRead bool
	logger            *slog.Logger
}

// digest hashes a token so comparisons take the same time whatever the
// lengths of the token and of the guess.
func digest(tok string) [sha256.Size]byte { return sha256.Sum256([]byte(tok)) }

// bearer returns the request's bearer token's digest; ok is false when it
// sent none.
func bearer(r *http.Request) (d [sha256.Size]byte, ok bool) {
	h := r.Header.Get("Authorization")
	const prefix = "bearer "
	if len(h) < len(prefix) || !strings.EqualFold(h[:len(prefix)], prefix) {
		return d, false
	}
	return digest(strings.TrimSpace(h[len(prefix):])), true
}

func matches(a, b [sha256.Size]byte) bool { return subtle.ConstantTimeCompare(a[:], b[:]) == 1 }

func unauthorized(w http.ResponseWriter, msg string) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="bext-scheduler"`)
	writeError(w, http.StatusUnauthorized, "unauthorized", msg)
}

// reader guards a read: open unless a read token is configured, then the
// read or the write token.
func (a *api) reader(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if a.hasRead {
			got, ok := bearer(r)
			if !ok {
				unauthorized(w, "this node's API needs Authorization: Bearer <[http] read_token>")
				return
			}
			// Both compared, always: the time taken says nothing about which.
			okRead, okWrite := matches(got, a.read), a.hasWrite && matches(got, a.write)
			if !okRead && !okWrite {
				unauthorized(w, "wrong token")
				return
			}
		}
		h(w, r)
	}
}

// writer guards a write: refused without a configured token (403), needs
// the write token (401 otherwise).
func (a *api) writer(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !a.hasWrite {
			writeError(w, http.StatusForbidden, "forbidden", NoTokenMessage)
			return
		}
		got, ok := bearer(r)
		if !ok {
			unauthorized(w, "writes need Authorization: Bearer <[http] token>")
			return
		}
		if !matches(got, a.write) {
			unauthorized(w, "wrong token")
			return
		}
		h(w, r.WithContext(ops.WithBy(r.Context(), apiBy(r))))
	}
}

func (a *api) status(w http.ResponseWriter, r *http.Request) {
	st, err := a.ops.Status(r.Context())
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

func (a *api) schedules(w http.ResponseWriter, r *http.Request) {
	ss, err := a.ops.Schedules(r.Context())
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, ss)
}

func (a *api) nodes(w http.ResponseWriter, r *http.Request) {
	ns, err := a.ops.Nodes(r.Context())
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, ns)
}

func (a *api) runs(w http.ResponseWriter, r *http.Request) {
	limit := defaultRunsLimit
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			writeError(w, http.StatusBadRequest, "invalid", "limit: want a whole number")
			return
		}
		limit = n
	}
	rs, err := a.ops.Runs(r.Context(), r.PathValue("id"), limit)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, rs)
}

// rangeParams reads ?from=&to= (RFC 3339; absent: zero, the ops
// default); it answers 400 itself and returns false on a bad one.
func rangeParams(w http.ResponseWriter, r *http.Request) (from, to time.Time, ok bool) {
	for _, p := range []struct {
		name string
		t    *time.Time
	}{{"from", &from}, {"to", &to}} {
		v := r.URL.Query().Get(p.name)
		if v == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			writeError(w, http.StatusBadRequest, "invalid", p.name+": want an RFC 3339 time such as 2026-01-02T15:04:05Z")
			return from, to, false
		}
		*p.t = t
	}
	return from, to, true
}

func (a *api) audit(w http.ResponseWriter, r *http.Request) {
	from, to, ok := rangeParams(w, r)
	if !ok {
		return
	}
	rows, err := a.ops.Audit(r.Context(), r.PathValue("id"), from, to)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, rows)
}

func (a *api) auditSummary(w http.ResponseWriter, r *http.Request) {
	from, to, ok := rangeParams(w, r)
	if !ok {
		return
	}
	sums, err := a.ops.AuditSummary(r.Context(), from, to)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, sums)
}

// waitParam is a request's ?wait= (default defaultTriggerWait, at most
// maxTriggerWait); false once it answered a bad one.
func waitParam(w http.ResponseWriter, r *http.Request) (time.Duration, bool) {
	v := r.URL.Query().Get("wait")
	if v == "" {
		return defaultTriggerWait, true
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		writeError(w, http.StatusBadRequest, "invalid", "wait: want a duration such as 10s")
		return 0, false
	}
	return min(d, maxTriggerWait), true
}

func (a *api) trigger(w http.ResponseWriter, r *http.Request) {
	wait, ok := waitParam(w, r)
	if !ok {
		return
	}
	id := r.PathValue("id")
	ans, err := a.ops.Trigger(r.Context(), id, wait)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	a.logger.Info("api: trigger", "schedule", id, "accepted", ans.Accepted, "by_node", ans.Node, "remote", r.RemoteAddr)
	code := http.StatusOK
	if !ans.Accepted {
		code = http.StatusAccepted // queued; no node took it yet
	}
	writeJSON(w, code, ans)
}

func (a *api) pause(w http.ResponseWriter, r *http.Request) {
	var req ops.PauseRequest
	if !decodeBody(w, r, &req) {
		return
	}
	id := r.PathValue("id")
	ans, err := a.ops.Pause(r.Context(), id, req)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	a.logger.Info("api: pause", "schedule", id, "note", ans.Note, "until", ans.Until, "remote", r.RemoteAddr)
	writeJSON(w, http.StatusOK, ans)
}

func (a *api) resume(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	ans, err := a.ops.Resume(r.Context(), id)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	a.logger.Info("api: resume", "schedule", id, "remote", r.RemoteAddr)
	writeJSON(w, http.StatusOK, ans)
}

func (a *api) stop(w http.ResponseWriter, r *http.Request) {
	wait, ok := waitParam(w, r)
	if !ok {
		return
	}
	id := r.PathValue("id")
	ans, err := a.ops.Stop(r.Context(), id, wait)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	a.logger.Info("api: stop", "schedule", id, "stopped", len(ans.Stopped), "remote", r.RemoteAddr)
	writeJSON(w, http.StatusOK, ans)
}

func (a *api) cancel(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	ans, err := a.ops.Cancel(r.Context(), id)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	a.logger.Info("api: cancel", "schedule", id, "cancelled", ans.Cancelled, "remote", r.RemoteAddr)
	writeJSON(w, http.StatusOK, ans)
}

// byHeader names the person behind an API call, as the CLI sends it
// (user@host): recorded after the client's address, never trusted alone.
const byHeader = "X-Bext-By"

// apiBy is who a write through the API is recorded as done by: "api",
// the client's address, and the CLI's user@host when it sent one (cut
// to 64 printable bytes: it is shown in tables).
func apiBy(r *http.Request) string {
	host := r.RemoteAddr
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	by := "api " + host
	if v := r.Header.Get(byHeader); v != "" {
		clean := make([]byte, 0, len(v))
		for i := 0; i < len(v) && len(clean) < 64; i++ {
			if c := v[i]; c > 0x20 && c < 0x7f {
				clean = append(clean, c)
			}
		}
		if len(clean) > 0 {
			by += " (" + string(clean) + ")"
		}
	}
	return by
}

// backfillRequest is the body of POST .../backfill.
type backfillRequest struct {
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
}

func (a *api) backfill(w http.ResponseWriter, r *http.Request) {
	var req backfillRequest
	if !decodeBody(w, r, &req) {
		return
	}
	id := r.PathValue("id")
	ans, err := a.ops.Backfill(r.Context(), id, req.From, req.To)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	a.logger.Info("api: backfill", "schedule", id, "ticks", len(ans.Ticks), "remote", r.RemoteAddr)
	writeJSON(w, http.StatusAccepted, ans)
}

// decodeBody reads an optional JSON object into v; it answers 400 itself
// and returns false on a bad one.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		writeError(w, http.StatusRequestEntityTooLarge, "invalid", "the body is over 64 KiB")
		return false
	}
	if len(strings.TrimSpace(string(body))) == 0 {
		return true
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeError(w, http.StatusBadRequest, "invalid", "bad JSON body: "+err.Error())
		return false
	}
	return true
}

// fail answers an ops error. The messages of 4xx answers are our own
// (they name the schedule id asked for); a backend failure is answered in
// general words and logged, since a driver's message may name hosts.
func (a *api) fail(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, ops.ErrUnknownSchedule):
		writeError(w, http.StatusNotFound, "unknown_schedule", err.Error())
	case errors.Is(err, ops.ErrInvalid):
		writeError(w, http.StatusBadRequest, "invalid", err.Error())
	case errors.Is(err, ops.ErrRunning):
		writeError(w, http.StatusConflict, "running", err.Error())
	case errors.Is(err, ops.ErrBusy):
		writeError(w, http.StatusConflict, "busy", err.Error())
	case errors.Is(err, ops.ErrNoBackend):
		writeError(w, http.StatusConflict, "no_backend", err.Error())
	case errors.Is(err, ops.ErrNotRunning):
		writeError(w, http.StatusConflict, "not_running", err.Error())
	case errors.Is(err, ops.ErrNotStopped):
		writeError(w, http.StatusGatewayTimeout, "not_stopped", err.Error())
	case errors.Is(err, ops.ErrPermission):
		a.logger.Warn("api: the backend refused the node's user", "path", r.URL.Path, "err", err)
		writeError(w, http.StatusServiceUnavailable, "backend_permission", "the lock backend refused this node's user the operation (a read-only role, an ACL); see the node's log and docs/OPERATING.md, \"Backend permissions\"")
	case errors.Is(err, context.Canceled):
		// The client went away; nobody reads the answer.
	case ops.Unreachable(err):
		a.logger.Warn("api: backend unavailable", "path", r.URL.Path, "err", err)
		writeError(w, http.StatusServiceUnavailable, "unavailable", "the lock backend did not answer; see the node's log")
	default:
		a.logger.Error("api: failed", "path", r.URL.Path, "err", err)
		writeError(w, http.StatusInternalServerError, "internal", "the request failed; see the node's log")
	}
}

// apiError is every error answer of the API.
type apiError struct {
	Error string `json:"error"`
	Code  string `json:"code"`
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, apiError{Error: msg, Code: code})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff") // never run as a script
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v) // the client went away: nothing to do
}
