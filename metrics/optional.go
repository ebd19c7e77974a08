package metrics

import (
	"context"
	"errors"
	"time"

	"github.com/bext-dev/bext-scheduler/locking"
)

// The optional interfaces of a lock backend that the instrumented Locker
// forwards. Each is a small type over *instrumented carrying its methods;
// withOptional embeds exactly those the wrapped backend implements, so a
// type assertion on the wrapper answers as one on the backend would (a
// wrapper of a backend without LeaseBounder does not claim a lease bound,
// one without Claimer is never handed to the scheduler's claims).

// claimer forwards locking.Claimer.
type claimer struct{ il *instrumented }

// Claim forwards to the wrapped Claimer.
func (c claimer) Claim(ctx context.Context, h *locking.Handle, d time.Duration) error {
	err := c.il.next.(locking.Claimer).Claim(ctx, h, d)
	c.il.m.ready.record(err)
	return err
}

// leaser forwards locking.LeaseBounder.
type leaser struct{ il *instrumented }

// MaxLease forwards to the wrapped LeaseBounder.
func (c leaser) MaxLease() time.Duration {
	return c.il.next.(locking.LeaseBounder).MaxLease()
}

// ticker forwards locking.TickLocker, counting TryLockTick as try_lock.
type ticker struct{ il *instrumented }

// TryLockTick forwards and counts the verdict under op try_lock: granted
// as acquired (the handle is then counted as held), contended as
// contended, done, paused and missed as themselves, any error as error.
func (c ticker) TryLockTick(ctx context.Context, r locking.TickRequest) (locking.TickAnswer, error) {
	l := c.il
	start := time.Now()
	ans, err := l.next.(locking.TickLocker).TryLockTick(ctx, r)
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
func (c ticker) InitMarks(ctx context.Context, keys []string) error {
	err := c.il.next.(locking.TickLocker).InitMarks(ctx, keys)
	c.il.m.ready.record(err)
	return err
}

// pauser forwards locking.Pauser.
type pauser struct{ il *instrumented }

// SetPause forwards to the wrapped Pauser.
func (c pauser) SetPause(ctx context.Context, key string, p locking.Pause) error {
	err := c.il.next.(locking.Pauser).SetPause(ctx, key, p)
	c.il.m.ready.record(err)
	return err
}

// GetPause forwards to the wrapped Pauser.
func (c pauser) GetPause(ctx context.Context, key string) (locking.Pause, error) {
	p, err := c.il.next.(locking.Pauser).GetPause(ctx, key)
	c.il.m.ready.record(err)
	return p, err
}

// withOptional returns l as a Locker with the optional methods its backend
// has: one struct type per combination, each embedding *instrumented (the
// Locker, Ping, List, Unwrap) and the parts that apply.
func (l *instrumented) withOptional() locking.Locker {
	type (
		c = claimer
		b = leaser
		t = ticker
		p = pauser
	)
	var mask int
	for i, ok := range []bool{is[locking.Claimer](l.next), is[locking.LeaseBounder](l.next), is[locking.TickLocker](l.next), is[locking.Pauser](l.next)} {
		if ok {
			mask |= 1 << i
		}
	}
	C, B, T, P := c{l}, b{l}, t{l}, p{l}
	switch mask {
	case 0b0001:
		return struct {
			*instrumented
			c
		}{l, C}
	case 0b0010:
		return struct {
			*instrumented
			b
		}{l, B}
	case 0b0011:
		return struct {
			*instrumented
			c
			b
		}{l, C, B}
	case 0b0100:
		return struct {
			*instrumented
			t
		}{l, T}
	case 0b0101:
		return struct {
			*instrumented
			c
			t
		}{l, C, T}
	case 0b0110:
		return struct {
			*instrumented
			b
			t
		}{l, B, T}
	case 0b0111:
		return struct {
			*instrumented
			c
			b
			t
		}{l, C, B, T}
	case 0b1000:
		return struct {
			*instrumented
			p
		}{l, P}
	case 0b1001:
		return struct {
			*instrumented
			c
			p
		}{l, C, P}
	case 0b1010:
		return struct {
			*instrumented
			b
			p
		}{l, B, P}
	case 0b1011:
		return struct {
			*instrumented
			c
			b
			p
		}{l, C, B, P}
	case 0b1100:
		return struct {
			*instrumented
			t
			p
		}{l, T, P}
	case 0b1101:
		return struct {
			*instrumented
			c
			t
			p
		}{l, C, T, P}
	case 0b1110:
		return struct {
			*instrumented
			b
			t
			p
		}{l, B, T, P}
	case 0b1111:
		return struct {
			*instrumented
			c
			b
			t
			p
		}{l, C, B, T, P}
	}
	return l
}

// is reports whether v implements I.
func is[I any](v any) bool {
	_, ok := v.(I)
	return ok
}
