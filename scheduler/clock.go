package scheduler

import "time"

// Clock is the only source of time the scheduler reads. Production uses
// RealClock; tests inject scheduler/fakeclock so they advance an hour of
// ticks in milliseconds instead of sleeping.
type Clock interface {
	Now() time.Time
	// NewTimer returns a started timer that fires once after d.
	NewTimer(d time.Duration) Timer
	// AfterFunc calls f on a goroutine of its own once d has passed, as
	// time.AfterFunc does: the timer's C is nil, Stop reports false once f
	// has been started, and Reset arms it to call f again.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is the part of *time.Timer the scheduler uses. Stop and Reset have
// Go 1.23 semantics: after they return, C yields no value from before.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
	Reset(d time.Duration) bool
}

// RealClock returns the clock of the machine (time.Now, time.NewTimer and
// time.AfterFunc).
func RealClock() Clock { return realClock{} }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

func (realClock) AfterFunc(d time.Duration, f func()) Timer { return realTimer{time.AfterFunc(d, f)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time        { return r.t.C }
func (r realTimer) Stop() bool                 { return r.t.Stop() }
func (r realTimer) Reset(d time.Duration) bool { return r.t.Reset(d) }

// OffsetClock returns a clock that reads offset ahead of c (behind when
// offset is negative). Timers are c's: durations do not depend on the
// offset. Tests use it to put the nodes of a one-process cluster on clocks
// that disagree by up to the configured clock skew.
func OffsetClock(c Clock, offset time.Duration) Clock { return offsetClock{c, offset} }

type offsetClock struct {
	Clock
	offset time.Duration
}

func (o offsetClock) Now() time.Time { return o.Clock.Now().Add(o.offset) }

// bootClockOf returns the lease clock (lease.go) for c: CLOCK_BOOTTIME,
// which counts time the host spent suspended, when c is the real clock
// (offset or not: a lease is a duration); nil for any other clock, whose
// Now then serves.
func bootClockOf(c Clock) func() time.Time {
	switch c := c.(type) {
	case realClock:
		return leaseClock.now
	case offsetClock:
		if _, ok := c.Clock.(realClock); ok {
			return leaseClock.now
		}
	}
	return nil
}
