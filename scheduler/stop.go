package scheduler

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// errStopped: an operator stopped the run (`stop`): its job is cancelled,
// result cancelled, and no retry follows.
var errStopped = errors.New("scheduler: run stopped by an operator")

// errReplaced: a later tick of the run's schedule replaced it (overlap =
// "replace"): as errStopped, result replaced.
var errReplaced = errors.New("scheduler: run replaced by a later tick of its schedule")

// stops is the runs an operator asked to stop, by run id, until each run
// ends: a run between two attempts has no job to cancel, and must not
// start another. pending lets a run's end skip the mutex when none is
// asked (every run ends through it).
type stops struct {
	pending atomic.Int32
	mu      sync.Mutex
	ids     map[string]error // the cause each run is stopped with
}

// StopRun stops the run runID of this node: its job's context is
// cancelled (a command gets SIGTERM, then SIGKILL after its kill grace),
// it is recorded cancelled, and no further attempt starts (one waiting for
// its retry ends at once). It reports whether it found the run's job
// running or waiting for a retry. The caller names a run that started
// here and has not ended (the agent's announcement of what runs): a run
// between two of those states (an attempt about to start) is still
// stopped, by the mark that every attempt reads once registered; the mark
// is forgotten when the run ends.
func (s *Scheduler) StopRun(runID string) bool { return s.stopRun(runID, errStopped, true) }

// ReplaceRun is StopRun for a run replaced by a later tick of its
// schedule (overlap = "replace", asked by the node of that tick): the run
// is recorded replaced, not cancelled.
func (s *Scheduler) ReplaceRun(runID string) bool { return s.stopRun(runID, errReplaced, false) }

// stopRun stops run runID with cause (errStopped, errReplaced); the first
// cause asked is kept. keep keeps the mark of a run found neither running
// nor between attempts, for an attempt about to register (an operator's
// stop names a run announced as running); a replace does not keep it: it
// asks again at its tick's next try, and a mark kept for a run that had
// ended would never be forgotten.
func (s *Scheduler) stopRun(runID string, cause error, keep bool) bool {
	if runID == "" {
		return false
	}
	s.stops.mu.Lock()
	if s.stops.ids == nil {
		s.stops.ids = map[string]error{}
	}
	added := s.stops.ids[runID] == nil
	if added {
		s.stops.ids[runID] = cause
		s.stops.pending.Add(1)
	}
	cause = s.stops.ids[runID]
	s.stops.mu.Unlock()
	// The mark first, then the walk: an attempt registered after the walk
	// reads the mark (attempt), one registered before is found.
	found := s.runs.cancelRun(runID, cause)
	found = s.inBackoff(runID) || found
	if !found && !keep && added {
		s.stopDone(runID)
	}
	return found
}

// stopAsked reports whether runID was asked to stop.
func (s *Scheduler) stopAsked(runID string) bool { return s.stopCause(runID) != nil }

// stopCause is the cause runID was asked to stop with (nil: none).
func (s *Scheduler) stopCause(runID string) error {
	if s.stops.pending.Load() == 0 {
		return nil
	}
	s.stops.mu.Lock()
	defer s.stops.mu.Unlock()
	return s.stops.ids[runID]
}

// stopDone forgets runID's stop once the run ended.
func (s *Scheduler) stopDone(runID string) {
	if s.stops.pending.Load() == 0 {
		return
	}
	s.stops.mu.Lock()
	if s.stops.ids[runID] != nil {
		delete(s.stops.ids, runID)
		s.stops.pending.Add(-1)
	}
	s.stops.mu.Unlock()
}

// inBackoff reports whether runID is a run of this node waiting between
// two attempts.
// A run in its backoff is woken (its channel closed) so that it ends at
// once, cancelled.
func (s *Scheduler) inBackoff(runID string) bool {
	s.backoffs.mu.Lock()
	defer s.backoffs.mu.Unlock()
	ch, ok := s.backoffs.ids[runID]
	if ok {
		select {
		case <-ch:
		default:
			close(ch)
		}
	}
	return ok
}

// backoffs is the runs waiting between two attempts (rare: only runs
// that failed and retry), so that StopRun finds and wakes them.
type backoffs struct {
	mu  sync.Mutex
	ids map[string]chan struct{}
}

// backoffStart registers runID as waiting between attempts; the channel
// is closed when it is stopped.
func (s *Scheduler) backoffStart(runID string) <-chan struct{} {
	s.backoffs.mu.Lock()
	if s.backoffs.ids == nil {
		s.backoffs.ids = map[string]chan struct{}{}
	}
	ch := make(chan struct{})
	s.backoffs.ids[runID] = ch
	s.backoffs.mu.Unlock()
	return ch
}

func (s *Scheduler) backoffEnd(runID string) {
	s.backoffs.mu.Lock()
	delete(s.backoffs.ids, runID)
	s.backoffs.mu.Unlock()
}

// cancelRun cancels the job of run runID, if registered, with cause; it
// reports whether it found it.
func (r *runSet) cancelRun(runID string, cause error) bool {
	found := false
	for i := range r.lists {
		l := &r.lists[i]
		l.mu.Lock()
		for w := l.head; w != nil; w = w.next {
			if w.runID == runID {
				w.cancel(cause)
				found = true
			}
		}
		l.mu.Unlock()
	}
	return found
}

// runsBefore returns the run ids of schedule id's runs here of ticks
// before at (overlap = "replace": the runs a tick at replaces).
func (r *runSet) runsBefore(id string, at time.Time) []string {
	var out []string
	for i := range r.lists {
		l := &r.lists[i]
		l.mu.Lock()
		for w := l.head; w != nil; w = w.next {
			if w.t.st.id == id && w.t.at.Before(at) && w.runID != "" {
				out = append(out, w.runID)
			}
		}
		l.mu.Unlock()
	}
	return out
}
