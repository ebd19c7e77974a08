package lockertest

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/bext-dev/bext-scheduler/locking"
)

// The cases of try-lock-tick and the pause flag (locking/tick.go; DESIGN.md,
// "The lock contract" and its "Rules of the mark"). Every backend's Locker
// implements locking.TickLocker and locking.Pauser; the cases fail, naming
// the missing interface, when it does not.
//
// Ticks are placed relative to the backend's clock (Backend.Now) and
// truncated to the millisecond, which every backend stores exactly. The
// offsets stay within tickSkew of that clock, so a backend on a real clock
// decides them the same way however slow the machine is.

// The request parameters most cases use.
const (
	tickSkew   = 5 * time.Second // MaxSkew
	tickWindow = time.Minute     // Window
	// clockSlack bounds how far TickAnswer.Now may lie outside the
	// Backend.Now readings taken around the call.
	clockSlack = time.Second
)

var tickCases = []testCase{
	{"Tick/GrantedThenDoneOrContended", caseTickGranted},
	{"Tick/MarkMonotone", caseTickMonotone},
	{"Tick/AheadRefused", caseTickAhead},
	{"Tick/MissedConsumesTick", caseTickMissed},
	{"Tick/WindowZero", caseTickWindowZero},
	{"Tick/MissingMark", caseTickMissingMark},
	{"Tick/FloorRaisesForgottenMark", caseTickFloor},
	{"Tick/InitMarks", caseTickInitMarks},
	{"Tick/BeforeIsTheMarkThePrecedingStepLeft", caseTickBefore},
	{"Mark/Read", caseMarkRead},
	{"Tick/PerTick", caseTickPerTick},
	{"Tick/ResentCall", caseTickResent},
	{"Tick/PerTickResentAfterLaterGrant", caseTickPerTickResent},
	{"Tick/ResentAfterPausedTick", func(s *suite) { caseTickResentAfterMark(s, false) }},
	{"Tick/ResentAfterMissedTick", func(s *suite) { caseTickResentAfterMark(s, true) }},
	{"Tick/ResendExtendsLease", func(s *suite) { caseTickResendExtendsLease(s, false) }},
	{"Tick/PerTickResendExtendsEntry", func(s *suite) { caseTickResendExtendsLease(s, true) }},
	{"Tick/TokenReusedForAnotherTick", caseTickTokenOtherTick},
	{"Tick/ResendAfterRelease", caseTickResendAfterRelease},
	{"Tick/ResendAfterLaterLock", caseTickResendAfterLaterLock},
	{"Tick/ResendAfterLeaseEnded", func(s *suite) { caseTickResendAfterLeaseEnded(s, false) }},
	{"Tick/PerTickResendAfterLeaseEnded", func(s *suite) { caseTickResendAfterLeaseEnded(s, true) }},
	{"Tick/ResendAfterLeaseEndedAndLaterGrant", func(s *suite) { caseTickExpiredAfterLaterAcquisition(s, false) }},
	{"Tick/ResendAfterLeaseEndedAndLaterLock", func(s *suite) { caseTickExpiredAfterLaterAcquisition(s, true) }},
	{"Tick/ResendAfterLeaseEndedPaused", caseTickExpiredPaused},
	{"Tick/ResendContendedThenLateCopy", func(s *suite) { caseTickResendDecided(s, false) }},
	{"Tick/ResendDoneThenLateCopy", func(s *suite) { caseTickResendDecided(s, true) }},
	{"Tick/FirstAttemptContendedWritesNothing", caseTickFirstContendedNoRecord},
	{"Tick/StaleHandle", caseTickStaleHandle},
	{"Tick/Race", caseTickRace},
	{"Tick/AnswerNow", caseTickAnswerNow},
	{"Tick/Cancelled", caseTickCancelled},
	{"Tick/Closed", caseTickClosed},
	{"Fence/AtLeastClockMicros", caseFenceClock},
	{"Pause/ConsumesDueTick", caseTickPaused},
	{"Pause/Until", caseTickPauseUntil},
	{"Pause/RoundTrip", casePauseRoundTrip},
	{"Pause/VerdictKeptForResend", func(s *suite) { caseTickVerdictKept(s, false) }},
	{"Tick/MissedVerdictKeptForResend", func(s *suite) { caseTickVerdictKept(s, true) }},
	{"BadInput/TryLockTick", caseBadTick},
}

// The ticks are claimed at T, T+1s, … in order; each case's key is its own,
// so its mark starts missing.

// A granted tick draws a fence (at least the clock in microseconds) and
// raises the mark: the same T from another node, or an earlier T, is done;
// a later T while the lock is held is contended; after release it is
// granted with a higher fence.
func caseTickGranted(s *suite) {
	a, b := s.locker(), s.locker()
	k := s.key("k")
	t1 := s.onTime()
	before := s.now()
	h1 := s.grant(a, s.tickReq(k, t1), "locker A at T")
	if h1.Key() != k {
		s.t.Errorf("handle Key() = %q, want the request's key %q", short(h1.Key()), short(k))
	}
	if h1.TTL() != longTTL {
		s.t.Errorf("handle TTL() = %v, want the request's %v", h1.TTL(), longTTL)
	}
	if floor := before.UnixMicro(); h1.Fence() < floor {
		s.t.Errorf("fence %d is below the backend's clock in microseconds before the call (%d)", h1.Fence(), floor)
	}
	s.wantTick(b, s.tickReq(k, t1), locking.TickDone, "locker B (another node) at the same T")
	s.wantTick(a, s.tickReq(k, t1), locking.TickDone, "locker A again at the same T")
	s.wantTick(b, s.tickReq(k, t1.Add(-time.Second)), locking.TickDone, "locker B at T-1s")
	s.wantTick(b, s.tickReq(k, t1.Add(time.Second)), locking.TickContended, "locker B at T+1s while A holds the lock")
	s.wantTick(a, s.tickReq(k, t1.Add(time.Second)), locking.TickContended, "locker A at T+1s while it holds the lock itself")
	s.mustRelease(a, h1, "locker A")
	h2 := s.grant(b, s.tickReq(k, t1.Add(time.Second)), "locker B at T+1s after A released (contended must not have raised the mark)")
	if h2.Fence() <= h1.Fence() {
		s.t.Errorf("fence at T+1s = %d, want > %d (T's)", h2.Fence(), h1.Fence())
	}
	s.mustRelease(b, h2, "locker B")
}

// The mark only moves forward, whoever holds the lock and across a fresh
// Locker (a restarted client), and fences keep increasing with it.
func caseTickMonotone(s *suite) {
	a, b := s.locker(), s.locker()
	k := s.key("k")
	t1 := s.onTime()
	var last int64
	grant := func(l locking.Locker, tick time.Time, who string) {
		s.t.Helper()
		h := s.grant(l, s.tickReq(k, tick), who)
		if h.Fence() <= last {
			s.t.Fatalf("%s: fence %d, want > %d (the previous grant's)", who, h.Fence(), last)
		}
		last = h.Fence()
		s.mustRelease(l, h, who)
	}
	grant(a, t1, "locker A at T")
	s.wantTick(b, s.tickReq(k, t1), locking.TickDone, "locker B at T after A released")
	grant(b, t1.Add(time.Second), "locker B at T+1s")
	s.wantTick(a, s.tickReq(k, t1), locking.TickDone, "locker A at T after B claimed T+1s")
	s.wantTick(a, s.tickReq(k, t1.Add(time.Second)), locking.TickDone, "locker A at T+1s")
	c := s.locker() // a client restarted: nothing carried over but the backend
	s.wantTick(c, s.tickReq(k, t1.Add(time.Second)), locking.TickDone, "fresh locker C at T+1s")
	s.wantTick(c, s.tickReq(k, t1), locking.TickDone, "fresh locker C at T")
	grant(c, t1.Add(2*time.Second), "fresh locker C at T+2s")
	s.wantTick(a, s.tickReq(k, t1.Add(2*time.Second)), locking.TickDone, "locker A at T+2s")
}

