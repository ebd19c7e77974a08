package scheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bext-dev/bext-scheduler/locking"
)

// Manual runs: a trigger (run once now) or a backfilled tick, asked of the
// cluster and taken by this node (DESIGN.md "Operating it"). The caller
// took the schedule's lock for it, in the same atomic step that took the
// request (cluster.Store.TakeRequest); the scheduler runs it like a tick
// from step 6 on: lease, renewals, retries, release at once, record. No
// tick mark moves. A regular tick that found the lock held by the manual
// run (contended on every node) is caught up when the run ends, within its
// catch-up window: a trigger never costs the schedule a tick.
//
// A backfilled tick runs only once the mark has passed it: a tick past
// the mark is still its regular run's to claim, on time or late, and
// running it as a backfill too would run it twice. The mark only moves
// forward, so the two never both run one tick from one decision.

// Manual is one manual run.
type Manual struct {
	ID    string    // the schedule id
	Tick  time.Time // its BEXT_TICK_TIME: when the trigger was asked for, or the backfilled tick
	RunID string    // the request's id; a fresh one when empty
	By    string    // who asked (the request's By), kept in the run's records
	// Handle is the schedule's lock, taken for this run; the scheduler
	// renews it and releases it when the run ends. Sent is when the
	// request that took it was sent: the lease runs from there.
	Handle *locking.Handle
	Sent   time.Time
	// Done, when set, is called once the run ended, with its result,
	// while the run still holds Handle (before its release). It is not
	// called for a run whose job never started and whose take is given
	// back (GiveBack): a backfilled tick then stays queued.
	Done func(RunResult)
	// Backfill marks a backfilled tick: Tick is one of the schedule's
	// own ticks, run again.
	Backfill bool
	// Rerun, when set, makes the run the re-run of a run whose node died
	// (on_node_loss = "rerun", internal/agent): RunID and Tick are the lost
	// run's, and the run is that run's next attempt, not a manual one.
	Rerun *Rerun
	// GiveBack, when set, gives the take back to the cluster
	// (cluster.Store.GiveBack, resent while its answer is not definite)
	// when the run ends with its job never started: its confirming
	// renewal failed, or its lease ran out before the job could start.
	// It is called instead of releasing Handle and instead of Done, on
	// the run's worker, and returns once the take was given back or
	// given up.
	GiveBack func()
}

// Rerun is what a re-run carries of the run it re-runs.
type Rerun struct {
	// Attempt is the re-run's first attempt's number (BEXT_ATTEMPT): the
	// lost run's last one plus one.
	Attempt int
	// Start is the lost run's start: the re-run is recorded as that run
	// (its start, its run id), whose provisional record it replaces.
	Start time.Time
}

// Errors of RunManual.
var (
	ErrUnknownSchedule = errors.New("scheduler: no such schedule")
	ErrStopped         = errors.New("scheduler: not running")
	// ErrTickUndecided: a backfilled tick the schedule's mark has not
	// passed yet; its regular run claims it. The request is to be
	// dropped, not asked again.
	ErrTickUndecided = errors.New("scheduler: backfilled tick not decided yet: its regular tick runs it")
	// ErrElsewhere: the schedule targets nodes (Schedule.Nodes) whose
	// tags this node lacks; a node that has them runs it.
	ErrElsewhere = errors.New("scheduler: the schedule targets other nodes")
)

// RunManual starts m on a worker and returns at once. It refuses a
// schedule this node does not have or that targets other nodes
// (ErrElsewhere), a scheduler that is not running, and
// a backfilled tick not decided yet (ErrTickUndecided; reading the mark
// waits for the backend); the caller then releases the lock it took.
func (s *Scheduler) RunManual(m Manual) error {
	if m.Backfill {
		if err := s.checkDecided(m); err != nil {
			return err
		}
	}
	s.mu.Lock()
	st := s.states[m.ID]
	switch {
	case !s.started || s.stopping:
		s.mu.Unlock()
		return ErrStopped
	case st == nil || st.removed:
		s.mu.Unlock()
		return fmt.Errorf("%w: %q", ErrUnknownSchedule, m.ID)
	case st.def.Elsewhere:
		s.mu.Unlock()
		return fmt.Errorf("%w: %q", ErrElsewhere, m.ID)
	}
	t := s.newTickLocked(st, m.Tick, m.Tick, false)
	t.manual = &m
	s.mu.Unlock()
	s.work.Submit(t)
	return nil
}

