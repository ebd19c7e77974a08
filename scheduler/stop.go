package scheduler

import (
	"errors"
	"sync"
	"sync/atomic"
)

// errStopped: an operator stopped the run (`stop`): its job is cancelled,
// result cancelled, and no retry follows.
var errStopped = errors.New("scheduler: run stopped by an operator")

// stops is the runs an operator asked to stop, by run id, until each run
// ends: a run between two attempts has no job to cancel, and must not
// start another. pending lets a run's end skip the mutex when none is
// asked (every run ends through it).
type stops struct {
	pending atomic.Int32
	mu      sync.Mutex
	ids     map[string]bool
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
func (s *Scheduler) StopRun(runID string) bool {
	if runID == "" {
		return false
	}
	s.stops.mu.Lock()
	if s.stops.ids == nil {
		s.stops.ids = map[string]bool{}
	}
	if !s.stops.ids[runID] {
		s.stops.ids[runID] = true
		s.stops.pending.Add(1)
	}
	s.stops.mu.Unlock()
	// The mark first, then the walk: an attempt registered after the walk
	// reads the mark (attempt), one registered before is found.
	found := s.runs.cancelRun(runID)
	return s.inBackoff(runID) || found
}

// stopAsked reports whether runID was asked to stop.
func (s *Scheduler) stopAsked(runID string) bool {
	if s.stops.pending.Load() == 0 {
		return false
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
	if s.stops.ids[runID] {
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

// cancelRun cancels the job of run runID, if registered, with errStopped;
// it reports whether it found it.
func (r *runSet) cancelRun(runID string) bool {
	found := false
	for i := range r.lists {
		l := &r.lists[i]
		l.mu.Lock()
		for w := l.head; w != nil; w = w.next {
			if w.runID == runID {
				w.cancel(errStopped)
				found = true
			}
		}
		l.mu.Unlock()
	}
	return found
}
