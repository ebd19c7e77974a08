package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/bext-dev/bext-scheduler/internal/workpool"
	"github.com/bext-dev/bext-scheduler/locking"
)

// This file is a tick's life: docs/DESIGN.md "A tick's life", steps 1 to
// 8, in order. A tick is one object (tick, below) from the moment it
// fires until end, which performs every obligation it holds exactly once.
//
//  1. fire: the loop pops it (loop.go popDueLocked: the overlap check needs
//     the schedule's state at that instant), the catch-up tries it
//     (catchup.go), or a manual run starts it (manual.go); newTickLocked.
//  2. start: the hint (resolved once per schedule by compile). A node-local
//     tick runs here (runLocal); a manual one goes to manual.go.
//  3. the handoff: a node that is not the tick's preferred one waits its
//     turn (handoff.go), and ends the tick if it hears it was decided.
//  4. ask: try-lock-tick, alone or batched (internal/batch); the answer
//     comes back into the tick (answered), and an undecided one is sent
//     again (resend.go). The backend decides done, paused, missed,
//     contended or granted, on its own clock.
//  5. locked: the jitter, holding the lock.
//  6. the job and its retries, under the lock, watched (run.go).
//  7. afterRun: the release, batched when the backend can (release.go).
//  8. the report: observer, log line, history record (record.go); then
//     end.
//
// What keeps a tick from running twice is the backend's tick mark, not a
// lock held after the run: try-lock-tick answers "done" to every node that
// asks for T once T was claimed, however far behind its clock runs, so the
// lock is released the moment the run ends (step 7) and the next tick is
// free to run anywhere.

// tick is one tick of a schedule on this node. One goroutine at a time
// owns it: the loop, a worker of the pool (internal/workpool), a batch's
// sender, a handoff timer; whoever hands it on stops touching it.
type tick struct {
	st       *schedState
	def      *compiled // the definition the tick fired with (Reload may swap st.def)
	at       time.Time // T, the scheduled time
	lateness time.Duration
	catchup  bool // tried by the catch-up (catchup.go), not by the loop
	counted  bool // a catch-up granted, and so counted in st.active
	// heldElsewhere: its last try-lock-tick was answered contended (a
	// run holds the schedule's lock while the mark is before T).
	heldElsewhere bool
	manual        *Manual // a manual run (manual.go), not a tick of the loop
	// win is the tick's catch-up window (Scheduler.window) when winSet:
	// the loop knows the next tick already, and a window of the default
	// (one period) was a Next call each time it was asked, twice a tick.
	winSet bool
	win    time.Duration

	state tickState
	step  tickStep // what the worker that takes it next does (runTask)

	// What the tick holds until its try-lock-tick is answered (letGo):
	// its share of its burst's context, which bounds the first attempt
	// (nil: none, or let go), and, preferred, its count in the handoff's
	// asking (handoff.go).
	burst     *burst
	preferred bool
	// handed: its handoff was decided already (handOffAll) and it asks.
	handed bool

	// resend, once its try-lock-tick was answered undecided, is the
	// request it sends again, token included (resend.go).
	resend *resending
	// sent is when the attempt answered was sent, on the lease clock.
	sent time.Time
	// batched is what a tick of a batching backend carries besides (made
	// at its first batched ask): a tick of a backend in this process
	// never needs it, and a tick that carried it inline was a fifth
	// larger.
	batched *batched

	lease lease      // granted: how long it may trust its lock (lease.go)
	out   runOutcome // how its run ended, once its job returned
	ran   ran        // what step 8 reports of the run
	// trace: its backend decision and run span, with a tracer (trace.go).
	trace *tickTrace
	// queued: it waits for its schedule's run in progress (overlap =
	// "queue", queue.go); nil until it first does.
	queued *queueWait
}

// batched is a tick's batched try-lock-tick, which the batcher answers
// into (reused by its resends), with its round trip bracketed on the
// scheduler's clock (before, after), and its batched release after the
// run (release.go).
type batched struct {
	call          tickCall
	before, after time.Time
	rel           releaseCall
}

// tickState is where a tick is in its life. It only moves forward
// (advance); end moves it to tickDone, once.
type tickState uint8

const (
	tickFired     tickState = iota // handed to the pool, not yet started
	tickWaiting                    // waiting for its turn (handoff.go)
	tickAsking                     // its try-lock-tick sent, or to be sent again
	tickGranted                    // granted: the jitter (step 5)
	tickRunning                    // its job runs (step 6)
	tickReleasing                  // its job returned: report and release (steps 7, 8)
	tickDone                       // ended
)

var tickStates = [...]string{"fired", "waiting", "asking", "granted", "running", "releasing", "done"}

func (st tickState) String() string { return tickStates[st] }

