package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/hints"
	"github.com/bext-dev/bext-scheduler/locking"
	"github.com/bext-dev/bext-scheduler/locking/memory"
	"github.com/bext-dev/bext-scheduler/scheduler"
	"github.com/bext-dev/bext-scheduler/scheduler/fakeclock"
)

// lossy is a memory backend behind a link that loses replies: each of the
// next lose try-lock-ticks is decided by the backend, then answered with a
// timeout, as a reply that came after op_timeout (and meanwhile the
// recovery's probe gets no reply either). onCall runs before the backend
// decides each call (numbered from 1): a test moves its clock there.
type lossy struct {
	*faulty
	mem *memory.Locker

	mu     sync.Mutex
	lose   int
	calls  int
	tokens []string
	onCall func(call int)
}

var errReplyLost = fmt.Errorf("test: no reply within op_timeout: %w: %w", locking.ErrUnavailable, context.DeadlineExceeded)

// call counts one round trip carrying reqs and reports whether its
// replies are lost.
func (l *lossy) call(reqs []locking.TickRequest) bool {
	l.mu.Lock()
	l.calls++
	n, hook := l.calls, l.onCall
	for _, r := range reqs {
		l.tokens = append(l.tokens, r.Token)
	}
	lose := l.lose > 0
	if lose {
		l.lose--
	}
	l.mu.Unlock()
	if hook != nil {
		hook(n)
	}
	return lose
}

func (l *lossy) TryLockTick(ctx context.Context, req locking.TickRequest) (locking.TickAnswer, error) {
	lose := l.call([]locking.TickRequest{req})
	ans, err := l.mem.TryLockTick(context.Background(), req)
	if lose {
		return locking.TickAnswer{}, errReplyLost
	}
	return ans, err
}

func (l *lossy) InitMarks(ctx context.Context, keys []string) error {
	l.mu.Lock()
	lose := l.lose > 0
	l.mu.Unlock()
	if err := l.mem.InitMarks(ctx, keys); err != nil || !lose {
		return err
	}
	return errReplyLost
}

func (l *lossy) sent() (calls int, tokens []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.calls, append([]string(nil), l.tokens...)
}

// lossyBatcher is lossy deciding in batches (locking.TickBatcher), each
// batch one round trip whose replies are lost or not.
type lossyBatcher struct{ *lossy }

func (l lossyBatcher) TryLockTicks(ctx context.Context, reqs []locking.TickRequest) ([]locking.TickAnswer, []error) {
	lose := l.call(reqs)
	answers, errs := make([]locking.TickAnswer, len(reqs)), make([]error, len(reqs))
	for i, r := range reqs {
		answers[i], errs[i] = l.mem.TryLockTick(context.Background(), r)
		if lose {
			answers[i], errs[i] = locking.TickAnswer{}, errReplyLost
		}
	}
	return answers, errs
}

// losing starts losing the replies of the next n calls, counted (and
// their tokens kept) from now: the scheduler's start asks too (its
// catch-up).
func (l *lossy) losing(n int) {
	l.mu.Lock()
	l.lose, l.calls, l.tokens = n, 0, nil
	l.mu.Unlock()
}

// newLossy returns a lossy memory backend on clock, batched or not.
func newLossy(clock *fakeclock.Clock, batched bool) (*lossy, scheduler.Locker) {
	mem := memory.New(memory.WithClock(clock.Now), memory.WithHolder("node-a"))
	l := &lossy{faulty: &faulty{inner: mem}, mem: mem}
	if batched {
		return l, lossyBatcher{l}
	}
	return l, l
}

// history is an Observer that also keeps run records (a RunObserver), as
// the cluster's history does.
type history struct {
	*recorder
	mu   sync.Mutex
	recs []scheduler.RunRecord
}

func (h *history) RunRecorded(r scheduler.RunRecord) {
	h.mu.Lock()
	h.recs = append(h.recs, r)
	h.mu.Unlock()
	h.broadcast()
}

func (h *history) records() []scheduler.RunRecord {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]scheduler.RunRecord(nil), h.recs...)
}