// A T further than MaxSkew ahead of the backend's clock is an error
// wrapping ErrTickAhead, an *AheadError naming the offset; it changes
// nothing. A T less far ahead is granted.
func caseTickAhead(s *suite) {
	a, b := s.locker(), s.locker()
	k := s.key("k")
	before := s.now()
	future := before.Add(time.Hour).Truncate(time.Millisecond)
	ans, err := s.ticker(a).TryLockTick(s.ctx, s.tickReq(k, future))
	after := s.now()
	if ans.Handle != nil {
		s.t.Fatalf("TryLockTick an hour ahead returned handle %v, want an error", ans.Handle)
	}
	s.wantErrIs(err, locking.ErrTickAhead, "TryLockTick an hour ahead of the backend's clock")
	var ae *locking.AheadError
	if !errors.As(err, &ae) {
		s.t.Fatalf("TryLockTick an hour ahead = %v (%T), want an error that errors.As finds a *locking.AheadError in", err, err)
	}
	// Offset is T minus the backend's clock when it decided, which lies
	// between the readings taken before and after the call.
	if lo, hi := future.Sub(after)-clockSlack, future.Sub(before)+clockSlack; ae.Offset < lo || ae.Offset > hi {
		s.t.Errorf("AheadError.Offset = %v, want T minus the backend's clock, in [%v, %v]", ae.Offset, lo, hi)
	}
	if ae.Key != k || !ae.Tick.Equal(future) || ae.MaxSkew != tickSkew {
		s.t.Errorf("AheadError = {Key %q, Tick %v, MaxSkew %v}, want {%q, %v, %v}", short(ae.Key), ae.Tick, ae.MaxSkew, short(k), future, tickSkew)
	}
	s.t.Logf("refused: %v", err)
	// Nothing changed: neither the mark (an on-time tick is granted) nor
	// the lock (it was free for that).
	t1 := s.onTime()
	h := s.grant(b, s.tickReq(k, t1), "locker B on time after A's refused future tick")
	s.mustRelease(b, h, "locker B")
	// Within MaxSkew ahead is not refused.
	h = s.grant(b, s.tickReq(k, t1.Add(tickSkew/2)), "locker B at MaxSkew/2 ahead")
	s.mustRelease(b, h, "locker B")
}

// A T more than max(MaxSkew, Window) behind the backend's clock is missed
// and consumed: asked again, it is done. Within the window it is granted.
func caseTickMissed(s *suite) {
	a, b := s.locker(), s.locker()
	k := s.key("k")
	now := s.onTime()
	// An old mark, without waiting: a request with a large MaxSkew claims
	// a tick 50s back (a missing mark counts as now minus MaxSkew).
	wide := s.tickReq(k, now.Add(-50*time.Second))
	wide.MaxSkew, wide.Window = 2*time.Minute, 0
	h := s.grant(a, wide, "locker A at T-50s with MaxSkew 2m")
	s.mustRelease(a, h, "locker A")

	// 30s late, beyond MaxSkew 5s and Window 10s: missed.
	late := s.tickReq(k, now.Add(-30*time.Second))
	late.Window = 10 * time.Second
	ans := s.wantTick(b, late, locking.TickMissed, "locker B at T-30s (Window 10s)")
	if !ans.Mark.Equal(late.Tick) {
		s.t.Errorf("mark after a missed tick = %v, want the tick %v (consumed)", ans.Mark, late.Tick)
	}
	s.wantTick(a, late, locking.TickDone, "locker A at the missed tick")
	late.Window = time.Hour // a wider window does not bring it back
	s.wantTick(a, late, locking.TickDone, "locker A at the missed tick with a 1h window")

	// 20s late, beyond MaxSkew but within a 1m window: granted (catch-up).
	h = s.grant(b, s.tickReq(k, now.Add(-20*time.Second)), "locker B at T-20s within Window 1m")
	s.mustRelease(b, h, "locker B")
	// The missed tick took no lock.
	h = s.grant(a, s.tickReq(k, now), "locker A on time")
	s.mustRelease(a, h, "locker A")
}

// Window 0 (no catch-up) still grants a tick that is on time.
func caseTickWindowZero(s *suite) {
	a := s.locker()
	k := s.key("k")
	r := s.tickReq(k, s.onTime())
	r.Window = 0
	h := s.grant(a, r, "locker A on time with Window 0")
	s.mustRelease(a, h, "locker A")
}

// A missing mark counts as the backend's time minus MaxSkew: a T older
// than that (though within the window) is done, a T after it granted.
func caseTickMissingMark(s *suite) {
	s.needForgetMark()
	a, b := s.locker(), s.locker()
	k := s.key("k")
	ahead := s.onTime().Add(3 * time.Second)
	h := s.grant(a, s.tickReq(k, ahead), "locker A at now+3s")
	s.mustRelease(a, h, "locker A")
	s.b.ForgetMark(s.t, k)
	now := s.onTime()
	s.wantTick(b, s.tickReq(k, now.Add(-2*tickSkew)), locking.TickDone,
		"locker B at now-2*MaxSkew after the mark was forgotten (a missing mark is now-MaxSkew)")
	h = s.grant(b, s.tickReq(k, now.Add(time.Second)), "locker B at now+1s after the mark was forgotten (it was now+3s)")
	if h.Fence() <= 0 {
		s.t.Errorf("fence after a forgotten mark = %d", h.Fence())
	}
	s.mustRelease(b, h, "locker B")
}

// Floor raises a forgotten mark (a request with Floor >= T is done), but
// never past the backend's clock.
func caseTickFloor(s *suite) {
	s.needForgetMark()
	a, b := s.locker(), s.locker()
	k, k2 := s.key("k"), s.key("k2")
	t1 := s.onTime()
	h := s.grant(a, s.tickReq(k, t1), "locker A at T")
	s.mustRelease(a, h, "locker A")
	s.b.ForgetMark(s.t, k)
	r := s.tickReq(k, t1)
	r.Floor = t1
	s.wantTick(b, r, locking.TickDone, "locker B at T with Floor T after the mark was forgotten")
	// The floor was stored: without it, T is still done.
	s.wantTick(b, s.tickReq(k, t1), locking.TickDone, "locker B at T without Floor after a Floor raised the forgotten mark")

	// A Floor an hour ahead lifts a missing mark only to the backend's
	// clock, so a tick 2s ahead (within MaxSkew) is granted.
	r = s.tickReq(k2, s.onTime().Add(2*time.Second))
	r.Floor = r.Tick.Add(time.Hour)
	h = s.grant(a, r, "locker A at now+2s with Floor now+1h (Floor must stop at the backend's clock)")
	s.mustRelease(a, h, "locker A")
}

// InitMarks creates absent marks at the backend's time and leaves existing
// marks alone.
func caseTickInitMarks(s *suite) {
	a, b := s.locker(), s.locker()
	fresh, existing := s.key("fresh"), s.key("existing")
	ahead := s.onTime().Add(3 * time.Second)
	h := s.grant(a, s.tickReq(existing, ahead), "locker A on the existing key at now+3s")
	s.mustRelease(a, h, "locker A")

	before := s.onTime()
	if err := s.ticker(b).InitMarks(s.ctx, []string{fresh, existing}); err != nil {
		s.t.Fatalf("InitMarks = %v", err)
	}
	// Without InitMarks this tick would be granted (a missing mark is
	// now-MaxSkew); the mark created at the backend's time covers it.
	s.wantTick(a, s.tickReq(fresh, before.Add(-time.Second)), locking.TickDone, "locker A on the fresh key, 1s before InitMarks")
	t1 := s.onTime().Add(time.Second)
	h = s.grant(a, s.tickReq(fresh, t1), "locker A on the fresh key, 1s after InitMarks")
	s.mustRelease(a, h, "locker A")
	// The existing mark (now+3s) was not lowered to the backend's time.
	s.wantTick(a, s.tickReq(existing, ahead.Add(-time.Second)), locking.TickDone, "locker A on the existing key, before its mark")

	// Again: marks that exist now stay where they are.
	if err := s.ticker(a).InitMarks(s.ctx, []string{fresh, existing}); err != nil {
		s.t.Fatalf("second InitMarks = %v", err)
	}
	s.wantTick(b, s.tickReq(fresh, t1), locking.TickDone, "locker B on the fresh key at its granted tick, after a second InitMarks")
	if err := s.ticker(a).InitMarks(s.ctx, nil); err != nil {
		s.t.Fatalf("InitMarks(nil) = %v, want nil", err)
	}
	// A key named twice, fresh or marked (the scheduler's recovery probe
	// names its unmarked schedules and its owed ones, which after an outage
	// at start are the same): each mark is created once.
	twice := s.key("twice")
	if err := s.ticker(b).InitMarks(s.ctx, []string{twice, existing, twice, existing}); err != nil {
		s.t.Fatalf("InitMarks with keys named twice = %v, want nil", err)
	}
	s.wantTick(a, s.tickReq(twice, s.onTime().Add(-time.Second)), locking.TickDone, "locker A on a key InitMarks was given twice, 1s before")
}

