// Package fakeclock is a scheduler.Clock whose time moves only when a test
// says so. Advance fires due timers in time order; BlockUntilArmed lets a
// test wait until the code under test has armed its timers, so no test
// ever sleeps to "give it time".
package fakeclock

import (
	"context"
	"sync"
	"time"

	"github.com/bext-dev/bext-scheduler/scheduler"
)

// Clock is a fake scheduler.Clock, safe for concurrent use.
type Clock struct {
	mu      sync.Mutex
	now     time.Time
	armed   []*Timer      // active timers, in no particular order
	running int           // AfterFunc functions started and not returned
	changed chan struct{} // closed when armed or running changes; nil when no one waits
}

var _ scheduler.Clock = (*Clock)(nil)

// New returns a clock that reads start until advanced.
func New(start time.Time) *Clock { return &Clock{now: start} }

// Now returns the clock's current time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// NewTimer returns a timer that fires when the clock reaches Now()+d
// (at once when d <= 0).
func (c *Clock) NewTimer(d time.Duration) scheduler.Timer {
	t := &Timer{c: c, ch: make(chan time.Time, 1), index: -1}
	t.Reset(d)
	return t
}

// AfterFunc returns a timer that calls f on a goroutine of its own when the
// clock reaches Now()+d (at once when d <= 0), as time.AfterFunc does.
func (c *Clock) AfterFunc(d time.Duration, f func()) scheduler.Timer {
	t := &Timer{c: c, fn: f, index: -1}
	t.Reset(d)
	return t
}

// Advance moves the clock forward by d, firing every timer that falls due
// on the way, earliest first, with the clock set to each one's deadline as
// it fires. A timer's channel holds one value, as with time.Timer.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	target := c.now.Add(d)
	for {
		var first *Timer
		for _, t := range c.armed {
			if !t.when.After(target) && (first == nil || t.when.Before(first.when)) {
				first = t
			}
		}
		if first == nil {
			break
		}
		if first.when.After(c.now) {
			c.now = first.when
		}
		c.disarm(first)
		first.fireLocked()
	}
	c.now = target
}

// Armed returns how many timers are waiting to fire.
func (c *Clock) Armed() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.armed)
}

// BlockUntilArmed waits until at least n timers are waiting to fire, or ctx
// ends (then it returns ctx's error).
func (c *Clock) BlockUntilArmed(ctx context.Context, n int) error {
	return c.block(ctx, func() bool { return len(c.armed) >= n })
}

// BlockUntilSettled waits until at least n timers are waiting to fire and
// every AfterFunc function the clock started has returned, or ctx ends.
// Armed timers alone do not say that the work a timer fired is over when
// that work re-arms its timer before it does the rest (a run's watch
// re-arms, then renews): a test that moves the clock on meanwhile races
// the work it fired.
func (c *Clock) BlockUntilSettled(ctx context.Context, n int) error {
	return c.block(ctx, func() bool { return len(c.armed) >= n && c.running == 0 })
}

// block waits until ok, called with c.mu held, is true.
func (c *Clock) block(ctx context.Context, ok func() bool) error {
	for {
		c.mu.Lock()
		if ok() {
			c.mu.Unlock()
			return nil
		}
		if c.changed == nil {
			c.changed = make(chan struct{})
		}
		ch := c.changed
		c.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// arm and disarm keep c.armed; the caller holds c.mu.
func (c *Clock) arm(t *Timer) {
	t.index = len(c.armed)
	c.armed = append(c.armed, t)
	c.notify()
}

func (c *Clock) disarm(t *Timer) {
	last := len(c.armed) - 1
	c.armed[t.index] = c.armed[last]
	c.armed[t.index].index = t.index
	c.armed[last] = nil
	c.armed = c.armed[:last]
	t.index = -1
	c.notify()
}

func (c *Clock) notify() {
	if c.changed != nil {
		close(c.changed)
		c.changed = nil
	}
}

// Timer is a fake timer; it implements scheduler.Timer.
type Timer struct {
	c     *Clock
	ch    chan time.Time // nil for an AfterFunc timer
	fn    func()         // set for an AfterFunc timer
	when  time.Time
	index int // in c.armed; -1 when not armed
}

// fireLocked fires a timer that is not armed: it sends the time on its
// channel (which holds one value, as time.Timer's) or starts its function.
func (t *Timer) fireLocked() {
	if t.fn != nil {
		c := t.c
		c.running++
		go func() {
			t.fn()
			c.mu.Lock()
			c.running--
			c.notify()
			c.mu.Unlock()
		}()
		return
	}
	select {
	case t.ch <- t.c.now:
	default:
	}
}

// C is the channel the timer fires on; nil for an AfterFunc timer.
func (t *Timer) C() <-chan time.Time { return t.ch }

// Stop disarms the timer and drops a value it fired but no one received
// (Go 1.23 semantics). It reports whether the timer was armed.
func (t *Timer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	return t.stopLocked()
}

func (t *Timer) stopLocked() bool {
	if t.ch != nil {
		select {
		case <-t.ch:
		default:
		}
	}
	if t.index < 0 {
		return false
	}
	t.c.disarm(t)
	return true
}

// Reset re-arms the timer to fire d from the clock's current time. It
// reports whether the timer was armed before.
func (t *Timer) Reset(d time.Duration) bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := t.stopLocked()
	t.when = t.c.now.Add(d)
	if d <= 0 {
		t.fireLocked()
		return was
	}
	t.c.arm(t)
	return was
}
