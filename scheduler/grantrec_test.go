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