var pathNames = map[bool]string{false: "unbatched", true: "batched"}

// A try-lock-tick whose replies are lost (the backend granted it, the
// answer came after op_timeout) is resent, same token and same T, until
// the backend's answer comes: the grant it made is recognised, and the
// tick runs, once. Skipped as backend_error instead, T ran nowhere: its
// mark was raised, so no node runs it, this one's catch-up included.
func TestUndecidedTickIsResentAndRuns(t *testing.T) {
	for _, batched := range []bool{false, true} {
		t.Run(pathNames[batched], func(t *testing.T) {
			t.Parallel()
			clock := fakeclock.New(t0)
			l, locker := newLossy(clock, batched)
			jb := &countingJob{}
			h := newHarness(t, scheduler.Options{Clock: clock, Locker: locker, Backend: hints.Distributed},
				sched("s", everyMinute, hints.RequireGlobal, jb)).start()
			l.losing(3)

			h.step(time.Minute)
			_, skips, _ := h.rec.snapshot()
			if got := jb.got(); len(got) != 1 || !got[0].Time.Equal(t0.Add(time.Minute)) {
				t.Fatalf("ran %v (skips %v), want the tick at %v once", got, skips, t0.Add(time.Minute))
			}
			if len(skips) != 0 {
				t.Errorf("skips %v, want none", skips)
			}
			calls, tokens := l.sent()
			if calls != 4 {
				t.Errorf("%d try-lock-ticks, want 4 (3 replies lost, then the resend answered)", calls)
			}
			for _, tok := range tokens {
				if tok == "" || tok != tokens[0] {
					t.Fatalf("tokens %q: want the scheduler's own, the same in every resend", tokens)
				}
			}
			if who := h.heldBy("s"); who != "" {
				t.Errorf("lock held by %q after the run", who)
			}
			h.step(time.Minute) // the next tick asks with a token of its own
			if got := jb.got(); len(got) != 2 {
				t.Errorf("ran %v, want the next tick too", got)
			}
			if _, tokens := l.sent(); tokens[len(tokens)-1] == tokens[0] {
				t.Errorf("the next tick asked with the previous tick's token")
			}
		})
	}
}

// A grant that comes after its tick left its catch-up window (its reply
// lost, recognised by a resend 3 s after T, the window 2 s) is not run:
// its lock is given back at once, not kept until its TTL (an hour), and
// the run is in history as not run, with its reason; the tick is counted
// skipped as missed. Never dropped silently.
func TestGrantPastItsWindowIsReleasedAndRecorded(t *testing.T) {
	for _, batched := range []bool{false, true} {
		t.Run(pathNames[batched], func(t *testing.T) {
			t.Parallel()
			clock := fakeclock.New(t0)
			l, locker := newLossy(clock, batched)
			jb := &countingJob{}
			s := sched("s", everyMinute, hints.RequireGlobal, jb)
			s.ExpectedRuntime = time.Hour
			s.CatchupWindow = 2 * time.Second
			hist := &history{recorder: newRecorder()}
			h := newHarness(t, scheduler.Options{Clock: clock, Locker: locker, Backend: hints.Distributed,
				Observer: hist, MaxClockSkew: 500 * time.Millisecond}, s)
			h.rec = hist.recorder
			h.start()
			l.losing(1)
			l.mu.Lock()
			l.onCall = func(call int) {
				if call == 2 { // the resend is decided 3 s after T
					clock.Advance(3 * time.Second)
				}
			}
			l.mu.Unlock()

			clock.Advance(time.Minute)
			h.rec.waitSkips(t, 1)
			h.idle()
			tick := t0.Add(time.Minute)
			if got := jb.got(); len(got) != 0 {
				t.Errorf("ran %v, want no run: granted past its window", got)
			}
			_, skips, _ := h.rec.snapshot()
			if len(skips) != 1 || !skips[0].tick.Equal(tick) || skips[0].reason != scheduler.SkipMissed {
				t.Errorf("skips %v, want %v skipped as missed", skips, tick)
			}
			recs := hist.records()
			if len(recs) != 1 {
				t.Fatalf("run records %+v, want one: the grant, not run", recs)
			}
			r := recs[0]
			if r.Result != scheduler.RunResult("not_run") || !r.Tick.Equal(tick) || r.Fence <= 0 || r.Err == nil ||
				!strings.Contains(r.Err.Error(), "catch-up window") || r.Node != "node-a" || r.RunID == "" {
				t.Errorf("run record %+v (err %v), want tick %v not_run with its fence and the window as the reason", r, r.Err, tick)
			}
			if who := h.heldBy("s"); who != "" {
				t.Errorf("lock held by %q: a grant that cannot run must be given back", who)
			}
			if h.logs.count(slog.LevelWarn, "tick granted too late to run: not run, its lock given back") != 1 {
				t.Errorf("want one warning for the grant not run")
			}
		})
	}
}

