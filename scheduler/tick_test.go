package scheduler

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/hints"
)

// misstepsOf runs f with tickMisstep recording instead of panicking, and
// returns what it recorded.
func misstepsOf(t *testing.T, f func()) []string {
	t.Helper()
	var got []string
	prev := tickMisstep
	tickMisstep = func(msg string) { got = append(got, msg) }
	defer func() { tickMisstep = prev }()
	f()
	return got
}

// newIdleScheduler is a scheduler with one node-local schedule, never run:
// its ticks are made and ended by hand.
func newIdleScheduler(t *testing.T) (*Scheduler, *schedState) {
	t.Helper()
	s, err := New(Options{NodeID: "n", Backend: hints.None},
		[]Schedule{{ID: "a", CronExpr: "* * * * *", Hint: hints.NodeLocal, Job: JobFunc(nopRun)}})
	if err != nil {
		t.Fatal(err)
	}
	return s, s.states["a"]
}

// A tick ends once: its obligations (in flight, running, the shutdown's
// wait) are kept by its first end, and a second end is refused, loudly:
// in the package's tests it panics, so no double end passes a test. Before
// the tick was one object, a tick's path kept them by convention, with
// eleven wg.Done sites in four files.
func TestTickEndsOnce(t *testing.T) {
	s, st := newIdleScheduler(t)
	at := time.Date(2026, 1, 1, 0, 1, 0, 0, time.UTC)
	s.mu.Lock()
	tk := s.newTickLocked(st, at, at, false)
	s.mu.Unlock()
	if s.inflight != 1 || st.active != 1 {
		t.Fatalf("a new tick: inflight %d active %d, want 1 1", s.inflight, st.active)
	}
	missteps := misstepsOf(t, func() {
		s.end(tk, runOutcome{skip: SkipMissed})
		s.end(tk, runOutcome{skip: SkipMissed})
	})
	if len(missteps) != 1 || !strings.Contains(missteps[0], "ended twice") {
		t.Fatalf("missteps %q, want one: ended twice", missteps)
	}
	if s.inflight != 0 || st.active != 0 {
		t.Errorf("after two ends: inflight %d active %d, want 0 0 (the second end refused)", s.inflight, st.active)
	}
	// The shutdown's wait was told once: a second Done would panic here
	// (negative WaitGroup counter), and Wait returns at once.
	s.wg.Wait()

	defer func() {
		if recover() == nil {
			t.Error("a second end did not panic under test")
		}
	}()
	s.end(tk, runOutcome{})
}

// A tick's state only moves forward: a step that would carry a tick back
// (say, asking again once its job ran) is refused.
func TestTickNeverMovesBack(t *testing.T) {
	s, st := newIdleScheduler(t)
	tk := &tick{st: st, def: st.def, at: time.Unix(60, 0)}
	missteps := misstepsOf(t, func() {
		s.advance(tk, tickAsking)
		s.advance(tk, tickAsking) // a resend asks again: no move back
		s.advance(tk, tickRunning)
		s.advance(tk, tickAsking)
	})
	if len(missteps) != 1 || !strings.Contains(missteps[0], "from running back to asking") {
		t.Fatalf("missteps %q, want one: running back to asking", missteps)
	}
	if tk.state != tickRunning {
		t.Errorf("state %v after a refused move back, want running", tk.state)
	}
}

func nopRun(context.Context, Tick) error { return nil }
