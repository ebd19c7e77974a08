package scheduler_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/hints"
	"github.com/bext-dev/bext-scheduler/locking"
	"github.com/bext-dev/bext-scheduler/locking/memory"
	"github.com/bext-dev/bext-scheduler/scheduler"
	"github.com/bext-dev/bext-scheduler/scheduler/fakeclock"
)

// histRecs is a recorder that also keeps what history is told: run starts,
// run records and skip records.
type histRecs struct {
	*recorder
	mu     sync.Mutex
	starts []scheduler.RunStart
	runs   []scheduler.RunRecord
	skips  []scheduler.SkipRecord
}

func (r *histRecs) RunStarted(s scheduler.RunStart) {
	r.mu.Lock()
	r.starts = append(r.starts, s)
	r.mu.Unlock()
	r.broadcast()
}

func (r *histRecs) RunRecorded(rec scheduler.RunRecord) {
	r.mu.Lock()
	r.runs = append(r.runs, rec)
	r.mu.Unlock()
	r.broadcast()
}

func (r *histRecs) SkipRecorded(k scheduler.SkipRecord) {
	r.mu.Lock()
	r.skips = append(r.skips, k)
	r.mu.Unlock()
	r.broadcast()
}

func (r *histRecs) waitSkipRecs(t testing.TB, n int) []scheduler.SkipRecord {
	t.Helper()
	r.wait(t, fmt.Sprintf("%d skip records", n), func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.skips) >= n
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]scheduler.SkipRecord(nil), r.skips...)
}

func (r *histRecs) skipRecs() []scheduler.SkipRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]scheduler.SkipRecord(nil), r.skips...)
}

// histHarness runs one every-minute require_global schedule "s" on node-a
// with job, history's observer recording, on locker (nil: the harness's).
func histHarness(t *testing.T, job scheduler.Job, locker scheduler.Locker) (*harness, *histRecs) {
	return histHarnessOn(t, fakeclock.New(t0), job, locker)
}

// histHarnessOn is histHarness on clock.
func histHarnessOn(t *testing.T, clock *fakeclock.Clock, job scheduler.Job, locker scheduler.Locker) (*harness, *histRecs) {
	t.Helper()
	s := sched("s", everyMinute, hints.RequireGlobal, job)
	s.ExpectedRuntime = 10 * time.Minute // a lease that outlives the clock's minute steps
	h := newHarness(t, scheduler.Options{Clock: clock}, s)
	recs := &histRecs{recorder: h.rec}
	if locker == nil {
		locker = h.locker
	}
	h.s = mustNew(t, scheduler.Options{Clock: h.clock, Locker: locker, Backend: hints.Distributed,
		Observer: recs, NodeID: "node-a"}, s)
	return h.start(), recs
}

func wantSkipRec(t *testing.T, got scheduler.SkipRecord, tick time.Time, why scheduler.RecordReason) {
	t.Helper()
	if got.Schedule != "s" || !got.Tick.Equal(tick) || got.Reason != why || got.Node != "node-a" || got.At.IsZero() {
		t.Fatalf("skip record %+v, want schedule s, tick %v, reason %s, node node-a, a decision time", got, tick, why)
	}
}

// A tick the backend answers paused is consumed (its mark raised): history
// is told, so that audit does not call it lost.
func TestPausedTickIsRecorded(t *testing.T) {
	h, recs := histHarness(t, &countingJob{}, nil)
	if err := h.mem.SetPause(context.Background(), "s", locking.Pause{Paused: true, Note: "maintenance"}); err != nil {
		t.Fatal(err)
	}
	h.step(time.Minute)
	ks := recs.waitSkipRecs(t, 1)
	wantSkipRec(t, ks[0], t0.Add(time.Minute), scheduler.RecordPaused)
}

// A tick answered missed (decided beyond its catch-up window: here this
// node's clock runs two minutes behind the backend's) is recorded missed.
func TestMissedTickIsRecorded(t *testing.T) {
	clock := fakeclock.New(t0)
	var behind atomic.Int64 // how far this node's clock runs behind the backend's, once started
	ahead := memory.New(memory.WithClock(func() time.Time { return clock.Now().Add(time.Duration(behind.Load())) }))
	h, recs := histHarnessOn(t, clock, &countingJob{}, ahead)
	behind.Store(int64(2 * time.Minute))
	h.step(time.Minute)
	ks := recs.waitSkipRecs(t, 1)
	wantSkipRec(t, ks[0], t0.Add(time.Minute), scheduler.RecordMissed)
}

// A tick whose schedule's lock another node's run holds (answered
// contended: the mark is before the tick) is an overlap; so is one this
// node skips because its own run still goes. A tick answered done (the
// usual answer to every node but one) is no record.
func TestOverlapTicksAreRecorded(t *testing.T) {
	job := newBlockingJob()
	h, recs := histHarness(t, job, nil)
	// Another node's run holds the schedule's lock.
	held, err := h.peer.TryLock(context.Background(), "s", 5*time.Minute)
	if err != nil || held == nil {
		t.Fatalf("peer TryLock: %v, %v", held, err)
	}
	h.step(time.Minute)
	ks := recs.waitSkipRecs(t, 1)
	wantSkipRec(t, ks[0], t0.Add(time.Minute), scheduler.RecordOverlap)
	if err := h.peer.Release(context.Background(), held); err != nil {
		t.Fatal(err)
	}
	// This node's own run of the next tick still goes at the one after.
	// (The grant of that next tick passed the mark over +1m, which it
	// also records, as stopped: history keeps a tick's first record.)
	h.loopParked()
	h.clock.Advance(time.Minute)
	job.waitStarted(t)
	h.loopParked()
	h.clock.Advance(time.Minute)
	recs.waitSkipRecs(t, 3)
	close(job.release)
	h.idle()
	first := map[time.Time]scheduler.SkipRecord{}
	for _, k := range recs.skipRecs() {
		if _, ok := first[k.Tick]; !ok {
			first[k.Tick] = k
		}
	}
	if len(first) != 2 {
		t.Fatalf("records of %d ticks, want 2 (+1m, +3m): %+v", len(first), recs.skipRecs())
	}
	wantSkipRec(t, first[t0.Add(time.Minute)], t0.Add(time.Minute), scheduler.RecordOverlap)
	wantSkipRec(t, first[t0.Add(3*time.Minute)], t0.Add(3*time.Minute), scheduler.RecordOverlap)
}