// TickAnswer.Before is the stored mark the step found, with the verdicts
// that raise it (granted, paused, missed): the init mark, then each
// decided tick in turn, a skipped one included. Zero with done, contended,
// and a key that had no mark. A resend answered from its grant's record
// (its grant's lock still held, or taken again after its lease ended)
// answers its first attempt's Before: that attempt's reply lost, the
// resend's node records the ticks the step passed over.
func caseTickBefore(s *suite) {
	a, b := s.locker(), s.locker()
	mr, ok := a.(locking.MarkReader)
	if !ok {
		s.t.Fatalf("%T does not implement locking.MarkReader: every backend must (locking/mark.go)", a)
	}
	wantBefore := func(ans locking.TickAnswer, want time.Time, who string) {
		s.t.Helper()
		if !ans.Before.Equal(want) {
			s.t.Errorf("%s: %v with Before %v, want %v", who, ans.Verdict, ans.Before, want)
		}
	}
	k := s.key("k")
	if err := s.ticker(a).InitMarks(s.ctx, []string{k}); err != nil {
		s.t.Fatalf("InitMarks = %v", err)
	}
	m0, ok, err := mr.Mark(s.ctx, k)
	if err != nil || !ok {
		s.t.Fatalf("Mark after InitMarks = %v, %v, %v; want a mark", m0, ok, err)
	}
	t1 := s.onTime().Add(time.Second)
	r1 := s.tickReq(k, t1)
	r1.Token = s.newToken()
	ans := s.wantTick(a, r1, locking.TickGranted, "locker A at T1, after InitMarks")
	wantBefore(ans, m0, "locker A at T1")
	r1.Resend = true
	again := s.wantTick(a, r1, locking.TickGranted, "locker A resending T1 (its grant holds)")
	wantBefore(again, m0, "locker A resending T1 (the first attempt's Before)")
	s.mustRelease(a, again.Handle, "locker A with the resent call's handle")
	wantBefore(s.wantTick(b, s.tickReq(k, t1), locking.TickDone, "locker B at T1"), time.Time{}, "locker B at T1")

	// T2 is skipped: no node asks for it.
	t3 := t1.Add(2 * time.Second)
	ans = s.wantTick(b, s.tickReq(k, t3), locking.TickGranted, "locker B at T3 (T2 not asked)")
	wantBefore(ans, t1, "locker B at T3")
	wantBefore(s.wantTick(a, s.tickReq(k, t3.Add(time.Second)), locking.TickContended, "locker A at T4 while B holds T3"),
		time.Time{}, "locker A at T4 while B holds T3")
	s.mustRelease(b, ans.Handle, "locker B")

	if err := s.pauser(a).SetPause(s.ctx, k, locking.Pause{Paused: true, Note: "lockertest"}); err != nil {
		s.t.Fatalf("SetPause = %v", err)
	}
	t4 := t3.Add(time.Second)
	wantBefore(s.wantTick(a, s.tickReq(k, t4), locking.TickPaused, "locker A at T4 while paused"), t3, "locker A at T4 while paused")
	if err := s.pauser(a).SetPause(s.ctx, k, locking.Pause{}); err != nil {
		s.t.Fatalf("SetPause (resume) = %v", err)
	}

	// Missed: an old mark first (a request with a large MaxSkew claims a
	// tick 50s back), then a tick 30s late with a 10s window.
	km := s.key("missed")
	now := s.onTime()
	wide := s.tickReq(km, now.Add(-50*time.Second))
	wide.MaxSkew, wide.Window = 2*time.Minute, 0
	ans = s.wantTick(a, wide, locking.TickGranted, "locker A at T-50s with MaxSkew 2m, no mark yet")
	wantBefore(ans, time.Time{}, "locker A on a key without a mark")
	s.mustRelease(a, ans.Handle, "locker A")
	late := s.tickReq(km, now.Add(-30*time.Second))
	late.Window = 10 * time.Second
	wantBefore(s.wantTick(b, late, locking.TickMissed, "locker B at T-30s (Window 10s)"), wide.Tick, "locker B at T-30s")

	// A resend after the grant's lease ended, taken again from the grant's
	// record: the first attempt's Before.
	if s.b.EndLease == nil {
		return
	}
	kl := s.key("lapsed")
	first := s.tickReq(kl, s.onTime().Add(-2*time.Second))
	h := s.grant(a, first, "locker A at T-2s (second key)")
	s.mustRelease(a, h, "locker A (second key)")
	rl := s.tickReq(kl, first.Tick.Add(time.Second))
	rl.TTL, rl.Token = s.ttl(), s.newToken()
	ans = s.wantTick(a, rl, locking.TickGranted, "locker A at T-1s (second key; its reply is lost)")
	wantBefore(ans, first.Tick, "locker A at T-1s (second key)")
	s.endLease(rl)
	rl.Resend = true
	re := s.wantTick(b, rl, locking.TickGranted, "locker B resending T-1s after its grant's lease ended")
	if re.Handle.Fence() != ans.Handle.Fence() {
		s.t.Errorf("resend after the lease ended: fence %d, want the grant's %d", re.Handle.Fence(), ans.Handle.Fence())
	}
	wantBefore(re, first.Tick, "locker B resending T-1s after its grant's lease ended (taken again)")
	s.loseReply(rl) // the resend's reply is lost too
	c := s.locker()
	again = s.wantTick(c, rl, locking.TickGranted, "locker C resending T-1s again")
	wantBefore(again, first.Tick, "locker C resending T-1s again (its lock held)")
	s.mustRelease(c, again.Handle, "locker C (second key)")
}

// PerTick: consecutive ticks are granted while the first lock is held,
// each once, with independent handles and increasing fences.
func caseTickPerTick(s *suite) {
	a, b := s.locker(), s.locker()
	k := s.key("k")
	t1 := s.onTime()
	r1, r2 := s.tickReq(k, t1), s.tickReq(k, t1.Add(time.Second))
	r1.PerTick, r2.PerTick = true, true
	h1 := s.grant(a, r1, "locker A at T, per tick")
	h2 := s.grant(b, r2, "locker B at T+1s, per tick, while A holds T")
	if h2.Fence() <= h1.Fence() {
		s.t.Errorf("fence at T+1s = %d, want > %d (T's): the key's fences increase across per-tick locks", h2.Fence(), h1.Fence())
	}
	s.wantTick(b, r1, locking.TickDone, "locker B at T, per tick")
	s.wantTick(a, r2, locking.TickDone, "locker A at T+1s, per tick")
	s.mustRenew(a, h1, "locker A (T)")
	s.mustRenew(b, h2, "locker B (T+1s)")
	s.mustRelease(a, h1, "locker A (T)")
	s.mustRenew(b, h2, "locker B (T+1s) after A released T")
	s.wantErrIs(a.Renew(s.ctx, h1), locking.ErrLockLost, "locker A: Renew of the released T")
	s.mustRelease(b, h2, "locker B (T+1s)")
}

// A resent call (same request, same Token, sent again while the first
// call's lock is held) is answered from its own lock: granted, same fence.
func caseTickResent(s *suite) {
	for _, perTick := range []bool{false, true} {
		name := "schedule lock"
		if perTick {
			name = "per-tick lock"
		}
		a, b := s.locker(), s.locker()
		k := s.key(name)
		tok, err := locking.NewToken()
		if err != nil {
			s.t.Fatal(err)
		}
		r := s.tickReq(k, s.onTime())
		r.PerTick, r.Token = perTick, tok
		h1 := s.grant(a, r, name+": locker A")
		if h1.Token() != tok {
			s.t.Errorf("%s: handle token differs from the request's Token", name)
		}
		ans := s.wantTick(a, r, locking.TickGranted, name+": locker A resending the same request (reply lost)")
		h2 := ans.Handle
		if h2.Fence() != h1.Fence() {
			s.t.Fatalf("%s: resent call's fence = %d, want the first call's %d", name, h2.Fence(), h1.Fence())
		}
		other := r
		if other.Token, err = locking.NewToken(); err != nil {
			s.t.Fatal(err)
		}
		s.wantTick(b, other, locking.TickDone, name+": locker B, same tick, another token")
		s.mustRenew(a, h2, name+": locker A with the resent call's handle")
		s.mustRelease(a, h2, name+": locker A with the resent call's handle")
		s.wantErrIs(a.Release(s.ctx, h1), locking.ErrLockLost, name+": Release of the first call's handle after the resent one released the lock")
		s.wantTick(a, r, locking.TickDone, name+": the same request after its lock was released")
	}
}

// A per-tick grant is answered as granted to its resend after a later
// tick of the same schedule was granted (overlap = "allow"): T1 is granted
// and its reply lost, T2 is granted while T1 runs, then T1 is resent with
// its token from a Locker that never heard of the grant. The answer is
// granted with T1's fence and acquisition, never done (T1, granted, would
// run nowhere). Another token for T1 is done, the resent grant releases,
// after which T1's resend is done; T2's grant is still its own.
func caseTickPerTickResent(s *suite) {
	a, b, c := s.locker(), s.locker(), s.locker()
	k := s.key("k")
	t1 := s.onTime()
	r1, r2 := s.tickReq(k, t1), s.tickReq(k, t1.Add(time.Second))
	r1.PerTick, r2.PerTick = true, true
	r1.Token, r2.Token = s.newToken(), s.newToken()
	h1 := s.grant(a, r1, "locker A at T1, per tick (its reply is lost)")
	h2 := s.grant(b, r2, "locker B at T2 = T1+1s, per tick, while T1 runs")
	if h2.Fence() <= h1.Fence() {
		s.t.Errorf("fence at T2 = %d, want > %d (T1's)", h2.Fence(), h1.Fence())
	}
	s.loseReply(r1)
	re := s.wantResentGrant(c, r1, h1, "locker C resending T1 with T1's token after T2 was granted")
	other := r1
	other.Token = s.newToken()
	s.wantTick(b, other, locking.TickDone, "locker B at T1 with another token while the resent T1 holds its lock")
	s.wantTick(c, other, locking.TickDone, "locker C at T1 with another token")
	s.mustRenew(c, re, "locker C with the resent T1's handle")
	s.mustRelease(c, re, "locker C with the resent T1's handle")
	s.wantTick(c, r1, locking.TickDone, "locker C resending T1 after its grant was released")
	s.wantTick(b, r1, locking.TickDone, "locker B resending T1 after its grant was released")

	// T2's grant was not touched by T1's resend and release.
	s.loseReply(r2)
	re2 := s.wantResentGrant(c, r2, h2, "locker C resending T2 with T2's token after T1 was released")
	s.mustRelease(c, re2, "locker C with the resent T2's handle")
	s.wantTick(c, r2, locking.TickDone, "locker C resending T2 after its grant was released")
}