// runManual carries manual run t from step 6 to step 8.
func (s *Scheduler) runManual(t *tick) {
	m := t.manual
	var l *lease
	if m.Handle != nil {
		sent := m.Sent
		if sent.IsZero() || s.bootClock != nil {
			// Sent is on the injected clock; the lease clock may differ.
			sent = s.leaseNow()
		}
		t.lease = *s.newLease(m.Handle, sent)
		l = &t.lease
	}
	var out runOutcome
	unconfirmed, noSlot := false, false
	if err := s.confirmTake(l); err != nil {
		unconfirmed = true
		out = runOutcome{result: ResultLockLost, start: s.clock.Now(), err: err}
		s.reportRan(t, out, ran{runID: t.runID(), manual: m.Rerun == nil, fence: l.h.Fence()})
	} else if noSlot = !s.manualSlot(t, l); noSlot {
		// Its concurrency group is full: given back below, the manual run
		// waits in its queue for a slot (the next poll, or another node).
		out = runOutcome{abandoned: true}
	} else {
		s.advance(t, tickRunning)
		out = s.runJob(t, l)
		s.releaseSlot(t)
	}
	// A job that never started (its take unconfirmed, or confirmed and
	// its lease run out before the job could start) gives its take back:
	// the trigger goes back to its queue, whatever the renewal did
	// (applied, it was the node's word that it heard the take), and a
	// backfilled tick stays at the head of its own, so Done, which takes
	// it off, is not called. The give-back releases the lock too; a plain
	// release would be the node's word that it heard the take as well.
	giveBack := l != nil && m.GiveBack != nil && (unconfirmed || noSlot || out.unstarted)
	// Done before the release: the agent's takes a backfilled tick off
	// its queue, and with the lock free first a take in between would
	// find the tick still at the head of its queue and run it again.
	if m.Done != nil && !giveBack && !noSlot {
		m.Done(out.result)
	}
	switch {
	case giveBack:
		m.GiveBack()
	case l != nil: // a lock_lost run too: see afterRun
		s.release(t.def.ID, l.h, "after the manual run")
	}
	// Still in flight until the catch-up below has been handed out, so
	// that nobody waiting for the scheduler to be idle sees a gap.
	s.mu.Lock()
	s.inflight++
	s.wg.Add(1)
	s.mu.Unlock()
	s.end(t, out)
	// A regular tick due meanwhile found the lock held by this run: try
	// it now, late, within its catch-up window (the mark decides).
	s.catchUp(s.clock.Now(), func(st *schedState) bool { return st == t.st })
	s.mu.Lock()
	s.inflight--
	s.notifyLocked()
	s.mu.Unlock()
	s.wg.Done()
}

// confirmTake renews a manual run's lock once before the run starts, and
// refuses the run when that renewal was not answered with success. The
// renewal tells the backend that the take's answer was heard: a take whose
// lock lapses with no renewal or release from its taker puts its trigger
// back on its queue (cluster.Store.TakeRequest), so that a trigger whose
// take's replies were all lost is not lost with them; a run that started
// has been confirmed, and is never requeued. A renewal that failed
// (ErrLockLost: the lock lapsed; or no answer: it may have been applied,
// the backend then counting the take heard) leaves the run not started,
// ended lock_lost, and the take is given back (Manual.GiveBack: the
// trigger goes back to its queue once, whichever way the renewal went).
// l nil (no lock): nothing to confirm.
func (s *Scheduler) confirmTake(l *lease) error {
	if l == nil {
		return nil
	}
	if err := s.renewLease(l); err != nil {
		return fmt.Errorf("%w: the take's lock was not renewed before the run: %w", errLockLost, err)
	}
	return nil
}

// checkDecided refuses m's tick when the schedule's mark has not passed
// it (a missing mark passed nothing: locking.DecidedUntil). A backend without marks to read has no regular tick to
// race: nothing is refused.
func (s *Scheduler) checkDecided(m Manual) error {
	mr, ok := s.opts.Locker.(locking.MarkReader)
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	mark, ok, err := mr.Mark(ctx, m.ID)
	switch {
	case errors.Is(err, errors.ErrUnsupported):
		return nil
	case err != nil:
		return fmt.Errorf("scheduler: reading the tick mark of %q for a backfill: %w", m.ID, err)
	}
	if until := locking.DecidedUntil(mark, ok, s.clock.Now()); m.Tick.After(until) {
		return fmt.Errorf("%w: %q tick %s, decided until %s", ErrTickUndecided, m.ID,
			m.Tick.UTC().Format(time.RFC3339Nano), until.UTC().Format(time.RFC3339Nano))
	}
	return nil
}
