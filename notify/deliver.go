package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/bext-dev/bext-scheduler/internal/redact"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

// kind is what a queued message asks for.
type kind int

const (
	kindPing   kind = iota // a healthchecks.io ping
	kindDecide             // decide whether a run starts or ends a streak, then maybe post
	kindPost               // a webhook POST of event
	kindDone               // closes done: everything queued before it was handled (tests)
)

// String is the kind's lane and the kind label of its drops in
// bext_notify_dropped_total (metrics.NotifyPing, metrics.NotifyNotification).
func (k kind) String() string {
	switch k {
	case kindPing:
		return "ping"
	case kindDecide, kindPost, kindDone:
		return "notification"
	}
	return "unknown"
}

// message is one queued delivery.
type message struct {
	kind     kind
	schedule string
	url      string // what is requested (the secret included)
	raw      string // the configured URL, for redaction
	body     string // a ping's body: the failed run's error line
	event    *Event // kindPost
	run      scheduler.RunRecord
	// traceparent, when the run is traced, is sent as the W3C
	// traceparent header: the ping or notification joins the run's trace.
	traceparent string

	// done (a start ping) is closed once it was delivered or given up;
	// after (a result ping) is its start's done: a result never overtakes
	// its start, or the monitor would see a start that never ends.
	done, after chan struct{}
}

// deliver handles one message from a queue; sent says a request of it
// was answered 2xx.
func (n *Notifier) deliver(ctx context.Context, m *message) (sent bool) {
	switch m.kind {
	case kindPing:
		if m.after != nil {
			select {
			case <-m.after:
			case <-ctx.Done():
			}
		}
		err := n.send(ctx, m.url, m.raw, m.traceparent, "text/plain; charset=utf-8", []byte(m.body))
		if m.done != nil {
			close(m.done)
		}
		if err != nil {
			n.log.Warn("ping failed", slog.String("schedule", m.schedule), slog.String("url", redact.URL(m.raw)),
				slog.String("error", err.Error()))
		}
		return err == nil
	case kindDecide:
		return n.decide(ctx, m)
	case kindPost:
		return n.post(ctx, m)
	case kindDone:
		close(m.done)
	}
	return false
}

// post sends a webhook event; sent says it was answered 2xx.
func (n *Notifier) post(ctx context.Context, m *message) (sent bool) {
	m.event.Text = m.event.text()
	body, err := json.Marshal(m.event)
	if err != nil { // an Event always marshals
		n.log.Error("encoding a notification", slog.Any("error", err))
		return false
	}
	if err := n.send(ctx, m.url, m.raw, m.traceparent, "application/json", body); err != nil {
		n.log.Warn("notification failed", slog.String("schedule", m.schedule), slog.String("event", m.event.Event),
			slog.String("url", redact.URL(m.raw)), slog.String("error", err.Error()))
		return false
	}
	n.log.Info("notification sent", slog.String("schedule", m.schedule), slog.String("event", m.event.Event),
		slog.String("url", redact.URL(m.raw)))
	return true
}

// errStatus is an answer that is not 2xx.
var errStatus = errors.New("notify: unexpected status")

// send POSTs body to target, each attempt bounded by the timeout, retrying
// network errors, 429 and 5xx answers after a doubling backoff. Its error
// never holds target's secret: only redact.URL(raw) and the cause.
func (n *Notifier) send(ctx context.Context, target, raw, traceparent, contentType string, body []byte) error {
	backoff := n.opts.Backoff
	var err error
	for attempt := 0; ; attempt++ {
		var retry bool
		retry, err = n.attempt(ctx, target, traceparent, contentType, body)
		if err == nil {
			return nil
		}
		if !retry || attempt >= n.opts.Retries {
			break
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%s: %s (given up: shutting down)", redact.URL(raw), redact.Scrub(err.Error(), raw))
		}
		backoff *= 2
	}
	return fmt.Errorf("%s: %s", redact.URL(raw), redact.Scrub(err.Error(), raw))
}

// attempt makes one request; retry says whether another may succeed.
func (n *Notifier) attempt(ctx context.Context, target, traceparent, contentType string, body []byte) (retry bool, err error) {
	actx, cancel := context.WithTimeout(ctx, n.opts.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return false, errors.New("bad URL")
	}
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("User-Agent", "bext-scheduler")
	if traceparent != "" {
		req.Header.Set("traceparent", traceparent)
	}
	resp, err := n.opts.Client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) { // its message quotes the URL: keep the cause only
			err = ue.Err
		}
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("no answer within %v", n.opts.Timeout)
		}
		return true, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // so the connection is reused
	resp.Body.Close()
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return false, nil
	}
	retry = resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500
	return retry, fmt.Errorf("%w %d", errStatus, resp.StatusCode)
}
