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
// good, given its stored mark (ok false when missing), the caller's clock
// and the clock-skew tolerance: the mark, or, when it is missing, now
// minus maxSkew (what try-lock-tick counts a missing mark as); never past
// now. A tick at or before it is answered done by every try-lock-tick
// from now on; a later one may still be granted, on time or late within
// its catch-up window.
func DecidedUntil(mark time.Time, ok bool, now time.Time, maxSkew time.Duration) time.Time {
	if !ok {
		mark = now.Add(-maxSkew)
	}
	if mark.After(now) {
		return now
	}
	return mark
}
