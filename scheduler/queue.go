package scheduler

import (
	"log/slog"
	"time"
)

// overlap = "queue" and "replace" (DESIGN.md "Overlap under a lock"). A tick of a
// queued schedule that finds the schedule's run in progress, here or on
// another node (try-lock-tick answered contended: the lock is held while
// the mark is before T), does not skip: it waits, holding nothing, and
// asks again once a second, or at once when a run of the schedule ends
// on this node, until it is decided or its catch-up window ends. A
// contended answer raises no mark, so T is still anyone's, and the mark
// keeps it once: the first node whose try is granted runs it, the
// others are answered done. One tick per schedule waits on a node
// (schedState.queue); a further tick while it waits is skipped as
// still_running. A node-local schedule's tick waits the same way for
// the node's own run. Under "replace" the waiting tick also stops the
// run it waits for (replace), which ends recorded replaced.

// queueRetry is how often a waiting tick asks again. The run it waits
// for may be on another node, whose release this node does not hear of,
// so the wait polls; a run that ends here wakes it at once (wakeQueued).
const queueRetry = time.Second

// queueWait is a tick waiting for its schedule's run in progress.
type queueWait struct {
	timer Timer // its next try; under s.mu
}

// park makes tick t, answered contended (or a node-local tick finding
// its schedule's run in progress here), wait and try again. It reports
// false when t does not wait: its schedule does not queue, another tick
// waits already, its window has ended, or the node is stopping. Then the
// caller skips it as it would have.
func (s *Scheduler) park(t *tick) bool {
	if !t.def.waits() || t.catchup || t.manual != nil {
		return false
	}
	left := t.at.Add(max(t.window(s), s.opts.MaxClockSkew)).Sub(s.clock.Now())
	if left <= 0 {
		return false
	}
	if !s.reserve(t) {
		return false
	}
	if t.def.Overlap == OverlapReplace {
		// Before the timer is armed, while t is still only this
		// worker's: once armed, a wake may hand it to another.
		s.replace(t) // outside s.mu: it cancels runs, and logs
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping || t.st.removed || t.st.queue != t {
		return false // the node began to stop meanwhile: skipped now
	}
	// The answer was decided: the next ask is a new request, with a
	// token of its own, not a resend of this one.
	t.resend = nil
	t.step = stepRequeue
	d := min(queueRetry, left)
	if t.st.queueWoken {
		t.st.queueWoken, d = false, 0
	}
	t.queued.timer = s.clock.AfterFunc(d, func() { s.work.Submit(t) })
	return true
}

// reserve takes t's schedule's waiting place for t, unless another tick
// holds it or the node is stopping.
func (s *Scheduler) reserve(t *tick) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := t.st
	if s.stopping || st.removed || (st.queue != nil && st.queue != t) {
		return false
	}
	st.queue = t
	if t.queued == nil {
		t.queued = &queueWait{}
	}
	return true
}

// wakeQueuedLocked starts st's waiting tick's next try now, if it waits
// on its timer (a run of st ended here, or the node is stopping). Under
// s.mu; the tick returned is submitted by the caller once it lets go.
func (s *Scheduler) wakeQueuedLocked(st *schedState) *tick {
	t := st.queue
	if t == nil {
		return nil
	}
	if t.queued == nil || t.queued.timer == nil {
		// Trying, or not parked yet (it took the place when it fired,
		// or replace has just stopped the run it waits for): park arms
		// its next try at once. Unheard, the tick waited queueRetry for
		// a run that had ended (TestQueueRunsTheWaitingTickWhenTheRunEnds
		// and TestReplaceStopsTheRunAndRuns, a few runs in 300).
		st.queueWoken = true
		return nil
	}
	tm := t.queued.timer
	t.queued.timer = nil
	if !tm.Stop() {
		return nil // fired: submitted already
	}
	return t
}

