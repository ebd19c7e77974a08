package scheduler

import "time"

// Clock is the only source of time the scheduler reads. Production uses
// RealClock; tests inject scheduler/fakeclock so they advance an hour of
// ticks in milliseconds instead of sleeping.
type Clock interface {
	Now() time.Time
	// NewTimer returns a started timer that fires once after d.
	NewTimer(d time.Duration) Timer
}

// Timer is the part of *time.Timer the scheduler uses. Stop and Reset have
// Go 1.23 semantics: after they return, C yields no value from before.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
	Reset(d time.Duration) bool
}

// RealClock returns the clock of the machine (time.Now and time.NewTimer).
func RealClock() Clock { return realClock{} }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

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