// A run's start is told with the start and the fence its final record
// has, so that the provisional record history writes at the start names
// the run its final record replaces.
func TestRunStartNamesItsRecord(t *testing.T) {
	job := &failingJob{failures: 1}
	s := sched("s", everyMinute, hints.RequireGlobal, job)
	s.Retries, s.RetryBackoff, s.ExpectedRuntime = 1, 10*time.Second, time.Minute
	h := newHarness(t, scheduler.Options{}, s)
	recs := &histRecs{recorder: h.rec}
	h.s = mustNew(t, scheduler.Options{Clock: h.clock, Locker: h.locker, Backend: hints.Distributed,
		Observer: recs, NodeID: "node-a"}, s)
	h.start()
	h.clock.Advance(time.Minute)
	waitAttempts(t, job, 1)
	h.advanceWhenArmed(3, 10*time.Second) // the loop's timer, the backoff and its renewal
	recs.wait(t, "a run record", func() bool {
		recs.mu.Lock()
		defer recs.mu.Unlock()
		return len(recs.runs) == 1
	})
	recs.mu.Lock()
	defer recs.mu.Unlock()
	if len(recs.starts) != 1 {
		t.Fatalf("%d starts told, want 1 (retries are one run)", len(recs.starts))
	}
	st, r := recs.starts[0], recs.runs[0]
	if st.RunID != r.RunID || !st.Start.Equal(r.Start) || st.Fence != r.Fence || st.Fence == 0 || !st.Tick.Equal(r.Tick) || st.Node != r.Node {
		t.Fatalf("start %+v, record %+v: want one run id, start, tick, node and a non-zero fence", st, r)
	}
	if r.Attempts != 2 {
		t.Fatalf("record of %d attempts, want 2", r.Attempts)
	}
}

// The ticks a decision passes the mark over, which no node asked for (here
// the backend's clock and this node's jump five minutes while the node is
// away), are recorded stopped by the node whose decision passed them.
func TestTicksPassedOverAreRecordedStopped(t *testing.T) {
	h, recs := histHarness(t, &countingJob{}, nil)
	h.step(time.Minute) // t0+1m runs: the mark is at it
	h.step(5 * time.Minute)
	byTick := map[time.Time]scheduler.RecordReason{}
	for _, k := range recs.skipRecs() {
		byTick[k.Tick] = k.Reason
	}
	recs.mu.Lock()
	ran := map[time.Time]bool{}
	for _, r := range recs.runs {
		ran[r.Tick] = true
	}
	recs.mu.Unlock()
	for k := 2; k <= 5; k++ {
		if at := t0.Add(time.Duration(k) * time.Minute); byTick[at] != scheduler.RecordStopped || ran[at] {
			t.Errorf("tick +%dm: record %q, ran %v; want recorded stopped (skips %v)", k, byTick[at], ran[at], byTick)
		}
	}
	if at := t0.Add(6 * time.Minute); !ran[at] || byTick[at] != "" {
		t.Errorf("tick +6m: ran %v, record %q; want run, no record", ran[at], byTick[at])
	}
	if len(byTick) != 4 {
		t.Errorf("%d skip records, want 4: %v", len(byTick), byTick)
	}
}

// A tick answered paused whose reply is lost is resent (same token and T),
// and the resend is answered paused again from the backend's record of
// that verdict (the mark is at T: decided anew it would be done): history
// is told the tick was paused, once, and audit does not call it lost.
func TestPausedTickWithLostReplyIsRecorded(t *testing.T) {
	for _, batched := range []bool{false, true} {
		t.Run(pathNames[batched], func(t *testing.T) {
			t.Parallel()
			clock := fakeclock.New(t0)
			l, locker := newLossy(clock, batched)
			h, recs := histHarnessOn(t, clock, &countingJob{}, locker)
			if err := l.mem.SetPause(context.Background(), "s", locking.Pause{Paused: true, Note: "maintenance"}); err != nil {
				t.Fatal(err)
			}
			l.losing(1) // the first attempt is answered paused, its reply lost
			h.step(time.Minute)
			ks := recs.waitSkipRecs(t, 1)
			wantSkipRec(t, ks[0], t0.Add(time.Minute), scheduler.RecordPaused)
			h.idle()
			if calls, tokens := l.sent(); calls != 2 || tokens[0] == "" || tokens[1] != tokens[0] {
				t.Errorf("%d try-lock-ticks with tokens %q, want 2 (the reply lost, then the resend), the same token", calls, tokens)
			}
			if ks := recs.skipRecs(); len(ks) != 1 {
				t.Errorf("skip records %+v, want one", ks)
			}
		})
	}
}