// tickStep is what a worker does with a tick it takes from the pool.
type tickStep uint8

const (
	stepStart    tickStep = iota // steps 2 to 4 (or a manual run)
	stepAsk                      // its turn came, or a resend is due: step 4
	stepAnswered                 // its batched try-lock-tick was answered
	stepEnd                      // its job returned: steps 7 and 8 (afterRun)
	stepRequeue                  // it waited for its schedule's run: try again (queue.go)
)

// newTickLocked makes a tick of st due at at, in flight from now on: end
// is owed for it. Under s.mu. A catch-up try is not counted as running
// (st.active) until granted: a try that is only asking must not make the
// schedule's next regular tick skip as still_running (locked counts it).
func (s *Scheduler) newTickLocked(st *schedState, at, now time.Time, catchup bool) *tick {
	if !catchup {
		st.active++
	}
	s.inflight++
	s.wg.Add(1)
	return &tick{st: st, def: st.def, at: at, lateness: now.Sub(at), catchup: catchup}
}

// advance moves t to state to. A tick never moves back, and never leaves
// tickDone: that would be a tick carried on after its end.
func (s *Scheduler) advance(t *tick, to tickState) {
	if to < t.state {
		tickMisstep(fmt.Sprintf("scheduler: tick %s of %q moved from %v back to %v", t.at.Format(time.RFC3339Nano), t.def.ID, t.state, to))
		s.log.Error("a tick's step back refused", slog.String("schedule", t.def.ID), slog.String("tick", t.at.Format(time.RFC3339)),
			slog.String("state", t.state.String()), slog.String("to", to.String()))
		return
	}
	t.state = to
}

// tickMisstep is called when a tick breaks its life's order (ended twice,
// moved back). In production it does nothing: the step is refused, and
// logged at error by its caller. The package's tests make it panic
// (export_test.go), so no such bug passes a test.
var tickMisstep = func(string) {}

// runTask is what a worker of the pool does with tick t: its next step.
// It returns t, with ok, when t's job returned in it: the pool then
// defers its end (jobReturned, pool.later).
func (s *Scheduler) runTask(t *tick) (later *tick, ok bool) {
	var returned bool
	switch t.step {
	case stepStart:
		returned = s.start(t)
	case stepAsk:
		returned = s.ask(t)
	case stepAnswered:
		returned = s.answered(t)
	case stepEnd:
		s.afterRun(t)
	case stepRequeue:
		returned = s.retryQueued(t)
	}
	return t, returned
}

// start is steps 2 and 3 of t, then step 4. Like every step it reports
// whether t's job returned in it: the caller then carries on with afterRun
// (the pool, deferred).
func (s *Scheduler) start(t *tick) bool {
	if t.manual != nil {
		s.runManual(t) // step 6 on, under the caller's lock (manual.go)
		return false
	}
	// Step 2: resolve the hint (done once per schedule by compile).
	if !t.def.lock {
		s.runLocal(t)
		return false
	}

	// A catch-up try still queued when shutdown begins is not sent: no
	// mark is raised for it, so another node, or this one once restarted,
	// still catches the tick up. At 100,000 schedules the queue of tries
	// (one backend round trip each) kept a stopping node running.
	if t.catchup && s.stoppingNow() {
		s.end(t, runOutcome{abandoned: true})
		return false
	}

	// Step 3: a node that is not the tick's preferred one waits its turn,
	// and ends the tick if it hears meanwhile that it was decided
	// (handoff.go). (dispatch decided it already for the loop's ticks:
	// handed.)
	turn := handoffAsk
	if !t.handed {
		turn = s.handOff(t)
	}
	switch turn {
	case handoffHeard:
		s.handedOff(t)
		return false
	case handoffWaiting:
		return false // back as a task when its wait ends (resumeWaiters)
	}
	return s.ask(t)
}

// ask is step 4 of tick t: try-lock-tick (TTL from compile). An answer
// that leaves it undecided (no reply in time) sends the same request
// again (resend.go). Batched, the tick goes on in answered, on whichever
// worker takes it once its batch is answered: this one is free now
// (unless it sends batches itself).
func (s *Scheduler) ask(t *tick) bool {
	s.advance(t, tickAsking)
	var req locking.TickRequest
	ctx := t.burst.context()
	if t.resend != nil {
		req, ctx = t.resend.req, t.resend.ctx
	} else {
		req = s.lockRequest(t)
	}
	if s.batch != nil {
		s.work.AddAsking(1) // until deliverAnswers: see pool.asking
		if t.batched == nil {
			t.batched = new(batched)
		}
		t.batched.call = tickCall{Ctx: ctx, Req: req, Tag: t}
		s.batch.Submit(&t.batched.call)
		return false
	}
	before, sent := s.clockAndLease()
	t.sent = sent
	ans, err := s.opts.Locker.TryLockTick(ctx, req)
	after := s.clock.Now()
	s.letGoAnswered(t, err == nil)
	if s.resend(t, req, ans, &err) {
		return false // back as a task that asks again
	}
	return s.decide(t, ans, err, before, after)
}