// A schedule lock's grant is answered as granted to its resend after a
// later tick of the schedule raised the mark without a lock: T is granted
// and its reply lost; the schedule is paused and T+1s is decided paused
// (or, missed, T+1s lies further behind the clock than its window), which
// raises the mark to T+1s while T's lock is held; then T is resent with
// its token from a Locker that never heard of the grant. The answer is
// granted with T's fence and acquisition, never done (T, granted, would
// run nowhere). Another token for T is done; after the resent grant is
// released, T's resend is done.
func caseTickResentAfterMark(s *suite, missed bool) {
	a, b, c := s.locker(), s.locker(), s.locker()
	k := s.key("k")
	now := s.onTime()
	r1 := s.tickReq(k, now)
	if missed {
		// T 50s back, granted within a wide MaxSkew (a missing mark counts
		// as now minus MaxSkew), as in caseTickMissed.
		r1.Tick, r1.MaxSkew, r1.Window = now.Add(-50*time.Second), 2*time.Minute, 0
	}
	r1.Token = s.newToken()
	h1 := s.grant(a, r1, "locker A at T, schedule lock (its reply is lost)")
	r2 := s.tickReq(k, r1.Tick.Add(time.Second))
	r2.Token = s.newToken()
	want, why := locking.TickPaused, "while the schedule is paused"
	if missed {
		r2.Window = 10 * time.Second
		want, why = locking.TickMissed, "49s behind the clock with Window 10s"
	} else if err := s.pauser(b).SetPause(s.ctx, k, locking.Pause{Paused: true, Note: "lockertest"}); err != nil {
		s.t.Fatalf("SetPause = %v", err)
	}
	ans := s.wantTick(b, r2, want, "locker B at T+1s "+why+", while T's lock is held")
	if !ans.Mark.Equal(r2.Tick) {
		s.t.Fatalf("mark after T+1s was %v = %v, want T+1s %v (consumed)", want, ans.Mark, r2.Tick)
	}
	s.loseReply(r1)
	re := s.wantResentGrant(c, r1, h1, "locker C resending T with T's token after T+1s was "+want.String())
	other := r1
	other.Token = s.newToken()
	s.wantTick(b, other, locking.TickDone, "locker B at T with another token while the resent T holds its lock")
	s.mustRenew(c, re, "locker C with the resent T's handle")
	s.mustRelease(c, re, "locker C with the resent T's handle")
	s.wantTick(c, r1, locking.TickDone, "locker C resending T after its grant was released")
	s.wantTick(b, r1, locking.TickDone, "locker B resending T after its grant was released")
}

// wantResentGrant asks l for r, a resend of the request first granted as
// first, and fails the case unless it is granted as that same acquisition:
// the same key, fence and token.
func (s *suite) wantResentGrant(l locking.Locker, r locking.TickRequest, first *locking.Handle, who string) *locking.Handle {
	s.t.Helper()
	re := s.wantTick(l, r, locking.TickGranted, who).Handle
	if re.Fence() != first.Fence() || re.Token() != r.Token || re.Key() != first.Key() {
		s.t.Errorf("%s: granted as (key %q, fence %d, same token %t), want the first grant's acquisition (key %q, fence %d, its token)",
			who, short(re.Key()), re.Fence(), re.Token() == r.Token, short(first.Key()), first.Fence())
	}
	return re
}

// A resent call extends its grant's lease, as a renewal would: T is
// granted (its reply lost) and its lease made to end in a second
// (Backend.EndLease); T is resent and granted as the same acquisition; once
// the first call's lease would have ended, the lock is still the resend's
// (another node's T+1s is contended) and a second resend, its reply lost
// too, is still granted as the same acquisition. Per tick, a later grant of
// the schedule comes between: it must not drop the resent grant (on
// Postgres, its tick_grants entry, whose until the resend extended).
func caseTickResendExtendsLease(s *suite, perTick bool) {
	s.needEndLease()
	a, b, c, d := s.locker(), s.locker(), s.locker(), s.locker()
	k := s.key("k")
	t1 := s.onTime()
	r := s.tickReq(k, t1)
	r.TTL, r.PerTick, r.Token = s.ttl(), perTick, s.newToken()
	h1 := s.grant(a, r, "locker A at T (its reply is lost)")
	// C and D resend within a second on a real clock: connected before.
	for _, l := range []locking.Locker{c, d} {
		s.mustRelease(l, s.mustLock(l, s.key("warm"), longTTL, "warming a locker"), "warming a locker")
	}
	const left = time.Second
	s.b.EndLease(s.t, r, left)
	s.loseReply(r)
	re := s.wantResentGrant(c, r, h1, "locker C resending T a second before the first call's lease ends")
	s.passTime(left + realSlack)
	// The first call's lease has ended; the resend's, counted from the
	// resend, lives on.
	if perTick {
		r2 := s.tickReq(k, t1.Add(time.Second))
		r2.PerTick = true
		h2 := s.grant(b, r2, "locker B at T+1s, per tick, after the first call's lease of T ended")
		defer s.mustRelease(b, h2, "locker B (T+1s)")
	} else {
		s.wantTick(b, s.tickReq(k, t1.Add(time.Second)), locking.TickContended,
			"locker B at T+1s after the first call's lease ended (the resend's lease holds the lock)")
	}
	s.mustRenew(c, re, "locker C with the resent call's handle, after the first call's lease ended")
	s.loseReply(r)
	re2 := s.wantResentGrant(d, r, h1, "locker D resending T again after the first call's lease ended (the resend extended it)")
	s.mustRelease(d, re2, "locker D with the second resend's handle")
}

// A request carrying the Token of an earlier grant but another T is no
// resend: it is decided as any other request. While T's schedule lock is
// held, T+1s with T's token is contended (never granted from T's lock,
// whose fence and lease are T's); once T is released, it is a new
// acquisition with a higher fence. Per tick, T+3s with T+2s's token is a
// grant of its own.
func caseTickTokenOtherTick(s *suite) {
	a, b := s.locker(), s.locker()
	k := s.key("k")
	t1 := s.onTime()
	r1 := s.tickReq(k, t1)
	r1.Token = s.newToken()
	h1 := s.grant(a, r1, "locker A at T")
	r2 := s.tickReq(k, t1.Add(time.Second))
	r2.Token = r1.Token
	s.wantTick(b, r2, locking.TickContended, "locker B at T+1s with T's token while T's lock is held")
	s.wantTick(a, r2, locking.TickContended, "locker A at T+1s with T's token while it holds T's lock")
	s.mustRelease(a, h1, "locker A (T)")
	h2 := s.grant(b, r2, "locker B at T+1s with T's token after T was released")
	if h2.Fence() <= h1.Fence() {
		s.t.Errorf("fence at T+1s = %d, want > %d (T's): a new acquisition", h2.Fence(), h1.Fence())
	}
	s.mustRelease(b, h2, "locker B (T+1s)")

	p1 := s.tickReq(k, t1.Add(2*time.Second))
	p1.PerTick, p1.Token = true, s.newToken()
	hp1 := s.grant(a, p1, "locker A at T+2s, per tick")
	p2 := s.tickReq(k, t1.Add(3*time.Second))
	p2.PerTick, p2.Token = true, p1.Token
	hp2 := s.grant(b, p2, "locker B at T+3s, per tick, with T+2s's token while T+2s is held")
	if hp2.Fence() <= hp1.Fence() {
		s.t.Errorf("fence at T+3s = %d, want > %d (T+2s's): an acquisition of its own", hp2.Fence(), hp1.Fence())
	}
	s.mustRelease(a, hp1, "locker A (T+2s)")
	s.mustRelease(b, hp2, "locker B (T+3s)")
}

