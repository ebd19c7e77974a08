package scheduler

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	"github.com/bext-dev/bext-scheduler/internal/mutation"
	"github.com/bext-dev/bext-scheduler/locking"
)

// Resending a try-lock-tick whose answer was not definite (step 4).
//
// A try-lock-tick whose reply is late or lost (op_timeout passed, the
// connection broke, Postgres's resend_held, a batch left short) may have
// been granted all the same: the backend took the lock, raised the mark
// and published it, so no other node runs T, and this node's own catch-up
// would be told done: skipped, T would run nowhere. So the scheduler draws
// each request's token itself (lockRequest) and, on such an answer, sends
// the same request again, same token and same T: a backend that granted
// it answers granted with the fence it drew (the lock contract's rule of
// the resent call), one that never saw it decides it as new. It resends
// until the backend decides, or until a grant could no longer be found: the
// TTL counted from the first attempt's send has run out twice over (a
// grant extended by a resend that reached the backend is found by the
// next), T
// left its catch-up window more than resendSettle ago, or the shutdown
// grace has ended. Only then is the tick skipped as
// backend_error, its grant unknown.
//
// A resend that reaches the backend after its grant's lease ended (a lost
// reply can cost the caller its whole op_timeout, the TTL or more) is
// answered from the grant's record, which every backend keeps as long as
// the resends go on (locking.GrantKeep): granted again with its fence when
// nothing came between, a late grant then; else expired (grantExpired).
//
// A grant that comes late (after a resend, or after its request's context
// ended) runs only while T is within its catch-up window and its lease
// lives, renewed first so the run has a whole lease. Its lease counts from
// the send of the attempt it answers: the backend granted or extended the
// lock when that attempt reached it. Otherwise the lock
// is given back and the run is recorded as not run, with the reason
// (ResultNotRun): T was consumed, and history says where it went.

const (
	// resendFirst and resendMax bound the wait between two sends of one
	// request: short, as a grant's lease runs meanwhile, and doubling so
	// that a backend that is down gets two requests a second per tick.
	resendFirst = 10 * time.Millisecond
	resendMax   = 500 * time.Millisecond
	// resendSettle is how long after T left its catch-up window a tick
	// still resends (resending.until): a long lease would otherwise keep
	// a tick resending twice a second for the whole lease through an
	// outage, for a grant that could not run anyway.
	resendSettle = time.Second
)

// ErrGrantUnknown is the error of a tick skipped while its try-lock-tick
// was still undecided: the backend may have granted it (its mark raised,
// so no node runs it). Such a tick is in history as not run with this
// error (RunRecord.Err): a grant nobody heard of is still accounted for.
var ErrGrantUnknown = errors.New("scheduler: grant unknown: try-lock-tick undecided")

// errLateGrant is the error recorded for a grant that came too late to run.
var errLateGrant = errors.New("scheduler: granted too late to run")

// resending is a tick's try-lock-tick being resent: the request it sends
// again as it is, and the bounds of its resends.
type resending struct {
	req locking.TickRequest
	// first is when the first attempt was sent (lease clock): the
	// backend keeps a grant's record GrantKeep from its grant, which
	// came after it.
	first time.Time
	// until is when resending ends, on the lease clock: a grant of the
	// first attempt, extended by no resend, has ended on the backend by
	// then.
	until time.Time
	// ctx bounds the resends (the burst's context bounds the first
	// attempt only): until the lease would end, on the real clock.
	ctx    context.Context
	cancel context.CancelFunc
	sends  int
	wait   time.Duration
}