// sendingRequests stamps a batch of try-lock-ticks about to be sent with
// the time it is sent, on the lease clock (its leases count from then) and
// on the scheduler's: one reading of each for the batch.
func (s *Scheduler) sendingRequests(calls []*tickCall) {
	before, sent := s.clockAndLease()
	for _, c := range calls {
		c.Tag.sent, c.Tag.batched.before = sent, before
	}
}

// deliverAnswers hands ticks whose batched try-lock-tick was answered
// back to the pool, all in one submit, ahead of the ticks that have not
// asked yet: a granted one's lease is running. Each lets go of what it
// held until answered (its burst share, its preferred ask) here, on the
// batch's sender, as soon as the answer came.
func (s *Scheduler) deliverAnswers(calls []*tickCall) {
	after := s.clock.Now()
	for _, c := range calls {
		c.Tag.batched.after = after
		c.Tag.step = stepAnswered
		s.letGoAnswered(c.Tag, c.Err == nil)
	}
	workpool.SubmitFront(s.work, calls, callTick)
}

// callTick is the tick of a batched try-lock-tick.
func callTick(c *tickCall) *tick { return c.Tag }

// answered carries on tick t whose batched try-lock-tick was answered.
func (s *Scheduler) answered(t *tick) bool {
	b := t.batched
	err := b.call.Err
	if s.resend(t, b.call.Req, b.call.Ans, &err) {
		return false // back as a task that asks again, through the batcher
	}
	return s.decide(t, b.call.Ans, err, b.before, b.after)
}

// letGo lets go of what t held until its try-lock-tick was answered: its
// share of its burst's context and its count in the handoff's asking.
// Once each, however often it is called; end calls it too, for a tick
// that never asked (or was never answered).
func (s *Scheduler) letGo(t *tick) { s.letGoAnswered(t, false) }

// letGoAnswered is letGo for a tick whose try-lock-tick was answered,
// decided when the backend decided it (no error): what the handoff's
// waiters held back behind this node's share then do (preferredAnswered).
func (s *Scheduler) letGoAnswered(t *tick, decided bool) {
	if t.burst != nil {
		t.burst.done()
		t.burst = nil
	}
	if t.preferred {
		t.preferred = false
		s.preferredAnswered(t.at, decided)
	}
}

// decide carries tick t on from its try-lock-tick's last answer (step 4's
// end), whose round trip was between before and after on the scheduler's
// clock. A grant that came late (after a resend, or after its request's
// context ended) runs only if it still can (lateGrant).
func (s *Scheduler) decide(t *tick, ans locking.TickAnswer, err error, before, after time.Time) bool {
	if s.tracer != nil {
		s.traceDecision(t, ans, err, before, after)
	}
	late := t.resend != nil
	if err != nil && ans.Handle != nil {
		// Granted, but the request's context ended before the answer
		// came (internal/batch): the mark is raised for this grant, so
		// no other node runs T; this one does, if it still can.
		err, late = nil, true
	}
	granted, why := s.lockAnswer(t, ans, err, before, after)
	if granted && late && !s.lateGrant(t) {
		return false
	}
	if err == nil && ans.Verdict == locking.TickExpired {
		s.grantExpired(t, ans.Fence)
		return false
	}
	return s.locked(t, granted, why)
}

// runLocal carries node-local tick t from step 2 to step 8.
func (s *Scheduler) runLocal(t *tick) {
	// No backend decides for a node-local tick: this node applies the
	// catch-up window itself (a node stopped across a tick runs it
	// late, once, within the window).
	if t.lateness > max(t.window(s), s.opts.MaxClockSkew) {
		s.reportSkip(t, SkipMissed, 0)
		s.end(t, runOutcome{skip: SkipMissed})
		return
	}
	if s.nodeLocalPaused(t) {
		s.reportSkip(t, SkipPaused, 0)
		s.end(t, runOutcome{skip: SkipPaused})
		return
	}
	if s.abandon(t) {
		return
	}
	// overlap = "queue": wait for the run of the schedule in progress
	// here, or skip when a tick waits already (queue.go).
	if t.def.waits() {
		switch wait, skip := s.waitLocal(t); {
		case wait:
			return
		case skip:
			s.reportSkip(t, SkipStillRunning, 0)
			s.end(t, runOutcome{skip: SkipStillRunning})
			return
		}
	}
	// A grouped node-local run takes a slot of its group first: the
	// slot is then its run's lease, renewed by its watch (group.go).
	var l *lease
	if t.def.Group != "" {
		sent := s.leaseNow()
		h, why := s.takeLocalSlot(t)
		if h == nil {
			s.reportSkip(t, why, 0)
			s.end(t, runOutcome{skip: why})
			return
		}
		// Paused while it waited for the slot (group_wait): a run must not
		// start after a pause returned (the simulation's invariant 6b).
		if s.nodeLocalPaused(t) {
			s.release(t.def.ID, h, "the group slot: paused while waiting for it")
			s.reportSkip(t, SkipPaused, 0)
			s.end(t, runOutcome{skip: SkipPaused})
			return
		}
		l = s.newLease(h, sent)
	}
	s.advance(t, tickRunning)
	out := s.runJob(t, l)
	if l != nil {
		s.release(t.def.ID, l.h, "the group slot, after the run")
	}
	s.end(t, out)
}

