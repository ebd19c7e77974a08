package scheduler

import (
	"context"
	"log/slog"
	"time"

	"github.com/bext-dev/bext-scheduler/locking"
)

// The clock-skew claim (DESIGN.md, step 7).
//
// Nodes fire tick T when their own clocks say T, and those clocks disagree
// by up to MaxClockSkew. If the winner released its lock the moment a short
// job ended, a node whose clock runs behind would fire T a moment later,
// find the key free, and run T a second time. So a tick's lock is kept
// until T + 2*MaxClockSkew by the holder's clock: any node fires T within
// MaxClockSkew of the true T, and the holder's clock is itself off by at
// most MaxClockSkew. The lock's TTL is at least 2*MaxClockSkew +
// SafetyMargin from an acquisition made at or after T, so the lease always
// outlasts the claim.
//
// The claim must never block the schedule's own next tick: when that tick
// fires here while the claim still lingers, the loop hands the claim's
// handle to the tick (popDueLocked), which renews it instead of calling
// TryLock (that would answer "contended", against ourselves). A fast
// schedule therefore stays with the node that holds its lock, ticks under
// one handle share its fencing token, and the schedule still runs once per
// tick. The end of a claim is an event in the loop's heap, not a goroutine
// waiting per claim.

// recordClaim asks a backend whose locks die with their holder (a
// locking.Claimer: Postgres) to keep f's tick claimed until T +
// 2*MaxClockSkew whatever becomes of this node. Backends whose locks
// outlive a dead holder by their TTL need nothing. It returns false, with
// h released, when the claim could not be recorded: the lock is then in
// doubt and the tick is not run.
func (s *Scheduler) recordClaim(f fired, h *locking.Handle) bool {
	if s.claimer == nil {
		return true
	}
	d := f.tick.Add(2 * s.opts.MaxClockSkew).Sub(s.clock.Now())
	if d <= 0 {
		return true
	}
	ctx, cancel := context.WithTimeout(s.jobCtx, h.TTL()/3)
	err := s.claimer.Claim(ctx, h, d)
	cancel()
	if err == nil {
		return true
	}
	s.log.Warn("could not record the tick's claim: tick not run", slog.String("schedule", f.def.ID),
		slog.String("tick", f.tick.Format(time.RFC3339)), slog.Int64("fence", h.Fence()), slog.Any("error", err))
	s.release(f.def.ID, h, "claim not recorded")
	return false
}

// claim is a lock kept after its tick, until ev.at.
type claim struct {
	h    *locking.Handle
	tick time.Time
	ev   event // eventRelease in the loop's heap; ev.st is the schedule
}

// keepClaimLocked files c (its handle and tick set) as st's lingering
// claim, until its tick + 2*MaxClockSkew. It returns false when the claim
// is not kept (its time already passed): the caller releases c.h now. A tick that ends while the
// scheduler stops keeps its claim too: shutdown releases it only when its
// time is up (a release at once would let a node whose clock runs behind
// run the tick again).
func (s *Scheduler) keepClaimLocked(st *schedState, c *claim) bool {
	until := c.tick.Add(2 * s.opts.MaxClockSkew)
	if !s.clock.Now().Before(until) || st.claim != nil {
		// st.claim is never set here in practice: a schedule's ticks hold
		// one key, so only one of them can hold its lock at a time.
		return false
	}
	c.ev = event{at: until.UnixNano(), kind: eventRelease, index: -1, st: st, claim: c}
	st.claim = c
	s.heap.push(&c.ev)
	if s.heap.head() == &c.ev {
		s.pokeLocked()
	}
	return true
}

// endClaim releases a claim whose time is up (started by the loop).
func (s *Scheduler) endClaim(c *claim) {
	defer s.wg.Done()
	s.release(c.ev.st.id, c.h, "claim ended")
	s.mu.Lock()
	s.inflight--
	s.forgetIfDoneLocked(c.ev.st)
	s.notifyLocked()
	s.mu.Unlock()
}