// A grant's resend after the grant was released is not granted: released,
// the grant is over (its run ended, or its holder gave it up), and the
// request is decided as a fresh one would be: done, T being marked. The
// same when the release found the lock lapsed (Expire: its TTL ran out, or
// on Postgres its session died): the holder gave the grant up all the same,
// and a resend granted then would run T a second time.
func caseTickResendAfterRelease(s *suite) {
	for _, c := range []struct {
		name            string
		perTick, lapsed bool
	}{
		{"schedule lock", false, false},
		{"per-tick lock", true, false},
		{"schedule lock, lapsed", false, true},
	} {
		a, b := s.locker(), s.locker()
		k := s.key(c.name)
		r := s.tickReq(k, s.onTime())
		r.PerTick, r.Token = c.perTick, s.newToken()
		h := s.grant(a, r, c.name+": locker A at T")
		if c.lapsed {
			s.b.Expire(s.t, k)
			s.wantErrIs(a.Release(s.ctx, h), locking.ErrLockLost, c.name+": locker A releasing T after its lock lapsed")
		} else {
			s.mustRelease(a, h, c.name+": locker A")
		}
		s.wantTick(b, r, locking.TickDone, c.name+": locker B resending T (its token) after its grant was released")
		s.wantTick(a, r, locking.TickDone, c.name+": locker A resending T (its token) after its grant was released")
	}
}

// A schedule lock's resend after a later acquisition of the key is not
// granted, so never with that acquisition's fence: T's lock lapsed
// (Expire; on Postgres its session died, as after a lost reply) and a plain
// TryLock of the key (`lock run`, a manual run) took it. The grant's lease
// ended when another holder took its lock, so T's resend is decided as a
// fresh request: done, T being marked, both while the other holder has the
// lock and after it released it. Granted, it would hand out another
// acquisition's fence (twice) or one below the last holder's.
func caseTickResendAfterLaterLock(s *suite) {
	a, b, c := s.locker(), s.locker(), s.locker()
	k := s.key("k")
	r := s.tickReq(k, s.onTime())
	r.Token = s.newToken()
	h1 := s.grant(a, r, "locker A at T (its reply is lost)")
	s.b.Expire(s.t, k)
	h2 := s.mustLock(b, k, longTTL, "locker B, a plain TryLock of the key after T's lock lapsed")
	if h2.Fence() <= h1.Fence() {
		s.t.Errorf("locker B's fence %d, want > %d (T's)", h2.Fence(), h1.Fence())
	}
	check := func(who string) {
		s.t.Helper()
		ans, err := s.ticker(c).TryLockTick(s.ctx, r)
		if err != nil {
			s.t.Fatalf("%s: TryLockTick = error %v, want done or expired", who, err)
		}
		if ans.Handle != nil {
			_ = c.Release(s.ctx, ans.Handle)
			s.t.Fatalf("%s: granted with fence %d (T's grant drew %d, locker B's acquisition %d), want done or expired: the grant's lease ended when B took its lock",
				who, ans.Handle.Fence(), h1.Fence(), h2.Fence())
		}
		// Expired when the backend still keeps T's grant record (Expire
		// may have moved a fake clock past it: then done, T is marked).
		switch {
		case ans.Verdict == locking.TickExpired && ans.Fence != h1.Fence():
			s.t.Fatalf("%s: expired with fence %d, want T's grant's %d", who, ans.Fence, h1.Fence())
		case ans.Verdict != locking.TickDone && ans.Verdict != locking.TickExpired:
			s.t.Fatalf("%s: %v, want done (T is marked) or expired", who, ans.Verdict)
		}
	}
	check("locker C resending T while locker B holds the key")
	s.mustRelease(b, h2, "locker B")
	check("locker C resending T after locker B released the key")
}

// endLease makes the lease of r's grant end, as if its TTL had run out
// (Backend.EndLease, then the time it named passes), and does what a lost
// reply to it leaves behind: the grant's record is all that is left of it.
func (s *suite) endLease(r locking.TickRequest) {
	s.t.Helper()
	s.needEndLease()
	const left = 50 * time.Millisecond
	s.b.EndLease(s.t, r, left)
	s.passTime(left + realSlack)
	s.loseReply(r)
}

// A resend that comes after its grant's lease ended (a lost reply cost its
// caller longer than the TTL), with nothing else asked of the key since, is
// granted as the same acquisition continued: the grant's fence, the lock
// held again (another node's later tick is contended, a renewal works).
// Answered done, as before the grant records, T would be granted and run
// nowhere. Per tick, a later tick granted meanwhile (the mark moved past T)
// does not stop it: per-tick runs overlap. Released, its resend is done.
func caseTickResendAfterLeaseEnded(s *suite, perTick bool) {
	a, b, c := s.locker(), s.locker(), s.locker()
	k := s.key("k")
	t1 := s.onTime()
	r := s.tickReq(k, t1)
	r.TTL, r.PerTick, r.Token = s.ttl(), perTick, s.newToken()
	h1 := s.grant(a, r, "locker A at T (its reply is lost)")
	s.endLease(r)
	if perTick {
		r2 := s.tickReq(k, t1.Add(time.Second))
		r2.PerTick = true
		h2 := s.grant(b, r2, "locker B at T+1s, per tick, after T's lease ended")
		defer s.mustRelease(b, h2, "locker B (T+1s)")
	}
	re := s.wantResentGrant(c, r, h1, "locker C resending T after its grant's lease ended")
	if !perTick {
		s.wantTick(b, s.tickReq(k, t1.Add(2*time.Second)), locking.TickContended,
			"locker B at T+2s after T's resend was granted again (it holds the lock)")
	}
	s.mustRenew(c, re, "locker C with the resend's handle")
	s.loseReply(r) // the resend's reply is lost too
	re2 := s.wantResentGrant(b, r, h1, "locker B resending T again while the resend's lock lives")
	s.mustRelease(b, re2, "locker B with the second resend's handle")
	// From a Locker that never held it: A and C may answer a resend of a
	// lock they still believe theirs without asking (Postgres).
	s.wantTick(s.locker(), r, locking.TickDone, "locker D resending T after its grant was released")
}

// A resend that comes after its grant's lease ended, once another
// acquisition took the key (a later tick's grant, or a plain TryLock), is
// told expired with its grant's fence, both while that holder has the lock
// and after it released it: taken again, the grant would hold the lock
// under a fence below the last holder's. Nothing changes.
func caseTickExpiredAfterLaterAcquisition(s *suite, plain bool) {
	a, b, c := s.locker(), s.locker(), s.locker()
	k := s.key("k")
	t1 := s.onTime()
	r := s.tickReq(k, t1)
	r.TTL, r.Token = s.ttl(), s.newToken()
	h1 := s.grant(a, r, "locker A at T (its reply is lost)")
	s.endLease(r)
	var h2 *locking.Handle
	if plain {
		h2 = s.mustLock(b, k, longTTL, "locker B, a plain TryLock of the key after T's lease ended")
	} else {
		h2 = s.grant(b, s.tickReq(k, t1.Add(time.Second)), "locker B at T+1s after T's lease ended")
	}
	if h2.Fence() <= h1.Fence() {
		s.t.Errorf("locker B's fence %d, want > %d (T's)", h2.Fence(), h1.Fence())
	}
	s.wantExpired(c, r, h1, "locker C resending T while locker B holds the key")
	s.mustRelease(b, h2, "locker B")
	s.wantExpired(c, r, h1, "locker C resending T after locker B released the key")
	if !plain {
		s.wantTick(c, s.tickReq(k, t1.Add(time.Second)), locking.TickDone, "locker C at T+1s (B's grant stands)")
	}
}

// A resend that comes after its grant's lease ended, while the key is
// paused, is told expired with its grant's fence (not paused: T was
// granted before the pause, and its caller records it as not run with that
// fence); nothing changes. Resumed with nothing else decided, it is granted
// again; once a later tick was decided (paused: the mark moved past T) it
// is expired for good.
func caseTickExpiredPaused(s *suite) {
	a, b, c := s.locker(), s.locker(), s.locker()
	k := s.key("k")
	t1 := s.onTime()
	r := s.tickReq(k, t1)
	r.TTL, r.Token = s.ttl(), s.newToken()
	h1 := s.grant(a, r, "locker A at T (its reply is lost)")
	s.endLease(r)
	p := s.pauser(b)
	if err := p.SetPause(s.ctx, k, locking.Pause{Paused: true, Note: "lockertest"}); err != nil {
		s.t.Fatalf("SetPause = %v", err)
	}
	s.wantExpired(c, r, h1, "locker C resending T while the key is paused")
	if err := p.SetPause(s.ctx, k, locking.Pause{}); err != nil {
		s.t.Fatalf("SetPause(resume) = %v", err)
	}
	re := s.wantResentGrant(c, r, h1, "locker C resending T after the key was resumed, nothing decided since")
	s.mustRelease(c, re, "locker C with the resend's handle")

	r2 := s.tickReq(k, t1.Add(time.Second))
	r2.TTL, r2.Token = s.ttl(), s.newToken()
	h2 := s.grant(a, r2, "locker A at T+1s (its reply is lost)")
	s.endLease(r2)
	if err := p.SetPause(s.ctx, k, locking.Pause{Paused: true, Note: "lockertest"}); err != nil {
		s.t.Fatalf("SetPause = %v", err)
	}
	s.wantTick(b, s.tickReq(k, t1.Add(2*time.Second)), locking.TickPaused, "locker B at T+2s while paused")
	if err := p.SetPause(s.ctx, k, locking.Pause{}); err != nil {
		s.t.Fatalf("SetPause(resume) = %v", err)
	}
	s.wantExpired(c, r2, h2, "locker C resending T+1s after T+2s was decided paused and the key resumed")
}