// Replies lost for longer than the usable lease (the TTL less the safety
// margin), though not the backend's: the backend still holds the first
// attempt's grant, extended by each resend that reached it, so a resend
// answered after the fault finds it and the tick runs, with a lease
// counted from that resend. Counted from the first attempt (or resending
// only for the usable lease), the grant was given back as too late and T
// ran nowhere: TestLateRepliesRunEveryTickOnce in e2e.
func TestGrantFoundPastTheUsableLeaseRuns(t *testing.T) {
	for _, batched := range []bool{false, true} {
		t.Run(pathNames[batched], func(t *testing.T) {
			t.Parallel()
			clock := fakeclock.New(t0)
			l, locker := newLossy(clock, batched)
			jb := &countingJob{}
			s := sched("s", everyMinute, hints.RequireGlobal, jb)
			s.ExpectedRuntime = time.Second // TTL 2 s, usable lease 1 s
			s.CatchupWindow = 10 * time.Second
			h := newHarness(t, scheduler.Options{Clock: clock, Locker: locker, Backend: hints.Distributed,
				SafetyMargin: time.Second, MaxClockSkew: 500 * time.Millisecond}, s).start()
			l.losing(4)
			l.mu.Lock()
			l.onCall = func(call int) {
				if call > 1 && call <= 5 { // each lost round trip takes 400 ms
					clock.Advance(400 * time.Millisecond)
				}
			}
			l.mu.Unlock()

			clock.Advance(time.Minute)
			h.rec.waitRuns(t, 1)
			h.idle()
			if got := jb.got(); len(got) != 1 || !got[0].Time.Equal(t0.Add(time.Minute)) {
				t.Fatalf("ran %v, want the tick once: its grant was found 1.6 s after T, within the backend's 2 s lease", got)
			}
			if _, skips, _ := h.rec.snapshot(); len(skips) != 0 {
				t.Errorf("skips %v, want none", skips)
			}
		})
	}
}

// A try-lock-tick whose replies stay lost is resent only while a grant
// could still run: once T left its catch-up window it is skipped as
// backend_error, its grant unknown, and the outage is logged once, with
// why.
func TestUndecidedTickGivesUpPastItsWindow(t *testing.T) {
	for _, batched := range []bool{false, true} {
		t.Run(pathNames[batched], func(t *testing.T) {
			t.Parallel()
			clock := fakeclock.New(t0)
			l, locker := newLossy(clock, batched)
			jb := &countingJob{}
			s := sched("s", everyMinute, hints.RequireGlobal, jb)
			s.ExpectedRuntime = time.Hour
			s.CatchupWindow = 2 * time.Second
			h := newHarness(t, scheduler.Options{Clock: clock, Locker: locker, Backend: hints.Distributed,
				MaxClockSkew: 500 * time.Millisecond}, s).start()
			l.losing(1 << 30)
			l.mu.Lock()
			l.onCall = func(call int) {
				if call == 3 { // T is 3 s old when the second resend is answered
					clock.Advance(3 * time.Second)
				}
			}
			l.mu.Unlock()

			clock.Advance(time.Minute)
			skips := h.rec.waitSkips(t, 1)
			h.idle()
			if len(skips) != 1 || skips[0].reason != scheduler.SkipBackendError || len(jb.got()) != 0 {
				t.Fatalf("skips %v, runs %v; want the tick skipped as backend_error", skips, jb.got())
			}
			if calls, _ := l.sent(); calls != 3 {
				t.Errorf("%d try-lock-ticks, want 3: resent until T left its window", calls)
			}
			const failed = "lock backend failed: locked ticks are skipped until it answers again"
			if n := h.logs.count(slog.LevelWarn, failed); n != 1 {
				t.Errorf("%d outage warnings, want 1", n)
			}
			if n := h.logs.count(slog.LevelDebug, "try-lock-tick failed"); n != 1 {
				t.Fatalf("%d lines for the tick given up, want 1", n)
			}
			if e := h.logs.attr("try-lock-tick failed", "error"); !strings.Contains(e, "grant unknown") {
				t.Errorf("the tick given up was logged with %q, want it to say the grant is unknown", e)
			}
		})
	}
}

