package metrics

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/bext-dev/bext-scheduler/locking"
)

// DefaultReadyWindow is how long a successful answer from the lock backend
// keeps the node ready without pinging it again. A scheduler that locks
// every few seconds never pings; an idle one pings at most once per window
// and per /readyz request after it.
const DefaultReadyWindow = 15 * time.Second

// DefaultPingTimeout bounds the ping /readyz makes when the last answer is
// stale or was a failure: a probe must not hang on a dead backend.
const DefaultPingTimeout = 2 * time.Second

// ErrNotReady is wrapped by Ready's errors. Match it with errors.Is.
var ErrNotReady = errors.New("metrics: lock backend not ready")

// Readiness answers "has the lock backend answered recently?" for /readyz.
// InstrumentLocker feeds it every operation's outcome: an operation that
// returned without a backend error means the backend answered (contention
// and "lock lost" are answers too). With no backend configured (no
// InstrumentLocker call), the node is always ready.
type Readiness struct {
	now    func() time.Time
	window time.Duration

	mu          sync.Mutex
	backend     string
	pinger      locking.Pinger // nil until a backend is tracked
	lastAt      time.Time      // when the backend last answered or failed
	lastOK      bool           // whether that was an answer
	lastSuccess time.Time      // zero: never
}

func newReadiness(now func() time.Time, window time.Duration) *Readiness {
	if now == nil {
		now = time.Now
	}
	if window <= 0 {
		window = DefaultReadyWindow
	}
	return &Readiness{now: now, window: window}
}

// track makes backend the one readiness depends on; p pings it.
func (r *Readiness) track(backend string, p locking.Pinger) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.backend, r.pinger = backend, p
}

// record notes the outcome of one backend operation.
func (r *Readiness) record(err error) {
	switch {
	case err == nil, errors.Is(err, locking.ErrLockLost):
		// The backend answered.
	case errors.Is(err, locking.ErrInvalid), errors.Is(err, context.Canceled):
		// Our caller's mistake, or our caller gave up: nothing learnt
		// about the backend.
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	r.lastAt, r.lastOK = now, err == nil || errors.Is(err, locking.ErrLockLost)
	if r.lastOK {
		r.lastSuccess = now
	}
}

// Ready returns nil when no backend is tracked, or when the backend's last
// outcome was an answer within the window. Otherwise it pings the backend
// (bounded by DefaultPingTimeout) and reports that. Its error text is safe
// to serve: it names the backend and a class of failure, never the
// driver's message (which may hold an address or a URL).
func (r *Readiness) Ready(ctx context.Context) error {
	r.mu.Lock()
	p, fresh := r.pinger, r.lastOK && r.now().Sub(r.lastAt) < r.window
	r.mu.Unlock()
	if p == nil || fresh {
		return nil
	}
	pctx, cancel := context.WithTimeout(ctx, DefaultPingTimeout)
	defer cancel()
	err := p.Ping(pctx)
	if err == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return &notReadyError{backend: r.backend, lastSuccess: r.lastSuccess, cause: err}
}

type notReadyError struct {
	backend     string
	lastSuccess time.Time
	cause       error
}

func (e *notReadyError) Error() string {
	since := "no successful answer yet"
	if !e.lastSuccess.IsZero() {
		since = "last answered " + e.lastSuccess.UTC().Format(time.RFC3339)
	}
	return fmt.Sprintf("lock backend %q %s (%s)", e.backend, failureClass(e.cause), since)
}

func (e *notReadyError) Unwrap() []error { return []error{ErrNotReady, e.cause} }

// failureClass describes err without quoting it.
func failureClass(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "did not answer in time"
	case errors.Is(err, locking.ErrClosed):
		return "is closed"
	case errors.Is(err, locking.ErrPermission):
		return "refuses this node's user permission (check the role or ACL user in the URL)"
	case errors.Is(err, locking.ErrUnavailable):
		return "is unavailable"
	default:
		return "failed to answer"
	}
}
