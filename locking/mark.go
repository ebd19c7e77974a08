package locking

import (
	"context"
	"time"
)

// MarkReader reads a key's tick mark without deciding anything. A
// backfill runs only ticks the mark has passed (DecidedUntil): those no
// try-lock-tick can grant any more, so a backfilled tick and its regular
// tick never both run from one decision. Every backend of this repository
// implements it.
type MarkReader interface {
	// Mark returns key's mark as stored; ok is false when the key
	// has none.
	Mark(ctx context.Context, key string) (mark time.Time, ok bool, err error)
}

// DecidedUntil is the latest tick time of a key that is decided for
// good, given its stored mark (ok false when missing) and the caller's
// clock; never past now. A tick at or before it is answered done by every
// try-lock-tick from now on (unless the backend loses or rewinds the
// mark); a later one may still be granted, on time or late within its
// catch-up window. A missing mark decides nothing (the zero time):
// try-lock-tick counts it as the backend's time minus max_clock_skew, and
// the caller's clock, which may be ahead of the backend's (within the
// skew or beyond it), cannot tell which ticks that passed (sim seed
// 432663: a node 2.4s ahead backfilled a tick the backend then granted to
// its regular run).
func DecidedUntil(mark time.Time, ok bool, now time.Time) time.Time {
	if !ok {
		return time.Time{}
	}
	if mark.After(now) {
		return now
	}
	return mark
}