// A tick given up with its grant unknown (every reply lost until the
// resends ended) is in history as not run, its error saying the grant is
// unknown: the backend may have granted it (its mark raised, so no node
// runs it), and an operator reading history must find the tick accounted
// for, not missing without a word (invariant 2, no grant lost; sim seeds with
// a reply lost and its resend lost again).
func TestTickGivenUpWithItsGrantUnknownIsInHistory(t *testing.T) {
	for _, batched := range []bool{false, true} {
		t.Run(pathNames[batched], func(t *testing.T) {
			t.Parallel()
			clock := fakeclock.New(t0)
			l, locker := newLossy(clock, batched)
			jb := &countingJob{}
			s := sched("s", everyMinute, hints.RequireGlobal, jb)
			s.ExpectedRuntime = time.Hour
			s.CatchupWindow = 2 * time.Second
			hist := &history{recorder: newRecorder()}
			h := newHarness(t, scheduler.Options{Clock: clock, Locker: locker, Backend: hints.Distributed,
				Observer: hist, MaxClockSkew: 500 * time.Millisecond}, s)
			h.rec = hist.recorder
			h.start()
			l.losing(1 << 30)
			l.mu.Lock()
			l.onCall = func(call int) {
				if call == 3 { // T is 3 s old when the second resend is answered
					clock.Advance(3 * time.Second)
				}
			}
			l.mu.Unlock()

			clock.Advance(time.Minute)
			h.rec.waitSkips(t, 1)
			h.idle()
			recs := hist.records()
			if len(recs) != 1 {
				t.Fatalf("run records %+v, want one: the tick given up, its grant unknown", recs)
			}
			r := recs[0]
			if r.Result != scheduler.ResultNotRun || !r.Tick.Equal(t0.Add(time.Minute)) || r.Fence != 0 ||
				!errors.Is(r.Err, scheduler.ErrGrantUnknown) {
				t.Errorf("record %+v, want T not run, no fence, its error ErrGrantUnknown", r)
			}
		})
	}
}