// indefinite reports whether err leaves a try-lock-tick undecided: the
// backend may or may not have decided it (no reply, a broken connection,
// a resend whose first attempt still holds the lock). An invalid request
// or a tick ahead of the backend's clock is decided.
func indefinite(err error) bool {
	if err == nil || errors.Is(err, locking.ErrInvalid) || errors.Is(err, locking.ErrTickAhead) {
		return false
	}
	var ne net.Error
	return errors.Is(err, locking.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) ||
		errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// resend sends t's request req again, after a wait, when its answer
// (ans, err; the attempt sent at t.sent on the lease clock) left it
// undecided and a grant could still be used; t comes back to the pool to
// ask (stepAsk). It reports false when t goes on with this answer: a
// decided one, or one it gives up on, whose err then says so.
func (s *Scheduler) resend(t *tick, req locking.TickRequest, ans locking.TickAnswer, err *error) bool {
	sent := t.sent
	if mutation.On(mutation.NoResend) { // mutation (simmut tag only): an undecided tick is given up at once
		return false
	}
	if ans.Handle == nil && req.Token != "" && errors.Is(*err, context.Canceled) {
		// The scheduler itself ended the call (the shutdown grace ran
		// out): the backend may have applied it all the same, and no
		// resend will tell. Given up as undecided, so that history
		// accounts for the tick (lockAnswer).
		*err = fmt.Errorf("%w: the call was cancelled before its answer came: %w", ErrGrantUnknown, *err)
		return false
	}
	if !indefinite(*err) || ans.Handle != nil {
		return false
	}
	r := t.resend
	if r == nil {
		if req.Token == "" {
			return false // the backend drew the token: a resend is a new request
		}
		r = &resending{req: req, first: sent, wait: resendFirst}
		// Every send after the first says so: a resend answered contended
		// or done is then recorded by the backend, which answers a late
		// copy of an earlier attempt the same (locking.TickRequest.Resend)
		// instead of granting it to a node that moved on.
		r.req.Resend = true
		// A grant of the first attempt is found by a resend for its TTL
		// (Postgres: or its MaxLease, if longer: its record outlives a
		// session that died), the margin included, and each resend that
		// reached the backend extended it. Resends go on for twice that:
		// a link whose replies come late may keep them all from reaching
		// the backend for a while (Postgres keeps a grant's record that
		// long, for them: locking/pg's keep). Past T's catch-up window
		// a found grant cannot run; a resend then only learns of it, to
		// give its lock back and record it, for resendSettle.
		inWindow := t.at.Add(max(t.window(s), s.opts.MaxClockSkew)).Sub(s.clock.Now())
		keep := locking.GrantKeep(t.def.ttl, s.maxLease)
		r.until = sent.Add(min(keep, max(inWindow, 0)+resendSettle))
		// One resend goes at least, while the backend keeps the grant's
		// record (locking.GrantKeep): the first attempt's lost reply may
		// have cost more than T's window (its whole op_timeout), and a
		// grant learnt of is recorded (not run, with its fence), where
		// one given up on is T consumed with no word.
		end := r.until
		if !s.leaseNow().Before(end) {
			end = sent.Add(keep)
		}
		r.ctx, r.cancel = context.WithTimeout(s.jobCtx, end.Sub(s.leaseNow()))
		t.resend = r
		// The outage, if it is one, begins now: logged, and probed.
		s.backendDown(t.st, t.at, *err, s.backend.skipped.Load())
	}
	// T's catch-up window does not end the resends: a grant that comes
	// past it is given back and recorded as not run (lateGrant), where
	// giving up would leave it unknown, and T consumed with no word.
	if (r.sends > 0 && !s.leaseNow().Before(r.until)) || r.ctx.Err() != nil {
		*err = fmt.Errorf("%w after %d resends: %w", ErrGrantUnknown, r.sends, *err)
		return false
	}
	r.sends++
	d := r.wait
	r.wait = min(2*r.wait, resendMax)
	if s.log.Enabled(context.Background(), slog.LevelDebug) {
		s.log.Debug("try-lock-tick undecided: resending it", slog.String("schedule", t.def.ID),
			slog.String("tick", t.at.Format(time.RFC3339)), slog.Int("resends", r.sends), slog.Any("error", *err))
	}
	t.step = stepAsk
	s.opts.NetClock.AfterFunc(d, func() { s.work.Submit(t) })
	return true
}

// lateGrant checks granted tick t's lease, whose grant came late (after
// a resend, or after its request's context ended): it reports whether t
// may still run. If not, the lock is given back and the run recorded as
// not run, and t ended.
func (s *Scheduler) lateGrant(t *tick) bool {
	l := &t.lease
	var why SkipReason
	var cause error
	late := s.clock.Now().Sub(t.at)
	switch {
	case late > max(t.window(s), s.opts.MaxClockSkew):
		why, cause = SkipMissed, fmt.Errorf("%w: granted %v after its tick, past its catch-up window of %v",
			errLateGrant, late, t.window(s))
	case s.expired(l):
		why, cause = SkipBackendError, fmt.Errorf("%w: its lease ran out before the grant came", errLateGrant)
	default:
		// The lease counts from the first attempt's send: renewed now,
		// the run starts with a whole one.
		err := s.renewLease(l)
		if err == nil {
			return true
		}
		why, cause = SkipBackendError, fmt.Errorf("%w: renewing its lease: %w", errLateGrant, err)
	}
	h := l.h
	s.release(t.def.ID, h, "granted too late to run")
	s.log.Warn("tick granted too late to run: not run, its lock given back", slog.String("schedule", t.def.ID),
		slog.String("tick", t.at.Format(time.RFC3339)), slog.Int64("fence", h.Fence()),
		slog.String("outcome", string(why)), slog.Any("error", cause))
	s.reportSkip(t, why, h.Fence())
	if s.runObs != nil {
		s.runObs.RunRecorded(RunRecord{Schedule: t.def.ID, Tick: t.at, Node: s.opts.NodeID, Result: ResultNotRun,
			Start: s.clock.Now(), Fence: h.Fence(), Err: cause, RunID: t.runID()})
	}
	s.end(t, runOutcome{skip: why})
	return false
}

// grantExpired ends tick t whose resend was answered expired: the
// backend granted the first attempt (fence), but its lease ended before
// the resend reached it and the grant could not be taken again (the key
// was acquired or paused, or a later tick decided, since). T is consumed
// and runs nowhere: skipped as backend_error, as a grant that came too late
// to run is (lateGrant), and recorded as not run with the grant's fence.
func (s *Scheduler) grantExpired(t *tick, fence int64) {
	why := SkipBackendError
	cause := fmt.Errorf("%w: its lease ran out before a resend of its try-lock-tick reached the backend (answered expired)", errLateGrant)
	s.log.Warn("tick granted but its lease ended before the answer came: not run", slog.String("schedule", t.def.ID),
		slog.String("tick", t.at.Format(time.RFC3339)), slog.Int64("fence", fence),
		slog.String("outcome", string(why)), slog.Any("error", cause))
	s.reportSkip(t, why, fence)
	if s.runObs != nil {
		s.runObs.RunRecorded(RunRecord{Schedule: t.def.ID, Tick: t.at, Node: s.opts.NodeID, Result: ResultNotRun,
			Start: s.clock.Now(), Fence: fence, Err: cause, RunID: t.runID()})
	}
	s.end(t, runOutcome{skip: why})
}

// pastKeep reports whether a resend of t answered done, contended, missed
// or paused may have been decided by a backend that no longer kept the
// record of a grant of an earlier attempt: it came GrantKeep or more after
// the first send (a resend delayed on its way). Such an answer proves
// nothing: the grant may be what raised the mark, or hold the lock; and a
// backend whose mark was set back below T (lost state) answers missed or
// paused for a T it granted (sim seed 366805). Only granted (a new grant,
// which runs or is given back as late) and expired (from the record) say
// what became of the earlier attempt.
func (s *Scheduler) pastKeep(t *tick, v locking.TickVerdict) bool {
	r := t.resend
	if r == nil {
		return false
	}
	switch v {
	case locking.TickDone, locking.TickContended, locking.TickMissed, locking.TickPaused:
	default:
		return false
	}
	return !s.leaseNow().Before(r.first.Add(locking.GrantKeep(t.def.ttl, s.maxLease)))
}