// unqueueLocked frees st's waiting place if t holds it: t was granted,
// runs, or ended. Under s.mu.
func (s *Scheduler) unqueueLocked(t *tick) {
	if t.st.queue != t {
		return
	}
	t.st.queue, t.st.queueWoken = nil, false
	if t.queued != nil && t.queued.timer != nil {
		t.queued.timer.Stop()
		t.queued.timer = nil
	}
}

// retryQueued is a waiting tick's next try: step 4 again for a locked
// one, the node-local run for one that is not. A node stopping, or a
// schedule removed, ends it skipped: no mark was raised for it, so
// another node may still run it.
func (s *Scheduler) retryQueued(t *tick) bool {
	s.mu.Lock()
	gone := s.stopping || t.st.removed
	if t.queued != nil {
		t.queued.timer = nil
	}
	s.mu.Unlock()
	t.lateness = s.clock.Now().Sub(t.at)
	if gone {
		s.log.Info("tick no longer waits for its schedule's run: the node is stopping or the schedule was removed",
			slog.String("schedule", t.def.ID), slog.String("tick", t.at.Format(time.RFC3339)))
		if !t.def.lock {
			s.end(t, runOutcome{abandoned: true})
			return false
		}
		s.reportSkip(t, SkipContended, 0)
		s.end(t, runOutcome{skip: SkipContended})
		return false
	}
	if !t.def.lock {
		s.runLocal(t)
		return false
	}
	// Its try is bounded as a fired tick's first try is (its burst's
	// context: the TTL, and the shutdown grace), by a burst of its own.
	t.burst = s.newBurst([]action{{t: t}})
	return s.ask(t)
}

// waitLocal is for node-local tick t of a queued schedule: it runs now
// (go), waits (parked) for the run of its schedule in progress on this
// node, or, when it may not wait, is skipped as still_running. A tick
// that runs frees its schedule's waiting place, so that the next tick
// can wait for it.
func (s *Scheduler) waitLocal(t *tick) (wait, skip bool) {
	if !t.def.waits() {
		return false, false
	}
	s.mu.Lock()
	busy := t.st.active > 1 // t itself counts
	if !busy {
		s.unqueueLocked(t)
	}
	s.mu.Unlock()
	if !busy {
		return false, false
	}
	if s.park(t) {
		return true, false
	}
	s.mu.Lock()
	s.unqueueLocked(t)
	s.mu.Unlock()
	return false, true
}

// wakeAllQueued wakes every waiting tick when shutdown begins: each ends
// (retryQueued) instead of holding the shutdown until its timer.
func (s *Scheduler) wakeAllQueued() {
	var ts []*tick
	s.mu.Lock()
	for _, st := range s.states {
		if t := s.wakeQueuedLocked(st); t != nil {
			ts = append(ts, t)
		}
	}
	s.mu.Unlock()
	for _, t := range ts {
		s.work.Submit(t)
	}
}

// waits reports whether a tick of def that finds its run in progress
// waits for it (queue, replace) rather than skipping or running beside.
func (def *compiled) waits() bool {
	return def.Overlap == OverlapQueue || def.Overlap == OverlapReplace
}

// replace stops the runs of waiting tick t's schedule of earlier ticks
// (overlap = "replace"): those here at once, the others through
// Options.ReplaceRuns. Asked at each of t's tries: a run that started
// elsewhere moments ago is announced to the cluster only by its node's
// next heartbeat, and ReplaceRuns names each run once.
func (s *Scheduler) replace(t *tick) {
	for _, id := range s.runs.runsBefore(t.st.id, t.at) {
		if s.stopRun(id, errReplaced, false) {
			s.log.Info("run replaced by a later tick of its schedule", slog.String("schedule", t.def.ID),
				slog.String("run_id", id), slog.String("tick", t.at.Format(time.RFC3339)))
		}
	}
	if s.opts.ReplaceRuns != nil && t.def.lock {
		s.opts.ReplaceRuns(t.def.ID, t.at)
	}
}