// locked carries locked tick t on from step 4's answer: granted (its
// lease in t.lease), or not and why the tick is skipped. It reports
// whether t's job returned in it: the caller then does steps 7 and 8
// (afterRun), which a worker defers behind the ticks waiting to start
// (pool.later).
func (s *Scheduler) locked(t *tick, granted bool, why SkipReason) bool {
	if !granted {
		if t.catchup {
			// A catch-up try that was not granted is no tick of this
			// node's: another node ran it, or it was decided otherwise.
			s.end(t, runOutcome{abandoned: true})
			return false
		}
		// overlap = "queue": a tick that found the schedule's run in
		// progress waits for it, and tries again (queue.go).
		if why == SkipContended && t.heldElsewhere && s.park(t) {
			return false
		}
		s.reportSkip(t, why, 0)
		s.end(t, runOutcome{skip: why})
		return false
	}
	s.advance(t, tickGranted)
	if t.def.waits() {
		// Granted: it no longer waits, and the next tick may.
		s.mu.Lock()
		s.unqueueLocked(t)
		s.mu.Unlock()
	}
	h := t.lease.h
	if t.catchup {
		// Granted: from now on it is a run of the schedule on this node,
		// and it runs even if a regular tick of the schedule fired here
		// meanwhile. The grant raised the mark to T, so no node will run
		// T if this one does not; and that regular tick holds no live
		// lease of the schedule's lock (under overlap = "skip" the lock
		// was free when this try was granted, and a grant taken after it
		// waits for its release), so the two runs do not overlap under
		// the lock (TestGrantedCatchUpRunsBesideARegularTickInFlight).
		s.mu.Lock()
		t.st.active++
		s.mu.Unlock()
		t.counted = true
		s.obs.TickFired(t.st.id, t.at, s.clock.Now().Sub(t.at))
	}

	// Step 5: the jitter, spent holding the lock. Shutdown ends the wait
	// and the job starts at once: T is marked, no other node will run it.
	if !s.waitJitter(t) {
		s.release(t.def.ID, h, "lock lost during the jitter")
		s.reportSkip(t, SkipBackendError, h.Fence())
		s.end(t, runOutcome{skip: SkipBackendError})
		return false
	}

	// Step 5½: a grouped schedule's run takes a slot of its concurrency
	// group first (group.go): none free skips the tick as group_full, or
	// waits for one within the tick's window (group_wait).
	if t.def.Group != "" {
		if why, ok := s.takeSlot(t); !ok {
			s.release(t.def.ID, h, "no slot of the group")
			if why == SkipGroupFull {
				s.recordSkip(t, t.at, RecordGroupFull)
			}
			s.reportSkip(t, why, h.Fence())
			s.end(t, runOutcome{skip: why})
			return false
		}
	}

	// Step 6: run, renewing the lock; the run's watch cancels the job when
	// the lease deadline passes (run.go).
	s.advance(t, tickRunning)
	t.out, t.ran = s.runAttempts(t, &t.lease)
	// Counted as releasing its lock until it ends (end), so that a tick
	// of its schedule that fires meanwhile waits for the release instead
	// of skipping as still_running (popDueLocked).
	s.advance(t, tickReleasing)
	t.st.releasing.Add(1)
	t.step = stepEnd
	return true
}

// afterRun is steps 7 and 8 of a locked tick whose job has returned: the
// run is reported, then its lock released at once. The mark, not the
// lock, keeps T from running again. A run ended as lock_lost is released
// too: a passed lease deadline does not mean the backend freed the lock
// (a Postgres holder frozen past its lease still has its session), and
// the release is token-checked, so it never frees another holder's. The
// tick ends once the lock is given back (release.go).
func (s *Scheduler) afterRun(t *tick) {
	s.releaseSlot(t)
	s.reportRan(t, t.out, t.ran)
	s.releaseAfterRun(t)
}