// A resend answered done or contended once the backend may have dropped
// its grant's record (GrantKeep after the first attempt) proves nothing:
// the grant may be the one that raised the mark. The tick is recorded as
// not run, its grant unknown, not skipped as contended with no word (sim
// seed 516: a resend stalled past the keep, answered contended).
func TestResendAnsweredPastTheGrantKeepIsGrantUnknown(t *testing.T) {
	for _, batched := range []bool{false, true} {
		t.Run(pathNames[batched], func(t *testing.T) {
			t.Parallel()
			clock := fakeclock.New(t0)
			l, locker := newLossy(clock, batched)
			jb := &countingJob{}
			s := sched("s", everyMinute, hints.RequireGlobal, jb)
			s.ExpectedRuntime = time.Second
			s.CatchupWindow = time.Hour
			hist := &history{recorder: newRecorder()}
			h := newHarness(t, scheduler.Options{Clock: clock, Locker: locker, Backend: hints.Distributed,
				Observer: hist, SafetyMargin: time.Second}, s)
			h.rec = hist.recorder
			h.start()
			l.losing(1) // the first attempt is granted, its reply lost
			l.mu.Lock()
			l.onCall = func(call int) {
				if call == 2 { // the resend reaches the backend long after the grant's record lapsed
					clock.Advance(time.Minute - time.Second)
				}
			}
			l.mu.Unlock()

			clock.Advance(time.Minute)
			h.rec.waitSkips(t, 1)
			h.idle()
			if got := jb.got(); len(got) != 0 {
				t.Fatalf("ran %v, want no run", got)
			}
			var found bool
			for _, r := range hist.records() {
				if r.Tick.Equal(t0.Add(time.Minute)) && r.Result == scheduler.ResultNotRun && errors.Is(r.Err, scheduler.ErrGrantUnknown) {
					found = true
				}
			}
			if !found {
				_, skips, _ := h.rec.snapshot()
				t.Errorf("records %+v (skips %v), want the tick at %v not run, its grant unknown", hist.records(), skips, t0.Add(time.Minute))
			}
		})
	}
}

// So does a resend answered missed or paused past the keep: the backend,
// its grant's record gone and the mark set back (a store restored from an
// old snapshot), decides the tick anew, and T being past its window (or
// the key paused) says nothing of the grant the first attempt got (sim
// seed 366805: the first reply lost, marks set back 27 s, the resend
// stalled until the keep ended and was answered missed; the tick was
// skipped as missed, its grant in no record).
func TestResendAnsweredMissedOrPausedPastTheGrantKeepIsGrantUnknown(t *testing.T) {
	for _, verdict := range []string{"missed", "paused"} {
		for _, batched := range []bool{false, true} {
			t.Run(verdict+"/"+pathNames[batched], func(t *testing.T) {
				t.Parallel()
				clock := fakeclock.New(t0)
				l, locker := newLossy(clock, batched)
				jb := &countingJob{}
				s := sched("s", everyMinute, hints.RequireGlobal, jb)
				s.ExpectedRuntime = time.Second
				s.CatchupWindow = 10 * time.Second
				hist := &history{recorder: newRecorder()}
				h := newHarness(t, scheduler.Options{Clock: clock, Locker: locker, Backend: hints.Distributed,
					Observer: hist, SafetyMargin: time.Second}, s)
				h.rec = hist.recorder
				h.start()
				l.losing(1) // the first attempt is granted, its reply lost
				l.mu.Lock()
				l.onCall = func(call int) {
					if call != 2 {
						return
					}
					// The resend reaches the backend long after the
					// grant's record lapsed, T past its window, and the
					// mark set back before T (or the key paused).
					clock.Advance(30 * time.Second)
					l.mem.RewindMarks(time.Hour, "s")
					if verdict == "paused" {
						if err := l.mem.SetPause(context.Background(), "s", locking.Pause{Paused: true}); err != nil {
							t.Errorf("pause: %v", err)
						}
					}
				}
				l.mu.Unlock()

				clock.Advance(time.Minute)
				h.rec.waitSkips(t, 1)
				h.idle()
				if got := jb.got(); len(got) != 0 {
					t.Fatalf("ran %v, want no run", got)
				}
				var found bool
				for _, r := range hist.records() {
					if r.Tick.Equal(t0.Add(time.Minute)) && r.Result == scheduler.ResultNotRun && errors.Is(r.Err, scheduler.ErrGrantUnknown) {
						found = true
					}
				}
				if !found {
					_, skips, _ := h.rec.snapshot()
					t.Errorf("records %+v (skips %v), want the tick at %v not run, its grant unknown", hist.records(), skips, t0.Add(time.Minute))
				}
			})
		}
	}
}

