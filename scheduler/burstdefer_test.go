package scheduler_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/hints"
	"github.com/bext-dev/bext-scheduler/locking"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

// rankBy ranks this node by schedule id among two nodes.
type rankBy map[string]int

func (r rankBy) Rank(id string, _ time.Time) (rank, n int) { return r[id], 2 }

// stuckFirst holds the first try-lock-tick of key for tick until answer
// gives it its outcome (nil: ask the backend); the others go through. It
// counts each key's requests for tick.
type stuckFirst struct {
	*faulty
	key     string
	tick    time.Time
	entered chan struct{}
	answer  chan error

	mu    sync.Mutex
	stuck bool
	asked map[string]int
}

func (s *stuckFirst) TryLockTick(ctx context.Context, r locking.TickRequest) (locking.TickAnswer, error) {
	s.mu.Lock()
	if r.Tick.Equal(s.tick) {
		s.asked[r.Key]++
	}
	first := r.Key == s.key && r.Tick.Equal(s.tick) && !s.stuck
	s.stuck = s.stuck || first
	s.mu.Unlock()
	if first {
		close(s.entered)
		if err := <-s.answer; err != nil {
			return locking.TickAnswer{}, err
		}
	}
	return s.faulty.TryLockTick(ctx, r)
}

func (s *stuckFirst) tries(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.asked[key]
}

// TestHeldBackWaiterAsksOnceThePreferredTryFails: this node is preferred
// for p and second for w, both due at T. Its try for p hangs; w's turn
// comes and w is deferred (a burst: this node still asks for its own
// share of T). When p's try fails, w must ask at once, without waiting
// for the deferral's bound (T + half the period): nobody else will ask
// for w if the preferred node is this one's peer and dead.
func TestHeldBackWaiterAsksOnceThePreferredTryFails(t *testing.T) {
	_, l, _, jw := heldBackBehindP(t)
	l.answer <- fmt.Errorf("backend down: %w", locking.ErrUnavailable)
	want := t0.Add(time.Minute)
	ranW := func() bool {
		got := jw.got()
		return len(got) > 0 && got[len(got)-1].Time.Equal(want)
	}
	deadline := time.Now().Add(waitTimeout)
	for !ranW() { // p's catch-up may run meanwhile: w's own job is watched
		if time.Now().After(deadline) {
			t.Fatalf("w's tick %v never ran once p's try failed (w asked %d times)", want, l.tries("w"))
		}
		runtime.Gosched()
	}
}

// TestHeldBackWaiterWaitsATurnOnceTheShareIsDecided: as above, but p's
// try is decided. w, held back behind it, does not ask the moment p is
// answered (the other nodes are most likely deciding their shares, w's
// tick among them): it waits a turn more, from then, and asks only when
// that turn comes, nobody having decided its tick meanwhile.
func TestHeldBackWaiterWaitsATurnOnceTheShareIsDecided(t *testing.T) {
	h, l, jp, jw := heldBackBehindP(t)
	l.answer <- nil // p's try goes on to the backend: decided, granted
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	for len(jp.got()) == 0 {
		if ctx.Err() != nil {
			t.Fatal("p's granted tick never ran")
		}
		runtime.Gosched()
	}
	if err := h.s.WaitSettled(ctx); err != nil {
		t.Fatalf("w not waiting for a turn once p was decided: %v", err)
	}
	if n := l.tries("w"); n != 0 {
		t.Fatalf("w asked %d times once p was decided, before its turn came again", n)
	}
	h.clock.Advance(scheduler.DefaultHandoffDelay)
	want := t0.Add(time.Minute)
	for got := jw.got(); len(got) == 0 || !got[len(got)-1].Time.Equal(want); got = jw.got() {
		if ctx.Err() != nil {
			t.Fatalf("w's tick %v never ran once its turn came again (w asked %d times)", want, l.tries("w"))
		}
		runtime.Gosched()
	}
	if n := l.tries("w"); n != 1 {
		t.Fatalf("w asked %d times, want once", n)
	}
}

// heldBackBehindP starts two every-minute schedules, p preferred on this
// node and w second, fires T, and returns once p's try-lock-tick hangs in
// l (answered by a send on l.answer) and w, its turn come, is held back
// behind it (deferred: HeldBack 1) without having asked.
func heldBackBehindP(t *testing.T) (*harness, *stuckFirst, *countingJob, *countingJob) {
	t.Helper()
	h := newHarness(t, scheduler.Options{Preferrer: rankBy{"p": 0, "w": 1}})
	l := &stuckFirst{faulty: h.locker, key: "p", tick: t0.Add(time.Minute), entered: make(chan struct{}), answer: make(chan error, 1),
		asked: map[string]int{}}
	jp, jw := &countingJob{}, &countingJob{}
	h = newHarness(t, scheduler.Options{Clock: h.clock, Locker: l, Backend: hints.Distributed,
		Preferrer: rankBy{"p": 0, "w": 1}},
		sched("p", everyMinute, hints.RequireGlobal, jp),
		sched("w", everyMinute, hints.RequireGlobal, jw)).start()
	// Registered after the harness's own cleanup, so it runs first: a
	// test that failed early lets p's try end, so the scheduler can stop.
	t.Cleanup(func() {
		select {
		case l.answer <- nil:
		default:
		}
	})

	h.clock.Advance(time.Minute)
	select {
	case <-l.entered:
	case <-time.After(waitTimeout):
		t.Fatal("p's try-lock-tick never came")
	}
	h.clock.Advance(scheduler.DefaultHandoffDelay + 50*time.Millisecond) // w's turn
	deadline := time.Now().Add(waitTimeout)
	for h.s.HeldBack() != 1 { // nothing signals it: the turn runs on a timer's goroutine
		if time.Now().After(deadline) {
			t.Fatalf("w not deferred after its turn; w asked %d times", l.tries("w"))
		}
		runtime.Gosched()
	}
	if n := l.tries("w"); n != 0 {
		t.Fatalf("w asked %d times while deferred", n)
	}
	return h, l, jp, jw
}