// A resend (Resend) answered contended or done, decided anew, is recorded:
// a late copy of an earlier attempt of the same request (no Resend flag),
// or another resend, that comes once the lock is free and T undecided is
// answered the same and takes nothing (the lock stays free, the mark
// where it was; a third party's request for T is granted). Decided anew,
// the copy was granted to a node told contended, which had moved on: T
// consumed and the lock held for nothing. Done: the mark is forgotten
// before the copy comes (a store that lost it), or the mark alone would
// answer it.
func caseTickResendDecided(s *suite, done bool) {
	a, b, c := s.locker(), s.locker(), s.locker()
	k := s.key("k")
	t0 := s.onTime()
	t1 := t0.Add(time.Second)
	r := s.tickReq(k, t1)
	r.Token, r.Resend = s.newToken(), true
	want, wantMark, hasMark := locking.TickContended, t0, true
	if done {
		s.needForgetMark()
		h := s.grant(a, s.tickReq(k, t1), "locker A at T")
		s.mustRelease(a, h, "locker A (T ran)")
		want = locking.TickDone
		s.wantTick(b, r, want, "locker B resending T (its first attempt's answer lost)")
		s.b.ForgetMark(s.t, k)
		hasMark = false
	} else {
		h := s.grant(a, s.tickReq(k, t0), "locker A at T-1s")
		s.wantTick(b, r, want, "locker B resending T while locker A holds the lock")
		s.mustRelease(a, h, "locker A (T-1s ran)")
	}
	first := r
	first.Resend = false
	s.wantTick(c, first, want, "a late copy of locker B's first attempt at T, the lock free")
	s.wantTick(b, r, want, "locker B resending T again, the lock free")
	s.wantMark(a, k, wantMark, hasMark, "after the late copies")
	h := s.grant(c, s.tickReq(k, t1), "locker C at T (another token) after the late copies")
	s.mustRelease(c, h, "locker C")
}

// A first attempt (no Resend) answered contended writes no record (the
// common path: every node but one, every tick): the same request asked
// again once the lock is free is decided anew, and granted.
func caseTickFirstContendedNoRecord(s *suite) {
	a, b := s.locker(), s.locker()
	k := s.key("k")
	t0 := s.onTime()
	h := s.grant(a, s.tickReq(k, t0), "locker A at T-1s")
	r := s.tickReq(k, t0.Add(time.Second))
	r.Token = s.newToken()
	s.wantTick(b, r, locking.TickContended, "locker B at T while locker A holds the lock")
	s.mustRelease(a, h, "locker A (T-1s ran)")
	g := s.grant(b, r, "locker B asking T again with the same token, the lock free")
	s.mustRelease(b, g, "locker B")
}

// wantMark fails the case unless key's mark, read through l, is mark (ok
// true) or missing (ok false).
func (s *suite) wantMark(l locking.Locker, key string, mark time.Time, ok bool, who string) {
	s.t.Helper()
	mr, is := l.(locking.MarkReader)
	if !is {
		s.t.Fatalf("%T does not implement locking.MarkReader", l)
	}
	m, got, err := mr.Mark(s.ctx, key)
	switch {
	case err != nil:
		s.t.Fatalf("%s: Mark = %v", who, err)
	case got != ok || (ok && !m.Equal(mark)):
		s.t.Errorf("%s: Mark = %v (stored %v), want %v (stored %v)", who, m, got, mark, ok)
	}
}

// wantExpired asks l for r, a resend of the request first granted as
// first, and fails the case unless it is told expired with first's fence.
func (s *suite) wantExpired(l locking.Locker, r locking.TickRequest, first *locking.Handle, who string) {
	s.t.Helper()
	ans := s.wantTick(l, r, locking.TickExpired, who)
	if ans.Fence != first.Fence() {
		s.t.Errorf("%s: expired with fence %d, want the grant's %d", who, ans.Fence, first.Fence())
	}
}

// needEndLease fails a case that needs Backend.EndLease without it.
func (s *suite) needEndLease() {
	s.t.Helper()
	if s.b.EndLease == nil {
		s.t.Fatal("Backend.EndLease is required: this case checks that a resend extends its grant's lease")
	}
}

// loseReply does what a lost reply to r's grant leaves behind on the
// backend (Backend.LoseReply; nothing when nil).
func (s *suite) loseReply(r locking.TickRequest) {
	s.t.Helper()
	if s.b.LoseReply == nil {
		return
	}
	lockKey := r.Key
	if r.PerTick {
		lockKey = locking.TickLockKey(r.Key, r.Tick)
	}
	s.b.LoseReply(s.t, lockKey)
}

// newToken is a fresh request token, or fails the case.
func (s *suite) newToken() string {
	s.t.Helper()
	tok, err := locking.NewToken()
	if err != nil {
		s.t.Fatal(err)
	}
	return tok
}

// A handle from TryLockTick works with Renew and Release, and once stale
// it cannot touch a newer holder's lock.
func caseTickStaleHandle(s *suite) {
	a, b, c := s.locker(), s.locker(), s.locker()
	k := s.key("k")
	t1 := s.onTime()
	stale := s.grant(a, s.tickReq(k, t1), "locker A")
	s.mustRenew(a, stale, "locker A")
	s.b.Expire(s.t, k)
	// After Expire, which may have moved the clock; and a later T even
	// when the grant, the renewal and the expiry took less than the
	// millisecond onTime counts in (a fast Redis: T2 was T1, answered done).
	t2 := s.onTime()
	if !t2.After(t1) {
		t2 = t1.Add(time.Millisecond)
	}
	fresh := s.grant(b, s.tickReq(k, t2), "locker B after A's lock was expired")
	if fresh.Fence() <= stale.Fence() {
		s.t.Errorf("fence after expiry = %d, want > %d", fresh.Fence(), stale.Fence())
	}
	if err := a.Renew(s.ctx, stale); err == nil {
		s.t.Fatal("locker A: Renew of a stale tick handle = nil, want an error: B holds the key now")
	}
	if err := a.Release(s.ctx, stale); err == nil {
		s.t.Fatal("locker A: Release of a stale tick handle = nil, want an error: B holds the key now")
	}
	s.wantTick(c, s.tickReq(k, t2.Add(time.Second)), locking.TickContended, "locker C after A's stale renew and release (B must still hold the key)")
	s.mustRenew(b, fresh, "locker B")
	s.mustRelease(b, fresh, "locker B")
	h := s.grant(c, s.tickReq(k, t2.Add(time.Second)), "locker C after B released")
	s.mustRelease(c, h, "locker C")
}

// raceN nodes ask for the same tick at once: exactly one is granted, the
// others are told done (or contended), nobody sees an error.
func caseTickRace(s *suite) {
	k := s.key("k")
	r := s.tickReq(k, s.onTime())
	lockers := make([]locking.TickLocker, raceN)
	plain := make([]locking.Locker, raceN)
	for i := range lockers {
		plain[i] = s.locker()
		lockers[i] = s.ticker(plain[i])
	}
	answers := make([]locking.TickAnswer, raceN)
	errs := make([]error, raceN)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range raceN {
		wg.Go(func() {
			<-start
			answers[i], errs[i] = lockers[i].TryLockTick(s.ctx, r)
		})
	}
	close(start)
	wg.Wait()
	winner := -1
	for i, ans := range answers {
		switch {
		case errs[i] != nil:
			s.t.Errorf("node %d: TryLockTick = error %v", i, errs[i])
		case ans.Verdict == locking.TickGranted:
			if winner >= 0 {
				s.t.Errorf("nodes %d and %d were both granted tick %v: it runs twice", winner, i, r.Tick)
			}
			winner = i
		case ans.Verdict != locking.TickDone && ans.Verdict != locking.TickContended:
			s.t.Errorf("node %d: verdict %v, want done or contended", i, ans.Verdict)
		}
	}
	if s.t.Failed() {
		return
	}
	if winner < 0 {
		s.t.Fatalf("none of %d nodes was granted the free tick", raceN)
	}
	s.mustRelease(plain[winner], answers[winner].Handle, "the winner")
}

// TickAnswer.Now is the backend's clock when it decided.
func caseTickAnswerNow(s *suite) {
	a := s.locker()
	k := s.key("k")
	check := func(r locking.TickRequest, want locking.TickVerdict, who string) {
		s.t.Helper()
		before := s.now()
		ans := s.wantTick(a, r, want, who)
		after := s.now()
		if ans.Now.Before(before.Add(-clockSlack)) || ans.Now.After(after.Add(clockSlack)) {
			s.t.Errorf("%s: TickAnswer.Now = %v, want the backend's clock, within %v of [%v, %v]", who, ans.Now, clockSlack, before, after)
		}
		if ans.Handle != nil {
			s.mustRelease(a, ans.Handle, who)
		}
	}
	t1 := s.onTime()
	check(s.tickReq(k, t1), locking.TickGranted, "granted")
	check(s.tickReq(k, t1), locking.TickDone, "done")
}

