package locking

import (
	"context"
	"strconv"
	"strings"
	"time"
)

// TickWatcher is implemented by backends that tell every node of a cluster
// when a try-lock-tick raised a tick mark (granted, paused or missed): the
// scheduler's handoff (a node that is not a tick's preferred node waits a
// moment before it asks) lets a waiting node drop a tick it hears was
// decided, without asking the backend. What it hears is a hint, never a
// decision: a mark heard is a mark the backend raised, but a mark not heard
// proves nothing (delivery is at most once: a dropped connection loses what
// was sent meanwhile), so a node that hears nothing asks try-lock-tick as
// before, and the mark still decides.
type TickWatcher interface {
	// WatchTicks reports marks raised by any node of the cluster, this one
	// included, until ctx ends; then it returns nil. It reconnects by
	// itself after a dropped connection. It returns an error only when it
	// cannot watch at all (a closed Locker). The callbacks run on the
	// watch's own goroutine, or on the goroutine of the try-lock-tick that
	// raised the mark: they must not block.
	WatchTicks(ctx context.Context, w TickWatch) error
}

// TickWatch is what WatchTicks reports to.
type TickWatch struct {
	// Mark is called for each raised mark.
	Mark func(TickMark)
	// Marks, when set, is called instead of Mark by a backend that hears
	// several marks at once (Redis: a batch's in one message), with them
	// in order: the scheduler then takes its locks once for all of them,
	// not once per mark of a burst while its own ticks wait to start.
	// A backend that does not know it calls Mark. The slice is the
	// backend's, reused once Marks returns.
	Marks func([]TickMark)
	// Listening, when set, is called each time the watch starts to
	// receive (at first and after each reconnection): marks raised before
	// it were not heard.
	Listening func()
}

// TickMark is a tick mark a try-lock-tick raised: Key's ticks up to Tick
// are decided. Tick is in whole microseconds, as backends store marks.
type TickMark struct {
	Key  string
	Tick time.Time
}

// ParseTickMark reads a raised mark as the Redis and Postgres backends
// send it: "T key", T in microseconds since the epoch. ok is false for
// anything else (a message of another version or sender), which a watch
// skips: hearing nothing proves nothing.
func ParseTickMark(s string) (m TickMark, ok bool) {
	t, key, ok := strings.Cut(s, " ")
	if !ok || key == "" {
		return TickMark{}, false
	}
	us, err := strconv.ParseInt(t, 10, 64)
	if err != nil {
		return TickMark{}, false
	}
	return TickMark{Key: key, Tick: time.UnixMicro(us)}, true
}

// Raised reports whether a try-lock-tick verdict raised the mark to the
// request's tick: the verdicts a TickWatcher publishes.
func (v TickVerdict) Raised() bool {
	return v == TickGranted || v == TickPaused || v == TickMissed
}