// end ends tick t with outcome out: it performs every obligation the
// tick holds, exactly once. It lets go of what the tick held until
// answered (letGo), stops its resends, records its outcome for Snapshot,
// no longer counts it running (or releasing its lock) nor in flight,
// tries a tick of its schedule that waited for its lock (endLocked), and
// tells the shutdown's wait (s.wg). A second end of one tick is refused
// (tickMisstep).
func (s *Scheduler) end(t *tick, out runOutcome) {
	s.letGo(t)
	s.mu.Lock()
	tries, ok := s.endLocked(t, out, nil)
	s.notifyLocked()
	s.mu.Unlock()
	s.submitTries(tries)
	if ok {
		s.wg.Done()
	}
}

// endAll is end for ticks ts, all with outcome out, under one
// acquisition of s.mu (a batch of ticks heard decided elsewhere).
func (s *Scheduler) endAll(ts []*tick, out runOutcome) {
	if len(ts) == 0 {
		return
	}
	for _, t := range ts {
		s.letGo(t)
	}
	var tries []action
	ended := 0
	s.mu.Lock()
	for _, t := range ts {
		var ok bool
		if tries, ok = s.endLocked(t, out, tries); ok {
			ended++
		}
	}
	s.notifyLocked()
	s.mu.Unlock()
	s.submitTries(tries)
	for range ended {
		s.wg.Done()
	}
}

// endReleased is end for the ticks whose locks one batch gave back
// (release.go released), with their runs' outcomes, under one acquisition
// of s.mu for the whole batch.
func (s *Scheduler) endReleased(calls []*releaseCall) {
	var tries []action
	ended := 0
	s.mu.Lock()
	for _, c := range calls {
		var ok bool
		if tries, ok = s.endLocked(c.Tag, c.Tag.out, tries); ok {
			ended++
		}
	}
	s.notifyLocked()
	s.mu.Unlock()
	s.submitTries(tries)
	for range ended {
		s.wg.Done()
	}
}

// endLocked is end under s.mu, for a tick that holds nothing of letGo's,
// without waking WaitIdle callers or telling s.wg: the caller does, once
// per tick it reports ended (ok). A catch-up try it makes is appended to
// tries for submitTries.
func (s *Scheduler) endLocked(t *tick, out runOutcome, tries []action) (_ []action, ok bool) {
	if t.state == tickDone {
		tickMisstep(fmt.Sprintf("scheduler: tick %s of %q ended twice", t.at.Format(time.RFC3339Nano), t.def.ID))
		s.log.Error("a tick ended twice: ignored", slog.String("schedule", t.def.ID), slog.String("tick", t.at.Format(time.RFC3339)))
		return tries, false
	}
	releasing := t.state == tickReleasing
	t.state = tickDone
	if t.resend != nil {
		t.resend.cancel()
	}
	st := t.st
	if releasing {
		st.releasing.Add(-1)
	}
	if !out.abandoned {
		st.last.tick, st.last.skip = unixOrZero(t.at), indexOf(skipReasons[:], out.skip)
		if out.skip == "" {
			st.last.result, st.last.runStart, st.last.runDur = indexOf(runResults[:], out.result), unixOrZero(out.start), out.dur
		}
	}
	if !t.catchup || t.counted {
		st.active--
	}
	if st.queue != nil {
		if st.queue == t {
			s.unqueueLocked(t)
		} else if w := s.wakeQueuedLocked(st); w != nil {
			// A run of the schedule ended here: the tick waiting for it
			// tries now (its lock is given back when this tick ends).
			tries = append(tries, action{t: w})
		}
	}
	s.inflight--
	s.forgetIfDoneLocked(st)
	return s.retryWaitingLocked(st, tries), true
}

// retryWaitingLocked tries st's latest tick once the last of its runs
// here has ended, when a tick of it fired while each of them was giving
// its lock back (st.waiting: popDueLocked). That tick's lock was held when
// it fired, so every other node was told contended, which raises no mark,
// and this node did not skip it as still_running, its runs having
// returned. The try is granted unless another node has claimed the tick
// since. It is appended to tries for submitTries.
func (s *Scheduler) retryWaitingLocked(st *schedState, tries []action) []action {
	if !st.waiting || st.active > 0 {
		return tries
	}
	st.waiting = false
	if st.removed || s.stopping {
		return tries
	}
	now := s.clock.Now()
	if at := s.catchUpTickLocked(st, now); !at.IsZero() {
		tries = append(tries, s.tryLateLocked(st, at, now))
	}
	return tries
}

// window is s.window(t.def, t.at), known or computed.
func (t *tick) window(s *Scheduler) time.Duration {
	if t.winSet {
		return t.win
	}
	return s.window(t.def, t.at)
}

