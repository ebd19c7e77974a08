package scheduler_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/hints"
	"github.com/bext-dev/bext-scheduler/locking"
	"github.com/bext-dev/bext-scheduler/locking/memory"
	"github.com/bext-dev/bext-scheduler/scheduler"
	"github.com/bext-dev/bext-scheduler/scheduler/fakeclock"
)

// lateBatcher is a memory backend that decides try-lock-ticks in batches
// (locking.TickBatcher); while late is set, every batch is decided only once
// its context has ended, as a server that ran the script whose reply came
// back after the caller's deadline: the locks are taken and the marks
// raised, and the caller's context has ended meanwhile.
type lateBatcher struct {
	*faulty
	mem *memory.Locker

	mu   sync.Mutex
	late bool
}

func (l *lateBatcher) TryLockTicks(ctx context.Context, reqs []locking.TickRequest) ([]locking.TickAnswer, []error) {
	l.mu.Lock()
	late := l.late
	l.mu.Unlock()
	// Only a burst's short context is outlived (a catch-up try of b,
	// bounded by b's hour, is answered at once).
	if d, ok := ctx.Deadline(); late && ok && time.Until(d) < time.Second {
		<-ctx.Done()
	}
	answers, errs := make([]locking.TickAnswer, len(reqs)), make([]error, len(reqs))
	for i, r := range reqs {
		answers[i], errs[i] = l.mem.TryLockTick(context.Background(), r)
	}
	return answers, errs
}

// TestLateGrantFreesItsLock: a burst's try-lock-ticks are bounded by the
// shortest TTL among them (burst), and a grant can come after its
// request's context ended (internal/batch sendOne). Its mark is raised, so no
// other node runs the tick: within its catch-up window, with its lease
// alive, it runs here (resend.go's late grant). Dropped, with the lock it
// took kept until its own TTL (b's is an hour, taken in a burst with a,
// whose TTL is a fraction of a second), T ran nowhere, and every tick of b
// for the next hour was contended on every node, though none of them ran
// it.
func TestLateGrantFreesItsLock(t *testing.T) {
	clock := fakeclock.New(t0)
	mem := memory.New(memory.WithClock(clock.Now), memory.WithHolder("node-a"))
	l := &lateBatcher{faulty: &faulty{inner: mem}, mem: mem}
	ja := &countingJob{}
	a := sched("a", everyMinute, hints.RequireGlobal, ja)
	a.ExpectedRuntime = 100 * time.Millisecond
	jb := &countingJob{}
	b := sched("b", everyMinute, hints.RequireGlobal, jb)
	b.ExpectedRuntime = time.Hour
	h := newHarness(t, scheduler.Options{Clock: clock, Locker: l, Backend: hints.Distributed,
		SafetyMargin: 10 * time.Millisecond}, a, b).start()

	l.mu.Lock()
	l.late = true
	l.mu.Unlock()
	h.step(time.Minute)
	h.idle()
	l.mu.Lock()
	l.late = false
	l.mu.Unlock()
	_, skips, _ := h.rec.snapshot()
	tick := t0.Add(time.Minute)
	if got := ja.got(); len(got) != 1 || !got[0].Time.Equal(tick) {
		t.Errorf("a ran %v (skips %v), want its tick at %v: granted late, within its window", got, skips, tick)
	}
	if got := jb.got(); len(got) != 1 || !got[0].Time.Equal(tick) {
		t.Errorf("b ran %v (skips %v), want its tick at %v: granted late, within its window", got, skips, tick)
	}
	infos, err := mem.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 0 {
		t.Errorf("locks of dropped grants still held: %v", infos)
	}
	h.step(time.Minute)
	if got := jb.got(); len(got) != 2 || !got[1].Time.Equal(t0.Add(2*time.Minute)) {
		t.Errorf("b ran %v, want its tick at %v", got, t0.Add(2*time.Minute))
	}
}
