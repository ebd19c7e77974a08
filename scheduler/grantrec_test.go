package scheduler_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/hints"
	"github.com/bext-dev/bext-scheduler/locking"
	"github.com/bext-dev/bext-scheduler/scheduler"
	"github.com/bext-dev/bext-scheduler/scheduler/fakeclock"
)

// A try-lock-tick whose reply is lost and whose resend reaches the backend
// only after the grant's TTL ran out (a lost reply costs the caller its
// whole op_timeout): the backend kept a record of the grant, so the tick
// is never answered done (granted, T marked, and run nowhere). With
// nothing asked of the schedule since, the resend is granted again with
// the grant's fence and the tick runs, once (its first resend's reply is
// lost too, and the next one finds the lock the resend took, with a lease
// from then). Paused meanwhile, the resend is answered expired, and the
// tick is recorded as not run with the grant's fence, skipped as
// backend_error and logged at warn.
func TestResendPastItsGrantsTTLIsNotSilentlyDone(t *testing.T) {
	for _, paused := range []bool{false, true} {
		for _, batched := range []bool{false, true} {
			name := pathNames[batched] + "/resumed"
			if paused {
				name = pathNames[batched] + "/paused"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				clock := fakeclock.New(t0)
				l, locker := newLossy(clock, batched)
				jb := &countingJob{}
				s := sched("s", everyMinute, hints.RequireGlobal, jb)
				s.ExpectedRuntime = time.Second // TTL 2 s
				s.CatchupWindow = 10 * time.Second
				hist := &history{recorder: newRecorder()}
				h := newHarness(t, scheduler.Options{Clock: clock, Locker: locker, Backend: hints.Distributed,
					Observer: hist, SafetyMargin: time.Second, MaxClockSkew: 500 * time.Millisecond}, s)
				h.rec = hist.recorder
				h.start()
				lost := 2
				if paused {
					lost = 1
				}
				l.losing(lost)
				l.mu.Lock()
				l.onCall = func(call int) {
					if call == 2 { // the first resend reaches the backend 3 s after T
						clock.Advance(3 * time.Second)
						if paused {
							if err := l.mem.SetPause(context.Background(), "s", locking.Pause{Paused: true}); err != nil {
								t.Error(err)
							}
						}
					}
				}
				l.mu.Unlock()

				clock.Advance(time.Minute)
				tick := t0.Add(time.Minute)
				if !paused {
					h.rec.waitRuns(t, 1)
					h.idle()
					if got := jb.got(); len(got) != 1 || !got[0].Time.Equal(tick) {
						t.Fatalf("ran %v, want the tick at %v once: its grant was continued by the resend", got, tick)
					}
					if _, skips, _ := h.rec.snapshot(); len(skips) != 0 {
						t.Errorf("skips %v, want none", skips)
					}
					return
				}
				h.rec.waitSkips(t, 1)
				h.idle()
				if got := jb.got(); len(got) != 0 {
					t.Errorf("ran %v, want no run: paused before the resend came", got)
				}
				_, skips, _ := h.rec.snapshot()
				if len(skips) != 1 || !skips[0].tick.Equal(tick) || skips[0].reason != scheduler.SkipBackendError {
					t.Errorf("skips %v, want %v skipped as backend_error", skips, tick)
				}
				recs := hist.records()
				if len(recs) != 1 {
					t.Fatalf("run records %+v, want one: the grant, not run", recs)
				}
				r := recs[0]
				if r.Result != scheduler.RunResult("not_run") || !r.Tick.Equal(tick) || r.Fence <= 0 || r.Err == nil ||
					!strings.Contains(r.Err.Error(), "expired") || r.Node != "node-a" || r.RunID == "" {
					t.Errorf("run record %+v (err %v), want tick %v not_run with its fence and the expiry as the reason", r, r.Err, tick)
				}
				if h.logs.count(slog.LevelWarn, "tick granted but its lease ended before the answer came: not run") != 1 {
					t.Errorf("want one warning for the grant not run")
				}
			})
		}
	}
}

// slowLoss is a memory backend whose first try-lock-tick's reply is lost
// after costing its caller cost on the clock (a lost reply waits out the
// whole op_timeout): the backend decided it at once.
type slowLoss struct {
	*lossy
	clock *fakeclock.Clock
	cost  time.Duration
}

func (l slowLoss) TryLockTick(ctx context.Context, req locking.TickRequest) (locking.TickAnswer, error) {
	lose := l.call([]locking.TickRequest{req})
	ans, err := l.mem.TryLockTick(context.Background(), req)
	if lose {
		l.clock.Advance(l.cost)
		return locking.TickAnswer{}, errReplyLost
	}
	return ans, err
}

// A lost reply that cost its caller more than T's catch-up window: the
// resends would end with the window (and a second), which had passed
// before the first could go. One resend goes all the same, while the
// backend keeps the grant's record: it finds the grant, too late to run,
// which is given back and recorded as not run with its fence (skipped as
// missed). Given up at once, T was granted and lost with no word.
func TestLostReplyPastTheWindowIsResentOnce(t *testing.T) {
	t.Parallel()
	clock := fakeclock.New(t0)
	l, _ := newLossy(clock, false)
	locker := slowLoss{lossy: l, clock: clock, cost: 4 * time.Second}
	jb := &countingJob{}
	s := sched("s", everyMinute, hints.RequireGlobal, jb)
	s.ExpectedRuntime = 10 * time.Second
	s.CatchupWindow = 2 * time.Second
	hist := &history{recorder: newRecorder()}
	h := newHarness(t, scheduler.Options{Clock: clock, Locker: locker, Backend: hints.Distributed,
		Observer: hist, MaxClockSkew: 500 * time.Millisecond}, s)
	h.rec = hist.recorder
	h.start()
	l.losing(1)

	clock.Advance(time.Minute)
	h.rec.waitSkips(t, 1)
	h.idle()
	tick := t0.Add(time.Minute)
	if got := jb.got(); len(got) != 0 {
		t.Errorf("ran %v, want no run: its grant was found past its window", got)
	}
	if calls, _ := l.sent(); calls != 2 {
		t.Errorf("%d try-lock-ticks, want 2: the lost one and one resend", calls)
	}
	_, skips, _ := h.rec.snapshot()
	if len(skips) != 1 || !skips[0].tick.Equal(tick) || skips[0].reason != scheduler.SkipMissed {
		t.Errorf("skips %v, want %v skipped as missed", skips, tick)
	}
	recs := hist.records()
	if len(recs) != 1 || recs[0].Result != scheduler.RunResult("not_run") || !recs[0].Tick.Equal(tick) || recs[0].Fence <= 0 {
		t.Fatalf("run records %+v, want one: the grant, not run, with its fence", recs)
	}
	if who := h.heldBy("s"); who != "" {
		t.Errorf("lock held by %q: a grant that cannot run must be given back", who)
	}
}