// runID is the run's id: the request's for a manual run, else a fresh one.
// by is who asked for t's run: the manual run's By, "" for a tick of the
// loop.
func (t *tick) by() string {
	if t.manual != nil {
		return t.manual.By
	}
	return ""
}

func (t *tick) runID() string {
	if t.manual != nil && t.manual.RunID != "" {
		return t.manual.RunID
	}
	return newRunID()
}

// lockRequest is step 4's try-lock-tick request for t. Its token is the
// scheduler's own, so that a resend carries it (resend.go); a backend in
// this process, whose answer is never lost, draws its own (more cheaply).
func (s *Scheduler) lockRequest(t *tick) locking.TickRequest {
	def := t.def
	var token string
	if !inProcess(s.opts.Locker) {
		token = newTickToken()
	}
	return locking.TickRequest{
		Key:     def.ID,
		Tick:    t.at,
		TTL:     def.ttl,
		PerTick: def.Overlap == OverlapAllow,
		Floor:   t.st.decided.load(t.at.Location()),
		MaxSkew: s.opts.MaxClockSkew,
		Window:  t.window(s),
		Token:   token,
	}
}

// newTickToken draws the token of a try-lock-tick. Empty if the system's
// random source fails: the backend then draws one, and the request is not
// resent.
func newTickToken() string {
	t, err := locking.NewToken()
	if err != nil {
		return ""
	}
	return t
}

// lockAnswer is step 4's answer to t's try-lock-tick, sent at t.sent on
// the lease clock, between before and after on the scheduler's. It
// reports whether t was granted (its lease then in t.lease), or why it is
// skipped.
func (s *Scheduler) lockAnswer(t *tick, ans locking.TickAnswer, err error, before, after time.Time) (granted bool, why SkipReason) {
	if t.resend != nil {
		t.resend.cancel()
	}
	// Only a contended answer makes a queued tick wait on (queue.go): a
	// tick that waited and is now answered done was run elsewhere.
	t.heldElsewhere = false
	st, def := t.st, t.def
	if err != nil {
		var ahead *locking.AheadError
		if errors.As(err, &ahead) {
			// This node's clock runs ahead of the backend's: its ticks are
			// refused until the clock is fixed, and the others run them.
			s.clockOffset(ahead.Offset)
			s.log.Error("tick refused: this node's clock runs ahead of the lock backend's",
				slog.String("schedule", def.ID), slog.String("tick", t.at.Format(time.RFC3339)),
				slog.Duration("offset", ahead.Offset), slog.Duration("max_clock_skew", s.opts.MaxClockSkew))
			if t.resend != nil && s.runObs != nil {
				// A resend refused decides nothing of the attempts before
				// it: one delayed on its way may still reach the backend
				// once T is due there, and be granted, to this node that
				// gave T up (the backends record a resend's contended or
				// done, not a refusal). T is then consumed, and history
				// says so, as for a tick whose resends went unanswered.
				s.runObs.RunRecorded(RunRecord{Schedule: def.ID, Tick: t.at, Node: s.opts.NodeID, Result: ResultNotRun,
					Start: s.clock.Now(), RunID: t.runID(),
					Err: fmt.Errorf("%w: a resend was refused as ahead of the backend's clock, and an earlier attempt may still reach it: %w", ErrGrantUnknown, err)})
			}
			return false, SkipBackendError
		}
		if errors.Is(err, ErrGrantUnknown) && s.runObs != nil {
			// The backend may have granted T, and then no node runs it:
			// history says so, where the tick would otherwise be consumed
			// with no word (a skip is a counter, not a record).
			s.runObs.RunRecorded(RunRecord{Schedule: def.ID, Tick: t.at, Node: s.opts.NodeID, Result: ResultNotRun,
				Start: s.clock.Now(), Err: err, RunID: t.runID()})
		}
		s.backendFailed(st, t.at, err)
		return false, SkipBackendError
	}
	if !ans.Now.IsZero() {
		// This node's clock minus the backend's, read at the middle of the
		// round trip.
		s.clockOffset(before.Add(after.Sub(before) / 2).Sub(ans.Now))
	}
	s.backendAnswered()
	if s.pastKeep(t, ans.Verdict) {
		err := fmt.Errorf("%w: a resend was answered %v after the backend's record of an earlier attempt's grant may have lapsed",
			ErrGrantUnknown, ans.Verdict)
		s.log.Warn("tick undecided: its try-lock-tick's resend came too late to be told of a grant", slog.String("schedule", def.ID),
			slog.String("tick", t.at.Format(time.RFC3339)), slog.Any("error", err))
		if s.runObs != nil {
			s.runObs.RunRecorded(RunRecord{Schedule: def.ID, Tick: t.at, Node: s.opts.NodeID, Result: ResultNotRun,
				Start: s.clock.Now(), Err: err, RunID: t.runID()})
		}
		if ans.Verdict != locking.TickContended {
			st.decided.raise(t.at) // done, missed, paused: the mark is at T or past it
		}
		if ans.Verdict == locking.TickMissed || ans.Verdict == locking.TickPaused {
			// T itself is accounted for above; the ticks the step raised
			// the mark over (its Before) are not, and no other node asked
			// for them: recorded stopped, as for a step heard in time
			// (sim seeds 30769, 41836: missed heard 13s after the first
			// send, the gap recorded by no one, audit found it lost).
			s.recordGap(t, ans.Before)
		}
		return false, SkipBackendError
	}

	if ans.Verdict != locking.TickContended {
		st.decided.raise(t.at)
	}
	s.checkMarkAhead(t, ans)

	switch ans.Verdict {
	case locking.TickGranted:
		if ans.Handle == nil {
			s.log.Error("try-lock-tick granted without a handle: tick not run", slog.String("schedule", def.ID))
			return false, SkipBackendError
		}
		s.recordGap(t, ans.Before)
		s.newTickLease(t, ans.Handle)
		return true, ""
	case locking.TickDone:
		return false, SkipContended
	case locking.TickContended:
		// The lock is held by a run of the schedule (a previous tick's,
		// or a manual run's) while the mark is before T: an overlap.
		// History says so, since T is consumed once a later tick is
		// decided; should T still be granted later (a catch-up try, or a
		// tick that waited: overlap = "queue"), its run is what audit
		// shows. Once per tick.
		t.heldElsewhere = true
		if t.queued == nil {
			s.recordSkip(t, t.at, RecordOverlap)
		}
		return false, SkipContended
	case locking.TickPaused:
		s.recordGap(t, ans.Before)
		s.recordSkip(t, t.at, RecordPaused)
		return false, SkipPaused
	case locking.TickMissed:
		s.recordGap(t, ans.Before)
		s.recordSkip(t, t.at, RecordMissed)
		return false, SkipMissed
	case locking.TickExpired:
		return false, SkipBackendError // recorded by grantExpired
	}
	s.log.Error("try-lock-tick answered an unknown verdict: tick not run", slog.String("schedule", def.ID),
		slog.String("verdict", ans.Verdict.String()))
	return false, SkipBackendError
}