// aheadOnResend is a memory backend behind a link that loses every first
// attempt of a try-lock-tick before the backend saw it (delayed, as it
// turns out: the test applies it later) and refuses every resend as ahead
// of the backend's clock, as it refuses the ticks of a node whose clock
// runs ahead by more than max_clock_skew.
type aheadOnResend struct {
	*faulty // not in process: its requests carry the scheduler's token
	mu      sync.Mutex
	on      bool // from the test's tick on; before, the backend answers
	delayed []locking.TickRequest
}

func (a *aheadOnResend) TryLockTick(ctx context.Context, req locking.TickRequest) (locking.TickAnswer, error) {
	a.mu.Lock()
	on := a.on
	a.mu.Unlock()
	if !on {
		return a.faulty.TryLockTick(ctx, req)
	}
	if req.Resend {
		return locking.TickAnswer{}, &locking.AheadError{Key: req.Key, Tick: req.Tick, Offset: 2 * time.Second, MaxSkew: req.MaxSkew}
	}
	a.mu.Lock()
	a.delayed = append(a.delayed, req)
	a.mu.Unlock()
	return locking.TickAnswer{}, errReplyLost
}

type aheadOnResendBatcher struct{ *aheadOnResend }

func (a aheadOnResendBatcher) TryLockTicks(ctx context.Context, reqs []locking.TickRequest) ([]locking.TickAnswer, []error) {
	answers, errs := make([]locking.TickAnswer, len(reqs)), make([]error, len(reqs))
	for i, r := range reqs {
		answers[i], errs[i] = a.TryLockTick(ctx, r)
	}
	return answers, errs
}

// A resend refused as ahead of the backend's clock decides nothing about
// the attempts before it: one delayed on its way may still reach the
// backend once T is due there and be granted, to a node that moved on
// (sim seeds 3149 and 19170: a node 3 s ahead, its first attempt failed,
// the resend refused, the first attempt's late copy granted a second
// later). The tick is recorded as not run, its grant unknown, as one whose
// resends went unanswered is: never consumed with no word.
func TestResendRefusedAheadIsGrantUnknown(t *testing.T) {
	for _, batched := range []bool{false, true} {
		t.Run(pathNames[batched], func(t *testing.T) {
			t.Parallel()
			clock := fakeclock.New(t0)
			mem := memory.New(memory.WithClock(clock.Now), memory.WithHolder("node-a"))
			a := &aheadOnResend{faulty: &faulty{inner: mem}}
			var locker scheduler.Locker = a
			if batched {
				locker = aheadOnResendBatcher{a}
			}
			jb := &countingJob{}
			hist := &history{recorder: newRecorder()}
			h := newHarness(t, scheduler.Options{Clock: clock, Locker: locker, Backend: hints.Distributed,
				Observer: hist}, sched("s", everyMinute, hints.RequireGlobal, jb))
			h.rec = hist.recorder
			h.start()
			a.mu.Lock()
			a.on = true
			a.mu.Unlock()

			clock.Advance(time.Minute)
			h.rec.waitSkips(t, 1)
			h.idle()
			tick := t0.Add(time.Minute)
			a.mu.Lock()
			var late []locking.TickRequest
			for _, r := range a.delayed {
				if r.Tick.Equal(tick) {
					late = append(late, r)
				}
			}
			a.mu.Unlock()
			if len(late) != 1 {
				t.Fatalf("first attempts of T %v, want one", late)
			}
			// The delayed first attempt lands: granted, to no one.
			if ans, err := mem.TryLockTick(context.Background(), late[0]); err != nil || ans.Verdict != locking.TickGranted {
				t.Fatalf("the late first attempt: %v %v, want granted", ans.Verdict, err)
			}
			if got := jb.got(); len(got) != 0 {
				t.Fatalf("ran %v, want no run", got)
			}
			var found bool
			for _, r := range hist.records() {
				if r.Tick.Equal(tick) && r.Result == scheduler.ResultNotRun && errors.Is(r.Err, scheduler.ErrGrantUnknown) {
					found = true
				}
			}
			if !found {
				_, skips, _ := h.rec.snapshot()
				t.Errorf("records %+v (skips %v), want the tick at %v not run, its grant unknown", hist.records(), skips, tick)
			}
		})
	}
}
