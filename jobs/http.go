package jobs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bext-dev/bext-scheduler/internal/redact"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

// DefaultHTTPTimeout bounds an HTTP job whose Timeout is zero.
const DefaultHTTPTimeout = 30 * time.Second

// maxDrain bounds how much of a response body is read (and discarded) so the
// connection can be reused without a huge body holding the run.
const maxDrain = 64 << 10

// Request headers an HTTP job sends (a contract).
const (
	HeaderScheduleID   = "X-Bext-Schedule-Id"
	HeaderTickTime     = "X-Bext-Tick-Time"
	HeaderNodeID       = "X-Bext-Node-Id"
	HeaderFencingToken = "X-Bext-Fencing-Token"
)

// HTTP calls a URL as the job. The request carries the tick in headers
// (X-Bext-Schedule-Id, X-Bext-Tick-Time, X-Bext-Node-Id, and
// X-Bext-Fencing-Token when locked). Errors name the method, the URL as
// scheme://host[:port] and the status, never the URL's user info, path or
// query, nor header values: webhook URLs carry their credential in the
// path, and headers carry tokens.
//
// A redirect is never followed: a 3xx answer is the job's result, a failure
// unless SuccessCodes lists it. Following one would send the job's custom
// headers (an X-Api-Key; Go strips only Authorization and Cookie) to
// whatever host the Location names, and a 301/302/303 would turn a POST
// into a body-less GET whose 200 would be recorded as the job's success.
type HTTP struct {
	URL     string
	Method  string            // default GET, or POST when Body is set
	Headers map[string]string // a "Host" entry sets the request's Host
	Body    string
	// Timeout bounds the whole call, body drain included. Default 30s.
	Timeout time.Duration
	// SuccessCodes lists the statuses that count as success; empty means
	// any 2xx.
	SuccessCodes []int
	// Client sends the request; nil means http.DefaultClient's transport.
	// Its CheckRedirect is ignored: redirects are never followed.
	Client *http.Client
}

// StatusError reports a response whose status is not a success.
type StatusError struct {
	Method string
	URL    string // redacted: scheme://host[:port]
	Status int
	// Location is where a 3xx answer pointed, redacted like URL; empty
	// for other statuses. The redirect was not followed.
	Location string
}

// Error names the request and the status it got.
func (e *StatusError) Error() string {
	msg := strings.TrimSpace(fmt.Sprintf("jobs: %s %s answered %d %s", e.Method, e.URL, e.Status, http.StatusText(e.Status)))
	if e.Status >= 300 && e.Status < 400 {
		to := ""
		if e.Location != "" {
			to = " to " + e.Location
		}
		msg += fmt.Sprintf(" (a redirect%s: not followed; list %d in success_codes if it means success)", to, e.Status)
	}
	return msg
}

// Run sends the request for tick t and reports whether it succeeded.
func (h *HTTP) Run(ctx context.Context, t scheduler.Tick) error {
	u, err := url.Parse(h.URL)
	if err != nil {
		// url.Parse's error quotes the whole URL, password included: keep
		// only its reason.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("%w: schedule %q: bad URL %s: %s", ErrInvalid, t.ScheduleID, redact.URL(h.URL), redact.Scrub(err.Error(), h.URL))
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("%w: schedule %q: URL %s must be absolute http or https", ErrInvalid, t.ScheduleID, redact.URL(h.URL))
	}
	method := h.method()
	shown := redact.URL(h.URL)

	timeout := h.Timeout
	if timeout <= 0 {
		timeout = DefaultHTTPTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	var body io.Reader
	if h.Body != "" {
		body = strings.NewReader(h.Body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return fmt.Errorf("%w: schedule %q: %s %s: %s", ErrInvalid, t.ScheduleID, method, shown, redact.Scrub(unwrapURLError(err).Error(), h.URL))
	}
	for k, v := range h.Headers {
		if strings.EqualFold(k, "Host") {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	req.Header.Set(HeaderScheduleID, t.ScheduleID)
	req.Header.Set(HeaderTickTime, t.Time.Format(time.RFC3339))
	req.Header.Set(HeaderNodeID, t.NodeID)
	if t.RunID != "" {
		// The same across retries of one run: a receiver that saw the key
		// already can answer without doing the work twice.
		req.Header.Set("Idempotency-Key", t.RunID)
	}
	if t.TraceParent != "" {
		// W3C Trace Context: the receiver's spans join the run's trace.
		req.Header.Set("traceparent", t.TraceParent)
	}
	if t.Locked() {
		req.Header.Set(HeaderFencingToken, strconv.FormatInt(t.FencingToken, 10))
	}

	resp, err := noRedirects(h.Client).Do(req)
	if err != nil {
		// The client's *url.Error quotes the URL (query included): replace
		// it with the redacted form, keeping the cause for errors.Is.
		return fmt.Errorf("jobs: %s %s: %w", method, shown, scrubbed(unwrapURLError(err), h.URL))
	}
	_, drainErr := io.Copy(io.Discard, io.LimitReader(resp.Body, maxDrain))
	_ = resp.Body.Close() // a close error after a read cannot change the outcome
	if !h.success(resp.StatusCode) {
		se := &StatusError{Method: method, URL: shown, Status: resp.StatusCode}
		if loc, err := resp.Location(); err == nil {
			se.Location = redact.URL(loc.String())
		}
		return se
	}
	if drainErr != nil && ctx.Err() != nil {
		// The endpoint answered in time but the body did not finish: the
		// job did not complete within its timeout.
		return fmt.Errorf("jobs: %s %s: reading the response: %w", method, shown, context.Cause(ctx))
	}
	return nil
}

// noRedirects returns a client that sends through c's transport (the
// default one when c is nil) and hands every 3xx back as the response.
func noRedirects(c *http.Client) *http.Client {
	nc := http.Client{}
	if c != nil {
		nc = *c
	}
	nc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &nc
}

func (h *HTTP) method() string {
	switch {
	case h.Method != "":
		return strings.ToUpper(h.Method)
	case h.Body != "":
		return http.MethodPost
	default:
		return http.MethodGet
	}
}

func (h *HTTP) success(code int) bool {
	if len(h.SuccessCodes) == 0 {
		return code >= 200 && code < 300
	}
	return slices.Contains(h.SuccessCodes, code)
}

func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// scrubbedError shows a cause's text with the URL's secrets removed and
// still unwraps to it, so errors.Is(err, context.DeadlineExceeded) holds.
type scrubbedError struct {
	msg   string
	cause error
}

func (e *scrubbedError) Error() string { return e.msg }
func (e *scrubbedError) Unwrap() error { return e.cause }

func scrubbed(err error, raw string) error {
	return &scrubbedError{msg: redact.Scrub(err.Error(), raw), cause: err}
}