// checkMarkAhead logs, once until the schedule is granted again, a tick
// answered done by a mark that lies further ahead of the backend's clock
// than max_clock_skew: no tick of the schedule runs before the time the
// mark says, and every tick until then would be skipped as contended, at
// debug level (a mark raised by a bug, or by anyone who can write the
// backend).
func (s *Scheduler) checkMarkAhead(t *tick, ans locking.TickAnswer) {
	st := t.st
	switch {
	case ans.Verdict == locking.TickGranted:
		if st.markAhead.Load() { // read first: a store per grant would write the line every tick
			st.markAhead.Store(false)
		}
		return
	case ans.Verdict != locking.TickDone || ans.Now.IsZero() || ans.Mark.Sub(ans.Now) <= s.opts.MaxClockSkew:
		return
	}
	if st.markAhead.Swap(true) {
		return
	}
	s.log.Error("tick mark ahead of the lock backend's clock: no tick of this schedule will run before the time it says",
		slog.String("schedule", t.def.ID), slog.String("mark", ans.Mark.UTC().Format(time.RFC3339Nano)),
		slog.Duration("ahead", ans.Mark.Sub(ans.Now)), slog.Duration("max_clock_skew", s.opts.MaxClockSkew))
}

// nodeLocalPaused reads a node-local tick's pause flag from the cluster
// state (a locked tick learns it inside try-lock-tick). A backend that
// does not answer does not stop a node-local run: it needs no backend.
func (s *Scheduler) nodeLocalPaused(t *tick) bool {
	p, ok := s.opts.Locker.(locking.Pauser)
	if !ok {
		return false
	}
	ctx := s.jobCtx
	if !inProcess(p) {
		// A backend across the network is given a second. One in this
		// process answers at once, and a timer per tick was half the
		// cost of a node-local tick in a burst.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Second)
		defer cancel()
	}
	pz, err := p.GetPause(ctx, t.def.ID)
	if err != nil {
		s.log.Debug("pause flag not read: node-local tick runs", slog.String("schedule", t.def.ID), slog.Any("error", err))
		return false
	}
	return pz.Active(s.clock.Now())
}

// clockOffset reports this node's clock offset to an observer that wants it.
func (s *Scheduler) clockOffset(d time.Duration) {
	if s.hand != nil {
		s.hand.offset.Store(int64(d)) // the handoff counts turns on the backend's clock
	}
	if s.clockObs != nil {
		s.clockObs.ClockOffset(d)
	}
}

