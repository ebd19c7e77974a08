package metrics

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bext-dev/bext-scheduler/locking"
)

// Lock operation and result label values (a contract).
const (
	opTryLock = "try_lock"
	opRenew   = "renew"
	opRelease = "release"

	resultAcquired  = "acquired"
	resultContended = "contended"
	resultOK        = "ok"
	resultLost      = "lost"
	resultError     = "error"

	// The try_lock results only try-lock-tick gives: the tick was not run
	// here, and not because of contention or a failure. A granted tick is
	// "acquired" (a lock was taken) and a contended one "contended", as
	// with TryLock, so acquired/(acquired+contended) stays the contention
	// ratio; a refused future tick (ErrTickAhead) is "error", as every call
	// that returns an error.
	resultDone   = "done"
	resultPaused = "paused"
	resultMissed = "missed"
	// resultExpired: a resend whose grant's lease ended before it reached
	// the backend (locking.TickExpired); the tick is recorded as not run.
	resultExpired = "expired"
)

// lister is implemented by backends that can list the locks they hold.
type lister interface {
	List(ctx context.Context) ([]locking.LockInfo, error)
}

// InstrumentLocker wraps l so that every TryLock, Renew and Release is
// counted in bext_locking_operations_total{backend,op,result} and timed in
// bext_locking_operation_duration_seconds, bext_locking_held_locks follows
// the locks taken through it, and m's readiness check learns whether the
// backend answers. backend is the label value ("memory", "redis", "pg").
//
// The returned Locker keeps l's optional abilities reachable: it always has
// Ping(ctx) error (forwarded, or nil when l cannot ping),
// List(ctx) ([]locking.LockInfo, error) (forwarded, or an error wrapping
// errors.ErrUnsupported) and Unwrap() locking.Locker; it forwards
// try-lock-tick and pause flags (errors.ErrUnsupported when l lacks them),
// and it is a locking.LeaseBounder exactly when l is. TryLockTick is
// counted and timed as op try_lock (results: see resultDone); InitMarks,
// SetPause, GetPause and MaxLease are forwarded uncounted.
func InstrumentLocker(l locking.Locker, backend string, m *Metrics) locking.Backend {
	il := &instrumented{
		next:    l,
		backend: backend,
		m:       m,
		ops:     map[string]map[string]prometheus.Counter{},
		timing:  map[string]prometheus.Observer{},
		gauge:   m.heldLocks.WithLabelValues(backend),
		held:    map[*locking.Handle]struct{}{},
	}
	// Every series is created here, at zero ("no errors yet" reads as 0,
	// not absent), and resolved once so an operation costs no label lookup.
	tryLock := []string{resultAcquired, resultContended, resultError}
	if _, ok := l.(locking.TickLocker); ok {
		tryLock = append(tryLock, resultDone, resultPaused, resultMissed, resultExpired)
	}
	for op, results := range map[string][]string{
		opTryLock: tryLock,
		opRenew:   {resultOK, resultLost, resultError},
		opRelease: {resultOK, resultLost, resultError},
	} {
		il.ops[op] = map[string]prometheus.Counter{}
		for _, r := range results {
			il.ops[op][r] = m.lockOps.WithLabelValues(backend, op, r)
		}
		il.timing[op] = m.lockDuration.WithLabelValues(backend, op)
	}
	il.gauge.Add(0)
	m.ready.track(backend, il)
	return il.withOptional()
}

type instrumented struct {
	next    locking.Locker
	backend string
	m       *Metrics
	ops     map[string]map[string]prometheus.Counter // [op][result]; read-only after construction
	timing  map[string]prometheus.Observer           // [op]
	gauge   prometheus.Gauge                         // held locks

	mu   sync.Mutex
	held map[*locking.Handle]struct{} // handles counted in held_locks
}

// TryLock forwards and counts acquired, contended or error.
func (l *instrumented) TryLock(ctx context.Context, key string, ttl time.Duration) (*locking.Handle, error) {
	start := time.Now()
	h, err := l.next.TryLock(ctx, key, ttl)
	result := resultError
	switch {
	case err == nil && h != nil:
		result = resultAcquired
		l.hold(h)
	case err == nil:
		result = resultContended
	}
	l.observe(opTryLock, result, start, err)
	return h, err
}

// Renew forwards and counts ok, lost or error; a lost lock is no longer held.
func (l *instrumented) Renew(ctx context.Context, h *locking.Handle) error {
	start := time.Now()
	err := l.next.Renew(ctx, h)
	result := outcome(err)
	if result == resultLost {
		l.drop(h)
	}
	l.observe(opRenew, result, start, err)
	return err
}

// Release stops counting h as held whatever the outcome: after Release the
// caller has let go of the handle, and a backend that failed to answer
// frees the lock by its TTL or its dropped session anyway. (Counting only
// ok and lost would leave the gauge up forever after a backend outage.)
func (l *instrumented) Release(ctx context.Context, h *locking.Handle) error {
	start := time.Now()
	err := l.next.Release(ctx, h)
	l.drop(h)
	l.observe(opRelease, outcome(err), start, err)
	return err
}

// Close closes the wrapped Locker, which releases everything it holds.
func (l *instrumented) Close(ctx context.Context) error {
	err := l.next.Close(ctx)
	l.mu.Lock()
	n := len(l.held)
	clear(l.held)
	l.mu.Unlock()
	l.gauge.Sub(float64(n))
	return err
}

// Ping forwards to the wrapped Locker when it is a locking.Pinger; a
// backend that cannot ping (memory) is always reachable.
func (l *instrumented) Ping(ctx context.Context) error {
	p, ok := l.next.(locking.Pinger)
	if !ok {
		return nil
	}
	err := p.Ping(ctx)
	l.m.ready.record(err)
	return err
}

// List forwards to the wrapped Locker when it can list its locks.
func (l *instrumented) List(ctx context.Context) ([]locking.LockInfo, error) {
	ls, ok := l.next.(lister)
	if !ok {
		return nil, fmt.Errorf("metrics: the %s lock backend cannot list held locks: %w", l.backend, errors.ErrUnsupported)
	}
	infos, err := ls.List(ctx)
	l.m.ready.record(err)
	return infos, err
}

// Unwrap returns the wrapped Locker.
func (l *instrumented) Unwrap() locking.Locker { return l.next }

func (l *instrumented) observe(op, result string, start time.Time, err error) {
	l.count(op, result, start)
	l.m.ready.record(err)
}

// count counts one operation under its result and records its duration.
func (l *instrumented) count(op, result string, start time.Time) {
	l.ops[op][result].Inc()
	l.timing[op].Observe(time.Since(start).Seconds())
}

func (l *instrumented) hold(h *locking.Handle) {
	l.mu.Lock()
	l.held[h] = struct{}{}
	l.mu.Unlock()
	l.gauge.Inc()
}

// drop stops counting h; a handle counted once is uncounted once, however
// many Renew and Release calls report it gone.
func (l *instrumented) drop(h *locking.Handle) {
	l.mu.Lock()
	_, ok := l.held[h]
	delete(l.held, h)
	l.mu.Unlock()
	if ok {
		l.gauge.Dec()
	}
}

func outcome(err error) string {
	switch {
	case err == nil:
		return resultOK
	case errors.Is(err, locking.ErrLockLost):
		return resultLost
	default:
		return resultError
	}
}
