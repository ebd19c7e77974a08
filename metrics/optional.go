package metrics

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bext-dev/bext-scheduler/locking"
)

// The interfaces of a lock backend beyond locking.Locker that the
// instrumented Locker forwards. TickLocker, Pauser and MarkReader are part
// of every backend of this repository, so the wrapper always has them (a
// wrapped Locker without them answers errors.ErrUnsupported). LeaseBounder
// is a real option (Postgres only): the wrapper has MaxLease exactly when the
// backend does, so a type assertion on it answers as one on the backend.

// leaser forwards locking.LeaseBounder.
type leaser struct{ il *instrumented }

// MaxLease forwards to the wrapped LeaseBounder.
func (c leaser) MaxLease() time.Duration {
	return c.il.next.(locking.LeaseBounder).MaxLease()
}

// TryLockTick forwards and counts the verdict under op try_lock: granted
// as acquired (the handle is then counted as held), contended as
// contended, done, paused, missed and expired as themselves, any error as
// error.
func (l *instrumented) TryLockTick(ctx context.Context, r locking.TickRequest) (locking.TickAnswer, error) {
	tl, ok := l.next.(locking.TickLocker)
	if !ok {
		return locking.TickAnswer{}, fmt.Errorf("metrics: %T has no try-lock-tick: %w", l.next, errors.ErrUnsupported)
	}
	start := time.Now()
	ans, err := tl.TryLockTick(ctx, r)
	result := resultError
	if err == nil {
		switch ans.Verdict {
		case locking.TickGranted:
			result = resultAcquired
			if ans.Handle != nil {
				l.hold(ans.Handle)
			}
		case locking.TickContended:
			result = resultContended
		case locking.TickDone:
			result = resultDone
		case locking.TickPaused:
			result = resultPaused
		case locking.TickMissed:
			result = resultMissed
		case locking.TickExpired:
			result = resultExpired
		}
	}
	answered := err
	if errors.Is(err, locking.ErrTickAhead) {
		// The backend answered; this node's clock is the one at fault.
		answered = nil
	}
	l.count(opTryLock, result, start)
	l.m.ready.record(answered)
	return ans, err
}

// InitMarks forwards to the wrapped TickLocker.
func (l *instrumented) InitMarks(ctx context.Context, keys []string) error {
	tl, ok := l.next.(locking.TickLocker)
	if !ok {
		return fmt.Errorf("metrics: %T has no tick marks: %w", l.next, errors.ErrUnsupported)
	}
	err := tl.InitMarks(ctx, keys)
	l.m.ready.record(err)
	return err
}

// SetPause forwards to the wrapped Pauser.
func (l *instrumented) SetPause(ctx context.Context, key string, p locking.Pause) error {
	pz, ok := l.next.(locking.Pauser)
	if !ok {
		return fmt.Errorf("metrics: %T has no pause flags: %w", l.next, errors.ErrUnsupported)
	}
	err := pz.SetPause(ctx, key, p)
	l.m.ready.record(err)
	return err
}

// GetPause forwards to the wrapped Pauser.
func (l *instrumented) GetPause(ctx context.Context, key string) (locking.Pause, error) {
	pz, ok := l.next.(locking.Pauser)
	if !ok {
		return locking.Pause{}, fmt.Errorf("metrics: %T has no pause flags: %w", l.next, errors.ErrUnsupported)
	}
	p, err := pz.GetPause(ctx, key)
	l.m.ready.record(err)
	return p, err
}

// Mark forwards to the wrapped MarkReader.
func (l *instrumented) Mark(ctx context.Context, key string) (time.Time, bool, error) {
	mr, ok := l.next.(locking.MarkReader)
	if !ok {
		return time.Time{}, false, fmt.Errorf("metrics: %T has no tick marks to read: %w", l.next, errors.ErrUnsupported)
	}
	m, ok, err := mr.Mark(ctx, key)
	l.m.ready.record(err)
	return m, ok, err
}

// withOptional returns l, with MaxLease when its backend has one.
func (l *instrumented) withOptional() locking.Backend {
	if _, ok := l.next.(locking.LeaseBounder); ok {
		return struct {
			*instrumented
			leaser
		}{l, leaser{l}}
	}
	return l
}

// is reports whether v implements I.
func is[I any](v any) bool {
	_, ok := v.(I)
	return ok
}