// window is the catch-up window of tick T of def: how late T may still
// start. The default is one period (until the next tick is due).
func (s *Scheduler) window(def *compiled, tick time.Time) time.Duration {
	if def.CatchupWindow != 0 {
		return windowAfter(def, tick, time.Time{})
	}
	return windowAfter(def, tick, def.Spec.Next(tick))
}

// windowAfter is window for a tick whose next tick is next (read only
// for the default window).
func windowAfter(def *compiled, tick, next time.Time) time.Duration {
	switch w := def.CatchupWindow; {
	case w == NoCatchup:
		return 0
	case w > 0:
		return w
	}
	if !next.IsZero() {
		return next.Sub(tick)
	}
	return 0
}

// waitJitter waits a random delay in [0, Jitter) while holding t's lock,
// renewing it as a run would. It returns false when the lock was lost.
// Shutdown ends the wait early: the job then starts at once.
func (s *Scheduler) waitJitter(t *tick) bool {
	l := &t.lease
	if t.def.Jitter <= 0 {
		return true
	}
	d := time.Duration(s.opts.Rand(int64(t.def.Jitter)))
	if d <= 0 {
		return true
	}
	d = min(d, t.def.Jitter-1)
	wait := s.clock.NewTimer(d)
	defer wait.Stop()
	r := s.clock.NewTimer(l.every)
	defer r.Stop()
	for {
		select {
		case <-wait.C():
			return true
		case <-s.stopCh:
			return true
		case <-r.C():
			r.Reset(l.every) // before renewing, as in runJob
			if err := s.renewLease(l); err != nil {
				s.log.Error("lock lost during jitter: tick not run", slog.String("schedule", t.def.ID),
					slog.String("tick", t.at.Format(time.RFC3339)), slog.Int64("fence", l.h.Fence()),
					slog.Any("error", err))
				return false
			}
		}
	}
}

// stoppingNow reports whether shutdown has begun.
func (s *Scheduler) stoppingNow() bool {
	select {
	case <-s.stopCh:
		return true
	default:
		return false
	}
}

// abandon reports whether shutdown began before node-local t's job
// started; if so it drops the tick (logged) and finishes it. A locked tick
// is never abandoned once granted: its mark is raised, so no other node
// would run it.
func (s *Scheduler) abandon(t *tick) bool {
	select {
	case <-s.stopCh:
	default:
		return false
	}
	s.log.Info("shutting down: node-local tick abandoned before its run", slog.String("schedule", t.def.ID),
		slog.String("tick", t.at.Format(time.RFC3339)))
	s.end(t, runOutcome{abandoned: true})
	return true
}

// reportSkip is step 8 for a tick that did not run: the observer, and one
// log line whose level says how much an operator should care.
func (s *Scheduler) reportSkip(t *tick, why SkipReason, fence int64) {
	s.reportSkipAt(t.st.id, t.at, why, fence)
}

// reportSkipAt is reportSkip for tick at of schedule id.
func (s *Scheduler) reportSkipAt(id string, at time.Time, why SkipReason, fence int64) {
	s.obs.TickSkipped(id, at, why)
	level := slog.LevelInfo
	switch why {
	case SkipContended:
		level = slog.LevelDebug
	case SkipBackendError:
		// Logged once per outage by backendFailed; each tick at debug.
		level = slog.LevelDebug
	case SkipMissed:
		level = slog.LevelWarn
	}
	if !s.log.Enabled(context.Background(), level) {
		return // formatting the line costs more than the rest of a tick
	}
	s.log.LogAttrs(context.Background(), level, "tick skipped",
		slog.String("schedule", id), slog.String("tick", at.Format(time.RFC3339)),
		slog.String("outcome", string(why)), slog.Duration("duration", 0), slog.Int64("fence", fence))
}

// reportRun is step 8 for a tick that ran.
func (s *Scheduler) reportRun(t *tick, out runOutcome, fence int64) {
	s.obs.RunFinished(t.st.id, t.at, out.result, out.dur, out.overrun)
	if !s.log.Enabled(context.Background(), slog.LevelInfo) {
		return
	}
	attrs := []slog.Attr{
		slog.String("schedule", t.st.id), slog.String("tick", t.at.Format(time.RFC3339)),
		slog.String("outcome", string(out.result)), slog.Duration("duration", out.dur),
		slog.Int64("fence", fence), slog.Bool("overrun", out.overrun),
	}
	if t.lateness > s.opts.MaxClockSkew {
		attrs = append(attrs, slog.Duration("late", t.lateness))
	}
	if out.err != nil {
		attrs = append(attrs, slog.Any("error", out.err))
	}
	s.log.LogAttrs(context.Background(), slog.LevelInfo, "tick ran", attrs...)
}
