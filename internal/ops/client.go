package ops

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Client is an Operator that asks a node's API (server.WithAPI). The CLI
// uses it with the memory backend, whose state lives only in the node's
// process.
type Client struct {
	base      string // http://host:port
	token     string // write token
	readToken string // read token; the write token when empty
	by        string // who asks (user@host), sent with writes
	http      *http.Client
}

// SetBy names who asks (the CLI's user@host): the node records it, after
// the client's address, with what the writes do.
func (c *Client) SetBy(by string) { c.by = by }

// NewClient returns a Client for the node listening at listen ("host:port"
// as [http] listen spells it; a wildcard host means this machine). token
// is sent with writes, readToken (or token, when empty) with reads.
func NewClient(listen, token, readToken string) (*Client, error) {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, fmt.Errorf("%w: [http] listen %q: want host:port", ErrInvalid, listen)
	}
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	if readToken == "" {
		readToken = token
	}
	return &Client{
		base: "http://" + net.JoinHostPort(host, port), token: token, readToken: readToken,
		// No client-wide timeout: each call's context bounds it.
		http: &http.Client{},
	}, nil
}

// Status is GET /api/v1/status.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var st Status
	err := c.do(ctx, http.MethodGet, "/api/v1/status", nil, &st)
	return st, err
}

// Runs is GET /api/v1/schedules/{id}/runs?limit=N.
func (c *Client) Runs(ctx context.Context, id string, limit int) ([]Run, error) {
	var rs []Run
	err := c.do(ctx, http.MethodGet, schedulePath(id, "runs")+"?limit="+strconv.Itoa(limit), nil, &rs)
	return rs, err
}

// Trigger is POST /api/v1/schedules/{id}/trigger?wait=D.
func (c *Client) Trigger(ctx context.Context, id string, wait time.Duration) (TriggerAnswer, error) {
	var a TriggerAnswer
	err := c.do(ctx, http.MethodPost, schedulePath(id, "trigger")+"?wait="+url.QueryEscape(wait.String()), nil, &a)
	return a, err
}

// Stop is POST /api/v1/schedules/{id}/stop?wait=D.
func (c *Client) Stop(ctx context.Context, id string, wait time.Duration) (StopAnswer, error) {
	var a StopAnswer
	err := c.do(ctx, http.MethodPost, schedulePath(id, "stop")+"?wait="+url.QueryEscape(wait.String()), nil, &a)
	return a, err
}

// Cancel is DELETE /api/v1/schedules/{id}/queue.
func (c *Client) Cancel(ctx context.Context, id string) (CancelAnswer, error) {
	var a CancelAnswer
	err := c.do(ctx, http.MethodDelete, schedulePath(id, "queue"), nil, &a)
	return a, err
}

// Pause is POST /api/v1/schedules/{id}/pause.
func (c *Client) Pause(ctx context.Context, id string, req PauseRequest) (PauseAnswer, error) {
	var a PauseAnswer
	err := c.do(ctx, http.MethodPost, schedulePath(id, "pause"), req, &a)
	return a, err
}

// Resume is POST /api/v1/schedules/{id}/resume.
func (c *Client) Resume(ctx context.Context, id string) (PauseAnswer, error) {
	var a PauseAnswer
	err := c.do(ctx, http.MethodPost, schedulePath(id, "resume"), nil, &a)
	return a, err
}

// Backfill is POST /api/v1/schedules/{id}/backfill.
func (c *Client) Backfill(ctx context.Context, id string, from, to time.Time) (BackfillAnswer, error) {
	var a BackfillAnswer
	body := struct {
		From time.Time `json:"from"`
		To   time.Time `json:"to"`
	}{from, to}
	err := c.do(ctx, http.MethodPost, schedulePath(id, "backfill"), body, &a)
	return a, err
}

// Audit is GET /api/v1/schedules/{id}/audit?from=&to= (a zero time is
// left out: the node's default).
func (c *Client) Audit(ctx context.Context, id string, from, to time.Time) ([]AuditTick, error) {
	var a []AuditTick
	err := c.do(ctx, http.MethodGet, schedulePath(id, "audit")+rangeQuery(from, to), nil, &a)
	return a, err
}

// AuditSummary is GET /api/v1/audit?from=&to=.
func (c *Client) AuditSummary(ctx context.Context, from, to time.Time) ([]AuditSummary, error) {
	var a []AuditSummary
	err := c.do(ctx, http.MethodGet, "/api/v1/audit"+rangeQuery(from, to), nil, &a)
	return a, err
}

// rangeQuery is ?from=&to= in RFC 3339 (nanoseconds kept), each only when
// set.
func rangeQuery(from, to time.Time) string {
	q := url.Values{}
	if !from.IsZero() {
		q.Set("from", from.UTC().Format(time.RFC3339Nano))
	}
	if !to.IsZero() {
		q.Set("to", to.UTC().Format(time.RFC3339Nano))
	}
	if len(q) == 0 {
		return ""
	}
	return "?" + q.Encode()
}

func schedulePath(id, what string) string {
	return "/api/v1/schedules/" + url.PathEscape(id) + "/" + what
}

// APIError is an error answer of the API; it matches the ops sentinel its
// code names.
type APIError struct {
	Status int
	Code   string
	Msg    string
}

func (e *APIError) Error() string { return e.Msg }

// Unwrap maps the answer's code to a sentinel, so callers match with
// errors.Is as they do for Service.
func (e *APIError) Unwrap() error {
	switch e.Code {
	case "unknown_schedule":
		return ErrUnknownSchedule
	case "invalid":
		return ErrInvalid
	case "running":
		return ErrRunning
	case "busy":
		return ErrBusy
	case "no_backend":
		return ErrNoBackend
	case "not_running":
		return ErrNotRunning
	case "backend_permission":
		return ErrPermission
	case "not_stopped":
		return ErrNotStopped
	case "unavailable":
		return ErrUnavailable
	case "unauthorized", "forbidden":
		return ErrUnauthorized
	}
	return nil
}

func (c *Client) do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	tok := c.readToken
	if method != http.MethodGet {
		tok = c.token
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	if c.by != "" && method != http.MethodGet {
		req.Header.Set("X-Bext-By", c.by)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		// Never the error's text alone: it is the node's address that
		// matters to the operator, and it holds nothing secret.
		return fmt.Errorf("%w: the node's API at %s did not answer: %w", ErrUnavailable, c.base, unwrapURL(err))
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("%w: reading the answer of %s: %w", ErrUnavailable, c.base, err)
	}
	if resp.StatusCode >= 300 {
		var e struct {
			Error string `json:"error"`
			Code  string `json:"code"`
		}
		if json.Unmarshal(data, &e) != nil || e.Error == "" {
			e.Error = fmt.Sprintf("the node's API answered %s", resp.Status)
		}
		return &APIError{Status: resp.StatusCode, Code: e.Code, Msg: e.Error}
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("ops: the answer of %s%s is not the JSON expected: %w", c.base, path, err)
	}
	return nil
}

// unwrapURL drops *url.Error's "Post \"http://...\"" prefix, which repeats
// the address and the path.
func unwrapURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
