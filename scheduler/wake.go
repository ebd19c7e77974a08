package scheduler

import (
	"time"

	"github.com/bext-dev/bext-scheduler/internal/wallwake"
)

// newWallWake returns the kernel wake (internal/wallwake: a Go timer
// counts monotonic time and would fire late after a suspend or a step of
// the wall clock) for c, or nil, nil when c is not the real clock (an
// injected clock has timers of its own to be woken by) or the platform
// has none. The caller must Close it.
func newWallWake(c Clock) (*wallwake.Wake, error) {
	offset, ok := realOffset(c)
	if !ok {
		return nil, nil
	}
	return wallwake.New(offset)
}

// realOffset says whether c reads the real wall clock, and how far ahead
// of it (OffsetClock).
func realOffset(c Clock) (time.Duration, bool) {
	switch c := c.(type) {
	case realClock:
		return 0, true
	case offsetClock:
		if _, ok := c.Clock.(realClock); ok {
			return c.offset, true
		}
	}
	return 0, false
}