// A cancelled context is an error and claims nothing.
func caseTickCancelled(s *suite) {
	a, b := s.locker(), s.locker()
	k := s.key("k")
	cancelled, cancel := context.WithCancel(s.ctx)
	cancel()
	r := s.tickReq(k, s.onTime())
	ans, err := s.ticker(a).TryLockTick(cancelled, r)
	if ans.Handle != nil {
		s.t.Fatalf("TryLockTick with a cancelled context returned handle %v", ans.Handle)
	}
	s.wantErrIs(err, context.Canceled, "TryLockTick with a cancelled context")
	h := s.grant(b, r, "locker B at the same tick (the cancelled call must not have claimed it)")
	s.mustRelease(b, h, "locker B")
}

// After Close, the tick and pause operations return ErrClosed.
func caseTickClosed(s *suite) {
	a := s.locker()
	k := s.key("k")
	if err := a.Close(s.ctx); err != nil {
		s.t.Fatalf("Close = %v", err)
	}
	_, err := s.ticker(a).TryLockTick(s.ctx, s.tickReq(k, s.onTime()))
	s.wantErrIs(err, locking.ErrClosed, "TryLockTick after Close")
	s.wantErrIs(s.ticker(a).InitMarks(s.ctx, []string{k}), locking.ErrClosed, "InitMarks after Close")
	s.wantErrIs(s.pauser(a).SetPause(s.ctx, k, locking.Pause{Paused: true}), locking.ErrClosed, "SetPause after Close")
	_, err = s.pauser(a).GetPause(s.ctx, k)
	s.wantErrIs(err, locking.ErrClosed, "GetPause after Close")
}

// Every fence, of TryLock and TryLockTick, is at least the backend's clock
// in microseconds (so it stays above fences drawn before the backend lost
// its data), also after the clock moved on.
func caseFenceClock(s *suite) {
	a := s.locker()
	k, kt := s.key("k"), s.key("tick")
	check := func(who string) {
		s.t.Helper()
		floor := s.now().UnixMicro()
		h := s.mustLock(a, k, longTTL, who+": TryLock")
		if h.Fence() < floor {
			s.t.Errorf("%s: TryLock fence %d is below the backend's clock in microseconds (%d)", who, h.Fence(), floor)
		}
		s.mustRelease(a, h, who)
		floor = s.now().UnixMicro()
		ht := s.grant(a, s.tickReq(kt, s.onTime()), who+": TryLockTick")
		if ht.Fence() < floor {
			s.t.Errorf("%s: TryLockTick fence %d is below the backend's clock in microseconds (%d)", who, ht.Fence(), floor)
		}
		s.mustRelease(a, ht, who)
	}
	check("now")
	if s.b.Advance != nil {
		s.b.Advance(time.Hour)
		check("an hour later")
	}
}

// A pause read inside try-lock-tick consumes a due tick: after resume the
// same tick is done, never replayed. Pausing one node pauses them all.
func caseTickPaused(s *suite) {
	a, b := s.locker(), s.locker()
	k := s.key("k")
	if err := s.pauser(a).SetPause(s.ctx, k, locking.Pause{Paused: true, Note: "lockertest"}); err != nil {
		s.t.Fatalf("SetPause = %v", err)
	}
	t1 := s.onTime()
	ans := s.wantTick(b, s.tickReq(k, t1), locking.TickPaused, "locker B at T while paused (by A)")
	if !ans.Mark.Equal(t1) {
		s.t.Errorf("mark after a paused tick = %v, want the tick %v (consumed)", ans.Mark, t1)
	}
	s.wantTick(b, s.tickReq(k, t1.Add(time.Second)), locking.TickPaused, "locker B at T+1s while paused")
	s.wantTick(a, s.tickReq(k, t1), locking.TickDone, "locker A at T while paused (already decided)")
	if err := s.pauser(b).SetPause(s.ctx, k, locking.Pause{}); err != nil {
		s.t.Fatalf("SetPause (resume) = %v", err)
	}
	s.wantTick(a, s.tickReq(k, t1), locking.TickDone, "locker A at T after resume (paused ticks are never replayed)")
	s.wantTick(a, s.tickReq(k, t1.Add(time.Second)), locking.TickDone, "locker A at T+1s after resume")
	h := s.grant(a, s.tickReq(k, t1.Add(2*time.Second)), "locker A at T+2s after resume (paused ticks took no lock)")
	s.mustRelease(a, h, "locker A")
}

// A request carrying a Token answered paused (missed: T beyond MaxSkew and
// Window behind the clock) is recorded: resent with that Token and T (its
// reply lost), it is answered the same verdict, from the record (with the
// first attempt's Before: its node records the ticks that step passed
// over), changing nothing: the mark stays at T and the lock free, even
// once the key is resumed. Decided anew it would be done (the mark is at
// T), and its node would record nothing of the tick it consumed: audit
// would call T lost. The same Token with another T is decided anew, and a
// request without a Token leaves no record (done when asked again).
func caseTickVerdictKept(s *suite, missed bool) {
	a, b := s.locker(), s.locker()
	k := s.key("k")
	now := s.onTime()
	want, what := locking.TickPaused, "paused"
	r := s.tickReq(k, now)
	var before time.Time // the mark the first attempt finds
	if missed {
		want, what = locking.TickMissed, "missed"
		// An old mark first: a missing one counts as now minus MaxSkew.
		wide := s.tickReq(k, now.Add(-50*time.Second))
		wide.MaxSkew, wide.Window = 2*time.Minute, 0
		h := s.grant(a, wide, "locker A at T-50s with MaxSkew 2m")
		s.mustRelease(a, h, "locker A")
		before = wide.Tick
		r = s.tickReq(k, now.Add(-30*time.Second))
		r.Window = 10 * time.Second // 30s late: beyond MaxSkew 5s and Window 10s
	} else {
		// A mark first, so that the verdict has a Before to keep.
		h := s.grant(a, s.tickReq(k, now.Add(-time.Second)), "locker A at T-1s")
		s.mustRelease(a, h, "locker A")
		before = now.Add(-time.Second)
		if err := s.pauser(a).SetPause(s.ctx, k, locking.Pause{Paused: true, Note: "lockertest"}); err != nil {
			s.t.Fatalf("SetPause = %v", err)
		}
	}
	r.Token = s.newToken()
	ans := s.wantTick(b, r, want, "locker B's first attempt at T")
	if !ans.Mark.Equal(r.Tick) {
		s.t.Errorf("mark after a %s tick = %v, want the tick %v (consumed)", what, ans.Mark, r.Tick)
	}
	re := r
	re.Resend = true
	firstBefore := ans.Before
	if !firstBefore.Equal(before) {
		s.t.Errorf("first attempt answered %s: Before = %v, want the mark it found %v", what, firstBefore, before)
	}
	ans = s.wantTick(b, re, want, "locker B resending T (its first reply lost)")
	if !ans.Before.Equal(firstBefore) {
		s.t.Errorf("a resend answered %s from its record: Before = %v, want its first attempt's %v (its node records the ticks that step passed over)",
			what, ans.Before, firstBefore)
	}
	if ans = s.wantTick(a, r, want, "a late copy of locker B's first attempt at T"); !ans.Before.Equal(firstBefore) {
		s.t.Errorf("a late copy answered %s from its record: Before = %v, want its first attempt's %v", what, ans.Before, firstBefore)
	}
	s.wantMark(a, k, r.Tick, true, "after the resends")
	if !missed {
		if err := s.pauser(a).SetPause(s.ctx, k, locking.Pause{}); err != nil {
			s.t.Fatalf("SetPause(resume) = %v", err)
		}
	}
	s.wantTick(b, re, want, "locker B resending T once more, the key resumed")
	s.wantMark(a, k, r.Tick, true, "after the resend on the resumed key")

	// The same Token with another T is decided anew: an earlier T is done,
	// a later one granted (the verdicts took no lock).
	other := r
	other.Tick = r.Tick.Add(-time.Second)
	s.wantTick(b, other, locking.TickDone, "locker B at T-1s with T's token")
	other.Tick = now.Add(time.Second)
	other.Window = tickWindow
	h := s.grant(b, other, "locker B at now+1s with T's token")
	s.mustRelease(b, h, "locker B")

	// Without a Token: no record, asked again it is done.
	k2 := s.key("k2")
	bare := s.tickReq(k2, now)
	if missed {
		wide := s.tickReq(k2, now.Add(-50*time.Second))
		wide.MaxSkew, wide.Window = 2*time.Minute, 0
		h := s.grant(a, wide, "locker A at T-50s with MaxSkew 2m (second key)")
		s.mustRelease(a, h, "locker A")
		bare = s.tickReq(k2, now.Add(-30*time.Second))
		bare.Window = 10 * time.Second
	} else if err := s.pauser(a).SetPause(s.ctx, k2, locking.Pause{Paused: true, Note: "lockertest"}); err != nil {
		s.t.Fatalf("SetPause = %v", err)
	}
	s.wantTick(b, bare, want, "locker B at T without a token (second key)")
	s.wantTick(b, bare, locking.TickDone, "locker B asking T again without a token (second key)")
}

