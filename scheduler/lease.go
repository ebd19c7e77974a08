package scheduler

import (
	"context"
	"fmt"
	"time"

	"github.com/bext-dev/bext-scheduler/locking"
)

// A lease is how long this node may trust that it holds a tick's lock
// (DESIGN.md step 6). It runs from the moment the node *sent* its last
// successful acquisition or renewal, for the backend's lease (the TTL on
// Redis and memory; on Postgres, which drops a silent peer's session and
// its locks after the server's dead-peer time, the shorter of the two),
// minus the safety margin. The job and each retry start only before the
// deadline, and the run's watch keeps a timer at the deadline that cancels
// the job when it passes, whether or not a renewal has answered: a
// renewal hung on a stalled link does not keep the job running past its
// lease (the backend may hand the lock to another node from then on), and
// a node frozen past its lease (SIGSTOP, GC, a VM pause) cancels its job
// the moment it runs again, without first waiting for the backend.
//
// The deadline is read on leaseClock, which counts time the host spent
// suspended (CLOCK_BOOTTIME), so a laptop lid or a VM suspend cannot make
// an expired lease look alive.
type lease struct {
	h     *locking.Handle
	len   time.Duration // usable lease: backend lease minus the safety margin
	every time.Duration // renewal period: a third of len
	until time.Time     // deadline on leaseClock
	// slot is the run's slot of its concurrency group (group.go), renewed
	// with h: the run holds both or neither. nil: no group.
	slot *locking.Handle
}

// newLease starts the lease of h, acquired by a request sent at sent.
func (s *Scheduler) newLease(h *locking.Handle, sent time.Time) *lease {
	n := s.leaseLen(h.TTL())
	return &lease{h: h, len: n, every: n / 3, until: sent.Add(n)}
}

// newTickLease starts the lease of granted tick t, whose try-lock-tick
// answered was sent at t.sent: the tick owns it (t.lease).
func (s *Scheduler) newTickLease(t *tick, h *locking.Handle) {
	n := s.leaseLen(h.TTL())
	t.lease = lease{h: h, len: n, every: n / 3, until: t.sent.Add(n)}
}

// leaseLen is the usable lease of a lock taken with ttl.
func (s *Scheduler) leaseLen(ttl time.Duration) time.Duration {
	full := ttl
	if s.maxLease > 0 && s.maxLease < full {
		full = s.maxLease
	}
	if n := full - s.opts.SafetyMargin; n >= full/4 {
		return n
	}
	// A margin as large as the lease itself (a short Postgres dead-peer
	// time): keep a quarter of the lease rather than none.
	return full / 4
}

// renewLease renews l, bounded by what is left of it: a renewal that has
// not answered by the deadline has failed. On success the deadline moves
// to the renewal's send time plus the lease. The run's watch renews
// through renewCtx and moves the deadline itself, so that its lease timer
// can fire while the renewal is in flight.
func (s *Scheduler) renewLease(l *lease) error {
	sent := s.leaseNow()
	left := l.until.Sub(sent)
	if left <= 0 {
		return fmt.Errorf("%w: lease ran out %v ago", errLeaseExpired, -left)
	}
	ctx, cancel := s.renewCtx(l, left)
	defer cancel()
	if err := s.renewHeld(ctx, l); err != nil {
		return err
	}
	l.until = sent.Add(l.len)
	return nil
}

// renewHeld renews what l holds: its lock, then its group slot. Either
// failing is the run's lock lost: a run without its slot would let the
// group exceed max_running.
func (s *Scheduler) renewHeld(ctx context.Context, l *lease) error {
	if err := s.opts.Locker.Renew(ctx, l.h); err != nil {
		return err
	}
	if l.slot != nil {
		if err := s.opts.Locker.Renew(ctx, l.slot); err != nil {
			return fmt.Errorf("the group slot: %w", err)
		}
	}
	return nil
}

// renewCtx is the context of a renewal of l sent with left of it to go:
// its answer is worth nothing past the lease deadline, nor past the next
// renewal.
func (s *Scheduler) renewCtx(l *lease, left time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(s.jobCtx, min(left, l.every))
}

// untilRenewal is how long until l's next renewal is due: a renewal
// period after its last renewal (or acquisition); ≤ 0 when due.
func (s *Scheduler) untilRenewal(l *lease) time.Duration {
	return l.until.Sub(s.leaseNow()) - (l.len - l.every)
}

// expired reports whether l's deadline has passed.
func (s *Scheduler) expired(l *lease) bool { return !s.leaseNow().Before(l.until) }

// clockAndLease reads the scheduler's clock and the lease clock at the
// same instant. On the real clock one reading of it serves both (a
// reading costs about 70 ns, and a tick read both at once twice).
func (s *Scheduler) clockAndLease() (now, lease time.Time) {
	if _, ok := s.clock.(realClock); ok {
		n := time.Now()
		return n, leaseClock.at(n)
	}
	return s.clock.Now(), s.leaseNow()
}

// leaseNow reads the lease clock: CLOCK_BOOTTIME on the real clock, the
// injected clock otherwise.
func (s *Scheduler) leaseNow() time.Time {
	if s.bootClock != nil {
		return s.bootClock()
	}
	return s.clock.Now()
}