// Until ends a pause by itself: in the past it does not pause, in the
// future it does.
func caseTickPauseUntil(s *suite) {
	a := s.locker()
	past, future := s.key("past"), s.key("future")
	now := s.onTime()
	if err := s.pauser(a).SetPause(s.ctx, past, locking.Pause{Paused: true, Until: now.Add(-time.Minute)}); err != nil {
		s.t.Fatalf("SetPause = %v", err)
	}
	if err := s.pauser(a).SetPause(s.ctx, future, locking.Pause{Paused: true, Until: now.Add(time.Hour)}); err != nil {
		s.t.Fatalf("SetPause = %v", err)
	}
	h := s.grant(a, s.tickReq(past, now), "a key paused until a minute ago")
	s.mustRelease(a, h, "locker A")
	s.wantTick(a, s.tickReq(future, now), locking.TickPaused, "a key paused until an hour from now")
}

// GetPause returns what SetPause stored, to another node too; a key never
// paused reads as the zero Pause.
func casePauseRoundTrip(s *suite) {
	a, b := s.locker(), s.locker()
	k := s.key("k")
	check := func(want locking.Pause, who string) {
		s.t.Helper()
		got, err := s.pauser(b).GetPause(s.ctx, k)
		if err != nil {
			s.t.Fatalf("%s: GetPause = %v", who, err)
		}
		if got.Paused != want.Paused || !got.Until.Equal(want.Until) || got.Note != want.Note {
			s.t.Errorf("%s: GetPause = %+v, want %+v", who, got, want)
		}
	}
	set := func(p locking.Pause, who string) {
		s.t.Helper()
		if err := s.pauser(a).SetPause(s.ctx, k, p); err != nil {
			s.t.Fatalf("%s: SetPause(%+v) = %v", who, p, err)
		}
		check(p, who)
	}
	check(locking.Pause{}, "never paused")
	set(locking.Pause{Paused: true, Until: s.now().Add(time.Hour).Truncate(time.Second), Note: "maintenance — DB migration ✓"}, "paused until")
	set(locking.Pause{Paused: true}, "paused, no end")
	set(locking.Pause{}, "resumed")
}

// Bad TryLockTick, InitMarks and pause arguments are errors wrapping
// ErrInvalid, never panics, and claim nothing.
func caseBadTick(s *suite) {
	a := s.locker()
	k := s.key("k")
	tl, p := s.ticker(a), s.pauser(a)
	good := s.tickReq(k, s.onTime())
	bad := []struct {
		name string
		edit func(*locking.TickRequest)
	}{
		{"zero tick", func(r *locking.TickRequest) { r.Tick = time.Time{} }},
		{"negative window", func(r *locking.TickRequest) { r.Window = -time.Second }},
		{"negative max skew", func(r *locking.TickRequest) { r.MaxSkew = -time.Second }},
		{"empty key", func(r *locking.TickRequest) { r.Key = "" }},
		{"zero TTL", func(r *locking.TickRequest) { r.TTL = 0 }},
		{"control character in key", func(r *locking.TickRequest) { r.Key += "\n" }},
	}
	for _, c := range bad {
		r := good
		c.edit(&r)
		var ans locking.TickAnswer
		var err error
		s.noPanic("TryLockTick with "+c.name, func() { ans, err = tl.TryLockTick(s.ctx, r) })
		if ans.Handle != nil {
			s.t.Errorf("TryLockTick with %s returned handle %v, want an error wrapping ErrInvalid", c.name, ans.Handle)
			continue
		}
		if !errors.Is(err, locking.ErrInvalid) {
			s.t.Errorf("TryLockTick with %s = %v, want an error wrapping ErrInvalid", c.name, err)
		}
	}
	var err error
	s.noPanic("InitMarks with an empty key", func() { err = tl.InitMarks(s.ctx, []string{k, ""}) })
	if !errors.Is(err, locking.ErrInvalid) {
		s.t.Errorf("InitMarks with an empty key = %v, want an error wrapping ErrInvalid", err)
	}
	s.noPanic("SetPause with an empty key", func() { err = p.SetPause(s.ctx, "", locking.Pause{Paused: true}) })
	if !errors.Is(err, locking.ErrInvalid) {
		s.t.Errorf("SetPause with an empty key = %v, want an error wrapping ErrInvalid", err)
	}
	s.noPanic("GetPause with an empty key", func() { _, err = p.GetPause(s.ctx, "") })
	if !errors.Is(err, locking.ErrInvalid) {
		s.t.Errorf("GetPause with an empty key = %v, want an error wrapping ErrInvalid", err)
	}
	// None of them claimed the tick or created the mark (an InitMarks that
	// failed on a bad key may still have created k's: then the tick, made
	// before it, is done; allow neither error nor a second grant).
	ans, err := tl.TryLockTick(s.ctx, good)
	if err != nil || (ans.Verdict != locking.TickGranted && ans.Verdict != locking.TickDone) {
		s.t.Fatalf("the valid request after the bad ones = %v, %v; want granted (or done if InitMarks created the mark)", ans.Verdict, err)
	}
	if ans.Handle != nil {
		s.mustRelease(a, ans.Handle, "locker A")
	}
}

// ticker returns l as a TickLocker, or fails the case: every backend
// implements try-lock-tick.
func (s *suite) ticker(l locking.Locker) locking.TickLocker {
	s.t.Helper()
	tl, ok := l.(locking.TickLocker)
	if !ok {
		s.t.Fatalf("%T does not implement locking.TickLocker: every backend must (locking/tick.go)", l)
	}
	return tl
}

// pauser returns l as a Pauser, or fails the case.
func (s *suite) pauser(l locking.Locker) locking.Pauser {
	s.t.Helper()
	p, ok := l.(locking.Pauser)
	if !ok {
		s.t.Fatalf("%T does not implement locking.Pauser: every backend must (locking/tick.go)", l)
	}
	return p
}

// needForgetMark fails a case that needs Backend.ForgetMark without it.
func (s *suite) needForgetMark() {
	s.t.Helper()
	if s.b.ForgetMark == nil {
		s.t.Fatal("Backend.ForgetMark is required: this case checks what a backend does with a mark it lost")
	}
}

// onTime is a tick due now on the backend's clock, to the millisecond.
func (s *suite) onTime() time.Time {
	return s.now().Truncate(time.Millisecond)
}

// tickReq is the usual request: schedule lock, MaxSkew 5s, Window 1m.
func (s *suite) tickReq(key string, tick time.Time) locking.TickRequest {
	return locking.TickRequest{Key: key, Tick: tick, TTL: longTTL, MaxSkew: tickSkew, Window: tickWindow}
}

// wantTick asks l for r and fails the case unless the verdict is want,
// with a handle exactly when granted, and a mark consistent with it.
func (s *suite) wantTick(l locking.Locker, r locking.TickRequest, want locking.TickVerdict, who string) locking.TickAnswer {
	s.t.Helper()
	ans, err := s.ticker(l).TryLockTick(s.ctx, r)
	if err != nil {
		s.t.Fatalf("%s: TryLockTick(%q, T=%v) = error %v, want %v", who, short(r.Key), r.Tick, err, want)
	}
	if ans.Verdict != want {
		if ans.Handle != nil {
			_ = l.Release(s.ctx, ans.Handle)
		}
		s.t.Fatalf("%s: TryLockTick(%q, T=%v) = %v (mark %v), want %v", who, short(r.Key), r.Tick, ans.Verdict, ans.Mark, want)
	}
	switch {
	case want == locking.TickGranted && ans.Handle == nil:
		s.t.Fatalf("%s: granted without a handle", who)
	case want != locking.TickGranted && ans.Handle != nil:
		s.t.Fatalf("%s: %v with handle %v, want none", who, want, ans.Handle)
	case want == locking.TickDone && !ans.Mark.IsZero() && ans.Mark.Before(r.Tick):
		s.t.Errorf("%s: done with mark %v before the tick %v", who, ans.Mark, r.Tick)
	}
	return ans
}

// grant asks l for r, wants it granted with a handle whose fence is
// positive and mark is T, and returns the handle.
func (s *suite) grant(l locking.Locker, r locking.TickRequest, who string) *locking.Handle {
	s.t.Helper()
	ans := s.wantTick(l, r, locking.TickGranted, who)
	if ans.Handle.Fence() <= 0 {
		s.t.Errorf("%s: fence %d, want > 0", who, ans.Handle.Fence())
	}
	if !ans.Mark.Equal(r.Tick) {
		s.t.Errorf("%s: granted with mark %v, want the tick %v", who, ans.Mark, r.Tick)
	}
	return ans.Handle
}
